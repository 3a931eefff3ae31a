// Scalar quant reference: block layouts, F16 / BF16 conversion, round-trip accuracy, and
// hand-built blocks with known values. Bit equality with llama.cpp's own code is checked by
// tests/python/test_quant_vs_gguf.py.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/reference.h"

namespace pagoda {
namespace {

// ---- layouts ----

template <typename Block>
void expect_layout(DType type, int block_size) {
  EXPECT_EQ(sizeof(Block), dtype_traits(type).type_size) << dtype_traits(type).name;
  EXPECT_EQ(block_size, static_cast<int>(dtype_traits(type).block_size)) << dtype_traits(type).name;
}

TEST(QuantBlocks, SizesMatchTheTraitsTable) {
  expect_layout<BlockQ4_0>(DType::kQ4_0, kBlockSize);
  expect_layout<BlockQ4_1>(DType::kQ4_1, kBlockSize);
  expect_layout<BlockQ5_0>(DType::kQ5_0, kBlockSize);
  expect_layout<BlockQ5_1>(DType::kQ5_1, kBlockSize);
  expect_layout<BlockQ8_0>(DType::kQ8_0, kBlockSize);
  expect_layout<BlockQ2_K>(DType::kQ2_K, kSuperBlockSize);
  expect_layout<BlockQ3_K>(DType::kQ3_K, kSuperBlockSize);
  expect_layout<BlockQ4_K>(DType::kQ4_K, kSuperBlockSize);
  expect_layout<BlockQ5_K>(DType::kQ5_K, kSuperBlockSize);
  expect_layout<BlockQ6_K>(DType::kQ6_K, kSuperBlockSize);
  expect_layout<BlockQ8_K>(DType::kQ8_K, kSuperBlockSize);
  expect_layout<BlockIQ4_NL>(DType::kIQ4_NL, kBlockSize);
  expect_layout<BlockIQ4_XS>(DType::kIQ4_XS, kSuperBlockSize);
  expect_layout<BlockMXFP4>(DType::kMXFP4, kBlockSize);
}

TEST(QuantBlocks, FieldOffsetsAreGgufs) {
  // The scales at the end of a block are where a wrong field order would show first.
  EXPECT_EQ(offsetof(BlockQ4_1, qs), 4u);
  EXPECT_EQ(offsetof(BlockQ5_0, qh), 2u);
  EXPECT_EQ(offsetof(BlockQ5_1, qs), 8u);
  EXPECT_EQ(offsetof(BlockQ2_K, d), 80u);
  EXPECT_EQ(offsetof(BlockQ2_K, dmin), 82u);
  EXPECT_EQ(offsetof(BlockQ3_K, scales), 96u);
  EXPECT_EQ(offsetof(BlockQ3_K, d), 108u);
  EXPECT_EQ(offsetof(BlockQ4_K, qs), 16u);
  EXPECT_EQ(offsetof(BlockQ5_K, qh), 16u);
  EXPECT_EQ(offsetof(BlockQ5_K, qs), 48u);
  EXPECT_EQ(offsetof(BlockQ6_K, scales), 192u);
  EXPECT_EQ(offsetof(BlockQ6_K, d), 208u);
  EXPECT_EQ(offsetof(BlockQ8_K, qs), 4u);
  EXPECT_EQ(offsetof(BlockQ8_K, bsums), 260u);
  EXPECT_EQ(offsetof(BlockIQ4_NL, qs), 2u);
  EXPECT_EQ(offsetof(BlockIQ4_XS, scales_h), 2u);
  EXPECT_EQ(offsetof(BlockIQ4_XS, scales_l), 4u);
  EXPECT_EQ(offsetof(BlockIQ4_XS, qs), 8u);
}

TEST(QuantBlocks, RowBytes) {
  EXPECT_EQ(row_bytes(DType::kF32, 3), 12u);
  EXPECT_EQ(row_bytes(DType::kBF16, 5), 10u);
  EXPECT_EQ(row_bytes(DType::kQ4_0, 64), 36u);
  EXPECT_EQ(row_bytes(DType::kQ4_K, 512), 288u);
  EXPECT_EQ(row_bytes(DType::kQ6_K, 0), 0u);
  EXPECT_THROW(row_bytes(DType::kQ4_K, 100), Error);
  EXPECT_THROW(row_bytes(DType::kQ8_0, -32), Error);
  EXPECT_THROW(row_bytes(DType::kF64, INT64_MAX), Error);  // 8 * INT64_MAX overflows
}

TEST(QuantReference, RejectsWhatItCannotDo) {
  std::vector<float> values(256, 1.0f);
  std::vector<uint8_t> bytes(1024);
  EXPECT_FALSE(can_dequantize(DType::kIQ1_S));
  EXPECT_FALSE(can_quantize(DType::kIQ3_S));  // decoded only
  EXPECT_TRUE(can_dequantize(DType::kIQ3_S));
  EXPECT_TRUE(can_quantize(DType::kIQ4_NL));
  EXPECT_TRUE(can_dequantize(DType::kIQ4_XS));
  EXPECT_TRUE(can_quantize(DType::kQ3_K));
  EXPECT_THROW(dequantize_row(DType::kIQ1_S, bytes.data(), values.data(), 256), Error);
  EXPECT_THROW(quantize_row(DType::kQ8_1, values.data(), bytes.data(), 32), Error);
  EXPECT_THROW(quantize_row(DType::kQ4_0, values.data(), bytes.data(), 48), Error);
  EXPECT_THROW(dequantize_row(DType::kQ2_K, bytes.data(), values.data(), 128), Error);
}

// ---- F16 / BF16 ----

// Compile-time spot checks; the exhaustive ones follow at run time.
static_assert(fp32_to_fp16(1.0f) == 0x3c00);
static_assert(fp16_to_fp32(0xc000) == -2.0f);
static_assert(fp32_to_bf16(1.0f) == 0x3f80);
static_assert(bf16_to_fp32(0x4049) == 3.140625f);

TEST(Fp16, KnownValues) {
  struct Case {
    float value;
    uint16_t bits;
  };
  const Case cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3c00},
      {-1.5f, 0xbe00},
      {65504.0f, 0x7bff},    // largest half
      {65519.996f, 0x7bff},  // just under the halfway point to 2^16
      {65520.0f, 0x7c00},    // halfway: ties to even, i.e. Inf
      {1e10f, 0x7c00},
      {-INFINITY, 0xfc00},
      {0x1p-14f, 0x0400},                    // smallest normal
      {0x1p-24f, 0x0001},                    // smallest subnormal
      {0x1p-25f, 0x0000},                    // half of it: tie to even (0)
      {0x1.000002p-25f, 0x0001},             // just above the tie
      {0x1.8p-24f, 0x0002},                  // 1.5 ulp: tie to even (2)
      {0x1.ff8p-15f, 0x03ff},                // largest subnormal
      {0x1.ffcp-15f, 0x0400},                // rounds up into the normals
      {1.0f + 0x1p-11f, 0x3c00},             // tie between 1 and 1 + 2^-10: even is 1
      {1.0f + 3 * 0x1p-11f, 0x3c02},         // tie between odd and even: even is up
      {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01},  // above the tie
  };
  for (const Case& c : cases) {
    EXPECT_EQ(fp32_to_fp16(c.value), c.bits) << c.value;
  }
  const uint16_t nan = fp32_to_fp16(NAN);
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  // A NaN whose payload lives only in bits that F16 drops must stay NaN, not become Inf.
  EXPECT_NE(fp32_to_fp16(std::bit_cast<float>(0x7f800001u)) & 0x03ff, 0);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7e00)));
  EXPECT_EQ(fp16_to_fp32(0x7c00), INFINITY);
  EXPECT_EQ(fp16_to_fp32(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_to_fp32(0x03ff), 0x1.ff8p-15f);
  EXPECT_EQ(std::bit_cast<uint32_t>(fp16_to_fp32(0x8000)), 0x80000000u);
}

