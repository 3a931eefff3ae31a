#include <gtest/gtest.h>

#include "core/dtype.h"

namespace pagoda {
namespace {

TEST(DType, KnownSizes) {
  EXPECT_EQ(dtype_traits(DType::kQ4_K).type_size, 144u);
  EXPECT_EQ(dtype_traits(DType::kQ4_K).block_size, 256u);
  EXPECT_EQ(dtype_traits(DType::kQ8_0).type_size, 34u);
  EXPECT_EQ(dtype_traits(DType::kF16).type_size, 2u);
  EXPECT_FALSE(dtype_traits(4u).has_value());  // 4 and 5 were removed Q4_2 / Q4_3
  EXPECT_EQ(dtype_from_name("q6_k"), DType::kQ6_K);
  EXPECT_FALSE(dtype_from_name("q7_k").has_value());
}

}  // namespace
}  // namespace pagoda
