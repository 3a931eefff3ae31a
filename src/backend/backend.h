// The op-level interface the model code calls. No graph: each op runs when called, on float
// buffers in the backend's own memory and weights in their stored type. The reference backend
// (ref/) is the oracle every faster backend is tested against.
//
// Memory: the activations, logits and KV cache an op reads or writes are the backend's
// (allocate): host memory for the CPU and reference backends, device memory for a GPU one. The
// host moves data in and out only through upload / download / gather_rows / copy_blocks, so a
// backend may keep its buffers where its kernels run. Small per-step inputs (token ids,
// positions, slot mappings, block tables) stay host arrays: a device backend copies them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <memory>
#include <string>

#include "backend/kv_format.h"
#include "core/block_copy.h"
#include "core/dtype.h"

namespace pagoda {

// A weight matrix as stored in the model file: `rows` output features, each a row of `cols`
// input elements in `type` (quantized blocks run along a row).
struct WeightMatrix {
  DType type = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;
  uint64_t row_bytes = 0;
  // Names these weights to a backend that keeps a copy in its own layout (the CPU backend packs
  // quantized and F16 / BF16 matrices in Backend::prepare or on their first product, and reuses
  // the copy): 0 means none is kept. Ids
  // from new_weight_id() are never reused, so a copy can never outlive the bytes it was made
  // from under the same name; the weights must not change while the id names them.
  uint64_t id = 0;
  // `data` lies in a read-only file mapping (release_mapped_pages may drop it once a backend
  // holds its own copy: it is read back from the file if used again).
  bool mapped = false;
};

// A fresh WeightMatrix::id (thread-safe).
uint64_t new_weight_id();

struct RopeParams {
  int32_t rotary_dim = 0;       // leading dimensions of each head that rotate (<= head_dim)
  float theta = 10000.0f;
  bool split_half = false;      // pairs (i, i + d/2) as in GPT-NeoX / HF; else adjacent (2i, 2i+1)
  float position_scale = 1.0f;  // linear scaling: positions are multiplied by this
  const float* freq_factors = nullptr;  // [rotary_dim / 2] divisors (Llama 3 scaling), or null
  // YaRN, as llama.cpp's ggml_rope_ext with ext_factor 1: pairs below yarn_low keep their
  // frequency, pairs above yarn_high are interpolated by position_scale, a linear ramp between.
  bool yarn = false;
  float yarn_low = 0.0f, yarn_high = 0.0f;  // correction range, in pairs
  float mscale = 1.0f;                      // cos and sin are multiplied by this (attention factor)

  // What pair `i`'s angle (position * frequency) is multiplied by.
  double angle_scale(int64_t i) const {
    if (!yarn) return position_scale;
    const double y = (static_cast<double>(i) - yarn_low) / std::max(0.001f, yarn_high - yarn_low);
    const double keep = 1.0 - std::clamp(y, 0.0, 1.0);
    return position_scale * (1.0 - keep) + keep;
  }
};

// Where each token's K/V goes and what each sequence attends to. K/V storage is in blocks of
// `block_size` token slots (backend/kv_format.h); a contiguous cache is the special case of one sequence whose block table is 0, 1, 2, ...
struct AttentionBatch {
  int32_t num_tokens = 0;
  const int32_t* positions = nullptr;     // [num_tokens]
  const int64_t* slot_mapping = nullptr;  // [num_tokens] slot = block * block_size + offset
  int32_t num_seqs = 0;
  const int32_t* query_start = nullptr;   // [num_seqs + 1] first token of each sequence
  const int32_t* block_table = nullptr;   // [num_seqs, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  int32_t block_size = 16;
};

// One layer's K/V memory in `type` (layout: backend/kv_format.h; attention math in F32).
struct KvLayer {
  void* k = nullptr;
  void* v = nullptr;
  KvType type = KvType::kF32;
};

struct AttentionParams {
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  float scale = 1.0f;         // applied to q·k
  int32_t window = 0;         // 0: attend to all earlier positions; else the last `window`
  // Attention sinks (gpt-oss): per query head a learned logit that joins each row's softmax
  // denominator, exp(sink - max) beside the scores, with no value of its own; null: none.
  const float* sinks = nullptr;  // [num_heads]
};

// Writes each token's K and V into its slot (backend/kv_format.h): what every backend's
// write_kv does, so that all store the same bytes.
void store_kv_tokens(const float* k, const float* v, const AttentionBatch& batch,
                     const AttentionParams& params, KvLayer cache);

// Memory a backend allocated: data() is what its ops take. It stays valid after the backend
// object is gone (a model's buffers may outlive one backend instance).
class BackendBuffer {
 public:
  virtual ~BackendBuffer() = default;
  virtual void* data() const = 0;
  virtual uint64_t bytes() const = 0;
};

// Zeroed host memory (LargeBuffer): what host-memory backends allocate. Throws Error naming
// `what` when it cannot be had.
std::unique_ptr<BackendBuffer> allocate_host_buffer(uint64_t bytes, const char* what);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // ---- memory and data movement (defaults: host memory, plain copies) ----