TEST(Fp16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if ((h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0) {
      ASSERT_TRUE(std::isnan(f)) << h;
      // Quiet NaNs keep their payload exactly.
      if (h & 0x0200) {
        ASSERT_EQ(fp32_to_fp16(f), h) << h;
      }
      continue;
    }
    ASSERT_EQ(fp32_to_fp16(f), h) << h;
  }
}

// Round-to-nearest-even of a finite float onto a grid, from first principles in double: the
// two neighbours and their distances. `down` is the neighbour towards zero, `up` the other.
uint16_t nearest_even(double value, uint16_t down, uint16_t up, double down_value,
                      double up_value) {
  const double to_down = std::fabs(value - down_value), to_up = std::fabs(up_value - value);
  if (to_down != to_up) return to_down < to_up ? down : up;
  return (down & 1) == 0 ? down : up;
}

TEST(Fp16, RandomFloatsRoundToNearestEven) {
  std::mt19937 rng(17);
  // Exponents from far below the subnormals to past the largest half.
  std::uniform_int_distribution<uint32_t> exponent(90, 145), mantissa(0, 0x7fffff), sign(0, 1);
  for (int i = 0; i < 500000; ++i) {
    const uint32_t bits = (sign(rng) << 31) | (exponent(rng) << 23) | mantissa(rng);
    const float f = std::bit_cast<float>(bits);
    const uint16_t got = fp32_to_fp16(f);
    const double magnitude = std::fabs(static_cast<double>(f));
    // The half just at or below |f| by search on the (monotone) positive half encodings.
    uint16_t down = 0;
    for (int bit = 14; bit >= 0; --bit) {
      const uint16_t candidate = static_cast<uint16_t>(down | (1u << bit));
      if (candidate <= 0x7c00 && fp16_to_fp32(candidate) <= magnitude) down = candidate;
    }
    uint16_t expected = down;
    if (down < 0x7c00 && fp16_to_fp32(down) != magnitude) {
      const uint16_t up = static_cast<uint16_t>(down + 1);
      // Past the largest half the upper neighbour is 2^16 (then encoded as Inf).
      const double up_value = up == 0x7c00 ? 65536.0 : fp16_to_fp32(up);
      expected = nearest_even(magnitude, down, up, fp16_to_fp32(down), up_value);
    }
    expected = static_cast<uint16_t>(expected | ((bits >> 16) & 0x8000));
    ASSERT_EQ(got, expected) << std::hexfloat << f;
  }
}

