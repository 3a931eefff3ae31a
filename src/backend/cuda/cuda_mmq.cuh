// Products of many tokens on the int8 tensor cores (llama.cpp's MMQ design): the weights are
// read in their stored blocks and unpacked to int8 in shared memory, the activations are the
// q8_1 blocks of cuda_q8.cuh, and each unit of 32 columns is one mma.sync m16n8k32 (s8 x s8,
// exact int32 sums) per 16 rows x 8 tokens, followed by that unit's per-block scaling in F32.
//
// Why int8 and not F16 tiles (m16n8k16): a unit of 32 weights against one q8_1 block is exactly
// one k = 32 step, so the integer sums are the decode products' (cuda_q8.cuh) and the CPU
// backend's, and the per-unit formula the same; the result is the decode kernels' bit for bit,
// and for the legacy types the CPU backend's. F16 tiles would round every weight times its
// scale to 11 bits again, and int8 mma has twice F16's rate.
//
// Everything here compiles with nvcc and with the host compiler alone: the kernel
// (cuda_mmq.cu) and the host emulation (mmq_product_host, tested against the CPU backend)
// stage the same tiles, read the same fragments and apply the same per-unit formula; only the
// mma itself is emulated on the host (mma_s8_host, through the same fragment mapping).
#pragma once

#include "backend/cuda/cuda_q8.cuh"

