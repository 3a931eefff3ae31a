// The weight-type table (quant/weight_types.h) is the one place a type is described: its rows
// must be consistent with each other and with what the lookups built on them answer.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "quant/reference.h"
#include "quant/weight_types.h"

namespace pagoda {
namespace {

TEST(WeightTypes, RowsAreUniqueAndIndexed) {
  std::set<uint32_t> numbers;
  std::set<std::string> names;
  int i = 0;
  for (const WeightType& t : weight_types()) {
    EXPECT_TRUE(numbers.insert(static_cast<uint32_t>(t.traits.type)).second) << t.traits.name;
    EXPECT_TRUE(names.insert(std::string(t.traits.name)).second) << t.traits.name;
    EXPECT_EQ(weight_type_index(t.traits.type), i) << t.traits.name;
    EXPECT_EQ(&dtype_traits(t.traits.type), &t.traits);
    EXPECT_EQ(dtype_from_name(t.traits.name), t.traits.type);
    EXPECT_GT(t.traits.block_size, 0u);
    EXPECT_GT(t.traits.type_size, 0u);
    // An encoder comes with its decoder (the 2- and 3-bit i-quants are decoded only); a search
    // only with an encoder; a fallback has smaller blocks.
    if (t.quantize != nullptr) {
      EXPECT_NE(t.dequantize, nullptr) << t.traits.name;
    }
    if (t.quantize_weighted != nullptr) {
      EXPECT_NE(t.quantize, nullptr) << t.traits.name;
    }
    if (t.fallback) {
      EXPECT_LT(dtype_traits(*t.fallback).block_size, t.traits.block_size) << t.traits.name;
      EXPECT_TRUE(can_quantize(*t.fallback)) << t.traits.name;
    }
    ++i;
  }
  EXPECT_EQ(i, kNumWeightTypes);
  EXPECT_EQ(weight_type_index(static_cast<DType>(4)), -1);
}

// Every type with a codec round-trips two blocks of a ramp within a loose bound (the codecs'
// exact bytes are held by test_quant_vs_gguf.py and the kernel tests).
TEST(WeightTypes, EveryCodecRoundTrips) {
  for (const WeightType& t : weight_types()) {
    if (t.quantize == nullptr) continue;
    const int64_t n = 2 * std::max<int64_t>(t.traits.block_size, 256);
    std::vector<float> x(static_cast<size_t>(n)), y(x.size());
    for (int64_t i = 0; i < n; ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 0.5f;
    std::vector<uint8_t> bytes(row_bytes(t.traits.type, n));
    quantize_row(t.traits.type, x.data(), bytes.data(), n);
    dequantize_row(t.traits.type, bytes.data(), y.data(), n);
    double err = 0.0, norm = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      err += (x[i] - y[i]) * (x[i] - y[i]);
      norm += x[i] * x[i];
    }
    EXPECT_LT(std::sqrt(err / norm), 0.3) << t.traits.name;
  }
}

}  // namespace
}  // namespace pagoda
