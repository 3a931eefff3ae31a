// Launchers of the CUDA backend's kernels (cuda_kernels.cu), on one stream. Pointers are device
// pointers unless named host_. Shapes as in backend/backend.h.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "backend/backend.h"
#include "backend/cuda/cuda_q8.cuh"

namespace pagoda::cuda {

// What the backend asked of the device since the process started, for the device check
// (PAGODA_CUDA_COUNTS): kernel launches (a cuBLAS product counts as one), waits of the host for
// the stream, and allocations. Atomic: backends of several models may run on several threads.
struct Counts {
  std::atomic<uint64_t> launches{0};
  std::atomic<uint64_t> syncs{0};
  std::atomic<uint64_t> mallocs{0};
  std::atomic<uint64_t> memsets{0};
  std::atomic<uint64_t> uploads{0};
  std::atomic<uint64_t> downloads{0};
};
Counts& counts();

// Whether matmul / embed read `type` directly (else it is uploaded converted to F16).
bool decodes(DType type);

void embed(cudaStream_t s, DType type, const uint8_t* table, uint64_t row_bytes, int64_t cols,
           const int32_t* ids, int64_t n, float* out);
void matmul(cudaStream_t s, DType type, const uint8_t* w, uint64_t row_bytes, int64_t rows,
            int64_t cols, const float* x, int64_t n, float* y);
// Products of at least this many tokens go to cuBLAS when it is there (cuda_gemm.cu).
constexpr int64_t kGemmMinTokens = 16;

// Whether cuBLAS was found at run time (and PAGODA_CUBLAS is not 0).
bool blas_available();

// y[n, rows] = x[n, cols] W^T on the tensor cores through cuBLAS (cuda_gemm.cu). The caller
// gives a device scratch of scratch_bytes() for the converted activations and decoded weights.
class GemmContext {
 public:
  GemmContext();
  ~GemmContext();
  static uint64_t scratch_bytes(DType type, int64_t rows, int64_t cols, int64_t n);
  void run(cudaStream_t s, DType type, const uint8_t* w, uint64_t row_bytes, int64_t rows,
           int64_t cols, const float* x, int64_t n, void* scratch, float* y);

 private:
  struct Handle;
  std::unique_ptr<Handle> handle_;
};

// The decode products on 8-bit activations (cuda_mmvq.cu, cuda_q8.cuh): x quantized to q8_1
// blocks (q8_bytes(n, cols) of device memory) once, then every product of that x reads them.
bool has_q8_product(DType type);
uint64_t q8_bytes(int64_t n, int64_t cols);
void quantize_q8_1(cudaStream_t s, const float* x, int64_t n, int64_t cols, void* q8);
// rms_norm (the same y) that also writes y's q8_1 blocks; dim a multiple of 32.
void rms_norm_q8_1(cudaStream_t s, const float* x, const float* weight, int64_t rows, int64_t dim,
                   float eps, float* y, void* q8);
// silu_mul (gelu_mul) with the same out that also writes out's q8_1 blocks; n a multiple of 32.
// The blocks of a [tokens, cols] row-major array are those of its n = tokens * cols values.
void gated_q8_1(cudaStream_t s, bool gelu, const float* gate, const float* up, int64_t n,
                float* out, void* q8);
struct Q8Product {
  const uint8_t* w;
  uint64_t row_bytes;
  int64_t rows;
  float* y;  // [n, rows]
};
// y = x W^T for 1 to kMaxQ8Products (cuda_q8.cuh) matrices of `type` with `cols` columns, in one launch per
// pass of up to 8 tokens.
void matmul_q8(cudaStream_t s, DType type, const Q8Product* products, int count, int64_t cols,
               const void* q8, int64_t n);

// Products of many tokens on the int8 tensor cores (cuda_mmq.cu, cuda_mmq.cuh): y[n, rows] =
// x W^T from x's q8_1 blocks (as matmul_q8), the weights read in their stored blocks.
bool has_mmq_product(DType type);
void matmul_mmq(cudaStream_t s, DType type, const uint8_t* w, uint64_t row_bytes, int64_t rows,
                int64_t cols, const void* q8, int64_t n, float* y);

void rms_norm(cudaStream_t s, const float* x, const float* weight, int64_t rows, int64_t dim,
              float eps, float* y);
void rope(cudaStream_t s, float* x, const int32_t* positions, int64_t n, int64_t heads,
          int64_t head_dim, const RopeParams& p, const float* freq_factors);
// K/V in F32 or F16, kv_format.h's layout (keys transposed in each head's slab).
void write_kv(cudaStream_t s, const float* k, const float* v, const int64_t* slots, int64_t n,
              int32_t block_size, const AttentionParams& p, KvLayer cache);
// seq_of[t]: token t's sequence; its row of block_table holds max_blocks entries. The tokens
// listed in `tokens` are computed one block per (token, head) with the positions split over
// warps (decodes); `tiles` holds {first token, count} pairs of up to kAttentionTileTokens
// consecutive tokens of one sequence, computed sharing each chunk of keys and values (prompts).
// With q8 (head_dim a multiple of 32, no tiles, every token listed): out's q8_1 blocks too.
constexpr int32_t kAttentionTileTokens = 8;
void attention(cudaStream_t s, const float* q, KvLayer cache, const int32_t* seq_of,
               const int32_t* positions, const int32_t* block_table, int32_t max_blocks,
               int32_t block_size, const int32_t* tokens, int64_t num_tokens,
               const int32_t* tiles, int64_t num_tiles, const AttentionParams& p, float* out,
               void* q8 = nullptr);
// Prompt attention on the F16 tensor cores (cuda_flash.cu, cuda_flash.cuh) for the cases
// flash_takes: `tiles` as cuda_flash.cuh's prompt_tiles makes them with flash_tile_tokens.
bool flash_takes(KvType type, int32_t heads, int32_t kv_heads, int32_t head_dim);
void flash_attention(cudaStream_t s, const float* q, KvLayer cache, const int32_t* seq_of,
                     const int32_t* positions, const int32_t* block_table, int32_t max_blocks,
                     int32_t block_size, const int32_t* tiles, int64_t num_tiles,
                     const AttentionParams& p, float* out);
void silu_mul(cudaStream_t s, const float* gate, const float* up, int64_t n, float* out);
void gelu_mul(cudaStream_t s, const float* gate, const float* up, int64_t n, float* out);
void add(cudaStream_t s, float* x, const float* y, int64_t n);
void add_bias(cudaStream_t s, float* x, const float* bias, int64_t rows, int64_t dim);
void scale(cudaStream_t s, float* x, float factor, int64_t n);
// out[i, :] = x[rows[i], :]; out must not overlap x.
void gather_rows(cudaStream_t s, const float* x, const int32_t* rows, int64_t count,
                 int64_t width, float* out);
// out[rows[i], :] += weights[i] * y[i, :] for i < count; rows distinct.
void add_scaled_rows(cudaStream_t s, const float* y, const int32_t* rows, const float* weights,
                     int64_t count, int64_t width, float* out);

}  // namespace pagoda::cuda
