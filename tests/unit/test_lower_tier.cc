// KvCacheManager over a lower tier (kv/lower_tier.h): blocks flow down as the pool caches them,
// a lookup that misses the pool continues below it and loads blocks into fresh pool blocks, a
// record that does not read stops the lookup, and the pool's hits are never evicted for it.
// The "K/V" of a block is one number, the digest of its prefix, so a block in the wrong place
// shows. Integers only, no model.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "kv/kv_cache_manager.h"

namespace pagoda {
namespace {

constexpr int32_t kBs = 4;

// A tier in memory; the pool's "K/V memory" is `content`, one number per block.
class FakeTier final : public LowerTier {
 public:
  explicit FakeTier(std::vector<uint64_t>& content) : content_(content) {}

  PrefixDigest chain(const PrefixDigest& parent, uint64_t extra,
                     std::span<const TokenId> tokens) const override {
    const uint64_t lo = hash_block(parent.lo ^ 0x5555, extra, tokens);
    return {lo, lo * 3 + parent.hi};
  }
  void store(BlockId block, BlockHash hash, const PrefixDigest& digest,
             std::span<const TokenId> tokens) override {
    ++num_stores;
    EXPECT_EQ(content_[static_cast<size_t>(block)], digest.lo) << "block " << block;
    records[{hash, digest.lo}] = {std::vector<TokenId>(tokens.begin(), tokens.end()),
                                  content_[static_cast<size_t>(block)]};
  }
  bool contains(BlockHash hash, const PrefixDigest& digest) const override {
    return records.count({hash, digest.lo}) > 0;
  }
  bool load(BlockId block, BlockHash hash, const PrefixDigest& digest,
            std::span<const TokenId> tokens) override {
    ++num_loads;
    auto it = records.find({hash, digest.lo});
    if (it == records.end() || unreadable.count(hash) ||
        !std::equal(tokens.begin(), tokens.end(), it->second.first.begin(),
                    it->second.first.end())) {
      return false;
    }
    content_[static_cast<size_t>(block)] = it->second.second;
    return true;
  }

  std::map<std::pair<BlockHash, uint64_t>, std::pair<std::vector<TokenId>, uint64_t>> records;
  std::set<BlockHash> unreadable;
  int num_stores = 0, num_loads = 0;

 private:
  std::vector<uint64_t>& content_;
};

class LowerTierTest : public ::testing::Test {
 protected:
  void make(int32_t num_blocks) {
    content_.assign(static_cast<size_t>(num_blocks), 0);
    KvCacheConfig config;
    config.num_blocks = num_blocks;
    config.block_size = kBs;
    kv_ = std::make_unique<KvCacheManager>(config);
    kv_->set_lower_tier(&tier_);
  }

  // The digest of every full block of `tokens`: what each block's "K/V" must be.
  std::vector<uint64_t> expected(const std::vector<TokenId>& tokens) const {
    std::vector<uint64_t> out;
    PrefixDigest d;
    for (size_t i = 0; i + kBs <= tokens.size(); i += kBs) {
      d = tier_.chain(d, 0, std::span<const TokenId>(tokens).subspan(i, kBs));
      out.push_back(d.lo);
    }
    return out;
  }

  // Reads what the tier holds after `p` (a load started, then landed) and looks the prefix up
  // again, as the scheduler does when the load has landed.
  void load_below(CachedPrefix& p, const TokenSequence& seq) {
    int32_t added = 0;
    if (kv_->start_lower_tier_load(p, seq)) {
      kv_->check_invariants();
      for (const auto& landed : kv_->finish_lower_tier_loads()) added += landed.num_tokens;
    }
    kv_->check_invariants();
    p = kv_->get_computed_blocks(seq, 0);
    p.num_lower_tier_tokens = std::min(added, p.num_tokens);
  }

  // Admits `id` (pool, then tier), "computes" the rest and caches it. Returns the prefix.
  CachedPrefix admit(SequenceId id, const std::vector<TokenId>& tokens) {
    const TokenSequence seq{tokens, {}};
    CachedPrefix prefix = kv_->get_computed_blocks(seq, 0);
    load_below(prefix, seq);
    const auto n = static_cast<int32_t>(tokens.size());
    EXPECT_TRUE(kv_->allocate_slots(id, 0, n - prefix.num_tokens, &prefix));
    kv_->check_invariants();
    const std::vector<uint64_t> want = expected(tokens);
    const std::vector<BlockId>& table = kv_->block_table(id);
    for (size_t i = 0; i < want.size(); ++i) {
      if (static_cast<int32_t>(i) < prefix.num_tokens / kBs) {
        EXPECT_EQ(content_[static_cast<size_t>(table[i])], want[i]) << "cached block " << i;
      } else {
        content_[static_cast<size_t>(table[i])] = want[i];  // the forward pass
      }
    }
    kv_->cache_full_blocks(id, seq, n);
    kv_->check_invariants();
    return prefix;
  }

