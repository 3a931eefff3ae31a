// The CUDA backend's kernels: a warp per output row for products of a few tokens (the weights
// decoded in registers, 32 per lane, read once per pass of up to kTokensPerPass tokens; many
// tokens go to cuBLAS, cuda_gemm.cu), and attention with the online softmax over a sequence's
// blocks, a token's positions split over a block's warps for decodes, tiles of a prompt's
// tokens sharing keys and values in shared memory. docs/CUDA.md has the measured speed and
// what is still to come (CUDA graphs, products at the copy bandwidth).
#include "backend/cuda/cuda_kernels.h"

#include <cuda_fp16.h>

#include <cmath>

#include "backend/cuda/cuda_decode.cuh"
#include "backend/cuda/cuda_flash.cuh"
#include "backend/cuda/cuda_units.cuh"
#include "core/error.h"

namespace pagoda::cuda {
namespace {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kTokensPerPass = 8;   // tokens of one pass over a weight row
constexpr int kMaxHeadDim = 256;    // attention keeps head_dim / 32 accumulators per lane
constexpr int kRowsPerBlock = 4;    // warps per block in the products

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail("CUDA: ", what, ": ", cudaGetErrorString(e));
  ++counts().launches;
}

unsigned blocks_for(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

template <DType T>
__global__ void embed_kernel(const uint8_t* table, uint64_t row_bytes, int64_t cols,
                             const int32_t* ids, float* out) {
  const int64_t t = blockIdx.x;
  const uint8_t* row = table + row_bytes * static_cast<uint64_t>(ids[t]);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[t * cols + c] = element<T>(row, c);
}

template <DType T>
__global__ void matmul_kernel(const uint8_t* w, uint64_t row_bytes, int64_t rows, int64_t cols,
                              const float* x, int64_t n, float* y) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const uint8_t* row = w + row_bytes * static_cast<uint64_t>(r);
  for (int64_t t0 = 0; t0 < n; t0 += kTokensPerPass) {
    const int m = static_cast<int>(min(static_cast<int64_t>(kTokensPerPass), n - t0));
    float acc[kTokensPerPass] = {};
    for (int64_t c = lane; c < cols; c += kWarp) {
      const float v = element<T>(row, c);
#pragma unroll
      for (int k = 0; k < kTokensPerPass; ++k) {
        if (k < m) acc[k] += v * x[(t0 + k) * cols + c];
      }
    }
#pragma unroll
    for (int k = 0; k < kTokensPerPass; ++k) acc[k] = warp_sum(acc[k]);
    if (lane == 0) {
      for (int k = 0; k < m; ++k) y[(t0 + k) * rows + r] = acc[k];
    }
  }
}

// The same product with a unit of 32 weights per lane (cuda_units.cuh): wide loads, several
// in flight per lane. Needs cols a multiple of 32 and x 16-byte aligned (float4 reads). N:
// tokens per pass; decode's N = 1 keeps the registers few, so more warps (and loads) are in
// flight.
template <DType T, int N>
__global__ void matvec_kernel(const uint8_t* w, uint64_t row_bytes, int64_t rows, int64_t cols,
                              const float* x, int64_t n, float* y) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const uint8_t* row = w + row_bytes * static_cast<uint64_t>(r);
  const int64_t units = cols / kUnit;
  for (int64_t t0 = 0; t0 < n; t0 += N) {
    const int m = static_cast<int>(min(static_cast<int64_t>(N), n - t0));
    float acc[N] = {};
#pragma unroll 2
    for (int64_t u = lane; u < units; u += kWarp) {
      float v[kUnit];
      unit_values<T>(row, u, v);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (k < m) {
          const auto* xp = reinterpret_cast<const float4*>(x + (t0 + k) * cols + u * kUnit);
          float sum = 0.0f;
#pragma unroll
          for (int i = 0; i < kUnit / 4; ++i) {
            const float4 xv = xp[i];
            sum += v[4 * i] * xv.x + v[4 * i + 1] * xv.y + v[4 * i + 2] * xv.z + v[4 * i + 3] * xv.w;
          }
          acc[k] += sum;
        }
      }
    }
#pragma unroll
    for (int k = 0; k < N; ++k) acc[k] = warp_sum(acc[k]);
    if (lane == 0) {
      for (int k = 0; k < m; ++k) y[(t0 + k) * rows + r] = acc[k];
    }
  }
}

