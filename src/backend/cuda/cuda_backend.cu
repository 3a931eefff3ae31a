// The CUDA backend: Backend's memory on the device and its ops as kernels (cuda_kernels.cu) on
// one stream. The host learns results only through download (the logits), which waits for the
// stream; everything else is queued.
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_flash.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_units.cuh"
#include "core/error.h"
#include "quant/fp16.h"
#include "quant/reference.h"

namespace pagoda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA: ", what, ": ", cudaGetErrorString(e));
}

using cuda::counts;

class DeviceBuffer final : public BackendBuffer {
 public:
  // Zeroed unless `zero` is false (scratch the kernels write before they read).
  DeviceBuffer(uint64_t bytes, const char* what, bool zero = true) : bytes_(bytes) {
    ++counts().mallocs;
    const cudaError_t e = cudaMalloc(&data_, bytes == 0 ? 1 : bytes);
    if (e != cudaSuccess) {
      size_t free_bytes = 0, total = 0;
      cudaMemGetInfo(&free_bytes, &total);
      fail(what, " needs ", bytes >> 20, " MiB of GPU memory but only ", free_bytes >> 20,
           " MiB are free (", cudaGetErrorString(e), ")");
    }
    if (!zero) return;
    ++counts().memsets;
    check(cudaMemset(data_, 0, bytes), "cudaMemset");
  }
  ~DeviceBuffer() override { cudaFree(data_); }
  void* data() const override { return data_; }
  uint64_t bytes() const override { return bytes_; }

 private:
  void* data_ = nullptr;
  uint64_t bytes_ = 0;
};

// A device array of T that grows to the largest count asked for (the per-step inputs), to
// twice the count so that a block table growing by a block a step does not allocate each step;
// never zeroed (every read is of what was uploaded). Every layer of a step passes the same
// positions, slots and block table: an upload equal to the last one is skipped, which saves a
// copy (and its few microseconds) per op and layer.
template <typename T>
class Staging {
 public:
  T* put(cudaStream_t s, const T* host, int64_t count) {
    if (count > capacity_) {
      capacity_ = std::max<int64_t>(2 * count, 64);
      buffer_ = std::make_unique<DeviceBuffer>(static_cast<uint64_t>(capacity_) * sizeof(T),
                                               "a step's inputs", false);
      last_.clear();
    }
    auto* dst = static_cast<T*>(buffer_ ? buffer_->data() : nullptr);
    const auto size = static_cast<size_t>(count);
    if (count > 0 && !(last_.size() == size && std::memcmp(last_.data(), host, size * sizeof(T)) == 0)) {
      check(cudaMemcpyAsync(dst, host, size * sizeof(T), cudaMemcpyHostToDevice, s),
            "upload of a step's inputs");
      ++counts().uploads;
      last_.assign(host, host + size);
    }
    return dst;
  }

