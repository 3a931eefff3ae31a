// OutputRows: the last layer's narrowing to the rows whose logits are wanted.
#include <gtest/gtest.h>

#include <vector>

#include "model/model.h"

namespace pagoda {
namespace {

// Three sequences: a 4-token prompt chunk that wants its last row, a decode, and a chunk that
// wants none (a prompt not finished this step).
ForwardBatch three_sequences() {
  ForwardBatch b;
  b.token_ids = {1, 2, 3, 4, 5, 6, 7, 8};
  b.positions = {0, 1, 2, 3, 9, 16, 17, 18};
  b.slot_mapping = {100, 101, 102, 103, 209, 316, 317, 318};
  b.query_start = {0, 4, 5, 8};
  b.block_table = {0, 1, 2};
  b.max_blocks_per_seq = 1;
  b.logit_rows = {3, 4};
  return b;
}

TEST(OutputRows, NarrowsToTheLogitRowsInTheirSequences) {
  const ForwardBatch b = three_sequences();
  const OutputRows out(b);
  ASSERT_TRUE(out.narrows);
  EXPECT_EQ(out.count(), 2);
  EXPECT_EQ(out.front, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(out.positions, (std::vector<int32_t>{3, 9}));
  EXPECT_EQ(out.slot_mapping, (std::vector<int64_t>{103, 209}));
  EXPECT_EQ(out.query_start, (std::vector<int32_t>{0, 1, 2, 2}));  // the third wants none
  const AttentionBatch a = out.attention_batch();
  EXPECT_EQ(a.num_tokens, 2);
  EXPECT_EQ(a.num_seqs, 3);
  EXPECT_EQ(a.positions[1], 9);
  EXPECT_EQ(a.query_start[3], 2);
  EXPECT_EQ(a.block_table, b.block_table.data());

  std::vector<float> x = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7};  // 8 rows of width 2
  out.gather(2, x.data());
  EXPECT_EQ(std::vector<float>(x.begin(), x.begin() + 4), (std::vector<float>{3, 3, 4, 4}));
}

TEST(OutputRows, NoRowsWantedNarrowsToNone) {
  ForwardBatch b = three_sequences();
  b.logit_rows.clear();
  const OutputRows out(b);
  ASSERT_TRUE(out.narrows);
  EXPECT_EQ(out.count(), 0);
  EXPECT_EQ(out.query_start, (std::vector<int32_t>{0, 0, 0, 0}));
}

TEST(OutputRows, EveryRowOrUnorderedRowsKeepTheFullBatch) {
  ForwardBatch b = three_sequences();
  b.logit_rows = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_FALSE(OutputRows(b).narrows);
  b.logit_rows = {4, 3};
  EXPECT_FALSE(OutputRows(b).narrows);
  b.logit_rows = {3, 3};
  EXPECT_FALSE(OutputRows(b).narrows);
}

}  // namespace
}  // namespace pagoda