TEST(Bf16, KnownValues) {
  EXPECT_EQ(fp32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_bf16(1.0f + 0x1p-8f), 0x3f80);      // tie: even is down
  EXPECT_EQ(fp32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);  // tie: even is up
  EXPECT_EQ(fp32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  EXPECT_EQ(fp32_to_bf16(3.4028235e38f), 0x7f80);  // rounds past the largest: Inf
  EXPECT_EQ(fp32_to_bf16(-INFINITY), 0xff80);
  EXPECT_EQ(fp32_to_bf16(0x1p-132f), 0x0002);  // float subnormal kept, not flushed
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x7f800001u)), 0x7fc0);  // quiet, not Inf
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0xffc00001u)), 0xffc0);
}

TEST(Bf16, EveryPatternWidensExactlyAndRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_fp32(static_cast<uint16_t>(h));
    ASSERT_EQ(std::bit_cast<uint32_t>(f), h << 16);
    const bool is_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
    if (!is_nan || (h & 0x40)) {
      ASSERT_EQ(fp32_to_bf16(f), h) << h;
    }
  }
}

TEST(Bf16, RandomFloatsRoundToNearestEven) {
  std::mt19937 rng(23);
  std::uniform_int_distribution<uint32_t> bits_dist(0, 0xffffffffu);
  for (int i = 0; i < 500000; ++i) {
    const uint32_t bits = bits_dist(rng);
    if ((bits & 0x7f800000u) == 0x7f800000u) continue;        // NaN / Inf: covered above
    const uint16_t down = static_cast<uint16_t>(bits >> 16);  // truncation is towards zero
    const uint16_t up = static_cast<uint16_t>(down + 1);
    const double value = std::fabs(static_cast<double>(std::bit_cast<float>(bits)));
    // Past the largest bf16 the upper neighbour is 2^128, then encoded as Inf.
    const double up_value = (up & 0x7fff) == 0x7f80 ? 0x1p128 : std::fabs(bf16_to_fp32(up));
    const uint16_t expected =
        (bits & 0xffffu) == 0
            ? down
            : nearest_even(value, down, up, std::fabs(bf16_to_fp32(down)), up_value);
    ASSERT_EQ(fp32_to_bf16(std::bit_cast<float>(bits)), expected) << std::hex << bits;
  }
}

// ---- round trips ----

struct Bound {
  DType type;
  double max_nmse;  // sum (x - y)^2 / sum x^2 on standard Gaussian data
};

