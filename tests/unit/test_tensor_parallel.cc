// How a model is cut over tensor-parallel ranks: even splits, whole KV-head groups, feed-forward
// columns on whole blocks, and the refusals.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/tensor_parallel.h"

namespace pagoda {
namespace {

TEST(SplitUnits, CoversEveryUnitOnceTheFirstRanksTakingTheRest) {
  for (int size = 1; size <= 5; ++size) {
    for (int64_t units = size; units < 40; ++units) {
      int64_t next = 0;
      for (int r = 0; r < size; ++r) {
        const UnitRange u = split_units(units, r, size);
        EXPECT_EQ(u.first, next);
        EXPECT_TRUE(u.count == units / size || u.count == units / size + 1);
        next += u.count;
      }
      EXPECT_EQ(next, units);
    }
  }
  EXPECT_EQ(split_units(19, 0, 2).count, 10);
  EXPECT_EQ(split_units(19, 1, 2).count, 9);
}

ModelConfig qwen_like() {
  ModelConfig c;
  c.num_heads = 14;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.hidden_size = 896;
  c.intermediate_size = 4864;
  c.vocab_size = 151936;
  return c;
}

TEST(TensorSlices, WholeKvHeadGroupsAndBlocksOfTheDownProjection) {
  const ModelConfig c = qwen_like();
  const TensorSlices a = tensor_slices(c, 256, "m", 0, 2), b = tensor_slices(c, 256, "m", 1, 2);
  EXPECT_EQ(a.kv_heads.first, 0);
  EXPECT_EQ(a.kv_heads.count, 1);
  EXPECT_EQ(b.kv_heads.first, 1);
  EXPECT_EQ(a.heads.count, 7);  // the 7 query heads that share KV head 0
  EXPECT_EQ(b.heads.first, 7);
  EXPECT_EQ(a.ffn.count, 10 * 256);  // 19 blocks of 256: 10 and 9
  EXPECT_EQ(b.ffn.first, 10 * 256);
  EXPECT_EQ(b.ffn.count, 9 * 256);
  EXPECT_EQ(a.vocab.count + b.vocab.count, 151936);
  EXPECT_EQ(b.vocab.first, a.vocab.count);
}

TEST(TensorSlices, RanksThatDoNotDivideTheKvHeadsAreRefusedByName) {
  ModelConfig c = qwen_like();
  c.num_heads = 9;
  c.num_kv_heads = 3;
  try {
    tensor_slices(c, 32, "smollm.gguf", 0, 2);
    FAIL() << "2 ranks over 3 KV heads were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 ranks do not divide the model's 3 KV heads"),
              std::string::npos)
        << e.what();
  }
  c.intermediate_size = 256;  // one block of 256 cannot go to two ranks
  c.num_kv_heads = 2;
  c.num_heads = 2;
  EXPECT_THROW(tensor_slices(c, 256, "m", 0, 2), Error);
}

}  // namespace
}  // namespace pagoda
