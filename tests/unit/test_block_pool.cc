// BlockPool: reference counts, the LRU free list, the verified prefix-cache map.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "core/error.h"
#include "kv/block_pool.h"

namespace pagoda {
namespace {

constexpr int32_t kBs = 4;

std::vector<TokenId> block_tokens(TokenId first) {
  return {first, first + 1, first + 2, first + 3};
}

BlockKey key_for(const std::vector<TokenId>& tokens, BlockHash parent_hash = kRootBlockHash,
                 PrefixId parent_prefix = kRootPrefixId, uint64_t extra = 0) {
  BlockKey key;
  key.parent_hash = parent_hash;
  key.parent_prefix_id = parent_prefix;
  key.extra = extra;
  key.hash = hash_block(parent_hash, extra, tokens);
  return key;
}

BlockHash constant_hash(BlockHash, uint64_t, std::span<const TokenId>) { return 42; }

TEST(BlockPoolTest, NumBlocksForBudget) {
  // 1 MiB, 256 bytes per token (K and V of all layers), 16-token blocks of 4 KiB: 256 blocks.
  EXPECT_EQ(BlockPool::num_blocks_for_budget(1 << 20, 256, 16), 256);
  EXPECT_EQ(BlockPool::num_blocks_for_budget((1 << 20) - 1, 256, 16), 255);  // rounds down
  EXPECT_EQ(BlockPool::num_blocks_for_budget(4096, 256, 16), 1);
  EXPECT_EQ(BlockPool::num_blocks_for_budget(1 << 20, 256, 1), 4096);
  EXPECT_THROW(BlockPool::num_blocks_for_budget(4095, 256, 16), Error);  // not one block
  EXPECT_THROW(BlockPool::num_blocks_for_budget(1 << 20, 0, 16), Error);
  EXPECT_THROW(BlockPool::num_blocks_for_budget(1 << 20, 256, 0), Error);
  const uint64_t huge = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(BlockPool::num_blocks_for_budget(huge, 1, 1), std::numeric_limits<int32_t>::max());
  EXPECT_THROW(BlockPool::num_blocks_for_budget(huge, huge / 2, 16), Error);  // overflow
}

TEST(BlockPoolTest, FreshPoolAllocatesInOrder) {
  BlockPool pool(5, kBs);
  pool.check_invariants();
  EXPECT_EQ(pool.num_free(), 5);
  EXPECT_EQ(pool.num_used(), 0);
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_EQ(pool.free_blocks_in_eviction_order(), (std::vector<BlockId>{0, 1, 2, 3, 4}));
  EXPECT_EQ(pool.allocate(3), (std::vector<BlockId>{0, 1, 2}));
  pool.check_invariants();
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.num_used(), 3);
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_EQ(pool.ref_count(3), 0);
  EXPECT_TRUE(pool.allocate(0).empty());
  EXPECT_THROW(pool.allocate(3), Error);  // more than free: a caller bug
  pool.check_invariants();
  EXPECT_THROW(BlockPool(0, kBs), Error);
  EXPECT_THROW(BlockPool(4, 0), Error);
}

TEST(BlockPoolTest, RefCountsAndRelease) {
  BlockPool pool(4, kBs);
  const std::vector<BlockId> blocks = pool.allocate(2);
  const std::vector<TokenId> tokens = block_tokens(100);
  pool.cache(blocks[0], key_for(tokens), tokens);  // only a hashed block may be shared
  pool.acquire(blocks[0]);
  pool.check_invariants();
  EXPECT_EQ(pool.ref_count(blocks[0]), 2);
  pool.release(blocks[0]);
  pool.check_invariants();
  EXPECT_EQ(pool.ref_count(blocks[0]), 1);
  EXPECT_EQ(pool.num_free(), 2);
  pool.release(blocks[0]);
  pool.release(blocks[1]);
  pool.check_invariants();
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_THROW(pool.release(blocks[1]), Error);  // ref count would go negative
  EXPECT_THROW(pool.acquire(3), Error);          // a free block without content is not a cache hit
  EXPECT_THROW(pool.ref_count(4), Error);
  pool.check_invariants();
}

TEST(BlockPoolTest, EmptyBlocksAreReusedBeforeCachedOnes) {
  BlockPool pool(4, kBs);
  const std::vector<BlockId> b = pool.allocate(4);
  const std::vector<TokenId> t0 = block_tokens(0), t1 = block_tokens(10);
  pool.cache(b[0], key_for(t0), t0);
  pool.cache(b[1], key_for(t1), t1);
  // Release in the order 0, 2, 1, 3: cached blocks join the tail, empty ones the head.
  pool.release(b[0]);
  pool.check_invariants();
  pool.release(b[2]);
  pool.check_invariants();
  pool.release(b[1]);
  pool.check_invariants();
  pool.release(b[3]);
  pool.check_invariants();
  EXPECT_EQ(pool.free_blocks_in_eviction_order(), (std::vector<BlockId>{3, 2, 0, 1}));
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_EQ(pool.allocate(2), (std::vector<BlockId>{3, 2}));  // nothing evicted yet
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_TRUE(pool.find(key_for(t0), t0).has_value());
  // Next comes the least recently freed cached block: evicting it drops its hash.
  EXPECT_EQ(pool.allocate(1), (std::vector<BlockId>{0}));
  pool.check_invariants();
  EXPECT_FALSE(pool.is_hashed(0));
  EXPECT_FALSE(pool.find(key_for(t0), t0).has_value());
  EXPECT_TRUE(pool.find(key_for(t1), t1).has_value());
  EXPECT_EQ(pool.num_cached(), 1);
}

TEST(BlockPoolTest, CacheHitLeavesTheMiddleOfTheFreeList) {
  BlockPool pool(5, kBs);
  const std::vector<BlockId> b = pool.allocate(5);
  std::vector<std::vector<TokenId>> tokens;
  for (int i = 0; i < 5; ++i) {
    tokens.push_back(block_tokens(TokenId(10 * i)));
    pool.cache(b[static_cast<size_t>(i)], key_for(tokens.back()), tokens.back());
  }
  for (BlockId id : b) pool.release(id);
  pool.check_invariants();
  EXPECT_EQ(pool.num_cached(), 5);
  const auto hit = pool.find(key_for(tokens[2]), tokens[2]);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->block, 2);
  pool.acquire(hit->block);
  pool.check_invariants();
  EXPECT_EQ(pool.free_blocks_in_eviction_order(), (std::vector<BlockId>{0, 1, 3, 4}));
  EXPECT_EQ(pool.num_cached(), 4);
  EXPECT_EQ(pool.num_used(), 1);
  // Released again, it is now the most recently used.
  pool.release(hit->block);
  pool.check_invariants();
  EXPECT_EQ(pool.free_blocks_in_eviction_order(), (std::vector<BlockId>{0, 1, 3, 4, 2}));
  // Head and tail removal keep the links right too.
  pool.acquire(0);
  pool.acquire(2);
  pool.check_invariants();
  EXPECT_EQ(pool.free_blocks_in_eviction_order(), (std::vector<BlockId>{1, 3, 4}));
}

