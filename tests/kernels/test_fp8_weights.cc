// FP8_E4M3 weights (core/dtype.h, quant/reference_fp8.h): the block layout, the reference
// decode (every code of quant/fp8.h times the F16 scale), the round-to-nearest encode (scale
// F16(amax / 448), codes as the FP8 KV cache writes them) and its round-trip error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/fp8.h"
#include "quant/reference.h"

namespace pagoda {
namespace {

constexpr DType kFP8 = DType::kFP8_E4M3;

TEST(FP8Weights, TypeIsPagodasOwn) {
  const DTypeTraits& t = dtype_traits(kFP8);
  EXPECT_EQ(static_cast<uint32_t>(kFP8), 0xF8E4u);
  EXPECT_EQ(t.name, "FP8_E4M3");
  EXPECT_EQ(t.block_size, 32u);
  EXPECT_EQ(t.type_size, 34u);
  EXPECT_EQ(dtype_from_name("fp8_e4m3"), kFP8);
  EXPECT_TRUE(can_quantize(kFP8));
  EXPECT_TRUE(can_dequantize(kFP8));
  EXPECT_EQ(row_bytes(kFP8, 96), 3u * 34u);
}

// Every code (but the two NaNs) in a block, with scale 0.75: each decodes to 0.75 times its
// E4M3 value, exactly.
TEST(FP8Weights, DecodesEveryCode) {
  const uint16_t d = fp32_to_fp16(0.75f);
  for (int first = 0; first < 256; first += 32) {
    BlockFP8 b{};
    b.d = d;
    for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<uint8_t>(first + j);
    float y[32];
    dequantize_row(kFP8, &b, y, 32);
    for (int j = 0; j < 32; ++j) {
      const auto code = static_cast<uint8_t>(first + j);
      if ((code & 0x7f) == 0x7f) continue;
      EXPECT_EQ(y[j], 0.75f * fp8_e4m3_to_fp32(code)) << int{code};
    }
  }
}

// Values that are a power-of-two scale times E4M3 values, the largest 448 times it, come back
// exactly; the stored scale is F16(amax / 448).
TEST(FP8Weights, RepresentableValuesRoundTripExactly) {
  std::mt19937 rng(3);
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) {
    uint8_t code = static_cast<uint8_t>(rng() & 0xff);
    if ((code & 0x7f) == 0x7f) code = 0x01;
    x[i] = 0.125f * fp8_e4m3_to_fp32(code);
  }
  x[5] = 0.125f * 448.0f;
  x[40] = -0.125f * 448.0f;
  std::vector<uint8_t> bytes(row_bytes(kFP8, 64));
  quantize_row(kFP8, x.data(), bytes.data(), 64);
  uint16_t d;
  std::memcpy(&d, bytes.data(), 2);
  EXPECT_EQ(fp16_to_fp32(d), 0.125f);
  std::vector<float> y(64);
  dequantize_row(kFP8, bytes.data(), y.data(), 64);
  EXPECT_EQ(x, y);
}

TEST(FP8Weights, ZeroBlockAndRoundTripError) {
  std::vector<float> zeros(32, 0.0f), y(32, 1.0f);
  std::vector<uint8_t> bytes(34, 0xff);
  quantize_row(kFP8, zeros.data(), bytes.data(), 32);
  dequantize_row(kFP8, bytes.data(), y.data(), 32);
  EXPECT_EQ(y, zeros);

  // Gaussian data: E4M3's 3 mantissa bits give a relative RMS error near 2^-4 / sqrt(3)
  // (measured 2.4e-2); every element within half a step of its binade (1 / 16 relative) or,
  // below the smallest normal, half the subnormal step (2^-10 of the scale).
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 32 * 512;
  std::vector<float> x(static_cast<size_t>(n)), z(x.size());
  for (float& v : x) v = normal(rng);
  bytes.resize(row_bytes(kFP8, n));
  quantize_row(kFP8, x.data(), bytes.data(), n);
  dequantize_row(kFP8, bytes.data(), z.data(), n);
  double err = 0, power = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* block = x.data() + i / 32 * 32;
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(block[j]));
    const float d = fp16_to_fp32(fp32_to_fp16(amax / 448.0f));
    const double bound = std::max(std::fabs(x[i]) / 16.0 * 1.0001, d * 0x1p-10 * 1.0001);
    EXPECT_LE(std::fabs(x[i] - z[i]), bound) << i;
    err += (x[i] - z[i]) * (x[i] - z[i]);
    power += x[i] * x[i];
  }
  const double rel = std::sqrt(err / power);
  EXPECT_GT(rel, 0.015);
  EXPECT_LT(rel, 0.035);
}

}  // namespace
}  // namespace pagoda
