// GPTQ's rounding (quant/gptq.h): the factor is what it claims, and on correlated inputs the
// rounded matrix moves W x less than rounding each block to its nearest levels does, for every
// type it writes, while each block still decodes on its own grid.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "quant/gptq.h"
#include "quant/reference.h"

namespace pagoda {
namespace {

// n inputs of `cols` whose columns are correlated (a few shared factors plus noise), with column
// scales that differ: the situation where pushing a column's error onto its neighbours pays.
std::vector<float> correlated_inputs(int64_t n, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  constexpr int kFactors = 6;
  std::vector<float> mix(static_cast<size_t>(kFactors * cols)), scale(static_cast<size_t>(cols));
  for (auto& v : mix) v = g(rng);
  for (auto& v : scale) v = std::exp(0.5f * g(rng));
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (int64_t r = 0; r < n; ++r) {
    float f[kFactors];
    for (float& v : f) v = g(rng);
    for (int64_t c = 0; c < cols; ++c) {
      float v = 0.3f * g(rng);
      for (int k = 0; k < kFactors; ++k) v += f[k] * mix[k * cols + c];
      x[r * cols + c] = v * scale[c];
    }
  }
  return x;
}

// sum over inputs and rows of ((W - deq(q)) x)^2.
double output_error(const std::vector<float>& w, DType type, const std::vector<uint8_t>& q,
                    int64_t rows, int64_t cols, const std::vector<float>& x, int64_t n) {
  std::vector<float> back(static_cast<size_t>(cols));
  const size_t rb = row_bytes(type, cols);
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(type, q.data() + r * rb, back.data(), cols);
    for (int64_t i = 0; i < n; ++i) {
      double y = 0.0;
      for (int64_t c = 0; c < cols; ++c) y += (w[r * cols + c] - back[c]) * x[i * cols + c];
      total += y * y;
    }
  }
  return total;
}

// With AWQ's scales the matrix reads x / s: the Gram the pass uses must be that input's.
TEST(Gptq, GramOfScaledInputsIsTheGramOfTheDividedRows) {
  const int64_t n = 40, cols = 24;
  const std::vector<float> x = correlated_inputs(n, cols, 3);
  std::vector<float> s(static_cast<size_t>(cols)), divided(x.size());
  for (int64_t c = 0; c < cols; ++c) s[c] = 0.25f + 0.125f * static_cast<float>(c % 7);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < cols; ++c) divided[r * cols + c] = x[r * cols + c] / s[c];
  }
  const std::vector<double> got = gptq_gram(x.data(), n, cols, s);
  const std::vector<double> expected = gptq_gram(divided.data(), n, cols);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    // The divided rows here are rounded to float; gptq_gram divides in double.
    EXPECT_NEAR(got[i], expected[i], 1e-5 * (1.0 + std::fabs(expected[i]))) << i;
  }
  const std::vector<double> plain = gptq_gram(x.data(), n, cols);
  EXPECT_GT(std::fabs(plain[0] - got[0]), 1e-3 * std::fabs(plain[0])) << "the scales did nothing";
}

TEST(Gptq, FactorIsTheUpperCholeskyOfTheDampedInverse) {
  constexpr int64_t kCols = 48, kN = 200;
  const std::vector<float> x = correlated_inputs(kN, kCols, 3);
  std::vector<double> h = gptq_gram(x.data(), kN, kCols);
  h[5 * kCols + 5] = 0.0;  // a column no input reached: zero row and column
  for (int64_t k = 0; k < kCols; ++k) h[5 * kCols + k] = h[k * kCols + 5] = 0.0;
  const double damp = 0.01;
  const std::vector<double> u = gptq_factor(h, kCols, damp);
  double mean = 0.0;
  for (int64_t i = 0; i < kCols; ++i) mean += h[i * kCols + i];
  mean /= kCols;
  std::vector<double> hd = h;
  hd[5 * kCols + 5] = 1.0;
  for (int64_t i = 0; i < kCols; ++i) hd[i * kCols + i] += damp * mean;
  // U upper triangular, and (U^T U) hd = I.
  for (int64_t i = 0; i < kCols; ++i) {
    for (int64_t j = 0; j < i; ++j) EXPECT_EQ(u[i * kCols + j], 0.0);
  }
  for (int64_t i = 0; i < kCols; ++i) {
    for (int64_t j = 0; j < kCols; ++j) {
      double p = 0.0;
      for (int64_t k = 0; k < kCols; ++k) {
        double inv_ik = 0.0;
        for (int64_t m = 0; m <= std::min(i, k); ++m) inv_ik += u[m * kCols + i] * u[m * kCols + k];
        p += inv_ik * hd[k * kCols + j];
      }
      EXPECT_NEAR(p, i == j ? 1.0 : 0.0, 1e-8) << i << " " << j;
    }
  }
  // The unreached column carries its error nowhere.
  for (int64_t k = 6; k < kCols; ++k) EXPECT_EQ(u[5 * kCols + k], 0.0);
}