__global__ void rms_norm_kernel(const float* x, const float* weight, int64_t dim, float eps,
                                float* y) {
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
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = xr[i] * inv * weight[i];
}

// What RopeParams::angle_scale computes (backend.h), for the device: pair i's multiplier of
// its angle, YaRN's ramp between the original frequency and the scaled one.
struct RopeScale {
  double position_scale;
  bool yarn;
  float low, high;
  __device__ double at(int64_t i) const {
    if (!yarn) return position_scale;
    const double y = (static_cast<double>(i) - low) / fmax(0.001, static_cast<double>(high - low));
    const double keep = 1.0 - fmin(fmax(y, 0.0), 1.0);
    return position_scale * (1.0 - keep) + keep;
  }
};

// One thread per rotated pair; the angle in double, as the reference computes it; cos and sin
// times `mscale` (YaRN's attention factor).
__global__ void rope_kernel(float* x, const int32_t* positions, int64_t n, int64_t heads,
                            int64_t head_dim, int32_t rotary_dim, double theta, bool split_half,
                            RopeScale scale, float mscale, const float* freq_factors) {
  const int64_t half = rotary_dim / 2;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * heads * half) return;
  const int64_t i = idx % half, th = idx / half, t = th / heads;
  float* v = x + th * head_dim;
  double freq = pow(theta, -2.0 * static_cast<double>(i) / rotary_dim);
  if (freq_factors != nullptr) freq /= freq_factors[i];
  const double angle = static_cast<double>(positions[t]) * freq * scale.at(i);
  double s, c;
  sincos(angle, &s, &c);
  s *= mscale;
  c *= mscale;
  const int64_t a = split_half ? i : 2 * i, b = split_half ? i + half : 2 * i + 1;
  const double x0 = v[a], x1 = v[b];
  v[a] = static_cast<float>(x0 * c - x1 * s);
  v[b] = static_cast<float>(x0 * s + x1 * c);
}

__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const __half* p) { return __half2float(*p); }

// One thread per (token, KV head, dimension). A head's slab in a block: block_size keys
// transposed (dimension d of slot o at d * block_size + o), then, in V, one row per slot.
template <typename KV>
__global__ void write_kv_kernel(const float* k, const float* v, const int64_t* slots, int64_t n,
                                int32_t block_size, int32_t kv_heads, int32_t head_dim, KV* kc,
                                KV* vc) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * kv_heads * head_dim) return;
  const int64_t d = idx % head_dim, th = idx / head_dim, head = th % kv_heads, t = th / kv_heads;
  const int64_t slot = slots[t], block = slot / block_size, offset = slot % block_size;
  const int64_t slab = (block * kv_heads + head) * block_size * head_dim;
  store(kc + slab + d * block_size + offset, k[idx]);
  store(vc + slab + offset * head_dim + d, v[idx]);
}

// One block of kSplitWarps warps per (token, query head): the warps take turns over the
// positions, 32 at a time (a lane each), so a decode step's few (token, head) pairs still keep
// the GPU busy. Each warp keeps its own online softmax (running maximum, sum, and the weighted
// value rows, lane d owning output dimensions d, d + 32, ...); the block merges them at the end.
constexpr int kSplitWarps = 8;

