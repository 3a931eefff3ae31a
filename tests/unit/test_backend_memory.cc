// Backend's memory operations (host defaults, shared by the CPU and reference backends) and
// BackendArray.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/backend.h"

namespace pagoda {
namespace {

TEST(BackendMemory, AllocatesZeroedMemoryAndMovesItBothWays) {
  const auto be = make_cpu_backend(1);
  const auto buffer = be->allocate(1000, "test");
  ASSERT_GE(buffer->bytes(), 1000u);
  const auto* bytes = static_cast<const uint8_t*>(buffer->data());
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(bytes[i], 0) << i;
  const std::vector<float> in = {1.5f, -2.0f, 3.25f};
  be->upload(in.data(), sizeof(float) * 3, buffer->data());
  std::vector<float> out(3);
  be->download(buffer->data(), sizeof(float) * 3, out.data());
  EXPECT_EQ(out, in);
}

TEST(BackendMemory, GathersRowsApartAndInPlace) {
  const auto be = make_reference_backend();
  std::vector<float> x = {0, 0, 1, 1, 2, 2, 3, 3};  // 4 rows of width 2
  std::vector<float> out(4, -1);
  const std::vector<int32_t> rows = {3, 0};
  be->gather_rows(x.data(), rows, 2, out.data());
  EXPECT_EQ(out, (std::vector<float>{3, 3, 0, 0}));
  const std::vector<int32_t> ascending = {1, 3};
  be->gather_rows(x.data(), ascending, 2, x.data());
  EXPECT_EQ(x, (std::vector<float>{1, 1, 3, 3, 2, 2, 3, 3}));
}

TEST(BackendMemory, CopiesBlocksOfKAndVInOrder) {
  const auto be = make_reference_backend();
  std::vector<uint8_t> k = {0, 0, 1, 1, 2, 2}, v = {5, 5, 6, 6, 7, 7};  // 3 blocks of 2 bytes
  const std::vector<BlockCopy> copies = {{2, 0}, {0, 1}, {1, 1}};  // 1 receives 2's, via 0
  be->copy_blocks(KvLayer{k.data(), v.data(), KvType::kF32}, 2, copies);
  EXPECT_EQ(k, (std::vector<uint8_t>{2, 2, 2, 2, 2, 2}));
  EXPECT_EQ(v, (std::vector<uint8_t>{7, 7, 7, 7, 7, 7}));
}

TEST(BackendArray, GrowsKeepsItsMemoryAndFollowsTheBackend) {
  const auto cpu = make_cpu_backend(1);
  const auto ref = make_reference_backend();
  BackendArray a;
  a.reserve(*cpu, 10, "test");
  float* first = a.data();
  ASSERT_NE(first, nullptr);
  first[9] = 1.0f;
  a.reserve(*cpu, 5, "test");  // smaller: the same memory, contents kept
  EXPECT_EQ(a.data(), first);
  EXPECT_EQ(a.data()[9], 1.0f);
  a.reserve(*cpu, 1000, "test");  // larger: new memory, zeroed
  EXPECT_EQ(a.data()[9], 0.0f);
  a.data()[0] = 2.0f;
  a.reserve(*ref, 4, "test");  // another backend: its own memory, zeroed
  EXPECT_EQ(a.data()[0], 0.0f);
}

}  // namespace
}  // namespace pagoda
