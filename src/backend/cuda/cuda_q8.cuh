// Integer dot products for the decode products (llama.cpp's mmvq / vecdotq design): the
// activations are quantized to 8 bits per 32 values (BlockQ8_1) once per step, and each stored
// weight type's 32-weight unit is dotted with one such block by four-byte integer dot products
// (__dp4a on the device, an emulation here on the host).
//
// Everything in this header compiles with nvcc and with the host compiler alone (no CUDA
// headers outside nvcc), so that the tests run the same functions on the host without a GPU.
// The activation scales and the per-block sums are the CPU backend's kQ8 ones (backend/cpu/
// kernels.h: d = F16(amax / 127), q = round-to-nearest-even(x * 127 / amax), s = F16(amax / 127 *
// sum(q))), and the legacy types' block result is the CPU's scalar formula, (dw * dx) * sumi +
// mw * s, so a unit's value is bit for bit the CPU backend's.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "quant/fp16.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define PAGODA_HD __host__ __device__ __forceinline__
#else
#define PAGODA_HD inline
#endif

#ifdef __CUDA_ARCH__
#define PAGODA_Q8_UNROLL _Pragma("unroll")
#else
#define PAGODA_Q8_UNROLL
#endif

namespace pagoda::cuda {

constexpr int kQ8Values = 32;

// 32 activations: x ~= d * qs[i]. s = F16(amax / 127 * sum) (Q8_1's s, for the types with a
// minimum), sum = the exact sum of qs (for the types with an offset, whose value is q - 8 etc.).
struct alignas(8) BlockQ8_1 {
  uint16_t d;  // F16
  uint16_t s;  // F16
  int32_t sum;
  int8_t qs[kQ8Values];
};
static_assert(sizeof(BlockQ8_1) == 40);

PAGODA_HD float half_to_float(uint16_t h) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(h));
#else
  return fp16_to_fp32(h);
#endif
}

PAGODA_HD uint16_t float_to_half(float f) {  // round to nearest even on both sides
#ifdef __CUDA_ARCH__
  return __half_as_ushort(__float2half_rn(f));
#else
  return fp32_to_fp16(f);
#endif
}

// a * b and a + b rounded each, never fused into one FMA (the host's scalar code does not fuse,
// so the device must not either for the results to agree bit for bit).
PAGODA_HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
PAGODA_HD float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// c + the sum of the four signed byte products of a and b.
PAGODA_HD int dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
  return __dp4a(a, b, c);
#else
  for (int k = 0; k < 4; ++k) {
    c += static_cast<int8_t>(static_cast<uint32_t>(a) >> (8 * k)) *
         static_cast<int8_t>(static_cast<uint32_t>(b) >> (8 * k));
  }
  return c;
#endif
}

// Byte-wise a - b, each byte wrapping (the results used here fit a signed byte).
PAGODA_HD int sub_bytes(int a, int b) {
#ifdef __CUDA_ARCH__
  return static_cast<int>(__vsub4(static_cast<unsigned>(a), static_cast<unsigned>(b)));
#else
  uint32_t out = 0;
  for (int k = 0; k < 4; ++k) {
    const uint32_t byte = ((static_cast<uint32_t>(a) >> (8 * k)) - (static_cast<uint32_t>(b) >> (8 * k))) & 0xffu;
    out |= byte << (8 * k);
  }
  return static_cast<int>(out);
#endif
}

// Four bytes at p as a little-endian int: p 4-byte aligned (word4) or 2-byte aligned (word2).
PAGODA_HD int word4(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const int*>(p);
#else
  int v;
  memcpy(&v, p, 4);
  return v;
#endif
}
PAGODA_HD int word2(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  const auto* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<int>(h[0] | (static_cast<uint32_t>(h[1]) << 16));
#else
  return word4(p);
#endif
}
PAGODA_HD uint16_t half_bits(const uint8_t* p) {  // p 2-byte aligned
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint16_t*>(p);
#else
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
#endif
}

// ---- quantizing activations ----

