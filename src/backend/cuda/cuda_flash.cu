// Prompt attention on the F16 tensor cores over the paged F16 KV cache (the design and every
// index: cuda_flash.cuh). One block of four warps per (query tile, KV head); warp w owns rows
// 16w .. 16w + 15 of the tile, lane l rows g and g + 8 (g = l / 4) and, of each 8-wide C tile,
// columns 2t and 2t + 1 (t = l % 4).
#include <cuda_fp16.h>

#include "backend/cuda/cuda_flash.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "core/error.h"

namespace pagoda::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ void mma_f16(const uint32_t* a, const uint32_t* b, float* c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();  // built for sm_80 and newer only (CMakeLists.txt)
#endif
}

__device__ __forceinline__ uint32_t pack_halves(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// The maximum (sum) over the four lanes of a group: the lanes holding one row.
__device__ __forceinline__ float row_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(kFullMask, v, 1));
  return fmaxf(v, __shfl_xor_sync(kFullMask, v, 2));
}
__device__ __forceinline__ float row_sum(float v) {
  v += __shfl_xor_sync(kFullMask, v, 1);
  return v + __shfl_xor_sync(kFullMask, v, 2);
}

template <int D>
struct FlashShared {
  __half keys[kFlashChunk][D + kFlashKeyPad];  // [position][dim]
  __half values[D][kFlashValueStride];         // [dim][position]
  int64_t slab[kFlashChunk];                   // the chunk's positions' slabs (-1: none)
  int32_t slot[kFlashChunk];
};

// Stage positions c0 .. c0 + 31: the block table read once per position, then every element
// addressed from the staged slab and slot (no division per element). Positions past hi are
// zeros (their scores are masked; zeros keep 0 * value finite).
template <int D>
__device__ void stage_chunk(FlashShared<D>& sh, const __half* kc, const __half* vc,
                            const int32_t* table, int32_t block_size, int32_t kv_heads,
                            int32_t kvh, int32_t c0, int32_t hi) {
  const int thread = static_cast<int>(threadIdx.x);
  if (thread < kFlashChunk) {
    const int32_t p = c0 + thread;
    const bool in = p <= hi;
    const KvSlot at = in ? kv_slot(table, block_size, kv_heads, kvh, D, p) : KvSlot{-1, 0};
    sh.slab[thread] = at.slab;
    sh.slot[thread] = at.slot;
  }
  __syncthreads();
  for (int idx = thread; idx < kFlashChunk * D; idx += kFlashWarps * 32) {
    const int j = idx % kFlashChunk, d = idx / kFlashChunk;  // positions fastest: keys coalesce
    const int64_t slab = sh.slab[j];
    sh.keys[j][d] = slab < 0 ? __float2half(0.0f) : kc[slab + static_cast<int64_t>(d) * block_size + sh.slot[j]];
    const int dv = idx % D, jv = idx / D;  // dims fastest: a value row coalesces
    const int64_t slab_v = sh.slab[jv];
    sh.values[dv][jv] = slab_v < 0 ? __float2half(0.0f) : vc[slab_v + static_cast<int64_t>(sh.slot[jv]) * D + dv];
  }
  __syncthreads();
}

template <int D>
__global__ void __launch_bounds__(kFlashWarps * 32)
    flash_kernel(const float* q, const __half* kc, const __half* vc, const int32_t* seq_of,
                 const int32_t* positions, const int32_t* block_table, int32_t max_blocks,
                 int32_t block_size, const int32_t* tiles, int32_t heads, int32_t kv_heads,
                 float scale, int32_t window, const float* sinks, float* out) {
  __shared__ FlashShared<D> sh;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t t0 = tiles[2 * blockIdx.x];
  const int32_t count = tiles[2 * blockIdx.x + 1], kvh = static_cast<int32_t>(blockIdx.y);
  const int32_t group = heads / kv_heads;
  const int32_t* table = block_table + static_cast<int64_t>(seq_of[t0]) * max_blocks;
  // The lane's two rows: g and g + 8 of the warp's 16.
  FlashRow rows[2];
  int32_t pos[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    rows[h] = flash_row(t0, count, group, kvh, 16 * warp + lane / 4 + 8 * h);
    pos[h] = rows[h].token < 0 ? -1 : positions[rows[h].token];
  }
  // Q as A fragments, F16, one set per 16 dims.
  uint32_t qa[D / 16][4];
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const FlashRow& fr = rows[r % 2];
      const int d = 16 * ks + f16_a_k(lane, r);
      qa[ks][r] = 0u;
      if (fr.token >= 0) {
        const float* qrow = q + (fr.token * heads + fr.head) * D;
        qa[ks][r] = pack_halves(qrow[d], qrow[d + 1]);
      }
    }
  }
  const int32_t lo = first_seen(positions[t0], window), hi = positions[t0 + count - 1];
  // The positions the warp's rows see, for skipping chunks none of them does.
  int32_t warp_hi = max(pos[0], pos[1]);
  for (int o = 16; o > 0; o /= 2) warp_hi = max(warp_hi, __shfl_xor_sync(kFullMask, warp_hi, o));
  int32_t warp_lo = pos[0] < 0 ? hi : first_seen(pos[0], window);
  for (int o = 16; o > 0; o /= 2) warp_lo = min(warp_lo, __shfl_xor_sync(kFullMask, warp_lo, o));

  float o_acc[D / 8][4] = {};
  float running_max[2] = {-INFINITY, -INFINITY}, partial_sum[2] = {0.0f, 0.0f};
  // Chunks from lo (never a position before it: its block may be gone from the table).
  for (int32_t c0 = lo; c0 <= hi; c0 += kFlashChunk) {
    stage_chunk<D>(sh, kc, vc, table, block_size, kv_heads, kvh, c0, hi);
    if (c0 <= warp_hi && c0 + kFlashChunk > warp_lo) {
      float s[kFlashChunk / 8][4];
#pragma unroll
      for (int nb = 0; nb < kFlashChunk / 8; ++nb) {
        s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
          uint32_t b[2];
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            b[r] = *reinterpret_cast<const uint32_t*>(&sh.keys[8 * nb + f16_b_col(lane)][16 * ks + f16_b_k(lane, r)]);
          }
          mma_f16(qa[ks], b, s[nb]);
        }
      }
      float new_max[2] = {running_max[0], running_max[1]};