constexpr DType kGptqTypes[] = {DType::kQ4_0,   DType::kQ4_1,  DType::kQ5_0, DType::kQ5_1,
                                DType::kQ8_0,   DType::kQ4_K,  DType::kQ5_K, DType::kQ6_K,
                                DType::kIQ4_NL, DType::kIQ4_XS};

std::vector<float> gaussian_weights(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(n));
  for (auto& v : w) v = g(rng);
  return w;
}

// `w` rounded into `type` row by row by the plain encoder, and by GPTQ with the factor `u`.
void plain_and_gptq(DType type, const std::vector<float>& w, int64_t rows, int64_t cols,
                    const std::vector<double>& u, std::vector<uint8_t>* plain,
                    std::vector<uint8_t>* ours) {
  const size_t rb = row_bytes(type, cols);
  plain->assign(rb * rows, 0);
  ours->assign(rb * rows, 0);
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(type, w.data() + r * cols, plain->data() + r * rb, cols);
  }
  std::vector<float> work = w;
  gptq_quantize(type, work.data(), rows, cols, u, nullptr, ours->data(), 2);
}

TEST(Gptq, LowersTheOutputErrorOfEveryType) {
  constexpr int64_t kRows = 24, kCols = 512, kN = 1024;  // two K super-blocks a row
  const std::vector<float> x = correlated_inputs(kN, kCols, 7);
  const std::vector<double> u = gptq_factor(gptq_gram(x.data(), kN, kCols), kCols, 0.01);
  const std::vector<float> w = gaussian_weights(kRows * kCols, 11);
  for (const DType type : kGptqTypes) {
    ASSERT_TRUE(gptq_supports(type));
    std::vector<uint8_t> plain, ours;
    plain_and_gptq(type, w, kRows, kCols, u, &plain, &ours);
    const double e_plain = output_error(w, type, plain, kRows, kCols, x, kN);
    const double e_gptq = output_error(w, type, ours, kRows, kCols, x, kN);
    // These inputs have six strong factors, so most of a column's error can be cancelled by its
    // neighbours; the printed ratios are far under the bound.
    EXPECT_LT(e_gptq, 0.2 * e_plain)
        << dtype_traits(type).name << ": " << e_gptq << " against " << e_plain;
    std::printf("%s: GPTQ output error %.3fx plain rounding's\n",
                std::string(dtype_traits(type).name).c_str(), e_gptq / e_plain);
  }
  for (const DType type : {DType::kQ2_K, DType::kQ3_K}) {
    EXPECT_FALSE(gptq_supports(type));
    std::vector<float> work = w;
    std::vector<uint8_t> out(row_bytes(type, kCols) * kRows);
    EXPECT_THROW(gptq_quantize(type, work.data(), kRows, kCols, u, nullptr, out.data(), 1), Error);
  }
}

// With inputs that are uncorrelated and alike (H = I), no column's error has anywhere to go:
// the pass must write what the type's encoder writes block by block, which checks that it reads
// every block's grid and packs every level as the encoder does. The K and IQ4 encoders round
// to the nearest level of the stored scales, so their bytes are equal; the legacy encoders round
// as ggml does (Q4_0 truncates x / d + 8.5), so theirs are compared as decoded values.
TEST(Gptq, WithNothingToCarryWritesTheEncodersLevels) {
  constexpr int64_t kRows = 16, kCols = 512;
  std::vector<double> identity(static_cast<size_t>(kCols * kCols), 0.0);
  for (int64_t i = 0; i < kCols; ++i) identity[i * kCols + i] = 1.0;
  const std::vector<double> u = gptq_factor(identity, kCols, 0.0);
  const std::vector<float> w = gaussian_weights(kRows * kCols, 5);
  for (const DType type : kGptqTypes) {
    const size_t rb = row_bytes(type, kCols);
    std::vector<uint8_t> plain, ours;
    plain_and_gptq(type, w, kRows, kCols, u, &plain, &ours);
    const bool legacy = type == DType::kQ4_0 || type == DType::kQ4_1 || type == DType::kQ5_0 ||
                        type == DType::kQ5_1 || type == DType::kQ8_0;
    if (!legacy) {
      EXPECT_EQ(plain, ours) << dtype_traits(type).name;
      continue;
    }
    std::vector<float> a(kCols), b(kCols);
    for (int64_t r = 0; r < kRows; ++r) {
      dequantize_row(type, plain.data() + r * rb, a.data(), kCols);
      dequantize_row(type, ours.data() + r * rb, b.data(), kCols);
      for (int64_t c = 0; c < kCols; ++c) {
        // Nearest against ggml's rounding: at most one level apart, and never farther from w.
        EXPECT_LE(std::fabs(b[c] - w[r * kCols + c]), std::fabs(a[c] - w[r * kCols + c]) + 1e-6f)
            << dtype_traits(type).name << " row " << r << " col " << c;
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
