// The decode products on 8-bit activations (llama.cpp's mmvq design): the activations of a
// step are quantized to BlockQ8_1 once (by the RMSNorm, gating or decode attention kernel that
// produces them where one does: cuda_backend.cu's q8_of and forget_q8), and
// each weight row is dotted with them by integer dot products (cuda_q8.cuh's dot_unit, the
// functions the host tests run). A block of four warps takes one row (long rows) or two or
// four rows (short ones); lane l of a row's warps takes units l, l + 32 * warps, ..., so a
// warp's lanes read consecutive units (one contiguous run of the row per step) and the
// activation blocks beside them. Q/K/V (gate/up) of one type run as one launch.
#include <cuda_fp16.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_q8.cuh"
#include "core/error.h"

namespace pagoda::cuda {
namespace {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kMaxPassTokens = 8;  // tokens of one pass over the weights
constexpr int kNormThreads = 256;  // as rms_norm's kernel (cuda_kernels.cu), same sums

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail("CUDA: ", what, ": ", cudaGetErrorString(e));
  ++counts().launches;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// A warp per block of 32 values; x is [blocks * 32] floats.
__global__ void quantize_kernel(const float* x, int64_t blocks, BlockQ8_1* out) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (b >= blocks) return;  // the whole warp leaves together
  const int lane = threadIdx.x % kWarp;
  quantize_warp(x[b * kWarp + lane], lane, out + b);
}

// rms_norm_kernel's row (the same sums in the same order, so the same y) that also writes the
// row's q8_1 blocks. x and y may alias: every x is read before the barrier.
__global__ void rms_norm_q8_kernel(const float* x, const float* weight, int64_t dim, float eps,
                                   float* y, BlockQ8_1* q) {
  __shared__ float partial[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
  ss = warp_sum(ss);
  if (threadIdx.x % kWarp == 0) partial[threadIdx.x / kWarp] = ss;
  __syncthreads();
  if (threadIdx.x < kWarp) {
    float v = threadIdx.x < blockDim.x / kWarp ? partial[threadIdx.x] : 0.0f;
    v = warp_sum(v);
    if (threadIdx.x == 0) partial[0] = v;
  }
  __syncthreads();
  const float inv = 1.0f / sqrtf(partial[0] / static_cast<float>(dim) + eps);
  const int lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  const int64_t units = dim / kWarp;
  BlockQ8_1* qr = q + static_cast<int64_t>(blockIdx.x) * units;
  for (int64_t u = threadIdx.x / kWarp; u < units; u += warps) {
    const int64_t i = u * kWarp + lane;
    const float v = xr[i] * inv * weight[i];
    yr[i] = v;
    quantize_warp(v, lane, qr + u);
  }
}

// silu_mul_kernel's (gelu_mul_kernel's) values (cuda_kernels.cu) and their q8_1 blocks, a warp
// per block of 32: the feed-forward's down projection reads them quantized.
template <bool Gelu>
__global__ void gated_q8_kernel(const float* gate, const float* up, int64_t blocks, float* out,
                                BlockQ8_1* q) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (b >= blocks) return;  // the whole warp leaves together
  const int lane = threadIdx.x % kWarp;
  const int64_t i = b * kWarp + lane;
  const float g = gate[i];
  float v;
  if constexpr (Gelu) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    v = 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * up[i];
  } else {
    v = g / (1.0f + expf(-g)) * up[i];
  }
  out[i] = v;
  quantize_warp(v, lane, q + b);
}

// Up to kMaxQ8Products matrices of one type on one input; block b belongs to product p when
// first_block[p] <= b < first_block[p + 1].
struct ProductSet {
  Q8Product p[kMaxQ8Products];
  unsigned first_block[kMaxQ8Products + 1];
  int count;
};

// y[k, r] = row r . x[k] for k < n <= N (tokens), every product of the set. warps_per_row of the
// block's kProductWarps warps share a row.
template <DType T, int N>
__global__ void __launch_bounds__(kProductWarps * kWarp)
    q8_product_kernel(ProductSet set, const BlockQ8_1* x, int64_t units, int n, int warps_per_row) {
  __shared__ float partial[kProductWarps][N];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const ProductSlot slot = product_slot(set.first_block, set.count, blockIdx.x, warp, lane,
                                        warps_per_row);
  // Picked with constant indices only: a run-time index into the parameters would copy them
  // to local memory.
  Q8Product prod = set.p[0];
#pragma unroll
  for (int i = 1; i < kMaxQ8Products; ++i) {
    if (i == slot.product) prod = set.p[i];
  }
  const int64_t r = slot.row;
  float acc[N] = {};
  if (r < prod.rows) {
    const uint8_t* row = prod.w + prod.row_bytes * static_cast<uint64_t>(r);
    for (int64_t u = slot.part; u < units; u += slot.stride) {
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (k < n) acc[k] += dot_unit<T>(row, u, x[k * units + u]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < N; ++k) acc[k] = warp_sum(acc[k]);
  if (warps_per_row == 1) {
    if (lane == 0 && r < prod.rows) {
      for (int k = 0; k < n; ++k) prod.y[k * prod.rows + r] = acc[k];
    }
    return;
  }
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < N; ++k) partial[warp][k] = acc[k];
  }
  __syncthreads();
  if (slot.writes && lane < n && r < prod.rows) {
    float sum = 0.0f;
    for (int w = 0; w < warps_per_row; ++w) sum += partial[warp + w][lane];
    prod.y[lane * prod.rows + r] = sum;
  }
}

