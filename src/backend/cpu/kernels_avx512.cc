// The AVX-512 level: the AVX2 kernels with VNNI dot products (VPDPBUSD, VPDPWSSD on 256-bit
// vectors via AVX512VL), mask-register bit expansion, and larger tiles for the 32 registers;
// 512-bit tiles over packed weights (x86_packed.inc) for the types that have them.
// Compiled for that target (the pragma below) and only entered after detection.
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <utility>

#include "core/dtype.h"
#include "quant/blocks.h"
#include "quant/fp8.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
// GCC 12 flags the _mm512_undefined_ps() inside its own conversion intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace pagoda::cpu {
namespace {

struct Isa {
  static __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
  static __m256i madd_add(__m256i acc, __m256i a, __m256i b) { return _mm256_dpwssd_epi32(acc, a, b); }
  static __m256i bits_to_bytes(uint32_t bits) { return _mm256_movm_epi8(bits); }
};

#include "backend/cpu/x86_common.inc"
#include "backend/cpu/x86_kquants.inc"
#include "backend/cpu/x86_matmul.inc"
#include "backend/cpu/x86_packed.inc"
#include "backend/cpu/x86_vector512.inc"

// 16 lanes in one 512-bit register; 32 registers hold 8 rows of scores (16) with two key
// vectors, and 4 x 4 output vectors of the weighted sum of values.
struct Vec16 {
  __m512 v;
  static __mmask16 first(int n) { return static_cast<__mmask16>((1u << n) - 1); }
  static Vec16 zero() { return {_mm512_setzero_ps()}; }
  static Vec16 load(const float* p, int n) {
    return {n >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(first(n), p)};
  }
  static Vec16 load(const uint16_t* p, int n) {
    return {_mm512_cvtph_ps(n >= 16 ? load256(p) : _mm256_maskz_loadu_epi16(first(n), p))};
  }
  // KV codes (kv_format.h): int8 as is; E4M3 as 2^-8 times its value (quant/fp8.h).
  static Vec16 load_i8(const int8_t* p, int n) {
    const __m128i x = n >= 16 ? load128(p) : _mm_maskz_loadu_epi8(first(n), p);
    return {_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x))};
  }
  // Sign-extended to 16 bits and shifted left by 7, a code's sign lands in bit 15 (and, cleared
  // by the mask, bit 14), its exponent and mantissa in bits 13..7: quant/fp8.h's scaled half.
  static Vec16 load_fp8(const uint8_t* p, int n) {
    const __m256i w = _mm256_cvtepi8_epi16(n >= 16 ? load128(p) : _mm_maskz_loadu_epi8(first(n), p));
    return {_mm512_cvtph_ps(_mm256_and_si256(_mm256_slli_epi16(w, 7), _mm256_set1_epi16(-0x4080)))};
  }
  static Vec16 bcast(float x) { return {_mm512_set1_ps(x)}; }
  static Vec16 fma(Vec16 a, Vec16 b, Vec16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  static Vec16 add(Vec16 a, Vec16 b) { return {_mm512_add_ps(a.v, b.v)}; }
  static Vec16 mul(Vec16 a, Vec16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
  void store(float* p, int n) const {
    if (n >= 16) {
      _mm512_storeu_ps(p, v);
    } else {
      _mm512_mask_storeu_ps(p, first(n), v);
    }
  }
};
// Low-rank products: four accumulator chains a token, four groups of 16 rows a pass.
constexpr int kLowRankChains = 4;
constexpr int kLowRankGroups = 4;
#include "backend/cpu/x86_low_rank.inc"

constexpr int kQkRows = 8;
constexpr int kQkRowsQuantized = 8;
constexpr int kPvRows = 4;
constexpr int kPvVecs = 4;

#include "backend/cpu/x86_attention.inc"

}  // namespace

void fill_avx512_kernels(Kernels& k) {
  fill_vector_ops(k);
  fill_vector_ops512(k);
  // 32 registers: 4 x 4 tiles for the legacy and float types; K-quants 2 x 4: their integer
  // sums per (row, token) sit beside the float accumulators, which at 4 x 4 fill all 32
  // registers, and 4 x 2 unpacks each weight vector for half as many tokens
  // (docs/BENCHMARKS.md, "CPU kernel choices, measured").
  fill_matmul<4, 4, 2, 4>(k);
  fill_packed(k);
  fill_attention(k);
  k.low_rank_down = low_rank_down_x86;
  k.low_rank_up = low_rank_up_x86;
}

}  // namespace pagoda::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else

namespace pagoda::cpu {
void fill_avx512_kernels(Kernels&) {}
}  // namespace pagoda::cpu

#endif