#pragma unroll
      for (int nb = 0; nb < kFlashChunk / 8; ++nb) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int h = i / 2;
          const int32_t j = c0 + 8 * nb + f16_c_col(lane, i);
          s[nb][i] = sees(pos[h], window, j) ? s[nb][i] * scale : -INFINITY;
          new_max[h] = fmaxf(new_max[h], s[nb][i]);
        }
      }
      SoftmaxStep step[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        new_max[h] = row_max(new_max[h]);
        step[h] = softmax_step(running_max[h], new_max[h]);
        running_max[h] = new_max[h];
        partial_sum[h] *= step[h].correction;
      }
#pragma unroll
      for (int nb = 0; nb < D / 8; ++nb) {
#pragma unroll
        for (int i = 0; i < 4; ++i) o_acc[nb][i] *= step[i / 2].correction;
      }
#pragma unroll
      for (int nb = 0; nb < kFlashChunk / 8; ++nb) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          s[nb][i] = expf(s[nb][i] - step[i / 2].base);
          partial_sum[i / 2] += s[nb][i];
        }
      }
      // P V: the scores' C tiles are P's A fragments in place (cuda_flash.cuh's p_tile).
#pragma unroll
      for (int ps = 0; ps < kFlashChunk / 16; ++ps) {
        uint32_t pa[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const float* c = s[p_tile(ps, r)];
          pa[r] = pack_halves(c[p_value(r)], c[p_value(r) + 1]);
        }
#pragma unroll
        for (int nb = 0; nb < D / 8; ++nb) {
          uint32_t b[2];
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            b[r] = *reinterpret_cast<const uint32_t*>(&sh.values[8 * nb + f16_b_col(lane)][16 * ps + f16_b_k(lane, r)]);
          }
          mma_f16(pa, b, o_acc[nb]);
        }
      }
    }
    __syncthreads();  // every warp is done with the chunk before the next is staged
  }
  float total[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    total[h] = row_sum(partial_sum[h]);
    if (rows[h].token >= 0) total[h] += sink_term(sinks, rows[h].head, running_max[h]);
  }
#pragma unroll
  for (int nb = 0; nb < D / 8; ++nb) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const FlashRow& fr = rows[i / 2];
      if (fr.token < 0) continue;
      out[(fr.token * heads + fr.head) * D + 8 * nb + f16_c_col(lane, i)] = o_acc[nb][i] / total[i / 2];
    }
  }
}

}  // namespace

bool flash_takes(KvType type, int32_t heads, int32_t kv_heads, int32_t head_dim) {
  return type == KvType::kF16 && (head_dim == 64 || head_dim == 128) && kv_heads > 0 &&
         heads % kv_heads == 0 && heads / kv_heads <= kFlashRows;
}

void flash_attention(cudaStream_t s, const float* q, KvLayer cache, const int32_t* seq_of,
                     const int32_t* positions, const int32_t* block_table, int32_t max_blocks,
                     int32_t block_size, const int32_t* tiles, int64_t num_tiles,
                     const AttentionParams& p, float* out) {
  if (num_tiles == 0) return;
  if (!flash_takes(cache.type, p.num_heads, p.num_kv_heads, p.head_dim)) {
    fail("CUDA: flash attention takes an F16 cache and head_dim 64 or 128");
  }
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(p.num_kv_heads));
  const auto* k = static_cast<const __half*>(cache.k);
  const auto* v = static_cast<const __half*>(cache.v);
  if (p.head_dim == 64) {
    flash_kernel<64><<<grid, kFlashWarps * 32, 0, s>>>(q, k, v, seq_of, positions, block_table,
                                                      max_blocks, block_size, tiles, p.num_heads,
                                                      p.num_kv_heads, p.scale, p.window, p.sinks,
                                                      out);
  } else {
    flash_kernel<128><<<grid, kFlashWarps * 32, 0, s>>>(q, k, v, seq_of, positions, block_table,
                                                       max_blocks, block_size, tiles, p.num_heads,
                                                       p.num_kv_heads, p.scale, p.window, p.sinks,
                                                       out);
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail("CUDA: flash attention: ", cudaGetErrorString(e));
  ++counts().launches;
}

}  // namespace pagoda::cuda