// The quant of x in a block whose largest magnitude is amax.
PAGODA_HD int q8_value(float x, float amax) {
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
#ifdef __CUDA_ARCH__
  return __float2int_rn(__fmul_rn(x, id));
#else
  return static_cast<int>(std::nearbyint(x * id));
#endif
}

// d and s of a block from its amax and the sum of its quants.
PAGODA_HD void q8_scales(float amax, int sum, BlockQ8_1* out) {
  const float step = amax / 127.0f;
  out->d = float_to_half(step);
  out->s = float_to_half(mul_rn(step, static_cast<float>(sum)));
  out->sum = sum;
}

// One block on one thread (the host; the device spreads a block over a warp, same results:
// amax and the integer sum do not depend on the order).
PAGODA_HD void quantize_q8_1_block(const float* x, BlockQ8_1* out) {
  float amax = 0.0f;
  for (int i = 0; i < kQ8Values; ++i) amax = fmaxf(amax, fabsf(x[i]));
  int sum = 0;
  for (int i = 0; i < kQ8Values; ++i) {
    const int q = q8_value(x[i], amax);
    out->qs[i] = static_cast<int8_t>(q);
    sum += q;
  }
  q8_scales(amax, sum, out);
}

#ifdef __CUDACC__
// The 32 values of a warp (one a lane) into *out, on the device: the same quants and scales as
// quantize_q8_1_block on one thread (a maximum and an integer sum do not depend on the order).
__device__ __forceinline__ void quantize_warp(float v, int lane, BlockQ8_1* out) {
  float amax = fabsf(v);
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const int q = q8_value(v, amax);
  int sum = q;
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  out->qs[lane] = static_cast<int8_t>(q);
  if (lane == 0) q8_scales(amax, sum, out);
}
#endif

// ---- one unit of 32 weights against one BlockQ8_1 ----