namespace pagoda::cuda {

// ---- the fragments of mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 (PTX ISA) ----
// Lane l is group g = l / 4, thread t = l % 4 of its group. Each register holds four
// consecutive k (bytes, little-endian).
//   A (16 x 32, row-major), 4 registers: register r holds row g + 8 (r % 2), k 4t + 16 (r / 2) ..
//   B (32 x 8, column-major), 2 registers: register r holds column g, k 4t + 16 r ..
//   C (16 x 8), 4 int32: c[i] is row g + 8 (i / 2), column 2t + i % 2.
constexpr int kWarpLanes = 32;
PAGODA_HD int mma_a_row(int lane, int reg) { return lane / 4 + 8 * (reg % 2); }
PAGODA_HD int mma_a_k(int lane, int reg) { return 4 * (lane % 4) + 16 * (reg / 2); }
PAGODA_HD int mma_b_col(int lane) { return lane / 4; }
PAGODA_HD int mma_b_k(int lane, int reg) { return 4 * (lane % 4) + 16 * reg; }
PAGODA_HD int mma_c_row(int lane, int i) { return lane / 4 + 8 * (i / 2); }
PAGODA_HD int mma_c_col(int lane, int i) { return 2 * (lane % 4) + i % 2; }

// A warp's mma on the host: a[lane][4], b[lane][2] in, c[lane][4] accumulated, through the
// mapping above.
inline void mma_s8_host(const int (*a)[4], const int (*b)[2], int (*c)[4]) {
  int8_t am[16][32], bm[32][8];
  for (int l = 0; l < kWarpLanes; ++l) {
    for (int r = 0; r < 4; ++r) {
      for (int k = 0; k < 4; ++k) {
        am[mma_a_row(l, r)][mma_a_k(l, r) + k] =
            static_cast<int8_t>(static_cast<uint32_t>(a[l][r]) >> (8 * k));
      }
    }
    for (int r = 0; r < 2; ++r) {
      for (int k = 0; k < 4; ++k) {
        bm[mma_b_k(l, r) + k][mma_b_col(l)] =
            static_cast<int8_t>(static_cast<uint32_t>(b[l][r]) >> (8 * k));
      }
    }
  }
  for (int l = 0; l < kWarpLanes; ++l) {
    for (int i = 0; i < 4; ++i) {
      int sum = 0;
      for (int k = 0; k < 32; ++k) sum += am[mma_c_row(l, i)][k] * bm[k][mma_c_col(l, i)];
      c[l][i] += sum;
    }
  }
}

// ---- the tiles a block stages in shared memory ----

constexpr int kMmqRows = 64;     // weight rows a block takes: 4 warps of 16
constexpr int kMmqTokens = 64;   // tokens a block takes: 8 fragments of 8 a warp
constexpr int kMmqUnits = 4;     // units of 32 columns a stage holds
constexpr int kMmqThreads = 128;
constexpr int kMmqFragments = kMmqTokens / 8;
// Words (4 int8) a staged row holds: the units' 8 words each, and 4 more so that the 32 lanes'
// fragment loads (8 rows x 4 words apart) fall in 32 different banks.
constexpr int kMmqStride = kMmqUnits * 8 + 4;

// The types taken. Q6_K has a scale per 16 weights: its units take two mma, one with A's
// registers of k 0 .. 15 and one with those of k 16 .. 31 (the others zero), for the two sums.
// Every type of the q8_1 decode products.
PAGODA_HD constexpr bool has_mmq(DType t) { return has_q8_dot(t); }
// Whether a unit's sum comes in two halves of 16 weights.
PAGODA_HD constexpr bool split_sums(DType t) { return t == DType::kQ6_K; }

// A weight unit's scales as its formula takes them: the legacy types' d and m (0 without a
// minimum); Q4_K / Q5_K's d, dmin and the sub-block's 6-bit scale and min; Q6_K's d and the
// scales of its two halves (sc, mn).
struct UnitScale {
  float d;
  float m;
  int sc;
  int mn;
};
// An activation block's d and s as floats, and its exact sum.
struct BlockScale {
  float d;
  float s;
  int sum;
};

// Unit u of `row` as 8 words of int8 weights (word i holds weights 4i .. 4i + 3) whose integer
// dot with the q8_1 quants gives the sum dot_unit<T> forms: offsets subtracted (Q4_0 q - 8,
// Q5_0 q - 16), unsigned values for the types with a minimum.
template <DType T>
PAGODA_HD void unpack_unit(const uint8_t* row, int64_t u, int* words, UnitScale* scale) {
  if constexpr (T == DType::kQ4_0 || T == DType::kQ4_1 || T == DType::kQ5_0 ||
                T == DType::kQ5_1) {
    constexpr bool kMin = T == DType::kQ4_1 || T == DType::kQ5_1;
    constexpr bool kFive = T == DType::kQ5_0 || T == DType::kQ5_1;
    constexpr int kBytes = T == DType::kQ4_0 ? 18 : T == DType::kQ4_1 ? 20 : T == DType::kQ5_0 ? 22 : 24;
    const uint8_t* b = row + u * kBytes;
    const int quants = (kMin ? 4 : 2) + (kFive ? 4 : 0);
    uint32_t qh = 0;
    if constexpr (kFive) qh = static_cast<uint32_t>(kMin ? word4(b + 4) : word2(b + 2));
    constexpr int kOffset = kMin ? 0 : kFive ? 0x10101010 : 0x08080808;
PAGODA_Q8_UNROLL
    for (int i = 0; i < 4; ++i) {
      const int v = word2(b + quants + 4 * i);
      int lo = v & 0x0F0F0F0F, hi = (v >> 4) & 0x0F0F0F0F;
      if constexpr (kFive) {
        lo |= spread_bits(qh >> (4 * i));
        hi |= spread_bits(qh >> (4 * i + 16));
      }
      words[i] = sub_bytes(lo, kOffset);
      words[i + 4] = sub_bytes(hi, kOffset);
    }
    *scale = {half_to_float(half_bits(b)), kMin ? half_to_float(half_bits(b + 2)) : 0.0f, 0, 0};
  } else if constexpr (T == DType::kQ8_0) {
    const uint8_t* b = row + u * 34;
PAGODA_Q8_UNROLL
    for (int i = 0; i < 8; ++i) words[i] = word2(b + 2 + 4 * i);
    *scale = {half_to_float(half_bits(b)), 0.0f, 0, 0};
  } else if constexpr (T == DType::kQ4_K || T == DType::kQ5_K) {
    // As dot_unit<T>: sub-block j = u % 8 is nibble j % 2 of qs[32 (j / 2) ..], fifth bits bit
    // j of qh.
    constexpr bool kFive = T == DType::kQ5_K;
    const uint8_t* b = row + (u / 8) * (kFive ? 176 : 144);
    const int j = static_cast<int>(u % 8), shift = (j & 1) * 4;
    const uint8_t* qs = b + (kFive ? 48 : 16) + (j / 2) * 32;
PAGODA_Q8_UNROLL
    for (int i = 0; i < 8; ++i) {
      int v = (word4(qs + 4 * i) >> shift) & 0x0F0F0F0F;
      if constexpr (kFive) v |= ((word4(b + 16 + 4 * i) >> j) & 0x01010101) << 4;
      words[i] = v;
    }
    int sc, m;
    scale_min_k4(j, b + 4, &sc, &m);
    *scale = {half_to_float(half_bits(b)), half_to_float(half_bits(b + 2)), sc, m};
  } else if constexpr (T == DType::kQ6_K) {
    // As dot_unit<T>: in half n = j / 4, quarter k = j % 4 takes nibble k / 2 of
    // ql[64 n + 32 (k % 2) ..] and bits 2k of qh[32 n ..], minus 32.
    const uint8_t* b = row + (u / 8) * 210;
    const int j = static_cast<int>(u % 8), n = j / 4, k = j % 4;
    const uint8_t* ql = b + 64 * n + 32 * (k % 2);
    const uint8_t* qh = b + 128 + 32 * n;
    const int shift = k < 2 ? 0 : 4;
PAGODA_Q8_UNROLL
    for (int i = 0; i < 8; ++i) {
      const int v = ((word2(ql + 4 * i) >> shift) & 0x0F0F0F0F) |
                    (((word2(qh + 4 * i) >> (2 * k)) & 0x03030303) << 4);
      words[i] = sub_bytes(v, 0x20202020);
    }
    const auto* scales = reinterpret_cast<const int8_t*>(b + 192 + 8 * n + 2 * k);
    *scale = {half_to_float(half_bits(b + 208)), 0.0f, scales[0], scales[1]};
  } else {
    static_assert(T == DType::kQ4_0, "no int8 tile product for this type");
  }
}

// One unit's value for one (row, token) from the integer sum (Q6_K: the sums of weights 0 .. 15
// and 16 .. 31): dot_unit<T>'s formula, operation for operation.
template <DType T>
PAGODA_HD float unit_result(const UnitScale& w, int sumi, int sumi_hi, const BlockScale& x) {
  if constexpr (T == DType::kQ6_K) {
    return mul_rn(mul_rn(w.d, x.d), static_cast<float>(w.sc * sumi + w.mn * sumi_hi));
  } else if constexpr (T == DType::kQ4_K || T == DType::kQ5_K) {
    return mul_rn(x.d, add_rn(mul_rn(w.d, static_cast<float>(w.sc * sumi)),
                              -mul_rn(w.m, static_cast<float>(w.mn * x.sum))));
  } else {
    return add_rn(mul_rn(mul_rn(w.d, x.d), static_cast<float>(sumi)), mul_rn(w.m, x.s));
  }
}

// Stage units u0 .. u0 + kMmqUnits - 1 of rows row0 .. row0 + kMmqRows - 1 (thread `thread` of
// kMmqThreads does its share): wq[r * kMmqStride + 8 k ..] and ws[r * kMmqUnits + k]. Rows and
// units past the matrix are staged as zeros.
template <DType T>
PAGODA_HD void stage_weights(const uint8_t* w, uint64_t row_bytes, int64_t rows, int64_t units,
                             int64_t row0, int64_t u0, int thread, int* wq, UnitScale* ws) {
  for (int task = thread; task < kMmqRows * kMmqUnits; task += kMmqThreads) {
    const int r = task / kMmqUnits, k = task % kMmqUnits;
    int* words = wq + r * kMmqStride + 8 * k;
    if (row0 + r < rows && u0 + k < units) {
      unpack_unit<T>(w + row_bytes * static_cast<uint64_t>(row0 + r), u0 + k, words,
                     ws + r * kMmqUnits + k);
    } else {
PAGODA_Q8_UNROLL
      for (int i = 0; i < 8; ++i) words[i] = 0;
      ws[r * kMmqUnits + k] = {0.0f, 0.0f, 0, 0};
    }
  }
}

// The same for the activations: tokens tok0 .. tok0 + kMmqTokens - 1 of x ([n][units] blocks).
PAGODA_HD void stage_activations(const BlockQ8_1* x, int64_t n, int64_t units, int64_t tok0,
                                 int64_t u0, int thread, int* xq, BlockScale* xs) {
  for (int task = thread; task < kMmqTokens * kMmqUnits; task += kMmqThreads) {
    const int t = task / kMmqUnits, k = task % kMmqUnits;
    int* words = xq + t * kMmqStride + 8 * k;
    if (tok0 + t < n && u0 + k < units) {
      const BlockQ8_1& b = x[(tok0 + t) * units + u0 + k];
PAGODA_Q8_UNROLL
      for (int i = 0; i < 8; ++i) words[i] = x_word(b, i);
      xs[t * kMmqUnits + k] = {half_to_float(b.d), half_to_float(b.s), b.sum};
    } else {
PAGODA_Q8_UNROLL
      for (int i = 0; i < 8; ++i) words[i] = 0;
      xs[t * kMmqUnits + k] = {0.0f, 0.0f, 0};
    }
  }
}

// Lane `lane` of warp `warp`: its A registers for staged unit k, its B registers for staged
// unit k and token fragment f.
PAGODA_HD void load_a(const int* wq, int warp, int lane, int k, int* a) {
PAGODA_Q8_UNROLL
  for (int r = 0; r < 4; ++r) {
    a[r] = wq[(16 * warp + mma_a_row(lane, r)) * kMmqStride + 8 * k + mma_a_k(lane, r) / 4];
  }
}
PAGODA_HD void load_b(const int* xq, int f, int lane, int k, int* b) {
PAGODA_Q8_UNROLL
  for (int r = 0; r < 2; ++r) {
    b[r] = xq[(8 * f + mma_b_col(lane)) * kMmqStride + 8 * k + mma_b_k(lane, r) / 4];
  }
}

// A registers of k 0 .. 15 (half 0) or 16 .. 31 (half 1) alone, the others zero.
PAGODA_HD void half_of_a(const int* a, int half, int* out) {
PAGODA_Q8_UNROLL
  for (int r = 0; r < 4; ++r) out[r] = r / 2 == half ? a[r] : 0;
}

// acc[i] += unit k's value for the lane's C element i (fragment f), in unit order; c_hi: the
// second half's sums where split_sums(T).
template <DType T>
PAGODA_HD void accumulate(const int* c, const int* c_hi, const UnitScale* ws,
                          const BlockScale* xs, int warp, int lane, int k, int f, float* acc) {
PAGODA_Q8_UNROLL
  for (int i = 0; i < 4; ++i) {
    const int r = 16 * warp + mma_c_row(lane, i), t = 8 * f + mma_c_col(lane, i);
    acc[i] = add_rn(acc[i], unit_result<T>(ws[r * kMmqUnits + k], c[i], c_hi[i],
                                           xs[t * kMmqUnits + k]));
  }
}

// Where the lane's C element i of fragment f goes: y[token][row] of the block's tile.
PAGODA_HD int64_t mmq_out_row(int64_t row0, int warp, int lane, int i) {
  return row0 + 16 * warp + mma_c_row(lane, i);
}
PAGODA_HD int64_t mmq_out_token(int64_t tok0, int f, int lane, int i) {
  return tok0 + 8 * f + mma_c_col(lane, i);
}

// y[n, rows] = x W^T on the host, block by block, warp by warp, exactly as cuda_mmq.cu's kernel
// does it with the mma emulated: the arithmetic the tests compare with the CPU backend.
template <DType T>
void mmq_product_host(const uint8_t* w, uint64_t row_bytes, int64_t rows, const BlockQ8_1* x,
                      int64_t units, int64_t n, float* y) {
  constexpr int kWarps = kMmqThreads / kWarpLanes;
  static_assert(kWarps * 16 == kMmqRows);
  int wq[kMmqRows * kMmqStride], xq[kMmqTokens * kMmqStride];
  UnitScale ws[kMmqRows * kMmqUnits];
  BlockScale xs[kMmqTokens * kMmqUnits];
  float acc[kWarps][kWarpLanes][kMmqFragments][4];
  for (int64_t row0 = 0; row0 < rows; row0 += kMmqRows) {
    for (int64_t tok0 = 0; tok0 < n; tok0 += kMmqTokens) {
      for (auto& warp : acc) for (auto& lane : warp) for (auto& f : lane) for (float& v : f) v = 0.0f;
      for (int64_t u0 = 0; u0 < units; u0 += kMmqUnits) {
        for (int thread = 0; thread < kMmqThreads; ++thread) {
          stage_weights<T>(w, row_bytes, rows, units, row0, u0, thread, wq, ws);
          stage_activations(x, n, units, tok0, u0, thread, xq, xs);
        }
        for (int k = 0; k < kMmqUnits && u0 + k < units; ++k) {
          for (int warp = 0; warp < kWarps; ++warp) {
            int a[kWarpLanes][4], lo[kWarpLanes][4], hi[kWarpLanes][4];
            for (int l = 0; l < kWarpLanes; ++l) {
              load_a(wq, warp, l, k, a[l]);
              half_of_a(a[l], 0, lo[l]);
              half_of_a(a[l], 1, hi[l]);
            }
            for (int f = 0; f < kMmqFragments; ++f) {
              int b[kWarpLanes][2], c[kWarpLanes][4] = {}, c_hi[kWarpLanes][4] = {};
              for (int l = 0; l < kWarpLanes; ++l) load_b(xq, f, l, k, b[l]);
              if constexpr (split_sums(T)) {
                mma_s8_host(lo, b, c);
                mma_s8_host(hi, b, c_hi);
              } else {
                mma_s8_host(a, b, c);
              }
              for (int l = 0; l < kWarpLanes; ++l) {
                accumulate<T>(c[l], c_hi[l], ws, xs, warp, l, k, f, acc[warp][l][f]);
              }
            }
          }
        }
      }
      for (int warp = 0; warp < kWarps; ++warp) {
        for (int l = 0; l < kWarpLanes; ++l) {
          for (int f = 0; f < kMmqFragments; ++f) {
            for (int i = 0; i < 4; ++i) {
              const int64_t r = mmq_out_row(row0, warp, l, i), t = mmq_out_token(tok0, f, l, i);
              if (r < rows && t < n) y[t * rows + r] = acc[warp][l][f][i];
            }
          }
        }
      }
    }
  }
}

}  // namespace pagoda::cuda