 private:
  std::unique_ptr<DeviceBuffer> buffer_;
  int64_t capacity_ = 0;
  std::vector<T> last_;  // what the device array holds
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    // A blocking stream: cudaMemset and cudaMemcpy (buffers zeroed, weights uploaded) run on the
    // legacy default stream and may return before they finish; only a blocking stream is
    // ordered after them.
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamDefault), "cudaStreamCreate");
    const char* kernels = std::getenv("PAGODA_CUDA_KERNELS");
    q8_products_ = kernels == nullptr || std::strcmp(kernels, "old") != 0;
    if (const char* min = std::getenv("PAGODA_CUDA_GEMM_MIN_TOKENS")) {
      gemm_min_tokens_ = std::max(1, std::atoi(min));
    }
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    if (std::getenv("PAGODA_CUDA_COUNTS") != nullptr) {
      std::fprintf(stderr, "cuda counts: %s\n", cuda_counts_json().c_str());
    }
  }

  std::string name() const override { return "cuda"; }

  bool host_visible() const override { return false; }
  std::unique_ptr<BackendBuffer> allocate(uint64_t bytes, const char* what) override {
    return std::make_unique<DeviceBuffer>(bytes, what);
  }
  void upload(const void* host, uint64_t bytes, void* dst) override {
    if (bytes == 0) return;
    forget_q8();
    ++counts().uploads, ++counts().syncs;
    check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_), "upload");
    check(cudaStreamSynchronize(stream_), "upload");
  }
  void download(const void* src, uint64_t bytes, void* host) override {
    if (bytes == 0) return;
    ++counts().downloads, ++counts().syncs;
    check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_), "download");
    check(cudaStreamSynchronize(stream_), "download");
  }
  void gather_rows(const float* x, std::span<const int32_t> rows, int64_t width,
                   float* out) override {
    const auto count = static_cast<int64_t>(rows.size());
    if (count == 0) return;
    forget_q8();
    const int32_t* device_rows = rows_.put(stream_, rows.data(), count);
    if (out != x) {
      cuda::gather_rows(stream_, x, device_rows, count, width, out);
      return;
    }
    // In place: threads of one kernel would read rows others are writing.
    scratch_.reserve(*this, count * width, "gathered rows");
    cuda::gather_rows(stream_, x, device_rows, count, width, scratch_.data());
    check(cudaMemcpyAsync(out, scratch_.data(), static_cast<size_t>(count * width) * sizeof(float),
                          cudaMemcpyDeviceToDevice, stream_),
          "gather_rows");
  }
  void add_scaled_rows(const float* y, std::span<const int32_t> rows,
                       std::span<const float> weights, int64_t width, float* out) override {
    const auto count = static_cast<int64_t>(rows.size());
    if (count == 0) return;
    forget_q8();
    cuda::add_scaled_rows(stream_, y, rows_.put(stream_, rows.data(), count),
                          row_weights_.put(stream_, weights.data(), count), count, width, out);
  }
  void copy_blocks(KvLayer cache, uint64_t block_bytes, std::span<const BlockCopy> copies) override {
    forget_q8();
    for (const BlockCopy& c : copies) {
      if (c.src == c.dst) continue;
      for (void* base : {cache.k, cache.v}) {
        auto* bytes = static_cast<uint8_t*>(base);
        check(cudaMemcpyAsync(bytes + uint64_t(c.dst) * block_bytes,
                              bytes + uint64_t(c.src) * block_bytes, block_bytes,
                              cudaMemcpyDeviceToDevice, stream_),
              "copy_blocks");
      }
    }
  }

  void prepare(const WeightMatrix& w) override { weights(w); }

  void embed(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) override {
    for (int64_t t = 0; t < n; ++t) {
      if (ids[t] < 0 || ids[t] >= table.rows) fail("token id ", ids[t], " is outside the embedding table");
    }
    forget_q8();
    const Weights& w = weights(table);
    cuda::embed(stream_, w.type, w.data(), w.row_bytes, table.cols, ids_.put(stream_, ids, n), n,
                out);
  }
  void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y) override {
    const Weights& d = weights(w);
    if (mmq_product(d.type, w.cols, n)) {
      cuda::matmul_mmq(stream_, d.type, d.data(), d.row_bytes, w.rows, w.cols,
                       q8_of(x, n, w.cols), n, y);
      forget_q8_under(y, n * w.rows);
      return;
    }
    if (q8_product(d.type, w.cols, n)) {
      const cuda::Q8Product p{d.data(), d.row_bytes, w.rows, y};
      cuda::matmul_q8(stream_, d.type, &p, 1, w.cols, q8_of(x, n, w.cols), n);
      forget_q8_under(y, n * w.rows);
      return;
    }
    forget_q8_under(y, n * w.rows);
    if (gemm_takes(n) && w.cols % 32 == 0) {
      const uint64_t bytes = cuda::GemmContext::scratch_bytes(d.type, w.rows, w.cols, n);
      if (bytes > (gemm_scratch_ ? gemm_scratch_->bytes() : 0)) {
        gemm_scratch_ = std::make_unique<DeviceBuffer>(bytes, "the products' scratch");
      }
      gemm_.run(stream_, d.type, d.data(), d.row_bytes, w.rows, w.cols, x, n,
                gemm_scratch_ ? gemm_scratch_->data() : nullptr, y);
      return;
    }
    cuda::matmul(stream_, d.type, d.data(), d.row_bytes, w.rows, w.cols, x, n, y);
  }
  // Products of the same x (Q, K and V; gate and up) share one quantized x; those of one type
  // and width run as one launch.
  void matmul_many(std::initializer_list<Product> products, const float* x,
                   int64_t num_tokens) override {
    std::vector<cuda::Q8Product> group;
    DType group_type = DType::kF32;
    int64_t group_cols = 0;
    auto flush = [&] {
      if (group.empty()) return;
      cuda::matmul_q8(stream_, group_type, group.data(), static_cast<int>(group.size()),
                      group_cols, q8_of(x, num_tokens, group_cols), num_tokens);
      for (const cuda::Q8Product& p : group) forget_q8_under(p.y, num_tokens * p.rows);
      group.clear();
    };
    for (const Product& p : products) {
      const Weights& d = weights(*p.w);
      if (mmq_product(d.type, p.w->cols, num_tokens) ||
          !q8_product(d.type, p.w->cols, num_tokens)) {
        flush();
        matmul(*p.w, x, num_tokens, p.y);
        continue;
      }
      if (!group.empty() && (d.type != group_type || p.w->cols != group_cols ||
                             group.size() == cuda::kMaxQ8Products)) {
        flush();
      }
      group_type = d.type;
      group_cols = p.w->cols;
      group.push_back({d.data(), d.row_bytes, p.w->rows, p.y});
    }
    flush();
  }
  void rms_norm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                float* y) override {
    forget_q8();
    if (q8_products_ && dim % cuda::kUnit == 0 && !gemm_takes(rows)) {
      // The products after a norm read its output quantized: made here, in the same pass.
      cuda::rms_norm_q8_1(stream_, x, vector(weight, dim), rows, dim, eps, y,
                          q8_space(rows * dim));
      q8_x_ = y, q8_count_ = rows * dim;
      return;
    }
    cuda::rms_norm(stream_, x, vector(weight, dim), rows, dim, eps, y);
  }
  void rope(float* x, const int32_t* positions, int64_t n, int64_t heads, int64_t head_dim,
            const RopeParams& p) override {
    forget_q8();
    const float* factors = p.freq_factors ? vector(p.freq_factors, p.rotary_dim / 2) : nullptr;
    cuda::rope(stream_, x, positions_.put(stream_, positions, n), n, heads, head_dim, p, factors);
  }
  void write_kv(const float* k, const float* v, const AttentionBatch& b, const AttentionParams& p,
                KvLayer cache) override {
    forget_q8();
    check_kv_type(cache.type);
    cuda::write_kv(stream_, k, v, slots_.put(stream_, b.slot_mapping, b.num_tokens), b.num_tokens,
                   b.block_size, p, cache);
  }
  void attention(const float* q, KvLayer cache, const AttentionBatch& b,
                 const AttentionParams& params, float* out) override {
    forget_q8();
    check_kv_type(cache.type);
    AttentionParams p = params;  // the kernels read the sinks (gpt-oss) from device memory
    if (p.sinks != nullptr) p.sinks = vector(params.sinks, p.num_heads);
    seq_of_host_.resize(static_cast<size_t>(b.num_tokens));
    for (int32_t s = 0; s < b.num_seqs; ++s) {
      for (int32_t t = b.query_start[s]; t < b.query_start[s + 1]; ++t) seq_of_host_[t] = s;
    }
    const int32_t* seq_of = seq_of_.put(stream_, seq_of_host_.data(), b.num_tokens);
    const int32_t* positions = positions_.put(stream_, b.positions, b.num_tokens);
    const int32_t* table = tables_.put(stream_, b.block_table,
                                       int64_t{b.num_seqs} * b.max_blocks_per_seq);
    // Sequences with a few query tokens (decodes) go token by token; longer ones (prompts) in
    // tiles of consecutive positions (so the positions a tile's block loads are the ones its
    // tokens see, never a block the table no longer holds): on the tensor cores where
    // flash_takes, else tiles that share each chunk of keys and values.
    const bool flash =
        q8_products_ && cuda::flash_takes(cache.type, p.num_heads, p.num_kv_heads, p.head_dim);
    const int32_t tile_tokens = flash ? cuda::flash_tile_tokens(p.num_heads / p.num_kv_heads)
                                      : cuda::kAttentionTileTokens;
    split_host_.clear();
    tiles_host_.clear();
    for (int32_t s = 0; s < b.num_seqs; ++s) {
      const int32_t begin = b.query_start[s], end = b.query_start[s + 1];
      if (end - begin < cuda::kAttentionTileTokens / 2) {
        for (int32_t t = begin; t < end; ++t) split_host_.push_back(t);
        continue;
      }
      cuda::prompt_tiles(b.positions, begin, end, tile_tokens, &tiles_host_);
    }
    const auto num_split = static_cast<int64_t>(split_host_.size());
    const auto num_tiles = static_cast<int64_t>(tiles_host_.size() / 2);
    const int32_t* split = split_.put(stream_, split_host_.data(), num_split);
    const int32_t* tiles = attention_tiles_.put(stream_, tiles_host_.data(), 2 * num_tiles);
    // A decode batch's output is quantized in the same kernel for the output product.
    const int64_t count = int64_t{b.num_tokens} * p.num_heads * p.head_dim;
    const bool quantize = q8_products_ && num_tiles == 0 && num_split == b.num_tokens &&
                          p.head_dim % cuda::kUnit == 0 && !gemm_takes(b.num_tokens);
    cuda::attention(stream_, q, cache, seq_of, positions, table, b.max_blocks_per_seq,
                    b.block_size, split, num_split, tiles, flash ? 0 : num_tiles, p, out,
                    quantize ? q8_space(count) : nullptr);
    if (flash) {
      cuda::flash_attention(stream_, q, cache, seq_of, positions, table, b.max_blocks_per_seq,
                            b.block_size, tiles, num_tiles, p, out);
    }
    if (quantize) q8_x_ = out, q8_count_ = count;
  }
  void silu_mul(const float* gate, const float* up, int64_t n, float* out) override {
    if (!gated_q8(false, gate, up, n, out)) cuda::silu_mul(stream_, gate, up, n, out);
  }
  void gelu_mul(const float* gate, const float* up, int64_t n, float* out) override {
    if (!gated_q8(true, gate, up, n, out)) cuda::gelu_mul(stream_, gate, up, n, out);
  }
  void add(float* x, const float* y, int64_t n) override {
    forget_q8();
    cuda::add(stream_, x, y, n);
  }
  void add_bias(float* x, const float* bias, int64_t rows, int64_t dim) override {
    forget_q8();
    cuda::add_bias(stream_, x, vector(bias, dim), rows, dim);
  }
  void scale(float* x, float s, int64_t n) override {
    forget_q8();
    cuda::scale(stream_, x, s, n);
  }

 private:
  struct Weights {
    std::unique_ptr<DeviceBuffer> buffer;
    DType type = DType::kF32;
    uint64_t row_bytes = 0;
    const uint8_t* data() const { return static_cast<const uint8_t*>(buffer->data()); }
  };
  // A host vector of the model (a norm's weights, a bias) and its device copy. The copy is
  // found by address and checked against the host's bytes, since a freed vector's address can
  // come back holding another model's values.
  struct Vector {
    std::vector<float> host;
    std::unique_ptr<DeviceBuffer> device;
  };

  // Whether a product of n tokens goes to cuBLAS.
  bool gemm_takes(int64_t n) const { return n >= gemm_min_tokens_ && cuda::blas_available(); }
  // Whether a product runs on q8_1 activations (else the float kernels or cuBLAS).
  bool q8_product(DType type, int64_t cols, int64_t n) const {
    return q8_products_ && cuda::has_q8_product(type) && cols % cuda::kUnit == 0 && !gemm_takes(n);
  }
  // Whether a product of n tokens runs on the int8 tensor cores from the stored blocks (else
  // cuBLAS on weights decoded to F16 for it).
  bool mmq_product(DType type, int64_t cols, int64_t n) const {
    return q8_products_ && cuda::has_mmq_product(type) && cols % cuda::kUnit == 0 &&
           n >= gemm_min_tokens_;
  }
  // The down projection reads a gating's result quantized: made in the same pass, for
  // decode-sized batches (n below gemm_min_tokens_ rows of a feed-forward up to kMaxFusedWidth
  // wide). False (and nothing done) otherwise.
  bool gated_q8(bool gelu, const float* gate, const float* up, int64_t n, float* out) {
    forget_q8();
    if (!q8_products_ || n % cuda::kUnit != 0 || n >= gemm_min_tokens_ * kMaxFusedWidth) return false;
    cuda::gated_q8_1(stream_, gelu, gate, up, n, out, q8_space(n));
    q8_x_ = out, q8_count_ = n;
    return true;
  }
  // Device memory for `count` values quantized (grown, never shrunk).
  void* q8_space(int64_t count) {
    const uint64_t bytes = cuda::q8_bytes(1, count);
    if (!q8_ || q8_->bytes() < bytes) {
      q8_ = std::make_unique<DeviceBuffer>(std::max<uint64_t>(2 * bytes, 1 << 16),
                                           "the quantized activations", false);
    }
    return q8_->data();
  }
  // x [n, cols] quantized: the blocks a norm or an earlier product made of it, else made now.
  const void* q8_of(const float* x, int64_t n, int64_t cols) {
    if (q8_x_ == x && q8_count_ == n * cols) return q8_->data();
    void* q = q8_space(n * cols);
    cuda::quantize_q8_1(stream_, x, n, cols, q);
    q8_x_ = x, q8_count_ = n * cols;
    return q;
  }
  // The quantized x is valid until an op writes device memory other than a product's output;
  // a product whose output overlaps x invalidates it too.
  void forget_q8() { q8_x_ = nullptr; }
  void forget_q8_under(const float* y, int64_t count) {
    if (q8_x_ != nullptr && y < q8_x_ + q8_count_ && q8_x_ < y + count) forget_q8();
  }

  static void check_kv_type(KvType type) {
    if (type != KvType::kF32 && type != KvType::kF16) {
      fail("the CUDA backend keeps the KV cache in f16 or f32; --kv-type q8_0 and fp8 are not "
           "built for it yet");
    }
  }

  // The device copy of `w`, made on first use: in its stored type where the kernels decode it,
  // else converted to F16 (types the device has no decoder for: Q2_K, Q3_K, the i-quants ...).
  const Weights& weights(const WeightMatrix& w) {
    // Ids are never reused; a matrix without one is known by its bytes' address and shape.
    const WeightKey key{w.id, w.id != 0 ? nullptr : w.data, w.id != 0 ? 0 : w.rows,
                        w.id != 0 ? 0 : w.cols};
    auto it = weights_.find(key);
    if (it != weights_.end()) return it->second;
    Weights d;
    if (cuda::decodes(w.type)) {
      d.type = w.type;
      d.row_bytes = w.row_bytes;
      d.buffer = std::make_unique<DeviceBuffer>(w.row_bytes * w.rows, "the weights");
      check(cudaMemcpy(d.buffer->data(), w.data, w.row_bytes * w.rows, cudaMemcpyHostToDevice),
            "weight upload");
      ++counts().uploads, ++counts().syncs;  // cudaMemcpy waits
    } else {
      d.type = DType::kF16;
      d.row_bytes = static_cast<uint64_t>(w.cols) * 2;
      std::vector<float> row(static_cast<size_t>(w.cols));
      std::vector<uint16_t> halves(static_cast<size_t>(w.cols * w.rows));
      for (int64_t r = 0; r < w.rows; ++r) {
        dequantize_row(w.type, w.data + w.row_bytes * r, row.data(), w.cols);
        for (int64_t c = 0; c < w.cols; ++c) halves[r * w.cols + c] = fp32_to_fp16(row[c]);
      }
      d.buffer = std::make_unique<DeviceBuffer>(halves.size() * 2, "the weights");
      check(cudaMemcpy(d.buffer->data(), halves.data(), halves.size() * 2, cudaMemcpyHostToDevice),
            "weight upload");
      ++counts().uploads, ++counts().syncs;  // cudaMemcpy waits
    }
    return weights_.emplace(key, std::move(d)).first->second;
  }

  const float* vector(const float* host, int64_t n) {
    Vector& v = vectors_[host];
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    if (!v.device || v.host.size() != static_cast<size_t>(n) ||
        std::memcmp(v.host.data(), host, bytes) != 0) {
      v.host.assign(host, host + n);
      v.device = std::make_unique<DeviceBuffer>(bytes, "the weights");
      check(cudaMemcpy(v.device->data(), host, bytes, cudaMemcpyHostToDevice), "weight upload");
      ++counts().uploads, ++counts().syncs;  // cudaMemcpy waits
    }
    return static_cast<const float*>(v.device->data());
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  bool q8_products_ = true;  // PAGODA_CUDA_KERNELS=old: the float products of before
  // Products of fewer tokens take the kernels (PAGODA_CUDA_GEMM_MIN_TOKENS, for measuring).
  int64_t gemm_min_tokens_ = cuda::kGemmMinTokens;
  std::unique_ptr<DeviceBuffer> q8_;
  const float* q8_x_ = nullptr;  // what q8_ holds quantized (q8_count_ values), when not null
  int64_t q8_count_ = 0;
  static constexpr int64_t kMaxFusedWidth = 65536;
  using WeightKey = std::tuple<uint64_t, const uint8_t*, int64_t, int64_t>;
  std::map<WeightKey, Weights> weights_;
  std::unordered_map<const float*, Vector> vectors_;
  Staging<int32_t> ids_, positions_, seq_of_, tables_, rows_, split_, attention_tiles_;
  std::vector<int32_t> split_host_, tiles_host_;
  Staging<int64_t> slots_;
  Staging<float> row_weights_;
  std::vector<int32_t> seq_of_host_;
  cuda::GemmContext gemm_;
  std::unique_ptr<DeviceBuffer> gemm_scratch_;
  BackendArray scratch_;
};

}  // namespace