template <typename KV>
__global__ void attention_kernel(const float* q, const KV* kc, const KV* vc, const int32_t* seq_of,
                                 const int32_t* positions, const int32_t* block_table,
                                 int32_t max_blocks, int32_t block_size, const int32_t* tokens,
                                 int32_t heads, int32_t kv_heads, int32_t head_dim, float scale,
                                 int32_t window, const float* sinks, float* out, BlockQ8_1* q8) {
  __shared__ float q_shared[kMaxHeadDim];
  __shared__ float acc_shared[kSplitWarps][kMaxHeadDim];
  __shared__ float max_shared[kSplitWarps], denom_shared[kSplitWarps];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t t = tokens[blockIdx.x / heads];
  const int32_t h = static_cast<int32_t>(blockIdx.x % heads), kvh = h / (heads / kv_heads);
  const int64_t pair = t * heads + h;
  const int32_t pos = positions[t], first = window > 0 ? max(0, pos - window + 1) : 0;
  const int32_t* table = block_table + static_cast<int64_t>(seq_of[t]) * max_blocks;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) q_shared[d] = q[pair * head_dim + d];
  __syncthreads();

  float running_max = -INFINITY, denom = 0.0f;
  float acc[kMaxHeadDim / kWarp] = {};
  for (int32_t j0 = first + warp * kWarp; j0 <= pos; j0 += kSplitWarps * kWarp) {
    const int32_t j = j0 + lane;
    float score = -INFINITY;
    int64_t value_row = 0;  // where position j's value row starts: shared with the warp below
    if (j <= pos) {
      const int64_t slab =
          (static_cast<int64_t>(table[j / block_size]) * kv_heads + kvh) * block_size * head_dim;
      value_row = slab + static_cast<int64_t>(j % block_size) * head_dim;
      const KV* keys = kc + slab + j % block_size;
      float dot = 0.0f;
#pragma unroll 8
      for (int d = 0; d < head_dim; ++d) {
        dot += q_shared[d] * load(keys + static_cast<int64_t>(d) * block_size);
      }
      score = dot * scale;
    }
    const float new_max = fmaxf(running_max, warp_max(score));
    const float p = j <= pos ? expf(score - new_max) : 0.0f;
    const float correction = running_max == -INFINITY ? 0.0f : expf(running_max - new_max);
    denom = denom * correction + warp_sum(p);
#pragma unroll
    for (int k = 0; k < kMaxHeadDim / kWarp; ++k) acc[k] *= correction;
    // The value rows' addresses come from the lanes that looked them up (no second table
    // read), and a full pass has a fixed count, so its loads are unrolled and overlap.
    auto add_value = [&](int32_t i) {
      const float pi = __shfl_sync(kFullMask, p, i);
      const KV* row = vc + __shfl_sync(kFullMask, value_row, i);
#pragma unroll
      for (int k = 0; k < kMaxHeadDim / kWarp; ++k) {
        const int d = lane + k * kWarp;
        if (d < head_dim) acc[k] += pi * load(row + d);
      }
    };
    const int32_t count = min(kWarp, pos - j0 + 1);
    if (count == kWarp) {
#pragma unroll 8
      for (int32_t i = 0; i < kWarp; ++i) add_value(i);
    } else {
      for (int32_t i = 0; i < count; ++i) add_value(i);
    }
    running_max = new_max;
  }
  if (lane == 0) {
    max_shared[warp] = running_max;
    denom_shared[warp] = denom;
  }
#pragma unroll
  for (int k = 0; k < kMaxHeadDim / kWarp; ++k) {
    const int d = lane + k * kWarp;
    if (d < head_dim) acc_shared[warp][d] = acc[k];
  }
  __syncthreads();
  // Warps that saw no position hold -inf and weigh nothing; position `pos` itself is always seen.
  float block_max = -INFINITY;
  for (int w = 0; w < kSplitWarps; ++w) block_max = fmaxf(block_max, max_shared[w]);
  float total = 0.0f;
  for (int w = 0; w < kSplitWarps; ++w) {
    if (max_shared[w] != -INFINITY) total += denom_shared[w] * expf(max_shared[w] - block_max);
  }
  total += sink_term(sinks, h, block_max);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < kSplitWarps; ++w) {
      if (max_shared[w] != -INFINITY) sum += acc_shared[w][d] * expf(max_shared[w] - block_max);
    }
    const float v = sum / total;
    out[pair * head_dim + d] = v;
    // With q8 (head_dim a multiple of 32, so whole warps are here): the output product's input.
    if (q8 != nullptr) quantize_warp(v, threadIdx.x % kWarp, q8 + (pair * head_dim + d) / kWarp);
  }
}

// Prompts: one block per (tile of up to kTileTokens consecutive tokens of one sequence, query
// head), a warp per token. The block walks the tile's positions kChunk at a time, loading each
// chunk's keys and values into shared memory once for all its tokens (the per-token kernel
// above reads them once per token); each warp then scores the chunk with a lane per position
// and adds the value rows, with the same online softmax.
constexpr int kTileTokens = kAttentionTileTokens;
constexpr int kChunk = 32;

// Dynamic shared memory of the tiled kernel: keys [head_dim][kChunk] (transposed, so lane j
// reads column j without bank conflicts), values [kChunk][head_dim], queries [kTileTokens][head_dim].
size_t tile_shared_bytes(int32_t head_dim) {
  return static_cast<size_t>(head_dim) * (2 * kChunk + kTileTokens) * sizeof(float);
}