// About 1.5x the values measured on 2^17 Gaussian samples (in parentheses), so a regression
// in scale choice or packing fails while seeds and lengths do not.
constexpr Bound kBounds[] = {
    {DType::kF32, 0.0},      // exact
    {DType::kF16, 7e-8},     // (4.3e-8)
    {DType::kBF16, 4.5e-6},  // (2.8e-6)
    {DType::kQ8_0, 4.5e-5},  // (2.9e-5)
    {DType::kQ4_0, 1.1e-2},  // (7.4e-3)
    {DType::kQ4_1, 9e-3},    // (6.1e-3)
    {DType::kQ5_0, 2.8e-3},  // (1.8e-3)
    {DType::kQ5_1, 2.2e-3},  // (1.4e-3)
    {DType::kQ2_K, 0.1},     // (6.9e-2)
    {DType::kQ3_K, 3.1e-2},  // (2.1e-2)
    {DType::kQ4_K, 7.5e-3},  // (4.9e-3)
    {DType::kQ5_K, 1.8e-3},  // (1.2e-3)
    {DType::kQ6_K, 4.5e-4},  // (3.0e-4)
    {DType::kQ8_K, 7.5e-5},  // (4.9e-5)
    {DType::kIQ4_NL, 8e-3},  // (5.4e-3)
    {DType::kIQ4_XS, 8e-3},  // (5.4e-3)
};

std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> values(n);
  for (float& v : values) v = dist(rng);
  return values;
}

std::vector<float> round_trip(DType type, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> bytes(row_bytes(type, n));
  quantize_row(type, x.data(), bytes.data(), n);
  std::vector<float> y(x.size());
  dequantize_row(type, bytes.data(), y.data(), n);
  return y;
}

double nmse(const std::vector<float>& x, const std::vector<float>& y) {
  double error = 0.0, energy = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    error += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    energy += static_cast<double>(x[i]) * x[i];
  }
  return error / energy;
}

TEST(QuantReference, RoundTripErrorPerType) {
  for (const Bound& bound : kBounds) {
    const auto& traits = dtype_traits(bound.type);
    // Rows of 1, 3 and 16 blocks, each row quantized on its own; enough rows that the pooled
    // error is stable (>= 2^15 samples).
    for (const int64_t blocks_per_row : {1, 3, 16}) {
      const int64_t n = blocks_per_row * traits.block_size;
      const int64_t num_rows = std::max<int64_t>(1, 32768 / n);
      double error = 0.0, energy = 0.0;
      for (int64_t r = 0; r < num_rows; ++r) {
        const auto x = gaussian(static_cast<size_t>(n), static_cast<uint32_t>(1000 * r + n));
        const auto y = round_trip(bound.type, x);
        const double e = nmse(x, y);
        double row_energy = 0.0;
        for (float v : x) row_energy += static_cast<double>(v) * v;
        error += e * row_energy;
        energy += row_energy;
      }
      const double measured = error / energy;
      EXPECT_LE(measured, bound.max_nmse) << traits.name << " rows of " << n;
      if (blocks_per_row == 16) {
        std::printf("[ quant    ] %-5s NMSE %.3e (bound %.1e)\n", std::string(traits.name).c_str(),
                    measured, bound.max_nmse);
      }
    }
  }
}

TEST(QuantReference, ScaleInvariantOverTheF16Range) {
  // Weights of very different magnitudes keep the same relative error while the F16 scales
  // stay normal; the data at 1e-3 still has block scales far above the F16 subnormals.
  for (const Bound& bound : kBounds) {
    const auto& traits = dtype_traits(bound.type);
    for (const float sigma : {1e-3f, 30.0f}) {
      const auto x = gaussian(16 * 256, 77, sigma);
      EXPECT_LE(nmse(x, round_trip(bound.type, x)), bound.max_nmse * 1.5)
          << traits.name << " sigma " << sigma;
    }
  }
}

TEST(QuantReference, ZeroAndConstantRows) {
  for (const Bound& bound : kBounds) {
    const auto& traits = dtype_traits(bound.type);
    const std::vector<float> zeros(512, 0.0f);
    for (float v : round_trip(bound.type, zeros)) ASSERT_EQ(v, 0.0f) << traits.name;
    // A constant row comes back within the type's step (within an F16 rounding for the
    // types whose offset or scale is F16: 0.3 is not exact in F16).
    for (const float c : {0.3f, -0.3f}) {
      const std::vector<float> constant(512, c);
      for (float v : round_trip(bound.type, constant)) {
        ASSERT_NEAR(v, c, 0.02 * 0.3) << traits.name << " constant " << c;
      }
    }
  }
}

