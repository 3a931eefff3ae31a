// The CUDA backend: Backend's memory on the device and its ops as kernels (cuda_kernels.cu) on
// one stream. The host learns results only through download (the logits), which waits for the
// stream; everything else is queued.
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <tuple>
#include <unordered_map>
#include <vector>

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

class DeviceBuffer final : public BackendBuffer {
 public:
  DeviceBuffer(uint64_t bytes, const char* what) : bytes_(bytes) {
    const cudaError_t e = cudaMalloc(&data_, bytes == 0 ? 1 : bytes);
    if (e != cudaSuccess) {
      size_t free_bytes = 0, total = 0;
      cudaMemGetInfo(&free_bytes, &total);
      fail(what, " needs ", bytes >> 20, " MiB of GPU memory but only ", free_bytes >> 20,
           " MiB are free (", cudaGetErrorString(e), ")");
    }
    check(cudaMemset(data_, 0, bytes), "cudaMemset");
  }
  ~DeviceBuffer() override { cudaFree(data_); }
  void* data() const override { return data_; }
  uint64_t bytes() const override { return bytes_; }

 private:
  void* data_ = nullptr;
  uint64_t bytes_ = 0;
};

// A device array of T that grows to the largest count asked for (the per-step inputs). Every
// layer of a step passes the same positions, slots and block table: an upload equal to the
// last one is skipped, which saves a copy (and its few microseconds) per op and layer.
template <typename T>
class Staging {
 public:
  T* put(cudaStream_t s, const T* host, int64_t count) {
    if (count > capacity_) {
      buffer_ = std::make_unique<DeviceBuffer>(static_cast<uint64_t>(count) * sizeof(T),
                                               "a step's inputs");
      capacity_ = count;
      last_.clear();
    }
    auto* dst = static_cast<T*>(buffer_ ? buffer_->data() : nullptr);
    const auto size = static_cast<size_t>(count);
    if (count > 0 && !(last_.size() == size && std::memcmp(last_.data(), host, size * sizeof(T)) == 0)) {
      check(cudaMemcpyAsync(dst, host, size * sizeof(T), cudaMemcpyHostToDevice, s),
            "upload of a step's inputs");
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
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda"; }

  bool host_visible() const override { return false; }
  std::unique_ptr<BackendBuffer> allocate(uint64_t bytes, const char* what) override {
    return std::make_unique<DeviceBuffer>(bytes, what);
  }
  void upload(const void* host, uint64_t bytes, void* dst) override {
    if (bytes == 0) return;
    check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_), "upload");
    check(cudaStreamSynchronize(stream_), "upload");
  }
  void download(const void* src, uint64_t bytes, void* host) override {
    if (bytes == 0) return;
    check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_), "download");
    check(cudaStreamSynchronize(stream_), "download");
  }
  void gather_rows(const float* x, std::span<const int32_t> rows, int64_t width,
                   float* out) override {
    const auto count = static_cast<int64_t>(rows.size());
    if (count == 0) return;
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
  void copy_blocks(KvLayer cache, uint64_t block_bytes, std::span<const BlockCopy> copies) override {
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
    const Weights& w = weights(table);
    cuda::embed(stream_, w.type, w.data(), w.row_bytes, table.cols, ids_.put(stream_, ids, n), n,
                out);
  }
  void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y) override {
    const Weights& d = weights(w);
    if (n >= cuda::kGemmMinTokens && w.cols % 32 == 0 && cuda::blas_available()) {
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
  void rms_norm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                float* y) override {
    cuda::rms_norm(stream_, x, vector(weight, dim), rows, dim, eps, y);
  }
  void rope(float* x, const int32_t* positions, int64_t n, int64_t heads, int64_t head_dim,
            const RopeParams& p) override {
    if (p.yarn || p.mscale != 1.0f) {
      fail("the CUDA backend does not compute YaRN RoPE scaling or a RoPE attention factor yet "
           "(run on the CPU backend)");
    }
    const float* factors = p.freq_factors ? vector(p.freq_factors, p.rotary_dim / 2) : nullptr;
    cuda::rope(stream_, x, positions_.put(stream_, positions, n), n, heads, head_dim, p, factors);
  }
  void write_kv(const float* k, const float* v, const AttentionBatch& b, const AttentionParams& p,
                KvLayer cache) override {
    check_kv_type(cache.type);
    cuda::write_kv(stream_, k, v, slots_.put(stream_, b.slot_mapping, b.num_tokens), b.num_tokens,
                   b.block_size, p, cache);
  }
  void attention(const float* q, KvLayer cache, const AttentionBatch& b, const AttentionParams& p,
                 float* out) override {
    check_kv_type(cache.type);
    if (p.sinks != nullptr) fail("the CUDA backend does not compute attention sinks (gpt-oss) yet (run on the CPU backend)");
    seq_of_host_.resize(static_cast<size_t>(b.num_tokens));
    for (int32_t s = 0; s < b.num_seqs; ++s) {
      for (int32_t t = b.query_start[s]; t < b.query_start[s + 1]; ++t) seq_of_host_[t] = s;
    }
    const int32_t* seq_of = seq_of_.put(stream_, seq_of_host_.data(), b.num_tokens);
    const int32_t* positions = positions_.put(stream_, b.positions, b.num_tokens);
    const int32_t* table = tables_.put(stream_, b.block_table,
                                       int64_t{b.num_seqs} * b.max_blocks_per_seq);
    // Sequences with a few query tokens (decodes) go token by token; longer ones (prompts) in
    // tiles that share each chunk of keys and values.
    split_host_.clear();
    tiles_host_.clear();
    for (int32_t s = 0; s < b.num_seqs; ++s) {
      const int32_t begin = b.query_start[s], end = b.query_start[s + 1];
      if (end - begin < cuda::kAttentionTileTokens / 2) {
        for (int32_t t = begin; t < end; ++t) split_host_.push_back(t);
        continue;
      }
      // A tile's tokens have consecutive positions (as a prompt's do), so the positions its
      // block loads are the ones its tokens see, never a block the table no longer holds.
      for (int32_t t = begin; t < end;) {
        int32_t count = 1;
        while (count < cuda::kAttentionTileTokens && t + count < end &&
               b.positions[t + count] == b.positions[t + count - 1] + 1) {
          ++count;
        }
        tiles_host_.push_back(t);
        tiles_host_.push_back(count);
        t += count;
      }
    }
    const auto num_split = static_cast<int64_t>(split_host_.size());
    const auto num_tiles = static_cast<int64_t>(tiles_host_.size() / 2);
    const int32_t* split = split_.put(stream_, split_host_.data(), num_split);
    const int32_t* tiles = attention_tiles_.put(stream_, tiles_host_.data(), 2 * num_tiles);
    cuda::attention(stream_, q, cache, seq_of, positions, table, b.max_blocks_per_seq,
                    b.block_size, split, num_split, tiles, num_tiles, p, out);
  }
  void silu_mul(const float* gate, const float* up, int64_t n, float* out) override {
    cuda::silu_mul(stream_, gate, up, n, out);
  }
  void gelu_mul(const float* gate, const float* up, int64_t n, float* out) override {
    cuda::gelu_mul(stream_, gate, up, n, out);
  }
  void add(float* x, const float* y, int64_t n) override { cuda::add(stream_, x, y, n); }
  void add_bias(float* x, const float* bias, int64_t rows, int64_t dim) override {
    cuda::add_bias(stream_, x, vector(bias, dim), rows, dim);
  }
  void scale(float* x, float s, int64_t n) override { cuda::scale(stream_, x, s, n); }

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
    }
    return static_cast<const float*>(v.device->data());
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  using WeightKey = std::tuple<uint64_t, const uint8_t*, int64_t, int64_t>;
  std::map<WeightKey, Weights> weights_;
  std::unordered_map<const float*, Vector> vectors_;
  Staging<int32_t> ids_, positions_, seq_of_, tables_, rows_, split_, attention_tiles_;
  std::vector<int32_t> split_host_, tiles_host_;
  Staging<int64_t> slots_;
  std::vector<int32_t> seq_of_host_;
  cuda::GemmContext gemm_;
  std::unique_ptr<DeviceBuffer> gemm_scratch_;
  BackendArray scratch_;
};

}  // namespace

bool cuda_backend_built() { return true; }

bool cuda_blas_available() { return cuda::blas_available(); }

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
