// Scalar reference quantize / dequantize for GGUF weight types: the oracle that every SIMD or
// GPU kernel is checked against, and the code behind `pagoda quantize`. Written for clarity,
// not speed: one block at a time, copied out of the source so no alignment is assumed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace pagoda {

// Bytes taken by n elements of `type`. Throws Error unless n >= 0 is a multiple of the type's
// block size, or if the byte count would overflow.
size_t row_bytes(DType type, int64_t n);

// Whether dequantize_row / quantize_row have code for `type`.
bool can_dequantize(DType type);
bool can_quantize(DType type);

// dst[0..n) = the values encoded by row_bytes(type, n) bytes at src (any alignment).
// Supports F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K .. Q8_K, IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS and pagoda's own FP8_E4M3 (quant/weight_types.cc has
// the list). Throws
// Error for another type or an n that is not a whole number of blocks.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// Encodes src[0..n) into row_bytes(type, n) bytes at dst (any alignment). Same types as
// dequantize_row but the 2- and 3-bit i-quants, which pagoda only decodes. Inputs must be finite; as in ggml, the F16 scales bound what survives: block
// maxima beyond about 65504 times the largest quant overflow to Inf, and tiny blocks (scales
// below 6e-5, F16's smallest normal) lose precision. The legacy types (Q4_0 .. Q8_0) and
// F16 / BF16 produce the same bytes as the gguf package's quantizers (which mirror ggml's
// reference code), provided the compiler does not fuse multiply-adds (the default in ISO C++
// mode). The K-quants use pagoda's own scale search, so their bytes differ from llama.cpp's
// while decoding with the same formula; so do IQ4_NL / IQ4_XS (a search for the scale of each
// 32 values with the least squared error over the non-linear grid; IQ4_XS then codes those
// scales as 6-bit multiples of one F16 super-scale). FP8_E4M3 rounds x / d to the nearest E4M3
// value (ties to even) with d = F16(amax / 448), as the FP8 KV cache codes its groups.
void quantize_row(DType type, const float* src, void* dst, int64_t n);

// Encodes src[0..n) like quantize_row, but chooses scales and quants that minimise the
// importance-weighted squared error sum_i q_i (x_i - deq_i)^2, q_i = importance[i] *
// sqrt(sigma2 + x_i^2) (llama.cpp's weighting; sigma2 the mean square of the row, or of the
// super-block for K types, as llama.cpp takes it). importance: n non-negative values, one per
// column (an importance matrix's mean squared activation); nullptr gives quantize_row's bytes.
// Types without a search (F32, F16, BF16, Q8_0, Q8_K) ignore it.
//
// Searched: Q4_0, Q4_1, Q5_0, Q5_1 (block scale and min; never a higher weighted error than
// quantize_row's), Q2_K .. Q6_K (every step of quantize_row's search, weighted) and IQ4_NL /
// IQ4_XS (quantize_row's search, weighted; never a higher weighted error than quantize_row's,
// block by block) and FP8_E4M3 (32 block scales from amax / 448 up to twice it; never a higher
// weighted error than quantize_row's, block by block). sigma2 is the mean square times 2 for
// Q3_K, Q4_K, Q5_K and the IQ4 types
// (over each block of 32 for IQ4_NL), as in llama.cpp; Q6_K takes the plain mean square where
// llama.cpp would weigh by importance alone. A row whose weights are all 0 has
// nothing to prefer and gets quantize_row's bytes. Throws Error for a negative or non-finite
// importance, and as quantize_row does for a type or n it cannot encode.
void quantize_row_weighted(DType type, const float* src, void* dst, int64_t n,
                           const float* importance);

}  // namespace pagoda
