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

  // Rows 3 and 4 of x (width 2) and of q (width 3) gathered to the front, in place.
  ModelConfig c;
  c.hidden_size = 2;
  c.num_heads = 1;
  c.num_kv_heads = 1;
  c.head_dim = 3;
  c.intermediate_size = 1;
  const auto backend = make_reference_backend();
  Activations act;
  act.resize(*backend, b.num_tokens(), c);
  for (int i = 0; i < 8 * 2; ++i) act.x.data()[i] = static_cast<float>(i / 2);
  for (int i = 0; i < 8 * 3; ++i) act.q.data()[i] = static_cast<float>(10 + i / 3);
  ASSERT_TRUE(out.gather_front(*backend, act, 3, 2));
  EXPECT_EQ(std::vector<float>(act.x.data(), act.x.data() + 4), (std::vector<float>{3, 3, 4, 4}));
  EXPECT_EQ(std::vector<float>(act.q.data(), act.q.data() + 6),
            (std::vector<float>{13, 13, 13, 14, 14, 14}));
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
