// GPTQ's error-compensating rounding (Frantar et al., 2022) for the 32-block legacy types, the
// K-quants Q4_K, Q5_K and Q6_K, and IQ4_NL / IQ4_XS (each column onto its nearest value of the
// non-linear grid). A
// matrix's columns are rounded one at a time, left to right, and each column's rounding error is
// pushed onto the columns not rounded yet through the inverse of the input's second moments
// H = sum over calibration inputs of x x^T, so that W x, not each weight on its own, moves as
// little as possible on inputs like the calibration ones. A block's scale (and min) is fitted
// when the pass reaches the block, on the values the earlier columns' errors left there, by the
// type's own encoder (importance-weighted when given weights); a K or IQ4_XS super-block's 256
// columns get all their group scales at once, when the pass reaches its first column.
//
// Rows are independent (every block lies in one row), so rows run in parallel; a row costs
// cols^2 / 2 multiply-adds, the factor of H cols^3 once per input.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/dtype.h"

namespace pagoda {

// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS.
bool gptq_supports(DType type);

// x^T x of `n` rows of `cols` (row-major, cols x cols), in double. With `col_div` (cols values),
// the second moments of x / col_div: the inputs of a matrix AWQ scaled by col_div, whose
// producer was divided by it.
std::vector<double> gptq_gram(const float* x, int64_t n, int64_t cols,
                              std::span<const float> col_div = {});

// What the pass reads: the upper Cholesky factor U (U^T U = (H + damp * mean(diag H) * I)^-1,
// row-major cols x cols) of `h`. A column no input reached (H_ii = 0) gets H_ii = 1, so its
// error goes nowhere. Throws Error when H is not positive definite after damping.
std::vector<double> gptq_factor(std::span<const double> h, int64_t cols, double damp);

// Rounds the rows x cols matrix `w` (changed in place: it ends holding the rounded values' source
// as the pass left it) into `type`, writing rows * row_bytes(type, cols) bytes to `dst`.
// `importance` (cols values, or null) weighs each block's fit. cols must be a multiple of the
// type's block (32, or 256 for the K types and IQ4_XS).
void gptq_quantize(DType type, float* w, int64_t rows, int64_t cols, std::span<const double> u,
                   const float* importance, uint8_t* dst, int threads);

}  // namespace pagoda