bool cuda_backend_built() { return true; }

bool cuda_blas_available() { return cuda::blas_available(); }

std::string cuda_counts_json() {
  const cuda::Counts& c = counts();
  char text[256];
  std::snprintf(text, sizeof text,
                "{\"launches\": %llu, \"syncs\": %llu, \"mallocs\": %llu, \"memsets\": %llu, "
                "\"uploads\": %llu, \"downloads\": %llu}",
                static_cast<unsigned long long>(c.launches.load()),
                static_cast<unsigned long long>(c.syncs.load()),
                static_cast<unsigned long long>(c.mallocs.load()),
                static_cast<unsigned long long>(c.memsets.load()),
                static_cast<unsigned long long>(c.uploads.load()),
                static_cast<unsigned long long>(c.downloads.load()));
  return text;
}

bool cuda_unit_values_on_host(DType type, const uint8_t* row, int64_t unit, float* out) {
  if (!cuda::device_decodes(type)) return false;
  float v[cuda::kUnit];
  cuda::by_device_type(type, [&]<DType T>() { cuda::unit_values<T>(row, unit, v); });
  std::memcpy(out, v, sizeof v);
  return true;
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear it: no driver or no device is not an error here
    return 0;
  }
  return count;
}

std::string cuda_device_description(int device) {
  if (device < 0 || device >= cuda_device_count()) fail("no CUDA device ", device);
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  char text[320];  // the name (at most 256) and the rest
  std::snprintf(text, sizeof text, "%s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
                static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  const int count = cuda_device_count();
  if (count == 0) fail("--backend cuda: no CUDA device is visible (driver or GPU missing)");
  if (device < 0 || device >= count) fail("--backend cuda: no device ", device, " (", count, " found)");
  return std::make_unique<CudaBackend>(device);
}

}  // namespace pagoda
