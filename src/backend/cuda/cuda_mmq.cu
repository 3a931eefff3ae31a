// Products of many tokens on the int8 tensor cores (cuda_mmq.cuh has the design and every
// piece of arithmetic): a block of four warps takes 64 tokens x 64 weight rows; per stage of
// four units (128 columns) the block unpacks the weight units to int8 and copies the q8_1
// activation quants into shared memory, then each warp runs, per unit, one mma.sync m16n8k32
// for its 16 rows and each of 8 fragments of 8 tokens, and adds the unit's scaled value to its
// F32 sums in unit order (so the result is the decode products' bit for bit).
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_mmq.cuh"
#include "core/error.h"

namespace pagoda::cuda {
namespace {

__device__ __forceinline__ void mma_s8(const int* a, const int* b, int* c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();  // built for sm_80 and newer only (CMakeLists.txt)
#endif
}

template <DType T>
__global__ void __launch_bounds__(kMmqThreads)
    mmq_kernel(const uint8_t* w, uint64_t row_bytes, int64_t rows, const BlockQ8_1* x,
               int64_t units, int64_t n, float* y) {
  __shared__ int wq[kMmqRows * kMmqStride];
  __shared__ int xq[kMmqTokens * kMmqStride];
  __shared__ UnitScale ws[kMmqRows * kMmqUnits];
  __shared__ BlockScale xs[kMmqTokens * kMmqUnits];
  const int64_t tok0 = static_cast<int64_t>(blockIdx.x) * kMmqTokens;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kMmqRows;
  const int thread = static_cast<int>(threadIdx.x), warp = thread / kWarpLanes,
            lane = thread % kWarpLanes;
  float acc[kMmqFragments][4];
#pragma unroll
  for (int f = 0; f < kMmqFragments; ++f) acc[f][0] = acc[f][1] = acc[f][2] = acc[f][3] = 0.0f;
  for (int64_t u0 = 0; u0 < units; u0 += kMmqUnits) {
    stage_weights<T>(w, row_bytes, rows, units, row0, u0, thread, wq, ws);
    stage_activations(x, n, units, tok0, u0, thread, xq, xs);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kMmqUnits; ++k) {
      if (u0 + k >= units) break;  // the same for the whole block
      int a[4];
      load_a(wq, warp, lane, k, a);
#pragma unroll
      for (int f = 0; f < kMmqFragments; ++f) {
        int b[2], c[4] = {0, 0, 0, 0}, c_hi[4] = {0, 0, 0, 0};
        load_b(xq, f, lane, k, b);
        if constexpr (split_sums(T)) {  // Q6_K: a scale per 16 weights, two sums
          int half[4];
          half_of_a(a, 0, half);
          mma_s8(half, b, c);
          half_of_a(a, 1, half);
          mma_s8(half, b, c_hi);
        } else {
          mma_s8(a, b, c);
        }
        accumulate<T>(c, c_hi, ws, xs, warp, lane, k, f, acc[f]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int f = 0; f < kMmqFragments; ++f) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t r = mmq_out_row(row0, warp, lane, i), t = mmq_out_token(tok0, f, lane, i);
      if (r < rows && t < n) y[t * rows + r] = acc[f][i];
    }
  }
}

template <class F>
void by_mmq_type(DType type, F&& f) {
  if (!by_q8_type(type, f)) {
    fail("CUDA: no int8 tile product for weight type ", static_cast<int>(type));
  }
}

}  // namespace

bool has_mmq_product(DType type) { return has_mmq(type); }

void matmul_mmq(cudaStream_t s, DType type, const uint8_t* w, uint64_t row_bytes, int64_t rows,
                int64_t cols, const void* q8, int64_t n, float* y) {
  if (rows == 0 || n == 0) return;
  // Token blocks fastest: the blocks running at once share weight rows (read from memory about
  // once) and the whole quantized input stays in L2 (21 MB for 4,096 tokens of 4,096 columns),
  // where rows fastest would stream the whole matrix again for every 64 tokens.
  const dim3 grid(static_cast<unsigned>((n + kMmqTokens - 1) / kMmqTokens),
                  static_cast<unsigned>((rows + kMmqRows - 1) / kMmqRows));
  if (grid.y > 65535) fail("CUDA: matmul_mmq takes at most ", 65535 * kMmqRows, " rows");
  const auto* x = static_cast<const BlockQ8_1*>(q8);
  by_mmq_type(type, [&]<DType T>() {
    mmq_kernel<T><<<grid, kMmqThreads, 0, s>>>(w, row_bytes, rows, x, cols / kQ8Values, n, y);
  });
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail("CUDA: matmul_mmq: ", cudaGetErrorString(e));
  ++counts().launches;
}

}  // namespace pagoda::cuda
