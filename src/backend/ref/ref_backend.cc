// The scalar reference backend: plain loops in float (double for reductions), written for
// clarity. It is the oracle the fast backends are tested against, and never the fast path.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "quant/fp16.h"
#include "quant/reference.h"

namespace pagoda {
namespace {

class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }

  void embed(const WeightMatrix& table, const int32_t* ids, int64_t num_tokens,
             float* out) override {
    for (int64_t t = 0; t < num_tokens; ++t) {
      if (ids[t] < 0 || ids[t] >= table.rows) fail("token id ", ids[t], " is outside the embedding table");
      dequantize_row(table.type, table.data + table.row_bytes * ids[t], out + t * table.cols,
                     table.cols);
    }
  }

  void matmul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) override {
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (int64_t r = 0; r < w.rows; ++r) {
      dequantize_row(w.type, w.data + w.row_bytes * r, row.data(), w.cols);
      for (int64_t t = 0; t < num_tokens; ++t) {
        const float* xt = x + t * w.cols;
        double sum = 0;
        for (int64_t c = 0; c < w.cols; ++c) sum += static_cast<double>(row[c]) * xt[c];
        y[t * w.rows + r] = static_cast<float>(sum);
      }
    }
  }

  void rms_norm(const float* x, const float* weight, int64_t num_rows, int64_t dim, float eps,
                float* y) override {
    for (int64_t t = 0; t < num_rows; ++t) {
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[t * dim + i]) * x[t * dim + i];
      float inv = static_cast<float>(1.0 / std::sqrt(ss / dim + eps));
      for (int64_t i = 0; i < dim; ++i) y[t * dim + i] = x[t * dim + i] * inv * weight[i];
    }
  }

  void rope(float* x, const int32_t* positions, int64_t num_tokens, int64_t num_heads,
            int64_t head_dim, const RopeParams& p) override {
    const int64_t half = p.rotary_dim / 2;
    for (int64_t t = 0; t < num_tokens; ++t) {
      const double pos = static_cast<double>(positions[t]);
      for (int64_t h = 0; h < num_heads; ++h) {
        float* v = x + (t * num_heads + h) * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          double freq = std::pow(static_cast<double>(p.theta), -2.0 * i / p.rotary_dim);
          if (p.freq_factors != nullptr) freq /= p.freq_factors[i];
          double angle = pos * freq * p.angle_scale(i);
          double c = std::cos(angle) * p.mscale, s = std::sin(angle) * p.mscale;
          int64_t a = p.split_half ? i : 2 * i;
          int64_t b = p.split_half ? i + half : 2 * i + 1;
          double x0 = v[a], x1 = v[b];
          v[a] = static_cast<float>(x0 * c - x1 * s);
          v[b] = static_cast<float>(x0 * s + x1 * c);
        }
      }
    }
  }

  void write_kv(const float* k, const float* v, const AttentionBatch& batch,
                const AttentionParams& p, KvLayer cache) override {
    store_kv_tokens(k, v, batch, p, cache);
  }

  void attention(const float* q, KvLayer cache, const AttentionBatch& batch,
                 const AttentionParams& p, float* out) override {
    const int32_t group = p.num_heads / p.num_kv_heads;
    const int64_t head_bytes = kv_head_bytes(cache.type, p.head_dim);
    std::vector<double> scores;
    std::vector<double> acc(static_cast<size_t>(p.head_dim));
    for (int32_t s = 0; s < batch.num_seqs; ++s) {
      const int32_t* table = batch.block_table + static_cast<int64_t>(s) * batch.max_blocks_per_seq;
      for (int32_t t = batch.query_start[s]; t < batch.query_start[s + 1]; ++t) {
        const int32_t pos = batch.positions[t];
        const int32_t first = p.window > 0 ? std::max(0, pos - p.window + 1) : 0;
        for (int32_t h = 0; h < p.num_heads; ++h) {
          const float* qh = q + (static_cast<int64_t>(t) * p.num_heads + h) * p.head_dim;
          const int32_t kvh = h / group;
          scores.assign(static_cast<size_t>(pos - first + 1), 0.0);
          double max_score = -INFINITY;
          for (int32_t j = first; j <= pos; ++j) {
            const uint8_t* keys =
                kv_slab(cache.k, table[j / batch.block_size], p.num_kv_heads, kvh, batch.block_size, head_bytes);
            double dot = 0;
            for (int32_t d = 0; d < p.head_dim; ++d) {
              dot += static_cast<double>(qh[d]) *
                     kv_load_key(keys, cache.type, p.head_dim, batch.block_size, j % batch.block_size, d);
            }
            dot *= p.scale;
            scores[j - first] = dot;
            max_score = std::max(max_score, dot);
          }
          if (p.sinks != nullptr) max_score = std::max(max_score, static_cast<double>(p.sinks[h]));
          double denom = 0;
          for (double& sc : scores) denom += (sc = std::exp(sc - max_score));
          if (p.sinks != nullptr) denom += std::exp(p.sinks[h] - max_score);
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int32_t j = first; j <= pos; ++j) {
            const uint8_t* row =
                kv_slab(cache.v, table[j / batch.block_size], p.num_kv_heads, kvh, batch.block_size, head_bytes) +
                (j % batch.block_size) * head_bytes;
            double w = scores[j - first] / denom;
            for (int32_t d = 0; d < p.head_dim; ++d) acc[d] += w * kv_load_value(row, cache.type, p.head_dim, d);
          }
          float* oh = out + (static_cast<int64_t>(t) * p.num_heads + h) * p.head_dim;
          for (int32_t d = 0; d < p.head_dim; ++d) oh[d] = static_cast<float>(acc[d]);
        }
      }
    }
  }

  void silu_mul(const float* gate, const float* up, int64_t n, float* out) override {
    for (int64_t i = 0; i < n; ++i) {
      double g = gate[i];
      out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
    }
  }

  void gelu_mul(const float* gate, const float* up, int64_t n, float* out) override {
    constexpr double kSqrt2OverPi = 0.7978845608028654;
    for (int64_t i = 0; i < n; ++i) {
      double g = gate[i];
      double gelu = 0.5 * g * (1.0 + std::tanh(kSqrt2OverPi * (g + 0.044715 * g * g * g)));
      out[i] = static_cast<float>(gelu * up[i]);
    }
  }

  void add(float* x, const float* y, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
  }

  void add_bias(float* x, const float* bias, int64_t num_rows, int64_t dim) override {
    for (int64_t t = 0; t < num_rows; ++t) {
      for (int64_t i = 0; i < dim; ++i) x[t * dim + i] += bias[i];
    }
  }

  void scale(float* x, float s, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
  }
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace pagoda