// Q4_K / Q5_K: sub-block j's 6-bit scale and min from the 12 packed bytes (get_scale_min_k4).
PAGODA_HD void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Bits 0..3 of b moved to bit 4 of bytes 0..3 (Q5's fifth bits of four consecutive weights).
PAGODA_HD int spread_bits(uint32_t b) {
  return static_cast<int>(((b & 1u) << 4) | ((b & 2u) << 11) | ((b & 4u) << 18) | ((b & 8u) << 25));
}

PAGODA_HD int x_word(const BlockQ8_1& x, int i) {
  return word4(reinterpret_cast<const uint8_t*>(x.qs) + 4 * i);
}

// The CPU's legacy block result: (dw * dx) * sumi + mw * s.
PAGODA_HD float legacy_result(float dw, float mw, int sumi, const BlockQ8_1& x) {
  return add_rn(mul_rn(mul_rn(dw, half_to_float(x.d)), static_cast<float>(sumi)),
                mul_rn(mw, half_to_float(x.s)));
}

// Q4_0, Q4_1 (Min) and Q5_0, Q5_1 (Five): the sum of q * xq over the unit, q unsigned.
template <bool Five>
PAGODA_HD int legacy_sum(const uint8_t* qs, uint32_t qh, const BlockQ8_1& x) {
  int sumi = 0;
PAGODA_Q8_UNROLL
  for (int i = 0; i < 4; ++i) {
    const int v = word2(qs + 4 * i);
    int lo = v & 0x0F0F0F0F, hi = (v >> 4) & 0x0F0F0F0F;
    if constexpr (Five) {
      lo |= spread_bits(qh >> (4 * i));
      hi |= spread_bits(qh >> (4 * i + 16));
    }
    sumi = dp4a(lo, x_word(x, i), sumi);
    sumi = dp4a(hi, x_word(x, i + 4), sumi);
  }
  return sumi;
}

// Unit u (weights 32u .. 32u + 31) of `row` dotted with x, the activations' block u.
template <DType T>
PAGODA_HD float dot_unit(const uint8_t* row, int64_t u, const BlockQ8_1& x) {
  if constexpr (T == DType::kQ4_0) {  // {d, qs[16]}
    const uint8_t* b = row + u * 18;
    const int sumi = legacy_sum<false>(b + 2, 0, x) - 8 * x.sum;
    return legacy_result(half_to_float(half_bits(b)), 0.0f, sumi, x);
  } else if constexpr (T == DType::kQ4_1) {  // {d, m, qs[16]}
    const uint8_t* b = row + u * 20;
    return legacy_result(half_to_float(half_bits(b)), half_to_float(half_bits(b + 2)),
                         legacy_sum<false>(b + 4, 0, x), x);
  } else if constexpr (T == DType::kQ5_0) {  // {d, qh[4], qs[16]}
    const uint8_t* b = row + u * 22;
    const int sumi = legacy_sum<true>(b + 6, static_cast<uint32_t>(word2(b + 2)), x) - 16 * x.sum;
    return legacy_result(half_to_float(half_bits(b)), 0.0f, sumi, x);
  } else if constexpr (T == DType::kQ5_1) {  // {d, m, qh[4], qs[16]}
    const uint8_t* b = row + u * 24;
    return legacy_result(half_to_float(half_bits(b)), half_to_float(half_bits(b + 2)),
                         legacy_sum<true>(b + 8, static_cast<uint32_t>(word4(b + 4)), x), x);
  } else if constexpr (T == DType::kQ8_0) {  // {d, qs[32]}
    const uint8_t* b = row + u * 34;
    int sumi = 0;
PAGODA_Q8_UNROLL
    for (int i = 0; i < 8; ++i) sumi = dp4a(word2(b + 2 + 4 * i), x_word(x, i), sumi);
    return legacy_result(half_to_float(half_bits(b)), 0.0f, sumi, x);
  } else if constexpr (T == DType::kQ4_K || T == DType::kQ5_K) {
    // {d, dmin, scales[12], (Q5_K: qh[32],) qs[128]}: sub-block j = u % 8 is nibble j % 2 of
    // qs[32 (j / 2) ..], its fifth bits bit j of qh. x = d sc q - dmin m, so the unit is
    // dx (d sc sum(q xq) - dmin m sum(xq)).
    constexpr bool kFive = T == DType::kQ5_K;
    const uint8_t* b = row + (u / 8) * (kFive ? 176 : 144);
    const int j = static_cast<int>(u % 8), shift = (j & 1) * 4;
    const uint8_t* qs = b + (kFive ? 48 : 16) + (j / 2) * 32;
    int sumi = 0;
PAGODA_Q8_UNROLL
    for (int i = 0; i < 8; ++i) {
      int v = (word4(qs + 4 * i) >> shift) & 0x0F0F0F0F;
      if constexpr (kFive) v |= ((word4(b + 16 + 4 * i) >> j) & 0x01010101) << 4;
      sumi = dp4a(v, x_word(x, i), sumi);
    }
    int sc, m;
    scale_min_k4(j, b + 4, &sc, &m);
    const float d = half_to_float(half_bits(b)), dmin = half_to_float(half_bits(b + 2));
    return mul_rn(half_to_float(x.d), add_rn(mul_rn(d, static_cast<float>(sc * sumi)),
                                             -mul_rn(dmin, static_cast<float>(m * x.sum))));
  } else if constexpr (T == DType::kQ6_K) {
    // {ql[128], qh[64], scales[16], d}: in half n = j / 4, quarter k = j % 4 takes nibble k / 2
    // of ql[64 n + 32 (k % 2) ..] and bits 2k of qh[32 n ..], minus 32; a scale per 16.
    const uint8_t* b = row + (u / 8) * 210;
    const int j = static_cast<int>(u % 8), n = j / 4, k = j % 4;
    const uint8_t* ql = b + 64 * n + 32 * (k % 2);
    const uint8_t* qh = b + 128 + 32 * n;
    const int shift = k < 2 ? 0 : 4;
    int sums[2] = {0, 0};
PAGODA_Q8_UNROLL
    for (int i = 0; i < 8; ++i) {
      const int v = ((word2(ql + 4 * i) >> shift) & 0x0F0F0F0F) |
                    (((word2(qh + 4 * i) >> (2 * k)) & 0x03030303) << 4);
      sums[i / 4] = dp4a(sub_bytes(v, 0x20202020), x_word(x, i), sums[i / 4]);
    }
    const auto* scales = reinterpret_cast<const int8_t*>(b + 192 + 8 * n + 2 * k);
    const int sumi = scales[0] * sums[0] + scales[1] * sums[1];
    return mul_rn(mul_rn(half_to_float(half_bits(b + 208)), half_to_float(x.d)),
                  static_cast<float>(sumi));
  } else {
    static_assert(T == DType::kQ4_0, "no q8_1 dot product for this type");
    return 0.0f;
  }
}

// The types dot_unit takes (the others keep the float products).
PAGODA_HD constexpr bool has_q8_dot(DType t) {
  return t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ5_0 || t == DType::kQ5_1 ||
         t == DType::kQ8_0 || t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
}

// Calls f.template operator()<T>() for `type` when has_q8_dot(type) (the one dispatch from a
// run-time type to the q8_1 decode and tile products) and returns true; false for any other.
template <class F>
bool by_q8_type(DType type, F&& f) {
  switch (type) {
    case DType::kQ4_0: f.template operator()<DType::kQ4_0>(); return true;
    case DType::kQ4_1: f.template operator()<DType::kQ4_1>(); return true;
    case DType::kQ5_0: f.template operator()<DType::kQ5_0>(); return true;
    case DType::kQ5_1: f.template operator()<DType::kQ5_1>(); return true;
    case DType::kQ8_0: f.template operator()<DType::kQ8_0>(); return true;
    case DType::kQ4_K: f.template operator()<DType::kQ4_K>(); return true;
    case DType::kQ5_K: f.template operator()<DType::kQ5_K>(); return true;
    case DType::kQ6_K: f.template operator()<DType::kQ6_K>(); return true;
    default: return false;
  }
}

// ---- which work a thread of the product kernel takes (cuda_mmvq.cu) ----

constexpr int kProductWarps = 4;  // warps per block
constexpr int kMaxQ8Products = 3;  // products of one input in one launch

// The most warps (1, 2 or 4) a row of `units` units is spread over with a unit for each lane.
PAGODA_HD int warps_per_row(int64_t units) {
  if (units >= 4 * kQ8Values) return 4;
  return units >= 2 * kQ8Values ? 2 : 1;
}

// Blocks a product of `rows` rows takes when `warps` warps share a row.
PAGODA_HD unsigned product_blocks(int64_t rows, int warps) {
  const int rows_per_block = kProductWarps / warps;
  return static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
}

// Thread (warp, lane) of block `block`: product `product` (first_block[p] <= block <
// first_block[p + 1], p < count), row `row` (may be past the product's rows: nothing to do),
// units part, part + stride, ...; the row's first warp (`writes`) sums the row's warps.
struct ProductSlot {
  int product;
  int64_t row;
  int part;
  int stride;
  bool writes;
};
PAGODA_HD ProductSlot product_slot(const unsigned* first_block, int count, unsigned block,
                                   int warp, int lane, int warps) {
  ProductSlot s{0, 0, 0, 0, false};
  unsigned first = 0;  // constant indices only, so that the kernel reads its parameters in place
PAGODA_Q8_UNROLL
  for (int i = 1; i < kMaxQ8Products; ++i) {
    if (i < count && block >= first_block[i]) s.product = i, first = first_block[i];
  }
  s.row = static_cast<int64_t>(block - first) * (kProductWarps / warps) + warp / warps;
  s.part = (warp % warps) * kQ8Values + lane;
  s.stride = warps * kQ8Values;
  s.writes = warp % warps == 0;
  return s;
}

// A whole row on one thread, unit after unit (the host's reference order; `x` holds cols / 32
// blocks).
template <DType T>
float dot_row_serial(const uint8_t* row, int64_t cols, const BlockQ8_1* x) {
  float acc = 0.0f;
  for (int64_t u = 0; u < cols / kQ8Values; ++u) acc += dot_unit<T>(row, u, x[u]);
  return acc;
}

}  // namespace pagoda::cuda