TEST(QuantReference, OutlierStaysLocal) {
  // One value of 40 sigma per 256: it must come back close, and the elements outside its own
  // group of 32 must keep nearly their usual error (the K-quants code every group scale
  // against one super-scale, so a poor code search would spread the outlier's damage).
  for (const Bound& bound : kBounds) {
    auto x = gaussian(8 * 4096, 5);
    std::vector<bool> near_outlier(x.size(), false);
    for (size_t i = 0; i < x.size(); i += 256) {
      x[i] = 40.0f;
      for (size_t j = i; j < i + 32; ++j) near_outlier[j] = true;
    }
    const auto y = round_trip(bound.type, x);
    std::vector<float> rest_x, rest_y;
    for (size_t i = 0; i < x.size(); ++i) {
      if (near_outlier[i]) {
        if (x[i] == 40.0f) {
          ASSERT_NEAR(y[i], 40.0f, 0.05 * 40) << dtype_traits(bound.type).name;
        }
        continue;
      }
      rest_x.push_back(x[i]);
      rest_y.push_back(y[i]);
    }
    // Q8_K has one step for all 256 elements, which the outlier sets: 40 / 127 / sqrt(12).
    const double rest_bound = bound.type == DType::kQ8_K ? 1.2e-2 : 2 * bound.max_nmse;
    EXPECT_LE(nmse(rest_x, rest_y), rest_bound) << dtype_traits(bound.type).name;
  }
}

TEST(QuantReference, AnyAlignment) {
  for (const Bound& bound : kBounds) {
    const auto x = gaussian(512, 9);
    const size_t size = row_bytes(bound.type, 512);
    std::vector<uint8_t> aligned(size), shifted(size + 1);
    quantize_row(bound.type, x.data(), aligned.data(), 512);
    quantize_row(bound.type, x.data(), shifted.data() + 1, 512);
    ASSERT_EQ(std::memcmp(aligned.data(), shifted.data() + 1, size), 0);
    std::vector<float> a(512), b(513);
    dequantize_row(bound.type, aligned.data(), a.data(), 512);
    dequantize_row(bound.type, shifted.data() + 1, b.data() + 1, 512);
    ASSERT_EQ(std::memcmp(a.data(), b.data() + 1, 512 * sizeof(float)), 0);
  }
}

TEST(QuantReference, Q8KBlockSums) {
  const auto x = gaussian(512, 3);
  std::vector<BlockQ8_K> blocks(2);
  quantize_row(DType::kQ8_K, x.data(), blocks.data(), 512);
  for (const BlockQ8_K& b : blocks) {
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += b.qs[g * 16 + l];
      EXPECT_EQ(b.bsums[g], sum);
    }
  }
}

// ---- hand-built blocks ----

template <typename Block>
std::vector<float> decode(DType type, const Block& block) {
  std::vector<float> y(dtype_traits(type).block_size);
  dequantize_row(type, &block, y.data(), static_cast<int64_t>(y.size()));
  return y;
}