TEST(BlockPoolTest, FindVerifiesTokensExtraAndPrefix) {
  BlockPool pool(4, kBs);
  const BlockId b = pool.allocate(1)[0];
  const std::vector<TokenId> tokens = block_tokens(7);
  const BlockKey key = key_for(tokens, 555, 3, 9);
  // A parent prefix id must exist before; fake one by caching a parent first.
  const BlockId parent = pool.allocate(1)[0];
  const std::vector<TokenId> parent_tokens = block_tokens(1);
  const PrefixId parent_id = pool.cache(parent, key_for(parent_tokens), parent_tokens);
  BlockKey child_key = key_for(tokens, key_for(parent_tokens).hash, parent_id, 9);
  const PrefixId id = pool.cache(b, child_key, tokens);
  pool.check_invariants();
  EXPECT_GT(id, parent_id);
  ASSERT_TRUE(pool.find(child_key, tokens).has_value());
  EXPECT_EQ(pool.find(child_key, tokens)->prefix_id, id);

  std::vector<TokenId> other = tokens;
  other[3] = 99;
  EXPECT_FALSE(pool.find(child_key, other).has_value()) << "same hash, other tokens";
  BlockKey wrong_prefix = child_key;
  wrong_prefix.parent_prefix_id = parent_id + 100;
  EXPECT_FALSE(pool.find(wrong_prefix, tokens).has_value()) << "same hash, other prefix";
  BlockKey wrong_extra = child_key;
  wrong_extra.extra = 10;
  EXPECT_FALSE(pool.find(wrong_extra, tokens).has_value()) << "same hash, other extra key";
  EXPECT_FALSE(pool.find(key, tokens).has_value()) << "other hash";
}

TEST(BlockPoolTest, DuplicateContentSharesThePrefixIdAndStaysUnhashed) {
  BlockPool pool(4, kBs);
  const std::vector<BlockId> b = pool.allocate(2);
  const std::vector<TokenId> tokens = block_tokens(3);
  const PrefixId first = pool.cache(b[0], key_for(tokens), tokens);
  const PrefixId second = pool.cache(b[1], key_for(tokens), tokens);
  pool.check_invariants();
  EXPECT_EQ(first, second);
  EXPECT_TRUE(pool.is_hashed(b[0]));
  EXPECT_FALSE(pool.is_hashed(b[1]));
  EXPECT_THROW(pool.cache(b[0], key_for(tokens), tokens), Error);  // cached twice: a bug
}

TEST(BlockPoolTest, CollisionNeverServesTheOtherContent) {
  BlockPool pool(4, kBs, constant_hash);
  const std::vector<BlockId> b = pool.allocate(3);
  const std::vector<TokenId> a = block_tokens(1), c = block_tokens(50);
  BlockKey key_a, key_c;
  key_a.hash = key_c.hash = 42;
  const PrefixId id_a = pool.cache(b[0], key_a, a);
  // Same hash, other tokens, while the first holder is in use: the newcomer stays unhashed.
  const PrefixId id_c = pool.cache(b[1], key_c, c);
  pool.check_invariants();
  EXPECT_NE(id_a, id_c);
  EXPECT_TRUE(pool.is_hashed(b[0]));
  EXPECT_FALSE(pool.is_hashed(b[1]));
  EXPECT_FALSE(pool.find(key_c, c).has_value());
  ASSERT_TRUE(pool.find(key_a, a).has_value());
  // Once the first is free, the newest content takes the entry; the old block becomes empty and
  // is reused first.
  pool.release(b[0]);
  pool.check_invariants();
  const PrefixId id_c2 = pool.cache(b[2], key_c, c);
  pool.check_invariants();
  EXPECT_NE(id_c2, id_c);
  EXPECT_TRUE(pool.is_hashed(b[2]));
  EXPECT_FALSE(pool.is_hashed(b[0]));
  EXPECT_FALSE(pool.find(key_a, a).has_value());
  EXPECT_EQ(pool.find(key_c, c)->block, b[2]);
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_EQ(pool.free_blocks_in_eviction_order().front(), b[0]);
}

}  // namespace
}  // namespace pagoda
