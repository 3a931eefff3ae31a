// The KV cache's value types (backend/kv_format.h) and the FP8 E4M3 codec under them
// (quant/fp8.h): every code, rounding ties, saturation; each type's round trip through a key
// slab and a value row, and the bytes each takes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/kv_format.h"
#include "core/error.h"
#include "quant/fp16.h"
#include "quant/fp8.h"

namespace pagoda {
namespace {

TEST(Fp8E4M3, KnownCodes) {
  EXPECT_EQ(fp8_e4m3_to_fp32(0x00), 0.0f);
  EXPECT_EQ(fp8_e4m3_to_fp32(0x38), 1.0f);         // exponent 7 = bias
  EXPECT_EQ(fp8_e4m3_to_fp32(0x7e), 448.0f);       // the largest finite
  EXPECT_EQ(fp8_e4m3_to_fp32(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_fp32(0x08), 0x1p-6f);      // the smallest normal
  EXPECT_EQ(fp8_e4m3_to_fp32(0x01), 0x1p-9f);      // the smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_fp32(0x07), 7 * 0x1p-9f);  // the largest subnormal
  EXPECT_EQ(fp8_e4m3_to_fp32(0x3c), 1.5f);
}

// Every finite code decodes, re-encodes to itself, and reads the same through the F16 shortcut
// the vector kernels take.
TEST(Fp8E4M3, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    if ((code & 0x7f) == 0x7f) continue;  // the two NaNs
    const float x = fp8_e4m3_to_fp32(code);
    const uint8_t back = fp32_to_fp8_e4m3(x);
    if (code == 0x80) {
      EXPECT_EQ(back & 0x7f, 0);  // -0 may come back as either zero
    } else {
      EXPECT_EQ(back, code) << "code " << c << " value " << x;
    }
    EXPECT_EQ(fp16_to_fp32(fp8_e4m3_as_scaled_fp16(code)) * kFp8AsFp16Scale, x) << "code " << c;
  }
}

// Between two neighbours the nearer wins, and a tie goes to the even code.
TEST(Fp8E4M3, RoundsToNearestEven) {
  for (int c = 0; c < 0x7e; ++c) {
    const auto lo = static_cast<uint8_t>(c), hi = static_cast<uint8_t>(c + 1);
    const float a = fp8_e4m3_to_fp32(lo), b = fp8_e4m3_to_fp32(hi);
    const float mid = (a + b) / 2;  // exact: both are short binary fractions
    EXPECT_EQ(fp32_to_fp8_e4m3(mid), (lo % 2 == 0) ? lo : hi) << "between codes " << c << ", " << c + 1;
    EXPECT_EQ(fp32_to_fp8_e4m3(std::nextafter(mid, a)), lo);
    EXPECT_EQ(fp32_to_fp8_e4m3(std::nextafter(mid, b)), hi);
    EXPECT_EQ(fp32_to_fp8_e4m3(-std::nextafter(mid, b)), hi | 0x80);
  }
}

TEST(Fp8E4M3, SaturatesAndNeverWritesNaN) {
  EXPECT_EQ(fp32_to_fp8_e4m3(449.0f), 0x7e);
  EXPECT_EQ(fp32_to_fp8_e4m3(1e30f), 0x7e);
  EXPECT_EQ(fp32_to_fp8_e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(fp32_to_fp8_e4m3(NAN), 0x00);
  EXPECT_EQ(fp32_to_fp8_e4m3(0x1p-11f), 0x00);  // below half the smallest subnormal
}

TEST(KvFormat, NamesAndBytes) {
  EXPECT_EQ(parse_kv_type("f16"), KvType::kF16);
  EXPECT_EQ(parse_kv_type("q8_0"), KvType::kQ8_0);
  EXPECT_EQ(parse_kv_type("fp8"), KvType::kFp8);
  EXPECT_THROW(parse_kv_type("q4_0"), Error);
  for (const KvTypeInfo& t : kv_types()) EXPECT_EQ(parse_kv_type(t.name), t.type);
  EXPECT_EQ(kv_head_bytes(KvType::kF32, 64), 256);
  EXPECT_EQ(kv_head_bytes(KvType::kF16, 64), 128);
  EXPECT_EQ(kv_head_bytes(KvType::kQ8_0, 64), 68);  // 64 codes + 2 F16 scales: 0.53x F16
  EXPECT_EQ(kv_head_bytes(KvType::kFp8, 128), 136);
  EXPECT_EQ(kv_head_bytes(KvType::kQ8_0, 33), 37);  // a last group of one
}

std::vector<float> random_vector(int64_t n, uint32_t seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  return x;
}

// A vector stored as a key (transposed into a slab) and as a value row reads back the same,
// within half a step of its group's scale (Q8_0) or 1/16 relative plus the scale's subnormal
// step (FP8); F32 exactly and F16 as fp16 rounds it.
TEST(KvFormat, KeyAndValueRoundTrip) {
  constexpr int32_t kBlockSize = 16, kOffset = 5;
  for (const KvTypeInfo& t : kv_types()) {
    for (int64_t dim : {7, 32, 33, 64, 128}) {
      SCOPED_TRACE(testing::Message() << t.name << " dim " << dim);
      std::vector<float> x = random_vector(dim, static_cast<uint32_t>(dim), 3.0f);
      x[0] = 40.0f;  // one outlier, in the first group
      const int64_t head_bytes = kv_head_bytes(t.type, dim);
      std::vector<uint8_t> slab(static_cast<size_t>(kBlockSize * head_bytes), 0xff);
      std::vector<uint8_t> row(static_cast<size_t>(head_bytes), 0xff);
      kv_store_key(x.data(), dim, t.type, slab.data(), kBlockSize, kOffset);
      kv_store_value(x.data(), dim, t.type, row.data());
      for (int64_t g0 = 0; g0 < dim; g0 += kKvGroup) {
        float amax = 0;
        for (int64_t d = g0; d < std::min(dim, g0 + kKvGroup); ++d) amax = std::max(amax, std::fabs(x[d]));
        for (int64_t d = g0; d < std::min(dim, g0 + kKvGroup); ++d) {
          const float key = kv_load_key(slab.data(), t.type, dim, kBlockSize, kOffset, d);
          EXPECT_EQ(key, kv_load_value(row.data(), t.type, dim, d)) << "d " << d;
          float bound = 0;
          if (t.type == KvType::kF16) bound = std::fabs(x[d]) * 0x1p-11f;
          if (t.type == KvType::kQ8_0) bound = amax / 127 * 0.5f * 1.01f;
          if (t.type == KvType::kFp8) bound = std::fabs(x[d]) / 16 * 1.01f + amax / 448 * 0x1p-9f;
          EXPECT_LE(std::fabs(key - x[d]), bound) << "d " << d << " x " << x[d];
        }
      }
      // Exactly the slot's bytes were written: stored again into a slab of zeros, only they
      // agree with the slab of ones.
      std::vector<uint8_t> zeros(slab.size(), 0);
      kv_store_key(x.data(), dim, t.type, zeros.data(), kBlockSize, kOffset);
      int64_t same = 0;
      for (size_t i = 0; i < slab.size(); ++i) same += slab[i] == zeros[i];
      EXPECT_EQ(same, head_bytes);
    }
  }
}

// A group of zeros stores a zero scale and zero codes, and reads back zeros.
TEST(KvFormat, ZerosStayZero) {
  for (KvType type : {KvType::kQ8_0, KvType::kFp8}) {
    std::vector<float> x(64, 0.0f);
    std::vector<uint8_t> row(static_cast<size_t>(kv_head_bytes(type, 64)), 0xff);
    kv_store_value(x.data(), 64, type, row.data());
    for (int64_t d = 0; d < 64; ++d) EXPECT_EQ(kv_load_value(row.data(), type, 64, d), 0.0f);
  }
}

}  // namespace
}  // namespace pagoda
