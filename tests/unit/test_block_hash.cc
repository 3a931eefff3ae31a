// Block hashing for the prefix cache: deterministic, sensitive to every input, well mixed.
#include <gtest/gtest.h>

#include <bit>
#include <random>
#include <unordered_set>
#include <vector>

#include "kv/block_hash.h"

namespace pagoda {
namespace {

std::vector<TokenId> random_tokens(std::mt19937& rng, int n) {
  std::uniform_int_distribution<TokenId> dist(0, 150000);
  std::vector<TokenId> out(static_cast<size_t>(n));
  for (TokenId& t : out) t = dist(rng);
  return out;
}

TEST(BlockHashTest, DeterministicAndKnownAcrossRuns) {
  const std::vector<TokenId> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  EXPECT_EQ(hash_block(kRootBlockHash, 0, tokens), hash_block(kRootBlockHash, 0, tokens));
  // Nothing run-dependent (no random seed, no pointer): the value is a constant of the code.
  const BlockHash h = hash_block(kRootBlockHash, 0, tokens);
  EXPECT_NE(h, 0u);
  EXPECT_EQ(hash_block(h, 0, tokens), hash_block(h, 0, std::vector<TokenId>(tokens)));
}

TEST(BlockHashTest, EveryInputChangesTheHash) {
  std::mt19937 rng(7);
  const std::vector<TokenId> tokens = random_tokens(rng, 16);
  const BlockHash base = hash_block(123, 5, tokens);
  EXPECT_NE(hash_block(124, 5, tokens), base) << "parent hash ignored";
  EXPECT_NE(hash_block(123, 6, tokens), base) << "extra key ignored";
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::vector<TokenId> changed = tokens;
    changed[i] ^= 1;
    EXPECT_NE(hash_block(123, 5, changed), base) << "token " << i << " ignored";
  }
  std::vector<TokenId> swapped = tokens;
  std::swap(swapped[0], swapped[1]);
  EXPECT_NE(hash_block(123, 5, swapped), base) << "order ignored";
  std::vector<TokenId> shorter(tokens.begin(), tokens.end() - 1);
  EXPECT_NE(hash_block(123, 5, shorter), base) << "length ignored";
  // Token values that only differ in sign bits or across the 32-bit lane boundary.
  EXPECT_NE(hash_block(0, 0, std::vector<TokenId>{-1, 0}),
            hash_block(0, 0, std::vector<TokenId>{0, -1}));
  EXPECT_NE(hash_block(0, 0, std::vector<TokenId>{0}),
            hash_block(0, 0, std::vector<TokenId>{0, 0}));
}

TEST(BlockHashTest, NoCollisionsAmongManyBlocks) {
  std::mt19937 rng(11);
  std::unordered_set<BlockHash> seen;
  constexpr int kNum = 100000;
  // Chained like a real cache: many blocks share parents and differ in one token.
  BlockHash parent = kRootBlockHash;
  for (int i = 0; i < kNum; ++i) {
    std::vector<TokenId> tokens = random_tokens(rng, 16);
    if (i % 2) tokens[static_cast<size_t>(i % 16)] = i;
    const BlockHash h = hash_block(parent, 0, tokens);
    EXPECT_TRUE(seen.insert(h).second) << "collision at block " << i;
    if (i % 8 == 0) parent = h;
  }
}

TEST(BlockHashTest, OneBitFlipChangesAboutHalfTheOutputBits) {
  std::mt19937 rng(3);
  int64_t num_flipped = 0;
  int num_trials = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<TokenId> tokens = random_tokens(rng, 16);
    const BlockHash a = hash_block(99, 0, tokens);
    tokens[static_cast<size_t>(trial % 16)] ^= TokenId(1) << (trial % 31);
    num_flipped += std::popcount(a ^ hash_block(99, 0, tokens));
    ++num_trials;
  }
  const double mean = double(num_flipped) / num_trials;
  EXPECT_GT(mean, 30.0);
  EXPECT_LT(mean, 34.0);
}

TEST(BlockHashTest, TokenSequenceReadsPromptThenOutput) {
  const std::vector<TokenId> prompt = {10, 11, 12};
  const std::vector<TokenId> output = {20, 21};
  const TokenSequence seq{prompt, output};
  ASSERT_EQ(seq.size(), 5);
  EXPECT_EQ(seq[0], 10);
  EXPECT_EQ(seq[2], 12);
  EXPECT_EQ(seq[3], 20);
  EXPECT_EQ(seq[4], 21);
  TokenId buf[3] = {};
  seq.copy(2, 3, buf);
  EXPECT_EQ(buf[0], 12);
  EXPECT_EQ(buf[1], 20);
  EXPECT_EQ(buf[2], 21);
}

}  // namespace
}  // namespace pagoda
