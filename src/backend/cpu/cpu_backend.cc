// The fast CPU backend. Until the SIMD kernels land it is the reference backend's ops with the
// matrix products spread over threads (weights dequantized one row at a time, in float).
#include <omp.h>

#include <vector>

#include "backend/backend.h"
#include "quant/reference.h"

namespace pagoda {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int num_threads)
      : ref_(make_reference_backend()), num_threads_(num_threads > 0 ? num_threads : omp_get_num_procs()) {}
  std::string name() const override { return "cpu"; }

  void embed(const WeightMatrix& t, const int32_t* ids, int64_t n, float* out) override {
    ref_->embed(t, ids, n, out);
  }

  void matmul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) override {
#pragma omp parallel num_threads(num_threads_)
    {
      std::vector<float> row(static_cast<size_t>(w.cols));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < w.rows; ++r) {
        dequantize_row(w.type, w.data + w.row_bytes * r, row.data(), w.cols);
        for (int64_t t = 0; t < num_tokens; ++t) {
          const float* xt = x + t * w.cols;
          float sum = 0;
          for (int64_t c = 0; c < w.cols; ++c) sum += row[c] * xt[c];
          y[t * w.rows + r] = sum;
        }
      }
    }
  }

  void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y) override {
    ref_->rms_norm(x, w, rows, dim, eps, y);
  }
  void rope(float* x, const int32_t* pos, int64_t n, int64_t heads, int64_t hd, const RopeParams& p) override {
    ref_->rope(x, pos, n, heads, hd, p);
  }
  void write_kv(const float* k, const float* v, const AttentionBatch& b, const AttentionParams& p,
                float* kc, float* vc) override {
    ref_->write_kv(k, v, b, p, kc, vc);
  }
  void attention(const float* q, const float* kc, const float* vc, const AttentionBatch& b,
                 const AttentionParams& p, float* out) override {
    ref_->attention(q, kc, vc, b, p, out);
  }
  void silu_mul(const float* g, const float* u, int64_t n, float* out) override { ref_->silu_mul(g, u, n, out); }
  void gelu_mul(const float* g, const float* u, int64_t n, float* out) override { ref_->gelu_mul(g, u, n, out); }
  void add(float* x, const float* y, int64_t n) override { ref_->add(x, y, n); }
  void add_bias(float* x, const float* b, int64_t rows, int64_t dim) override { ref_->add_bias(x, b, rows, dim); }
  void scale(float* x, float s, int64_t n) override { ref_->scale(x, s, n); }

 private:
  std::unique_ptr<Backend> ref_;
  int num_threads_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int num_threads) {
  return std::make_unique<CpuBackend>(num_threads);
}

}  // namespace pagoda
