// Paged against contiguous KV fit: hand-worked counts for one budget, and bad sizes rejected.
#include <gtest/gtest.h>

#include "bench/kv_fit.h"
#include "core/error.h"

namespace pagoda::bench {
namespace {

TEST(BenchKvFit, CountsSequencesForOneBudget) {
  // 1024 blocks of 16 = 16384 token slots; contiguous reserves 2048 per sequence: 8 fit.
  const KvFit f = kv_fit(1024, 16, 100, 2048, 100);
  EXPECT_EQ(f.seq_len, 100);
  EXPECT_EQ(f.contiguous, 8);
  EXPECT_EQ(f.paged, 146);  // 100 tokens take 7 blocks: floor(1024 / 7)
  EXPECT_NEAR(f.gain(), 18.25, 1e-12);
  EXPECT_EQ(kv_fit(1024, 16, 100, 2048, 2048).paged, 8);
  EXPECT_EQ(kv_fit(1024, 16, 100, 2048, 16).paged, 1024);
  EXPECT_EQ(kv_fit(1024, 16, 100, 2048, 17).paged, 512);
}

TEST(BenchKvFit, NothingFitsContiguouslyWhenOneSequenceIsTooLong) {
  const KvFit f = kv_fit(4, 16, 64, 128, 16);  // 64 slots, but each sequence wants 128
  EXPECT_EQ(f.contiguous, 0);
  EXPECT_EQ(f.paged, 4);
  EXPECT_EQ(f.gain(), 0.0);
}

TEST(BenchKvFit, RejectsBadSizes) {
  EXPECT_THROW(kv_fit(0, 16, 64, 128, 16), Error);
  EXPECT_THROW(kv_fit(4, 16, 0, 128, 16), Error);
  EXPECT_THROW(kv_fit(4, 16, 64, 128, 129), Error);
  EXPECT_THROW(kv_fit(4, 16, 64, 128, 0), Error);
  EXPECT_THROW(kv_fit(4, 16, 64, 0, 1), Error);
}

TEST(BenchKvFit, LengthsAreSortedUniqueAndWithinTheMax) {
  EXPECT_EQ(kv_fit_lengths(2048), (std::vector<int64_t>{16, 64, 100, 512, 1024, 2048}));
  EXPECT_EQ(kv_fit_lengths(2048, 300), (std::vector<int64_t>{16, 64, 100, 300, 512, 1024, 2048}));
  EXPECT_EQ(kv_fit_lengths(64, 64), (std::vector<int64_t>{16, 32, 64}));
  EXPECT_EQ(kv_fit_lengths(8), (std::vector<int64_t>{2, 4, 8}));
}

}  // namespace
}  // namespace pagoda::bench