  // Whether data() of this backend's buffers may be read and written by the host directly (the
  // CPU and reference backends; a GPU's device memory is not).
  virtual bool host_visible() const { return true; }
  // `bytes` of zeroed memory for ops of this backend; throws Error naming `what` when they
  // cannot be had.
  virtual std::unique_ptr<BackendBuffer> allocate(uint64_t bytes, const char* what) {
    return allocate_host_buffer(bytes, what);
  }
  // Host memory -> this backend's memory, and back.
  virtual void upload(const void* host, uint64_t bytes, void* dst);
  virtual void download(const void* src, uint64_t bytes, void* host);
  // out[i, :] = x[rows[i], :] for rows of `width` floats. out may be x when every
  // rows[i] >= i and rows ascend (rows gathered to the front in place).
  virtual void gather_rows(const float* x, std::span<const int32_t> rows, int64_t width,
                           float* out);
  // out[rows[i], :] += weights[i] * y[i, :] for rows of `width` floats; rows distinct (a
  // mixture-of-experts block adds each expert's rows back to the tokens routed to it). rows and
  // weights are host arrays.
  virtual void add_scaled_rows(const float* y, std::span<const int32_t> rows,
                               std::span<const float> weights, int64_t width, float* out);
  // Copy-on-write of one layer: for each copy, the `block_bytes` of block src in cache.k and
  // cache.v overwrite block dst's, in order.
  virtual void copy_blocks(KvLayer cache, uint64_t block_bytes, std::span<const BlockCopy> copies);

  // Called for each weight matrix of a model before it runs (Model::prepare), so that a backend
  // that keeps weights in a layout of its own makes that copy now, not in the first request.
  virtual void prepare(const WeightMatrix& /*w*/) {}
  // The weights named by `ids` (WeightMatrix::id) will not be used again: a copy kept in the
  // backend's own layout is freed (a LoRA adapter unloaded at run time). Called between
  // forward passes, on the thread that runs them.
  virtual void drop_weights(std::span<const uint64_t> /*ids*/) {}

