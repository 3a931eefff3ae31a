// The encoder's bidirectional attention on the CPU: every query row of a sequence against every
// key of it. A work item is one head of one sequence over a run of its query rows; each row's
// scores are dot products (the kernels' vector dot), softmaxed with the kernels' exp, and its
// output is the probability-weighted sum of the value rows (axpy), all in float.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"

namespace pagoda::cpu {
namespace {

constexpr int32_t kRowsPerItem = 16;  // query rows of one work item

struct Item {
  int32_t first = 0, last = 0;       // the sequence's rows
  int32_t row_begin = 0, row_end = 0;  // this item's query rows
  int32_t head = 0;
};

}  // namespace

void encoder_attention(const Kernels& k, const float* q, const float* keys, const float* values,
                       const int32_t* query_start, int32_t num_seqs, const AttentionParams& p,
                       float* out, ThreadPool& pool) {
  const int64_t hd = p.head_dim, q_row = int64_t{p.num_heads} * hd,
                kv_row = int64_t{p.num_kv_heads} * hd;
  const int32_t group = p.num_heads / p.num_kv_heads;
  std::vector<Item> items;
  int64_t work = 0;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t first = query_start[s], last = query_start[s + 1];
    work += int64_t{last - first} * (last - first) * q_row * 2;
    for (int32_t h = 0; h < p.num_heads; ++h) {
      for (int32_t r = first; r < last; r += kRowsPerItem) {
        items.push_back({first, last, r, std::min(last, r + kRowsPerItem), h});
      }
    }
  }
  auto run = [&](const Item& it) {
    const int64_t kv_off = int64_t{it.head / group} * hd;
    const int32_t n = it.last - it.first;
    std::vector<float> scores(static_cast<size_t>(n));
    for (int32_t i = it.row_begin; i < it.row_end; ++i) {
      const float* qi = q + i * q_row + it.head * hd;
      float top = -INFINITY;
      for (int32_t j = 0; j < n; ++j) {
        scores[j] = k.dot(qi, keys + (it.first + j) * kv_row + kv_off, hd) * p.scale;
        top = std::max(top, scores[j]);
      }
      const float sum = k.exp_shift_sum(scores.data(), n, top);
      float* o = out + i * q_row + it.head * hd;
      std::fill(o, o + hd, 0.0f);
      for (int32_t j = 0; j < n; ++j) k.axpy(scores[j], values + (it.first + j) * kv_row + kv_off, o, hd);
      k.scale(o, 1.0f / sum, hd);
    }
  };
  const auto num_items = static_cast<int64_t>(items.size());
  if (!worth_threads(work) || num_items < 2) {
    for (const Item& it : items) run(it);
    return;
  }
  pool.run(num_items, [&](int64_t c, int) { run(items[static_cast<size_t>(c)]); });
}

void gelu_erf(const Kernels& k, float* x, int64_t n) {
  // erf(z) = 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-z^2), t = 1 / (1 + p z), z >= 0
  // (Abramowitz and Stegun 7.1.26); odd in z. Here z = |x| / sqrt(2).
  constexpr float kP = 0.3275911f, kA1 = 0.254829592f, kA2 = -0.284496736f, kA3 = 1.421413741f,
                  kA4 = -1.453152027f, kA5 = 1.061405429f, kInvSqrt2 = 0.70710678118654752f;
  constexpr int64_t kBlock = 256;
  float e[kBlock];
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = std::min(kBlock, n - i);
    float* v = x + i;
    for (int64_t j = 0; j < m; ++j) e[j] = -0.5f * v[j] * v[j];
    k.exp_shift_sum(e, m, 0.0f);  // e = exp(-z^2)
    for (int64_t j = 0; j < m; ++j) {
      const float z = std::fabs(v[j]) * kInvSqrt2;
      const float t = 1.0f / (1.0f + kP * z);
      const float erf_z = 1.0f - t * (kA1 + t * (kA2 + t * (kA3 + t * (kA4 + t * kA5)))) * e[j];
      v[j] = 0.5f * v[j] * (1.0f + (v[j] < 0 ? -erf_z : erf_z));
    }
  }
}

}  // namespace pagoda::cpu