template <DType T>
void launch_products(cudaStream_t s, ProductSet set, unsigned blocks, const BlockQ8_1* x,
                     int64_t units, int n, int warps) {
  const dim3 grid(blocks), block(kProductWarps * kWarp);
  if (n == 1) {
    q8_product_kernel<T, 1><<<grid, block, 0, s>>>(set, x, units, n, warps);
  } else if (n == 2) {
    q8_product_kernel<T, 2><<<grid, block, 0, s>>>(set, x, units, n, warps);
  } else if (n <= 4) {
    q8_product_kernel<T, 4><<<grid, block, 0, s>>>(set, x, units, n, warps);
  } else {
    q8_product_kernel<T, kMaxPassTokens><<<grid, block, 0, s>>>(set, x, units, n, warps);
  }
}

template <class F>
void by_q8_product_type(DType type, F&& f) {
  if (!by_q8_type(type, f)) {
    fail("CUDA: no q8_1 product for weight type ", static_cast<int>(type));
  }
}

}  // namespace

bool has_q8_product(DType type) { return has_q8_dot(type); }

uint64_t q8_bytes(int64_t n, int64_t cols) {
  return static_cast<uint64_t>(n) * static_cast<uint64_t>(cols / kQ8Values) * sizeof(BlockQ8_1);
}

void quantize_q8_1(cudaStream_t s, const float* x, int64_t n, int64_t cols, void* q8) {
  const int64_t blocks = n * (cols / kQ8Values);
  if (blocks == 0) return;
  constexpr int kWarpsPerBlock = 8;
  quantize_kernel<<<static_cast<unsigned>((blocks + kWarpsPerBlock - 1) / kWarpsPerBlock),
                    kWarpsPerBlock * kWarp, 0, s>>>(x, blocks, static_cast<BlockQ8_1*>(q8));
  check_launch("quantize_q8_1");
}

void rms_norm_q8_1(cudaStream_t s, const float* x, const float* weight, int64_t rows, int64_t dim,
                   float eps, float* y, void* q8) {
  if (rows == 0) return;
  rms_norm_q8_kernel<<<static_cast<unsigned>(rows), kNormThreads, 0, s>>>(
      x, weight, dim, eps, y, static_cast<BlockQ8_1*>(q8));
  check_launch("rms_norm_q8_1");
}

void gated_q8_1(cudaStream_t s, bool gelu, const float* gate, const float* up, int64_t n,
                float* out, void* q8) {
  const int64_t blocks = n / kQ8Values;
  if (blocks == 0) return;
  constexpr int kWarpsPerBlock = 8;
  const dim3 grid(static_cast<unsigned>((blocks + kWarpsPerBlock - 1) / kWarpsPerBlock));
  auto* q = static_cast<BlockQ8_1*>(q8);
  if (gelu) {
    gated_q8_kernel<true><<<grid, kWarpsPerBlock * kWarp, 0, s>>>(gate, up, blocks, out, q);
  } else {
    gated_q8_kernel<false><<<grid, kWarpsPerBlock * kWarp, 0, s>>>(gate, up, blocks, out, q);
  }
  check_launch("gated_q8_1");
}

void matmul_q8(cudaStream_t s, DType type, const Q8Product* products, int count, int64_t cols,
               const void* q8, int64_t n) {
  if (count < 1 || count > kMaxQ8Products) fail("CUDA: matmul_q8 takes 1 to 3 products");
  const int64_t units = cols / kQ8Values;
  const int warps = warps_per_row(units);
  ProductSet set{};
  set.count = count;
  unsigned blocks = 0;
  for (int p = 0; p < count; ++p) {
    set.p[p] = products[p];
    set.first_block[p] = blocks;
    blocks += product_blocks(products[p].rows, warps);
  }
  set.first_block[count] = blocks;
  if (blocks == 0) return;
  const auto* x = static_cast<const BlockQ8_1*>(q8);
  for (int64_t t0 = 0; t0 < n; t0 += kMaxPassTokens) {
    const int m = static_cast<int>(n - t0 < kMaxPassTokens ? n - t0 : kMaxPassTokens);
    ProductSet pass = set;
    for (int p = 0; p < count; ++p) pass.p[p].y += t0 * products[p].rows;
    by_q8_product_type(type, [&]<DType T>() {
      launch_products<T>(s, pass, blocks, x + t0 * units, units, m, warps);
    });
    check_launch("matmul_q8");
  }
}

}  // namespace pagoda::cuda