template <typename KV>
__global__ void attention_tile_kernel(const float* q, const KV* kc, const KV* vc,
                                      const int32_t* seq_of, const int32_t* positions,
                                      const int32_t* block_table, int32_t max_blocks,
                                      int32_t block_size, const int32_t* tiles, int32_t heads,
                                      int32_t kv_heads, int32_t head_dim, float scale,
                                      int32_t window, const float* sinks, float* out) {
  extern __shared__ float shared[];
  float* k_s = shared;
  float* v_s = k_s + head_dim * kChunk;
  float* q_s = v_s + kChunk * head_dim;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int32_t tile = static_cast<int32_t>(blockIdx.x / heads);
  const int32_t h = static_cast<int32_t>(blockIdx.x % heads), kvh = h / (heads / kv_heads);
  const int32_t t0 = tiles[2 * tile], count = tiles[2 * tile + 1];
  const int32_t* table = block_table + static_cast<int64_t>(seq_of[t0]) * max_blocks;
  const bool active = warp < count;
  const int64_t t = t0 + min(warp, count - 1);
  const int32_t pos = positions[t], first = window > 0 ? max(0, pos - window + 1) : 0;
  // The positions any of the tile's tokens sees.
  int32_t lo = pos, hi = pos;
  for (int32_t i = 0; i < count; ++i) {
    const int32_t p_i = positions[t0 + i];
    lo = min(lo, window > 0 ? max(0, p_i - window + 1) : 0);
    hi = max(hi, p_i);
  }
  const int64_t pair = t * heads + h;
  float* qw = q_s + warp * head_dim;
  for (int d = lane; d < head_dim; d += kWarp) qw[d] = q[pair * head_dim + d];
  __syncwarp();

  float running_max = -INFINITY, denom = 0.0f;
  float acc[kMaxHeadDim / kWarp] = {};
  for (int32_t c0 = lo; c0 <= hi; c0 += kChunk) {
    __syncthreads();  // every warp is done with the last chunk
    for (int idx = threadIdx.x; idx < kChunk * head_dim; idx += blockDim.x) {
      // Keys with the position fastest (one dimension of a block's keys is contiguous),
      // values with the dimension fastest (a position's row is contiguous).
      const int jk = idx % kChunk, dk = idx / kChunk;
      const int32_t pk = c0 + jk;
      float key = 0.0f;
      if (pk <= hi) {
        const int64_t slab =
            (static_cast<int64_t>(table[pk / block_size]) * kv_heads + kvh) * block_size * head_dim;
        key = load(kc + slab + static_cast<int64_t>(dk) * block_size + pk % block_size);
      }
      k_s[dk * kChunk + jk] = key;
      const int jv = idx / head_dim, dv = idx % head_dim;
      const int32_t pv = c0 + jv;
      float value = 0.0f;
      if (pv <= hi) {
        const int64_t slab =
            (static_cast<int64_t>(table[pv / block_size]) * kv_heads + kvh) * block_size * head_dim;
        value = load(vc + slab + static_cast<int64_t>(pv % block_size) * head_dim + dv);
      }
      v_s[jv * head_dim + dv] = value;
    }
    __syncthreads();
    if (!active || c0 > pos || c0 + kChunk <= first) continue;  // no position of this token
    const int32_t j = c0 + lane;
    const bool valid = j >= first && j <= pos;
    float score = -INFINITY;
    if (valid) {
      float dot = 0.0f;
#pragma unroll 8
      for (int d = 0; d < head_dim; ++d) dot += qw[d] * k_s[d * kChunk + lane];
      score = dot * scale;
    }
    const float new_max = fmaxf(running_max, warp_max(score));  // some lane is valid
    const float p = valid ? expf(score - new_max) : 0.0f;
    const float correction = running_max == -INFINITY ? 0.0f : expf(running_max - new_max);
    denom = denom * correction + warp_sum(p);
#pragma unroll
    for (int k = 0; k < kMaxHeadDim / kWarp; ++k) acc[k] *= correction;
#pragma unroll 8
    for (int i = 0; i < kChunk; ++i) {
      const float pi = __shfl_sync(kFullMask, p, i);
#pragma unroll
      for (int k = 0; k < kMaxHeadDim / kWarp; ++k) {
        const int d = lane + k * kWarp;
        if (d < head_dim) acc[k] += pi * v_s[i * head_dim + d];
      }
    }
    running_max = new_max;
  }
  if (!active) return;
  const float total = denom + sink_term(sinks, h, running_max);
#pragma unroll
  for (int k = 0; k < kMaxHeadDim / kWarp; ++k) {
    const int d = lane + k * kWarp;
    if (d < head_dim) out[pair * head_dim + d] = acc[k] / total;
  }
}