TEST(QuantKnownBlocks, Legacy) {
  BlockQ4_0 q4_0{};
  q4_0.d = 0x3800;  // 0.5
  for (int j = 0; j < 16; ++j) q4_0.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  auto y = decode(DType::kQ4_0, q4_0);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f);       // low nibbles: elements 0..15
    EXPECT_EQ(y[j + 16], (7 - j) * 0.5f);  // high nibbles: elements 16..31
  }

  BlockQ4_1 q4_1{};
  q4_1.d = 0x3400;  // 0.25
  q4_1.m = 0xbc00;  // -1
  q4_1.qs[3] = 0xf2;
  y = decode(DType::kQ4_1, q4_1);
  EXPECT_EQ(y[3], 2 * 0.25f - 1);
  EXPECT_EQ(y[19], 15 * 0.25f - 1);
  EXPECT_EQ(y[0], -1.0f);

  BlockQ5_0 q5_0{};
  q5_0.d = 0x3c00;  // 1
  const uint32_t qh = (1u << 0) | (1u << 31);
  std::memcpy(q5_0.qh, &qh, 4);
  q5_0.qs[0] = 0x03;
  q5_0.qs[15] = 0x70;
  y = decode(DType::kQ5_0, q5_0);
  EXPECT_EQ(y[0], (3 | 16) - 16.0f);
  EXPECT_EQ(y[31], (7 | 16) - 16.0f);
  EXPECT_EQ(y[15], -16.0f);  // low nibble 0, no fifth bit
  EXPECT_EQ(y[16], -16.0f);

  BlockQ5_1 q5_1{};
  q5_1.d = 0x4000;  // 2
  q5_1.m = 0x3c00;  // 1
  const uint32_t qh1 = 1u << 20;
  std::memcpy(q5_1.qh, &qh1, 4);
  q5_1.qs[4] = 0x91;  // element 4 low nibble 1, element 20 high nibble 9
  y = decode(DType::kQ5_1, q5_1);
  EXPECT_EQ(y[4], 1 * 2.0f + 1);
  EXPECT_EQ(y[20], (9 | 16) * 2.0f + 1);

  BlockQ8_0 q8_0{};
  q8_0.d = 0xc000;  // -2
  for (int j = 0; j < 32; ++j) q8_0.qs[j] = static_cast<int8_t>(j * 8 - 128);
  y = decode(DType::kQ8_0, q8_0);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], -2.0f * (j * 8 - 128));
}

TEST(QuantKnownBlocks, Q2K) {
  BlockQ2_K b{};
  b.d = 0x3c00;     // 1
  b.dmin = 0x3800;  // 0.5
  b.scales[12] = 5 | (2 << 4);
  b.qs[33] = 3 << 4;  // second half, third 2-bit lane, l = 1: element 128 + 64 + 1
  const auto y = decode(DType::kQ2_K, b);
  EXPECT_EQ(y[193], 5 * 3 - 0.5f * 2);
  EXPECT_EQ(y[192], -1.0f);  // same group, quant 0: just the min
  EXPECT_EQ(y[1], 0.0f);     // group 0 has scale and min 0
  EXPECT_EQ(y[208], 0.0f);   // group 13
}

TEST(QuantKnownBlocks, Q3K) {
  BlockQ3_K b{};
  b.d = 0x3c00;
  // Every 6-bit scale = 33, i.e. +1 after the -32 bias: low nibbles 1, high bits 2.
  for (int i = 0; i < 8; ++i) b.scales[i] = 0x11;
  for (int i = 8; i < 12; ++i) b.scales[i] = 0xaa;
  std::memset(b.hmask, 0xff, sizeof(b.hmask));  // a set bit means "no -4"
  b.qs[32 + 8] = 3 << 4;                        // element 128 + 64 + 8 = 200: low bits 3
  b.hmask[9] &= ~(1 << 6);                      // element 6*32 + 9 = 201: high bit clear -> -4
  // Group 15 gets scale -32: its low nibble (high nibble of scales[7]) and high bits
  // (bits 6..7 of scales[11]) cleared.
  b.scales[7] = 0x01;
  b.scales[11] = 0x2a;
  b.qs[63] = 1 << 6;  // element 128 + 96 + 31 = 255: quant 1
  const auto y = decode(DType::kQ3_K, b);
  EXPECT_EQ(y[200], 3.0f);
  EXPECT_EQ(y[201], -4.0f);
  EXPECT_EQ(y[202], 0.0f);
  EXPECT_EQ(y[255], -32.0f);
  EXPECT_EQ(y[240], 0.0f);
}

TEST(QuantKnownBlocks, Q4KAndQ5K) {
  BlockQ4_K b{};
  b.d = 0x3c00;
  b.dmin = 0x3c00;
  // Group 0: scale 1, min 0. Group 5: scale 33, min 18, split into low nibbles (byte 9) and top
  // two bits (bytes 1 and 5).
  b.scales[0] = 1;
  b.scales[9] = (33 & 0xf) | ((18 & 0xf) << 4);
  b.scales[1] = (33 >> 4) << 6;
  b.scales[5] = (18 >> 4) << 6;
  b.qs[0] = 0x0f;       // element 0 (group 0, low nibble)
  b.qs[64 + 3] = 0x70;  // element 5*32 + 3 (group 5 is odd: high nibbles of qs[64..96))
  auto y = decode(DType::kQ4_K, b);
  EXPECT_EQ(y[0], 15.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[163], 33.0f * 7 - 18);
  EXPECT_EQ(y[160], -18.0f);
  EXPECT_EQ(y[131], 0.0f);  // group 4 (low nibble of the same byte): scale 0, min 0

  BlockQ5_K b5{};
  b5.d = b.d;
  b5.dmin = b.dmin;
  std::memcpy(b5.scales, b.scales, sizeof(b.scales));
  std::memcpy(b5.qs, b.qs, sizeof(b.qs));
  b5.qh[3] = 1 << 5;  // fifth bit of element 5*32 + 3
  y = decode(DType::kQ5_K, b5);
  EXPECT_EQ(y[163], 33.0f * (7 + 16) - 18);
  EXPECT_EQ(y[0], 15.0f);
}

