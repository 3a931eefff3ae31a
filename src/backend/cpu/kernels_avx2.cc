// The AVX2 level (with FMA and F16C): integer dot products through VPMADDUBSW + VPMADDWD.
// The whole file is compiled for that target (the pragma below) and only entered after
// detected_cpu_level() says the CPU has it; the build flags stay portable.
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "core/dtype.h"

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

}  // namespace

void fill_avx2_kernels(Kernels& k) {
  fill_vector_ops(k);
  // 16 registers: 4 x 2 accumulators for the legacy and float tiles; the K-quant tiles also
  // keep integer sums per (row, token) but spill well, and 2 x 4 beat 2 x 2 by 25% on prefill.
  fill_matmul<4, 2, 2, 4>(k);
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
