// The AVX2 level (with FMA and F16C): integer dot products through VPMADDUBSW + VPMADDWD.
// The whole file is compiled for that target (the pragma below) and only entered after
// detected_cpu_level() says the CPU has it; the build flags stay portable.
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
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace pagoda::cpu {
namespace {

struct Isa {
  // VPMADDUBSW saturates its int16 pairs; every u here is at most 128, so it never does.
  static __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
  static __m256i madd_add(__m256i acc, __m256i a, __m256i b) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
  }
  // Byte j takes byte j / 8 of the mask; OR-ing in every bit but bit j % 8 leaves all ones
  // exactly where that bit was set.
  static __m256i bits_to_bytes(uint32_t bits) {
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(bits)),
        _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
    const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
    return _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1));
  }
};

#include "backend/cpu/x86_common.inc"
#include "backend/cpu/x86_kquants.inc"
#include "backend/cpu/x86_matmul.inc"

// 16 lanes as two 256-bit halves; 16 registers hold 3 rows of scores (12) with two key vectors,
// and 2 x 2 output vectors of the weighted sum of values.
struct Vec16 {
  __m256 lo, hi;
  static Vec16 zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static Vec16 load(const float* p, int n) {
    if (n >= 16) return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
    return {n >= 8 ? _mm256_loadu_ps(p) : load_partial(p, n),
            n > 8 ? load_partial(p + 8, n - 8) : _mm256_setzero_ps()};
  }
  static Vec16 load(const uint16_t* p, int n) {
    if (n >= 16) return {_mm256_cvtph_ps(load128(p)), _mm256_cvtph_ps(load128(p + 8))};
    alignas(16) uint16_t buf[16] = {};
    std::memcpy(buf, p, static_cast<size_t>(n) * 2);
    return {_mm256_cvtph_ps(load128(buf)), _mm256_cvtph_ps(load128(buf + 8))};
  }
  // KV codes (kv_format.h): int8 as is; E4M3 as 2^-8 times its value (quant/fp8.h).
  static __m128i load_bytes(const void* p, int n) {
    if (n >= 16) return load128(p);
    alignas(16) uint8_t buf[16] = {};
    std::memcpy(buf, p, static_cast<size_t>(n));
    return load128(buf);
  }
  static Vec16 load_i8(const int8_t* p, int n) {
    const __m128i x = load_bytes(p, n);
    return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(x, 8)))};
  }
  // Sign-extended to 16 bits and shifted left by 7, a code's sign lands in bit 15 (and, cleared
  // by the mask, bit 14), its exponent and mantissa in bits 13..7: quant/fp8.h's scaled half.
  static Vec16 load_fp8(const uint8_t* p, int n) {
    const __m256i w = _mm256_cvtepi8_epi16(load_bytes(p, n));
    const __m256i h = _mm256_and_si256(_mm256_slli_epi16(w, 7), _mm256_set1_epi16(-0x4080));
    return {_mm256_cvtph_ps(_mm256_castsi256_si128(h)), _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1))};
  }
  static Vec16 bcast(float x) {
    const __m256 v = _mm256_set1_ps(x);
    return {v, v};
  }
  static Vec16 mul(Vec16 a, Vec16 b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
  static Vec16 fma(Vec16 a, Vec16 b, Vec16 c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
  }
  static Vec16 add(Vec16 a, Vec16 b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
  void store(float* p, int n) const {
    if (n >= 8) {
      _mm256_storeu_ps(p, lo);
      if (n >= 16) {
        _mm256_storeu_ps(p + 8, hi);
      } else if (n > 8) {
        store_partial(p + 8, hi, n - 8);
      }
    } else {
      store_partial(p, lo, n);
    }
  }
};
// Low-rank products: two accumulator chains a token and one group of 16 rows a pass (each
// Vec16 is two registers of the 16).
constexpr int kLowRankChains = 2;
constexpr int kLowRankGroups = 1;
#include "backend/cpu/x86_low_rank.inc"

constexpr int kQkRows = 3;
constexpr int kQkRowsQuantized = 2;  // three Vec16 chains a row: 2 rows fill the 16 registers
constexpr int kPvRows = 2;
constexpr int kPvVecs = 2;

#include "backend/cpu/x86_attention.inc"

}  // namespace

void fill_avx2_kernels(Kernels& k) {
  fill_vector_ops(k);
  // 16 registers: 4 x 2 accumulators for the legacy and float tiles; the K-quant tiles also
  // keep integer sums per (row, token) but spill well, so they take 2 x 4: each unpacked weight
  // vector serves four tokens instead of two (docs/BENCHMARKS.md, "CPU kernel choices,
  // measured").
  fill_matmul<4, 2, 2, 4>(k);
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

#else  // not x86-64: the level is never detected

namespace pagoda::cpu {
void fill_avx2_kernels(Kernels&) {}
}  // namespace pagoda::cpu

#endif