TEST(QuantKnownBlocks, Q6K) {
  BlockQ6_K b{};
  b.d = 0x3800;  // 0.5
  for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<int8_t>(g - 8);
  // Element 200 = second half, lane 2, l = 8: high nibble of ql[64 + 8], bits 4..5 of qh[40].
  b.ql[72] = 0x50;
  b.qh[40] = 2 << 4;
  const auto y = decode(DType::kQ6_K, b);
  EXPECT_EQ(y[200], 0.5f * 4 * ((5 | (2 << 4)) - 32));
  EXPECT_EQ(y[201], 0.5f * 4 * -32);  // quant 0 is -32 after the bias
  EXPECT_EQ(y[136], 0.0f);            // low nibble of ql[72]: group 8, scale 0
  EXPECT_EQ(y[0], 0.5f * -8 * -32);
}

// The grid as llama.cpp's kvalues_iq4nl has it; element j of a block is the low nibble of qs[j]
// for j < 16, the high nibble of qs[j - 16] after.
TEST(QuantKnownBlocks, IQ4NL) {
  BlockIQ4_NL b{};
  b.d = 0xb800;  // -0.5
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = decode(DType::kIQ4_NL, b);
  const int grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], -0.5f * grid[j]) << j;
    EXPECT_EQ(y[j + 16], -0.5f * grid[15 - j]) << j;
  }
}

// Sub-block s's 6-bit scale: nibble s % 2 of scales_l[s / 2], bits 2s..2s+1 of scales_h.
TEST(QuantKnownBlocks, IQ4XS) {
  BlockIQ4_XS b{};
  b.d = 0x3400;  // 0.25
  // Sub-block 3: ls = 0x2 | (1 << 4) = 18, i.e. scale 18 - 32 = -14. Sub-block 6: ls = 63.
  b.scales_l[1] = 0x20;
  b.scales_l[3] = 0x0f;
  b.scales_h = static_cast<uint16_t>((1 << 6) | (3 << 12));
  b.qs[3 * 16 + 5] = 0x9e;  // element 3*32 + 5: index 14; element 3*32 + 21: index 9
  b.qs[6 * 16 + 15] = 0x0f;
  const auto y = decode(DType::kIQ4_XS, b);
  EXPECT_EQ(y[3 * 32 + 5], 0.25f * -14 * 89);
  EXPECT_EQ(y[3 * 32 + 21], 0.25f * -14 * 13);
  EXPECT_EQ(y[6 * 32 + 15], 0.25f * 31 * 113);
  EXPECT_EQ(y[6 * 32 + 31], 0.25f * 31 * -127);
  EXPECT_EQ(y[0], 0.25f * -32 * -127);  // every other sub-block: ls 0, index 0
}

TEST(QuantKnownBlocks, Q8KAndPlainTypes) {
  BlockQ8_K b{};
  b.d = 0.25f;
  for (int e = 0; e < 256; ++e) b.qs[e] = static_cast<int8_t>(e - 128);
  const auto y = decode(DType::kQ8_K, b);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 0.25f * (e - 128));

  const uint16_t halves[] = {0x3c00, 0xc000, 0x0001, 0x7c00};
  float out[4];
  dequantize_row(DType::kF16, halves, out, 4);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 0x1p-24f);
  EXPECT_EQ(out[3], INFINITY);
  const uint16_t bhalves[] = {0x3f80, 0xc049};
  dequantize_row(DType::kBF16, bhalves, out, 2);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.140625f);
}

}  // namespace
}  // namespace pagoda
