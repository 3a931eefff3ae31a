#include "core/large_buffer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

namespace pagoda {
namespace {

bool all_zero(const LargeBuffer& b) {
  return std::all_of(b.data(), b.data() + b.size(), [](uint8_t v) { return v == 0; });
}

TEST(LargeBuffer, EmptyByDefaultAndForZeroBytes) {
  EXPECT_EQ(LargeBuffer().size(), 0u);
  EXPECT_EQ(LargeBuffer(0, "test").size(), 0u);
}

TEST(LargeBuffer, SmallBuffersAreZeroedWholeSmallPages) {
  const LargeBuffer b(1000, "test");
  EXPECT_EQ(b.size(), 4096u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 4096, 0u);
  EXPECT_TRUE(all_zero(b));
}

TEST(LargeBuffer, LargeBuffersStartOnAHugePageAndWasteLessThanASmallPage) {
  const size_t bytes = (size_t{5} << 20) + 123;
  LargeBuffer b(bytes, "test");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (size_t{2} << 20), 0u);
  EXPECT_GE(b.size(), bytes);
  EXPECT_LT(b.size(), bytes + 4096);
  EXPECT_TRUE(all_zero(b));
  b.data()[bytes - 1] = 7;  // every byte asked for is writable
  LargeBuffer moved = std::move(b);
  EXPECT_EQ(moved.data()[bytes - 1], 7);
}

}  // namespace
}  // namespace pagoda
