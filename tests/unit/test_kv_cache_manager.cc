// KvCacheManager: block tables, automatic prefix caching (verified hits), tail-first freeing,
// fork with copy-on-write of the tail. Integers only, no model.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/error.h"
#include "kv/kv_cache_manager.h"

namespace pagoda {
namespace {

constexpr int32_t kBs = 4;

KvCacheManager make_kv(int32_t num_blocks, BlockHashFn hash_fn = hash_block, bool caching = true) {
  KvCacheConfig config;
  config.num_blocks = num_blocks;
  config.block_size = kBs;
  config.hash_fn = hash_fn;
  config.enable_prefix_caching = caching;
  return KvCacheManager(config);
}

std::vector<TokenId> iota_tokens(int n, TokenId first = 100) {
  std::vector<TokenId> out(static_cast<size_t>(n));
  std::iota(out.begin(), out.end(), first);
  return out;
}

TokenSequence seq(const std::vector<TokenId>& tokens) { return {tokens, {}}; }

// Admits `id` with its cached prefix and computes all of `tokens` (as one step would).
// Returns the number of prefix tokens it got from the cache, or -1 when blocks ran out.
int32_t admit_and_compute(KvCacheManager& kv, SequenceId id, const std::vector<TokenId>& tokens,
                          uint64_t extra = 0) {
  const CachedPrefix prefix = kv.get_computed_blocks(seq(tokens), extra);
  const auto n = static_cast<int32_t>(tokens.size());
  if (!kv.allocate_slots(id, 0, n - prefix.num_tokens, &prefix)) return -1;
  kv.check_invariants();
  kv.cache_full_blocks(id, seq(tokens), n);
  kv.check_invariants();
  return prefix.num_tokens;
}

TEST(KvCacheManagerTest, TablesGrowAppendOnly) {
  KvCacheManager kv = make_kv(8);
  const std::vector<TokenId> tokens = iota_tokens(9);
  const CachedPrefix none = kv.get_computed_blocks(seq(tokens), 0);
  EXPECT_EQ(none.num_tokens, 0);
  auto fresh = kv.allocate_slots(1, 0, 5, &none);
  ASSERT_TRUE(fresh.has_value());
  kv.check_invariants();
  EXPECT_EQ(*fresh, (std::vector<BlockId>{0, 1}));
  EXPECT_EQ(kv.num_slots(1), 5);
  kv.cache_full_blocks(1, seq(tokens), 5);
  kv.check_invariants();
  EXPECT_EQ(kv.num_hashed_blocks(1), 1);
  fresh = kv.allocate_slots(1, 5, 3);  // 8 slots: still two blocks
  ASSERT_TRUE(fresh.has_value());
  EXPECT_TRUE(fresh->empty());
  fresh = kv.allocate_slots(1, 8, 1);
  kv.check_invariants();
  EXPECT_EQ(*fresh, (std::vector<BlockId>{2}));
  EXPECT_EQ(kv.block_table(1), (std::vector<BlockId>{0, 1, 2}));
  EXPECT_EQ(kv.stats().num_used_blocks, 3);
  kv.free(1);
  kv.check_invariants();
  EXPECT_FALSE(kv.has(1));
  EXPECT_EQ(kv.stats().num_free_blocks, 8);
  kv.free(1);  // unknown: nothing to do
  EXPECT_THROW(kv.block_table(1), Error);
}

TEST(KvCacheManagerTest, SecondRequestGetsTheSharedFullBlocks) {
  KvCacheManager kv = make_kv(16);
  const std::vector<TokenId> a = iota_tokens(14);  // blocks a0 a1 a2 full, a3 holds 2
  ASSERT_EQ(admit_and_compute(kv, 1, a), 0);
  // b shares the first 10 tokens: the first two blocks are equal, the third is not.
  std::vector<TokenId> b(a.begin(), a.begin() + 10);
  for (TokenId t = 0; t < 6; ++t) b.push_back(5000 + t);
  const CachedPrefix hit = kv.get_computed_blocks(seq(b), 0);
  EXPECT_EQ(hit.num_tokens, 8);
  EXPECT_EQ(hit.blocks, (std::vector<BlockId>{kv.block_table(1)[0], kv.block_table(1)[1]}));
  auto fresh = kv.allocate_slots(2, 0, 16 - 8, &hit);
  ASSERT_TRUE(fresh.has_value());
  kv.check_invariants();
  EXPECT_EQ(fresh->size(), 2u);  // only the blocks for the 8 new tokens
  EXPECT_EQ(kv.pool().ref_count(kv.block_table(1)[0]), 2);
  EXPECT_EQ(kv.pool().ref_count(kv.block_table(1)[2]), 1);
  const KvCacheStats stats = kv.stats();
  EXPECT_EQ(stats.num_queried_tokens, 14 + 16);
  EXPECT_EQ(stats.num_hit_tokens, 8);
  EXPECT_DOUBLE_EQ(stats.prefix_hit_rate(), 8.0 / 30.0);
  EXPECT_EQ(stats.num_used_blocks, 4 + 2);
  kv.cache_full_blocks(2, seq(b), 16);
  kv.check_invariants();
  kv.free(1);
  kv.check_invariants();
  EXPECT_EQ(kv.pool().ref_count(hit.blocks[0]), 1);
  EXPECT_EQ(kv.stats().num_cached_blocks, 1);  // a2 (full, hashed); a3 held a partial tail
  kv.free(2);
  kv.check_invariants();
  EXPECT_EQ(kv.stats().num_used_blocks, 0);
  EXPECT_EQ(kv.stats().num_cached_blocks, 5);
}

TEST(KvCacheManagerTest, WholePromptCachedStillComputesOneToken) {
  KvCacheManager kv = make_kv(16);
  const std::vector<TokenId> a = iota_tokens(12);  // exactly three full blocks
  ASSERT_EQ(admit_and_compute(kv, 1, a), 0);
  kv.free(1);
  kv.check_invariants();
  // The same prompt: the last block is given up so the last token is computed for logits.
  EXPECT_EQ(kv.get_computed_blocks(seq(a), 0).num_tokens, 8);
  EXPECT_EQ(admit_and_compute(kv, 2, a), 8);
  // One token more: all three blocks are a hit.
  std::vector<TokenId> longer = a;
  longer.push_back(7);
  EXPECT_EQ(kv.get_computed_blocks(seq(longer), 0).num_tokens, 12);
  // A one-token sequence never hits.
  EXPECT_EQ(kv.get_computed_blocks(seq(std::vector<TokenId>{100}), 0).num_tokens, 0);
}

TEST(KvCacheManagerTest, PromptAndOutputHashTheSameAsOneSequence) {
  KvCacheManager kv = make_kv(16);
  const std::vector<TokenId> all = iota_tokens(13);
  const std::vector<TokenId> prompt(all.begin(), all.begin() + 6),
      output(all.begin() + 6, all.end());
  const TokenSequence split{prompt, output};
  const CachedPrefix none = kv.get_computed_blocks(split, 0);
  ASSERT_TRUE(kv.allocate_slots(1, 0, 12, &none));
  kv.cache_full_blocks(1, split, 12);
  kv.check_invariants();
  EXPECT_EQ(kv.get_computed_blocks(seq(all), 0).num_tokens, 12);
}

TEST(KvCacheManagerTest, ExtraKeySeparatesCaches) {
  KvCacheManager kv = make_kv(16);
  const std::vector<TokenId> a = iota_tokens(9);
  ASSERT_EQ(admit_and_compute(kv, 1, a, /*extra=*/1), 0);
  EXPECT_EQ(kv.get_computed_blocks(seq(a), 2).num_tokens, 0);
  EXPECT_EQ(kv.get_computed_blocks(seq(a), 1).num_tokens, 8);
}

BlockHash constant_hash(BlockHash, uint64_t, std::span<const TokenId>) { return 42; }

TEST(KvCacheManagerTest, HashCollisionIsNeverServed) {
  KvCacheManager kv = make_kv(16, constant_hash);  // every block collides with every other
  const std::vector<TokenId> a = iota_tokens(13, 100);
  ASSERT_EQ(admit_and_compute(kv, 1, a), 0);
  // Other tokens, same hash: a miss.
  const std::vector<TokenId> b = iota_tokens(13, 900);
  EXPECT_EQ(kv.get_computed_blocks(seq(b), 0).num_tokens, 0);
  EXPECT_EQ(admit_and_compute(kv, 2, b), 0);
  // The same tokens: only a0 could take the one map entry; a1 and a2 collided with it.
  EXPECT_EQ(kv.get_computed_blocks(seq(a), 0).num_tokens, 4);
  kv.check_invariants();
}

// Ignores the parent and the first token of the block: blocks that differ only there collide.
BlockHash weak_hash(BlockHash, uint64_t extra, std::span<const TokenId> tokens) {
  return hash_block(kRootBlockHash, extra, tokens.subspan(1));
}

TEST(KvCacheManagerTest, CollidingPrefixesDoNotChainIntoWrongKv) {
  KvCacheManager kv = make_kv(16, weak_hash);
  const std::vector<TokenId> x = {1, 2, 3, 4}, x2 = {9, 2, 3, 4}, y = {5, 6, 7, 8};
  auto concat = [](std::vector<TokenId> p, const std::vector<TokenId>& q, TokenId last) {
    p.insert(p.end(), q.begin(), q.end());
    p.push_back(last);
    return p;
  };
  const std::vector<TokenId> a = concat(x, y, 0);  // X Y | 0
  ASSERT_EQ(admit_and_compute(kv, 1, a), 0);
  kv.free(1);
  // X' collides with X: a miss, and b0 takes the entry of the free a0.
  const std::vector<TokenId> b = concat(x2, {}, 0);
  EXPECT_EQ(admit_and_compute(kv, 2, b), 0);
  kv.check_invariants();
  // X' Y: block 0 is b0; block 1 has Y's hash and tokens, but was computed after X, not X'.
  // Verifying tokens alone would serve a1 here.
  const std::vector<TokenId> d = concat(x2, y, 0);
  EXPECT_EQ(kv.get_computed_blocks(seq(d), 0).num_tokens, 4);
  // X Y is not cached any more either: a0 lost its entry.
  EXPECT_EQ(kv.get_computed_blocks(seq(a), 0).num_tokens, 0);
}

TEST(KvCacheManagerTest, FreeingTailFirstEvictsTheTailFirst) {
  KvCacheManager kv = make_kv(4);
  const std::vector<TokenId> a = iota_tokens(14);  // a0 a1 a2 full, a3 partial
  ASSERT_EQ(admit_and_compute(kv, 1, a), 0);
  const std::vector<BlockId> table = kv.block_table(1);
  kv.free(1);
  kv.check_invariants();
  // The partial block holds nothing reusable: first out. Then a2, a1, a0.
  EXPECT_EQ(kv.pool().free_blocks_in_eviction_order(),
            (std::vector<BlockId>{table[3], table[2], table[1], table[0]}));
  EXPECT_EQ(kv.stats().num_cached_blocks, 3);
  // Another request takes two blocks: a3 and a2 go, the shared-most prefix a0 a1 stays.
  const std::vector<TokenId> other = iota_tokens(8, 7000);
  ASSERT_EQ(admit_and_compute(kv, 2, other), 0);
  EXPECT_EQ(kv.block_table(2), (std::vector<BlockId>{table[3], table[2]}));
  EXPECT_EQ(kv.get_computed_blocks(seq(a), 0).num_tokens, 8);
  EXPECT_EQ(kv.get_computed_blocks(seq(a), 0).blocks, (std::vector<BlockId>{table[0], table[1]}));
}

TEST(KvCacheManagerTest, FailedAllocationChangesNothing) {
  KvCacheManager kv = make_kv(4);
  const std::vector<TokenId> a = iota_tokens(8);
  ASSERT_EQ(admit_and_compute(kv, 1, a), 0);
  kv.free(1);  // a0 a1 cached, two empty blocks
  const std::vector<BlockId> order = kv.pool().free_blocks_in_eviction_order();
  const KvCacheStats before = kv.stats();
  // a's 8 tokens + 9 more: 2 hit blocks (revived from the free list) + 3 new > 4 free.
  std::vector<TokenId> b = a;
  for (TokenId t = 0; t < 9; ++t) b.push_back(3000 + t);
  const CachedPrefix hit = kv.get_computed_blocks(seq(b), 0);
  EXPECT_EQ(hit.num_tokens, 8);
  EXPECT_FALSE(kv.allocate_slots(2, 0, 9, &hit).has_value());
  kv.check_invariants();
  EXPECT_FALSE(kv.has(2));
  EXPECT_EQ(kv.pool().free_blocks_in_eviction_order(), order);
  EXPECT_EQ(kv.stats().num_hit_tokens, before.num_hit_tokens);
  EXPECT_EQ(kv.stats().num_queried_tokens, before.num_queried_tokens);
  // 8 more fit exactly: the two empty blocks are allocated, the hits are not evicted.
  ASSERT_TRUE(kv.allocate_slots(2, 0, 8, &hit).has_value());
  kv.check_invariants();
  EXPECT_EQ(kv.stats().num_free_blocks, 0);
  EXPECT_EQ(kv.block_table(2)[0], hit.blocks[0]);
  EXPECT_EQ(kv.block_table(2)[1], hit.blocks[1]);
  // Growing past the pool fails and leaves the table as it was.
  EXPECT_FALSE(kv.allocate_slots(2, 16, 1).has_value());
  EXPECT_EQ(kv.num_slots(2), 16);
  EXPECT_EQ(kv.block_table(2).size(), 4u);
  kv.check_invariants();
}

TEST(KvCacheManagerTest, ForkSharesFullBlocksAndCopiesTheTail) {
  KvCacheManager kv = make_kv(8);
  const std::vector<TokenId> a = iota_tokens(10);  // a0 a1 full, a2 holds 2 tokens
  ASSERT_EQ(admit_and_compute(kv, 1, a), 0);
  const std::vector<BlockId> parent = kv.block_table(1);
  auto copies = kv.fork(1, 2, 10);
  ASSERT_TRUE(copies.has_value());
  kv.check_invariants();
  const std::vector<BlockId>& child = kv.block_table(2);
  ASSERT_EQ(child.size(), 3u);
  EXPECT_EQ(child[0], parent[0]);
  EXPECT_EQ(child[1], parent[1]);
  EXPECT_NE(child[2], parent[2]);
  EXPECT_EQ(*copies, (std::vector<BlockCopy>{{parent[2], child[2]}}));
  EXPECT_EQ(kv.pool().ref_count(parent[0]), 2);
  EXPECT_EQ(kv.pool().ref_count(parent[2]), 1);
  EXPECT_EQ(kv.num_slots(2), 10);
  EXPECT_EQ(kv.num_hashed_blocks(2), 2);
  // On a block boundary there is no tail to copy.
  copies = kv.fork(1, 3, 8);
  ASSERT_TRUE(copies.has_value());
  EXPECT_TRUE(copies->empty());
  EXPECT_EQ(kv.block_table(3), (std::vector<BlockId>{parent[0], parent[1]}));
  EXPECT_EQ(kv.pool().ref_count(parent[0]), 3);
  kv.check_invariants();
  // Each continues on its own blocks.
  std::vector<TokenId> c = a;
  c.push_back(1);
  c.push_back(2);
  ASSERT_TRUE(kv.allocate_slots(2, 10, 2).has_value());
  kv.cache_full_blocks(2, seq(c), 12);
  kv.check_invariants();
  EXPECT_TRUE(kv.pool().is_hashed(kv.block_table(2)[2]));
  EXPECT_FALSE(kv.pool().is_hashed(parent[2]));
  EXPECT_THROW(kv.fork(1, 2, 10), Error);  // the child id is taken
  kv.free(1);
  kv.free(2);
  kv.free(3);
  kv.check_invariants();
  EXPECT_EQ(kv.stats().num_used_blocks, 0);
}

TEST(KvCacheManagerTest, ForkWithoutAFreeBlockChangesNothing) {
  KvCacheManager kv = make_kv(3);
  ASSERT_EQ(admit_and_compute(kv, 1, iota_tokens(10)), 0);  // takes all three blocks
  EXPECT_FALSE(kv.fork(1, 2, 10).has_value());
  kv.check_invariants();
  EXPECT_FALSE(kv.has(2));
  EXPECT_EQ(kv.pool().ref_count(kv.block_table(1)[0]), 1);
  EXPECT_TRUE(kv.fork(1, 2, 8).has_value());  // no tail: no block needed
  kv.check_invariants();
}

TEST(KvCacheManagerTest, ConcurrentDuplicatesShareThePrefixIdentity) {
  KvCacheManager kv = make_kv(16);
  const std::vector<TokenId> p = iota_tokens(12);
  // Both admitted before either computed: no hits, two copies of the same three blocks.
  const CachedPrefix none1 = kv.get_computed_blocks(seq(p), 0);
  const CachedPrefix none2 = kv.get_computed_blocks(seq(p), 0);
  ASSERT_TRUE(kv.allocate_slots(1, 0, 12, &none1));
  ASSERT_TRUE(kv.allocate_slots(2, 0, 12, &none2));
  kv.cache_full_blocks(1, seq(p), 12);
  kv.cache_full_blocks(2, seq(p), 12);
  kv.check_invariants();
  EXPECT_FALSE(kv.pool().is_hashed(kv.block_table(2)[0]));  // a duplicate: not cached twice
  // Sequence 2 goes on alone; its next block hangs under request 1's identical prefix.
  std::vector<TokenId> longer = p;
  for (TokenId t = 0; t < 5; ++t) longer.push_back(800 + t);
  ASSERT_TRUE(kv.allocate_slots(2, 12, 4));
  kv.cache_full_blocks(2, seq(longer), 16);
  kv.check_invariants();
  const CachedPrefix hit = kv.get_computed_blocks(seq(longer), 0);
  EXPECT_EQ(hit.num_tokens, 16);
  EXPECT_EQ(hit.blocks[0], kv.block_table(1)[0]);
  EXPECT_EQ(hit.blocks[3], kv.block_table(2)[3]);
}

TEST(KvCacheManagerTest, PrefixCachingOff) {
  KvCacheManager kv = make_kv(8, hash_block, /*caching=*/false);
  const std::vector<TokenId> a = iota_tokens(13);
  ASSERT_EQ(admit_and_compute(kv, 1, a), 0);
  EXPECT_EQ(kv.num_hashed_blocks(1), 0);
  EXPECT_EQ(kv.get_computed_blocks(seq(a), 0).num_tokens, 0);
  kv.free(1);
  kv.check_invariants();
  EXPECT_EQ(kv.stats().num_cached_blocks, 0);
}

}  // namespace
}  // namespace pagoda