  // out[t, :] = row ids[t] of `table`, as float.        out: [num_tokens, table.cols]
  virtual void embed(const WeightMatrix& table, const int32_t* ids, int64_t num_tokens,
                     float* out) = 0;
  // y[t, r] = sum_c w[r, c] * x[t, c].  x: [num_tokens, w.cols]  y: [num_tokens, w.rows]
  virtual void matmul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) = 0;
  // matmul(*p.w, x, num_tokens, p.y) for each product, all of the same x (Q, K and V; gate and
  // up): a backend may prepare x once and run the products as one job. Results are matmul's.
  struct Product {
    const WeightMatrix* w;
    float* y;
  };
  virtual void matmul_many(std::initializer_list<Product> products, const float* x, int64_t num_tokens) {
    for (const Product& p : products) matmul(*p.w, x, num_tokens, p.y);
  }
  // A low-rank term (a LoRA adapter's pair): y[t, :] += scale * B (A x[t, :]) for each row t of
  // `rows`. A is rank x cols (x's width), B is y's width x rank; both keep their ids' promise
  // (a backend may keep copies of them, freed by drop_weights).
  struct LowRankTerm {
    const WeightMatrix* a;
    const WeightMatrix* b;
    float scale;
    float* y;                       // [num_tokens, b->rows]
    std::span<const int32_t> rows;  // distinct, each < num_tokens
  };
  // Adds every term, all of the same x ([num_tokens, cols]). Terms that write the same y take
  // disjoint rows. A row's result does not depend on the other rows or terms of the call. The
  // default (low_rank.cc) is matmul, scale and add over each term's gathered rows.
  virtual void add_low_rank(std::span<const LowRankTerm> terms, const float* x,
                            int64_t num_tokens);
  // y[t, :] = x[t, :] / rms(x[t, :]) * weight.           x, y: [num_rows, dim] (may alias)
  virtual void rms_norm(const float* x, const float* weight, int64_t num_rows, int64_t dim,
                        float eps, float* y) = 0;
  // Rotates x in place.                                  x: [num_tokens, num_heads, head_dim]
  virtual void rope(float* x, const int32_t* positions, int64_t num_tokens, int64_t num_heads,
                    int64_t head_dim, const RopeParams& params) = 0;
  // Writes each token's K and V into its slot.           k, v: [num_tokens, num_kv_heads, head_dim]
  virtual void write_kv(const float* k, const float* v, const AttentionBatch& batch,
                        const AttentionParams& params, KvLayer cache) = 0;
  // Causal attention of each token over its sequence's cached K/V (including itself).
  // q, out: [num_tokens, num_heads, head_dim]
  virtual void attention(const float* q, KvLayer cache, const AttentionBatch& batch,
                         const AttentionParams& params, float* out) = 0;
  // out = act(gate) * up, elementwise over n values (act: SiLU or tanh-approximated GELU).
  virtual void silu_mul(const float* gate, const float* up, int64_t n, float* out) = 0;
  virtual void gelu_mul(const float* gate, const float* up, int64_t n, float* out) = 0;
  // x += y over n values.
  virtual void add(float* x, const float* y, int64_t n) = 0;
  // x[t, :] += bias over num_rows rows of dim.
  virtual void add_bias(float* x, const float* bias, int64_t num_rows, int64_t dim) = 0;
  // x *= s over n values.
  virtual void scale(float* x, float s, int64_t n) = 0;

  // ---- encoder ops (BERT). The defaults (encoder_ops.cc) are the reference: scalar host code,
  // so a backend whose memory the host cannot read must override them or refuse encoders. ----

  // y[t, :] = (x[t, :] - mean) / sqrt(var + eps) * weight + bias.   x, y: [num_rows, dim] (may alias)
  virtual void layer_norm(const float* x, const float* weight, const float* bias,
                          int64_t num_rows, int64_t dim, float eps, float* y);
  // x = x * Phi(x) over n values: GELU in its exact erf form, as BERT computes it.
  virtual void gelu_erf(float* x, int64_t n);
  // Bidirectional attention without a cache: each token of a sequence attends to every token of
  // it (its rows query_start[s] .. query_start[s + 1]), earlier and later. params.window is
  // ignored.                  q, out: [num_tokens, num_heads, head_dim]; k, v: [num_tokens, num_kv_heads, head_dim]
  virtual void encoder_attention(const float* q, const float* k, const float* v,
                                 const int32_t* query_start, int32_t num_seqs,
                                 const AttentionParams& params, float* out);

  // Runs job(0) ... job(count - 1), each independent of the others, on the backend's host
  // threads where it has them (the CPU backend), else in order: host-side steps of a family that
  // have no op of their own (Qwen3.5's Gated DeltaNet recurrence), on memory the host reads.
  // A job must not throw.
  virtual void parallel_for(int64_t count, const std::function<void(int64_t)>& job) {
    for (int64_t i = 0; i < count; ++i) job(i);
  }
};

// A float array in a backend's memory that grows (at least doubling) to the largest count asked
// for: what a step's activations live in.
class BackendArray {
 public:
  // At least `count` floats of `backend`'s memory. The contents are not kept when the array
  // grows or another backend asks (a model run by the reference backend, then the CPU one).
  void reserve(Backend& backend, int64_t count, const char* what);
  float* data() const { return data_; }

 private:
  const Backend* owner_ = nullptr;
  std::unique_ptr<BackendBuffer> buffer_;
  float* data_ = nullptr;
  int64_t capacity_ = 0;
};

std::unique_ptr<Backend> make_reference_backend();
// The fast CPU backend; num_threads 0 means every core.
std::unique_ptr<Backend> make_cpu_backend(int num_threads);
// The CPU backend's threads as a thing of their own, so that several backends (the models of
// one server) share one set: their ops take turns on it instead of each backend spinning its
// own threads on the same cores. num_threads 0 means every core.
class CpuThreads;
std::shared_ptr<CpuThreads> make_cpu_threads(int num_threads);
std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<CpuThreads> threads);

}  // namespace pagoda