__global__ void silu_mul_kernel(const float* gate, const float* up, int64_t n, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void gelu_mul_kernel(const float* gate, const float* up, int64_t n, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * up[i];
  }
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}

__global__ void add_bias_kernel(float* x, const float* bias, int64_t total, int64_t dim) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) x[i] += bias[i % dim];
}

__global__ void scale_kernel(float* x, float factor, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
}

__global__ void gather_rows_kernel(const float* x, const int32_t* rows, int64_t width, float* out) {
  const int64_t i = blockIdx.x;
  const float* src = x + static_cast<int64_t>(rows[i]) * width;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) out[i * width + c] = src[c];
}

// One block per row i (rows distinct: no two blocks write one row).
__global__ void add_scaled_rows_kernel(const float* y, const int32_t* rows, const float* weights,
                                       int64_t width, float* out) {
  const int64_t i = blockIdx.x;
  float* dst = out + static_cast<int64_t>(rows[i]) * width;
  const float w = weights[i];
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) dst[c] += w * y[i * width + c];
}

constexpr int kThreads = 256;

}  // namespace

Counts& counts() {
  static Counts c;
  return c;
}

bool decodes(DType type) { return device_decodes(type); }

void embed(cudaStream_t s, DType type, const uint8_t* table, uint64_t row_bytes, int64_t cols,
           const int32_t* ids, int64_t n, float* out) {
  if (n == 0) return;
  by_device_type(type, [&]<DType T>() {
    embed_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, s>>>(table, row_bytes, cols, ids, out);
  });
  check_launch("embed");
}

void matmul(cudaStream_t s, DType type, const uint8_t* w, uint64_t row_bytes, int64_t rows,
            int64_t cols, const float* x, int64_t n, float* y) {
  if (n == 0 || rows == 0) return;
  const bool units = cols % kUnit == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  by_device_type(type, [&]<DType T>() {
    if (units && n == 1) {
      matvec_kernel<T, 1><<<blocks_for(rows, kRowsPerBlock), kRowsPerBlock * kWarp, 0, s>>>(
          w, row_bytes, rows, cols, x, n, y);
    } else if (units) {
      matvec_kernel<T, kTokensPerPass>
          <<<blocks_for(rows, kRowsPerBlock), kRowsPerBlock * kWarp, 0, s>>>(w, row_bytes, rows,
                                                                            cols, x, n, y);
    } else {
      matmul_kernel<T><<<blocks_for(rows, kRowsPerBlock), kRowsPerBlock * kWarp, 0, s>>>(
          w, row_bytes, rows, cols, x, n, y);
    }
  });
  check_launch("matmul");
}

void rms_norm(cudaStream_t s, const float* x, const float* weight, int64_t rows, int64_t dim,
              float eps, float* y) {
  if (rows == 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, weight, dim, eps, y);
  check_launch("rms_norm");
}

void rope(cudaStream_t s, float* x, const int32_t* positions, int64_t n, int64_t heads,
          int64_t head_dim, const RopeParams& p, const float* freq_factors) {
  const int64_t total = n * heads * (p.rotary_dim / 2);
  if (total == 0) return;
  rope_kernel<<<blocks_for(total, kThreads), kThreads, 0, s>>>(
      x, positions, n, heads, head_dim, p.rotary_dim, p.theta, p.split_half,
      RopeScale{p.position_scale, p.yarn, p.yarn_low, p.yarn_high}, p.mscale, freq_factors);
  check_launch("rope");
}

void write_kv(cudaStream_t s, const float* k, const float* v, const int64_t* slots, int64_t n,
              int32_t block_size, const AttentionParams& p, KvLayer cache) {
  const int64_t total = n * p.num_kv_heads * p.head_dim;
  if (total == 0) return;
  const unsigned blocks = blocks_for(total, kThreads);
  if (cache.type == KvType::kF32) {
    write_kv_kernel<<<blocks, kThreads, 0, s>>>(k, v, slots, n, block_size, p.num_kv_heads,
                                                p.head_dim, static_cast<float*>(cache.k),
                                                static_cast<float*>(cache.v));
  } else {
    write_kv_kernel<<<blocks, kThreads, 0, s>>>(k, v, slots, n, block_size, p.num_kv_heads,
                                                p.head_dim, static_cast<__half*>(cache.k),
                                                static_cast<__half*>(cache.v));
  }
  check_launch("write_kv");
}