namespace pagoda {
namespace {

// Speculative decoding allocates slots for proposals; the rejected ones are given back.
TEST(KvCacheManagerTest, TruncateGivesBackTheSlotsOfRejectedProposals) {
  KvCacheManager kv = make_kv(8);
  const std::vector<TokenId> tokens = iota_tokens(6);
  ASSERT_EQ(admit_and_compute(kv, 1, tokens), 0);  // 6 slots: blocks 0 (full, hashed) and 1
  const int32_t free_before = kv.pool().num_free();
  // A decode with 5 proposals: slots 6 .. 11, two more blocks.
  ASSERT_TRUE(kv.allocate_slots(1, 6, 6).has_value());
  EXPECT_EQ(kv.block_table(1).size(), 3u);
  EXPECT_EQ(kv.pool().num_free(), free_before - 1);
  // One proposal accepted: 6 + 1 + 1 computed; the block of slots 8 .. 11 goes back.
  const BlockId dropped = kv.block_table(1).back();
  kv.truncate(1, 8);
  kv.check_invariants();
  EXPECT_EQ(kv.num_slots(1), 8);
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  EXPECT_EQ(kv.pool().num_free(), free_before);
  EXPECT_EQ(kv.pool().ref_count(dropped), 0);
  EXPECT_FALSE(kv.pool().is_hashed(dropped));
  // Down to a block boundary keeps exactly the full blocks.
  kv.truncate(1, 4);
  kv.check_invariants();
  EXPECT_EQ(kv.block_table(1).size(), 1u);
  // Never below the hashed (computed, maybe shared) blocks, and never up.
  EXPECT_THROW(kv.truncate(1, 3), Error);
  EXPECT_THROW(kv.truncate(1, 5), Error);
  kv.free(1);
  kv.check_invariants();
  EXPECT_EQ(kv.pool().num_free(), 8);
}

}  // namespace
}  // namespace pagoda
