// The reference encoder ops (BERT): Backend's defaults, in plain scalar code over host memory.
// Sums run in double, so these are the oracle a faster override is compared with.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"

namespace pagoda {
namespace {

void need_host_memory(const Backend& b, const char* op) {
  if (!b.host_visible()) {
    fail("the ", b.name(), " backend has no ", op, " op: encoder models (BERT) run on the CPU");
  }
}

}  // namespace

void Backend::layer_norm(const float* x, const float* weight, const float* bias, int64_t rows,
                         int64_t dim, float eps, float* y) {
  need_host_memory(*this, "layer_norm");
  for (int64_t t = 0; t < rows; ++t) {
    const float* in = x + t * dim;
    float* out = y + t * dim;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < dim; ++i) mean += in[i];
    mean /= static_cast<double>(dim);
    for (int64_t i = 0; i < dim; ++i) var += (in[i] - mean) * (in[i] - mean);
    var /= static_cast<double>(dim);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < dim; ++i) {
      out[i] = static_cast<float>((in[i] - mean) * inv * weight[i] + bias[i]);
    }
  }
}

void Backend::gelu_erf(float* x, int64_t n) {
  need_host_memory(*this, "gelu_erf");
  constexpr double kInvSqrt2 = 0.70710678118654752440;
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    x[i] = static_cast<float>(0.5 * v * (1.0 + std::erf(v * kInvSqrt2)));
  }
}

void Backend::encoder_attention(const float* q, const float* k, const float* v,
                                const int32_t* query_start, int32_t num_seqs,
                                const AttentionParams& p, float* out) {
  need_host_memory(*this, "encoder_attention");
  const int64_t hd = p.head_dim, q_row = int64_t{p.num_heads} * hd,
                kv_row = int64_t{p.num_kv_heads} * hd;
  const int32_t group = p.num_heads / p.num_kv_heads;
  std::vector<double> scores, acc(static_cast<size_t>(hd));
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t first = query_start[s], last = query_start[s + 1];
    scores.resize(static_cast<size_t>(last - first));
    for (int32_t i = first; i < last; ++i) {
      for (int32_t h = 0; h < p.num_heads; ++h) {
        const float* qi = q + i * q_row + h * hd;
        const int64_t kv_off = int64_t{h / group} * hd;
        double top = -INFINITY;
        for (int32_t j = first; j < last; ++j) {
          const float* kj = k + j * kv_row + kv_off;
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d) dot += double{qi[d]} * kj[d];
          scores[j - first] = dot * p.scale;
          top = std::max(top, scores[j - first]);
        }
        double sum = 0;
        for (double& sc : scores) sum += sc = std::exp(sc - top);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int32_t j = first; j < last; ++j) {
          const float* vj = v + j * kv_row + kv_off;
          for (int64_t d = 0; d < hd; ++d) acc[d] += scores[j - first] * vj[d];
        }
        float* o = out + i * q_row + h * hd;
        for (int64_t d = 0; d < hd; ++d) o[d] = static_cast<float>(acc[d] / sum);
      }
    }
  }
}

}  // namespace pagoda