  std::vector<uint64_t> content_;
  FakeTier tier_{content_};
  std::unique_ptr<KvCacheManager> kv_;
};

std::vector<TokenId> tokens_from(TokenId first, int n) {
  std::vector<TokenId> out(static_cast<size_t>(n));
  std::iota(out.begin(), out.end(), first);
  return out;
}

TEST_F(LowerTierTest, CachedBlocksFlowDownOnceEach) {
  make(16);
  const std::vector<TokenId> a = tokens_from(100, 14);  // 3 full blocks and a partial one
  admit(1, a);
  EXPECT_EQ(tier_.num_stores, 3);
  EXPECT_EQ(tier_.records.size(), 3u);
  // The same prefix again: pool hits, nothing new below.
  std::vector<TokenId> b = a;
  b.push_back(7);
  b.push_back(8);  // 16 tokens: its 4th block is new
  const CachedPrefix p = admit(2, b);
  EXPECT_EQ(p.num_tokens, 12);
  EXPECT_EQ(p.num_lower_tier_tokens, 0);
  EXPECT_EQ(tier_.num_stores, 4);
}

TEST_F(LowerTierTest, ALookupSpansThePoolAndTheTier) {
  make(6);
  const std::vector<TokenId> a = tokens_from(100, 17);  // 4 full blocks + 1 token: 5 blocks
  admit(1, a);
  kv_->free(1);  // tail first: its last blocks are evicted first
  admit(2, tokens_from(500, 16));  // 4 blocks: a's empty tail, a free one, a's blocks 3, 2
  kv_->free(2);
  const CachedPrefix p = admit(3, a);
  EXPECT_EQ(p.num_tokens, 16);             // (17 - 1) / 4 blocks, the last token computed
  EXPECT_EQ(p.num_lower_tier_tokens, 8);   // blocks 2 and 3 from the tier
  EXPECT_EQ(kv_->stats().num_lower_tier_hit_tokens, 8);
  EXPECT_EQ(tier_.num_loads, 2);
}

TEST_F(LowerTierTest, AFreshPoolLoadsEverythingFromTheTier) {
  make(8);
  const std::vector<TokenId> a = tokens_from(100, 13);
  admit(1, a);
  make(8);  // a restart: an empty pool over the same tier
  const CachedPrefix p = admit(1, a);
  EXPECT_EQ(p.num_tokens, 12);
  EXPECT_EQ(p.num_lower_tier_tokens, 12);
}

TEST_F(LowerTierTest, ARecordThatDoesNotReadStopsTheLookup) {
  make(8);
  const std::vector<TokenId> a = tokens_from(100, 17);
  admit(1, a);
  make(8);
  const std::vector<uint64_t> want = expected(a);
  // The third block's record is unreadable: two blocks load, the rest is computed.
  BlockHash hash3 = 0;
  for (const auto& [key, rec] : tier_.records) {
    if (rec.second == want[2]) hash3 = key.first;
  }
  ASSERT_NE(hash3, 0u);
  tier_.unreadable.insert(hash3);
  const int32_t num_free = kv_->pool().num_free();
  const CachedPrefix p = admit(1, a);
  EXPECT_EQ(p.num_lower_tier_tokens, 8);
  EXPECT_EQ(num_free - kv_->pool().num_free(), kv_->num_blocks_for(17));
}

TEST_F(LowerTierTest, TheTierNeverEvictsThePoolsHits) {
  make(5);
  const std::vector<TokenId> a = tokens_from(100, 17);
  admit(1, a);  // all 5 blocks
  kv_->free(1);
  // Another sequence takes 3 blocks (a's tail first): a's blocks 0 and 1 stay cached, and they
  // are the only free blocks.
  admit(2, tokens_from(500, 9));
  const TokenSequence seq{a, {}};
  CachedPrefix p = kv_->get_computed_blocks(seq, 0);
  ASSERT_EQ(p.num_tokens, 8);
  const std::vector<BlockId> hits = p.blocks;
  load_below(p, seq);
  EXPECT_EQ(p.num_lower_tier_tokens, 0);  // no block to load into but the hits themselves
  EXPECT_EQ(p.blocks, hits);
  for (BlockId b : hits) EXPECT_TRUE(kv_->pool().is_hashed(b));
  // With room, the rest comes from the tier, the hits kept.
  kv_->free(2);
  CachedPrefix q = kv_->get_computed_blocks(seq, 0);
  load_below(q, seq);
  EXPECT_EQ(q.num_tokens, 16);
  EXPECT_EQ(q.num_lower_tier_tokens, 8);
  EXPECT_EQ(std::vector<BlockId>(q.blocks.begin(), q.blocks.begin() + 2), hits);
  for (size_t i = 0; i < q.blocks.size(); ++i) {
    EXPECT_EQ(content_[static_cast<size_t>(q.blocks[i])], expected(a)[i]) << i;
  }
  EXPECT_TRUE(kv_->allocate_slots(3, 0, 1, &q));
  kv_->check_invariants();
}

}  // namespace
}  // namespace pagoda
