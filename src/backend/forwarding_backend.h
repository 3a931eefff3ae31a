// A backend that hands every op to another one: the base of decorators that watch or change
// some ops (the importance matrix's matmul observer, LoRA adapters) and leave the rest as the
// inner backend runs them, its memory and kernels included.
#pragma once

#include "backend/backend.h"

namespace pagoda {

class ForwardingBackend : public Backend {
 public:
  // `inner` must outlive this backend.
  explicit ForwardingBackend(Backend& inner) : inner_(inner) {}

  std::string name() const override { return inner_.name(); }
  bool host_visible() const override { return inner_.host_visible(); }
  std::unique_ptr<BackendBuffer> allocate(uint64_t bytes, const char* what) override {
    return inner_.allocate(bytes, what);
  }
  void upload(const void* host, uint64_t bytes, void* dst) override {
    inner_.upload(host, bytes, dst);
  }
  void download(const void* src, uint64_t bytes, void* host) override {
    inner_.download(src, bytes, host);
  }
  void gather_rows(const float* x, std::span<const int32_t> rows, int64_t width,
                   float* out) override {
    inner_.gather_rows(x, rows, width, out);
  }
  void add_scaled_rows(const float* y, std::span<const int32_t> rows,
                       std::span<const float> weights, int64_t width, float* out) override {
    inner_.add_scaled_rows(y, rows, weights, width, out);
  }
  void copy_blocks(KvLayer cache, uint64_t block_bytes,
                   std::span<const BlockCopy> copies) override {
    inner_.copy_blocks(cache, block_bytes, copies);
  }
  void prepare(const WeightMatrix& w) override { inner_.prepare(w); }
  void drop_weights(std::span<const uint64_t> ids) override { inner_.drop_weights(ids); }
  void embed(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) override {
    inner_.embed(table, ids, n, out);
  }
  void matmul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) override {
    inner_.matmul(w, x, num_tokens, y);
  }
  void matmul_many(std::initializer_list<Product> products, const float* x,
                   int64_t num_tokens) override {
    inner_.matmul_many(products, x, num_tokens);
  }
  void add_low_rank(std::span<const LowRankTerm> terms, const float* x,
                    int64_t num_tokens) override {
    inner_.add_low_rank(terms, x, num_tokens);
  }
  void rms_norm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                float* y) override {
    inner_.rms_norm(x, weight, rows, dim, eps, y);
  }
  void rope(float* x, const int32_t* positions, int64_t n, int64_t heads, int64_t head_dim,
            const RopeParams& p) override {
    inner_.rope(x, positions, n, heads, head_dim, p);
  }
  void write_kv(const float* k, const float* v, const AttentionBatch& b,
                const AttentionParams& p, KvLayer cache) override {
    inner_.write_kv(k, v, b, p, cache);
  }
  void attention(const float* q, KvLayer cache, const AttentionBatch& b,
                 const AttentionParams& p, float* out) override {
    inner_.attention(q, cache, b, p, out);
  }
  void silu_mul(const float* g, const float* u, int64_t n, float* out) override {
    inner_.silu_mul(g, u, n, out);
  }
  void gelu_mul(const float* g, const float* u, int64_t n, float* out) override {
    inner_.gelu_mul(g, u, n, out);
  }
  void add(float* x, const float* y, int64_t n) override { inner_.add(x, y, n); }
  void add_bias(float* x, const float* bias, int64_t rows, int64_t dim) override {
    inner_.add_bias(x, bias, rows, dim);
  }
  void scale(float* x, float s, int64_t n) override { inner_.scale(x, s, n); }
  void parallel_for(int64_t count, const std::function<void(int64_t)>& job) override {
    inner_.parallel_for(count, job);
  }
  void layer_norm(const float* x, const float* weight, const float* bias, int64_t rows,
                  int64_t dim, float eps, float* y) override {
    inner_.layer_norm(x, weight, bias, rows, dim, eps, y);
  }
  void gelu_erf(float* x, int64_t n) override { inner_.gelu_erf(x, n); }
  void encoder_attention(const float* q, const float* k, const float* v,
                         const int32_t* query_start, int32_t num_seqs,
                         const AttentionParams& params, float* out) override {
    inner_.encoder_attention(q, k, v, query_start, num_seqs, params, out);
  }

 protected:
  Backend& inner_;
};

}  // namespace pagoda