void attention(cudaStream_t s, const float* q, KvLayer cache, const int32_t* seq_of,
               const int32_t* positions, const int32_t* block_table, int32_t max_blocks,
               int32_t block_size, const int32_t* tokens, int64_t num_tokens,
               const int32_t* tiles, int64_t num_tiles, const AttentionParams& p, float* out,
               void* q8) {
  if (p.head_dim > kMaxHeadDim) {
    fail("the CUDA backend's attention takes head_dim up to ", kMaxHeadDim, ", not ", p.head_dim);
  }
  auto run = [&]<typename KV>(const KV* k, const KV* v) {
    if (num_tokens > 0) {
      attention_kernel<<<static_cast<unsigned>(num_tokens * p.num_heads), kSplitWarps * kWarp, 0,
                         s>>>(q, k, v, seq_of, positions, block_table, max_blocks, block_size,
                              tokens, p.num_heads, p.num_kv_heads, p.head_dim, p.scale, p.window,
                              p.sinks, out, static_cast<BlockQ8_1*>(q8));
      check_launch("attention");
    }
    if (num_tiles > 0) {
      const size_t bytes = tile_shared_bytes(p.head_dim);
      static const bool raised = [&] {  // past the 48 KiB a launch gets unasked (head_dim 256)
        return cudaFuncSetAttribute(attention_tile_kernel<KV>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(tile_shared_bytes(kMaxHeadDim))) == cudaSuccess;
      }();
      if (!raised) check_launch("attention (shared memory)");
      attention_tile_kernel<<<static_cast<unsigned>(num_tiles * p.num_heads),
                              kTileTokens * kWarp, bytes, s>>>(
          q, k, v, seq_of, positions, block_table, max_blocks, block_size, tiles, p.num_heads,
          p.num_kv_heads, p.head_dim, p.scale, p.window, p.sinks, out);
      check_launch("attention (prompt tiles)");
    }
  };
  if (cache.type == KvType::kF32) {
    run(static_cast<const float*>(cache.k), static_cast<const float*>(cache.v));
  } else {
    run(static_cast<const __half*>(cache.k), static_cast<const __half*>(cache.v));
  }
}

void silu_mul(cudaStream_t s, const float* gate, const float* up, int64_t n, float* out) {
  if (n == 0) return;
  silu_mul_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(gate, up, n, out);
  check_launch("silu_mul");
}

void gelu_mul(cudaStream_t s, const float* gate, const float* up, int64_t n, float* out) {
  if (n == 0) return;
  gelu_mul_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(gate, up, n, out);
  check_launch("gelu_mul");
}

void add(cudaStream_t s, float* x, const float* y, int64_t n) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(x, y, n);
  check_launch("add");
}

void add_bias(cudaStream_t s, float* x, const float* bias, int64_t rows, int64_t dim) {
  if (rows * dim == 0) return;
  add_bias_kernel<<<blocks_for(rows * dim, kThreads), kThreads, 0, s>>>(x, bias, rows * dim, dim);
  check_launch("add_bias");
}

void scale(cudaStream_t s, float* x, float factor, int64_t n) {
  if (n == 0) return;
  scale_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(x, factor, n);
  check_launch("scale");
}

void gather_rows(cudaStream_t s, const float* x, const int32_t* rows, int64_t count,
                 int64_t width, float* out) {
  if (count == 0) return;
  gather_rows_kernel<<<static_cast<unsigned>(count), kThreads, 0, s>>>(x, rows, width, out);
  check_launch("gather_rows");
}

void add_scaled_rows(cudaStream_t s, const float* y, const int32_t* rows, const float* weights,
                     int64_t count, int64_t width, float* out) {
  if (count == 0) return;
  add_scaled_rows_kernel<<<static_cast<unsigned>(count), kThreads, 0, s>>>(y, rows, weights,
                                                                          width, out);
  check_launch("add_scaled_rows");
}

}  // namespace pagoda::cuda
