// The host-memory tier (kv/host_tier.h) under KvCacheManager: blocks the pool evicts are kept
// in host memory, bounded in bytes with the least recently used dropped first (down to the tier
// below when it lacks them), and a lookup that misses the pool loads them back. The "K/V" of a
// block is one number, the digest of its prefix, so a block in the wrong place shows. Integers
// only, no model.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "kv/host_tier.h"
#include "kv/kv_cache_manager.h"

namespace pagoda {
namespace {

constexpr int32_t kBs = 4;
constexpr uint64_t kEntryBytes = sizeof(uint64_t) + kBs * sizeof(TokenId);  // payload + tokens

// The pool's "K/V memory": one number per block, as 8 bytes.
PoolBlockBytes pool_bytes(std::vector<uint64_t>& content, bool any_thread) {
  PoolBlockBytes p;
  p.block_bytes = sizeof(uint64_t);
  p.read = [&content](BlockId b, uint8_t* out) {
    std::memcpy(out, &content[static_cast<size_t>(b)], sizeof(uint64_t));
  };
  p.write = [&content](BlockId b, const uint8_t* in) {
    std::memcpy(&content[static_cast<size_t>(b)], in, sizeof(uint64_t));
  };
  p.any_thread = any_thread;
  return p;
}

// A disk tier stand-in: stores every block as it is cached (unless `refuse_stores`), keeps what
// the host tier hands down.
class BelowTier final : public LowerTier {
 public:
  explicit BelowTier(std::vector<uint64_t>& content) : content_(content) {}
  PrefixDigest chain(const PrefixDigest& parent, uint64_t extra,
                     std::span<const TokenId> tokens) const override {
    const uint64_t lo = hash_block(parent.lo ^ 0x1234, extra, tokens);
    return {lo, lo * 5 + parent.hi};
  }
  void store(BlockId block, BlockHash hash, const PrefixDigest& digest,
             std::span<const TokenId>) override {
    if (!refuse_stores) records[{hash, digest.lo}] = content_[static_cast<size_t>(block)];
  }
  bool contains(BlockHash hash, const PrefixDigest& digest) const override {
    return records.count({hash, digest.lo}) > 0;
  }
  bool load(BlockId block, BlockHash hash, const PrefixDigest& digest,
            std::span<const TokenId>) override {
    auto it = records.find({hash, digest.lo});
    if (it == records.end()) return false;
    content_[static_cast<size_t>(block)] = it->second;
    ++num_loads;
    return true;
  }
  bool keep(BlockHash hash, const PrefixDigest& digest, std::span<const TokenId>,
            std::vector<uint8_t> payload) override {
    uint64_t v = 0;
    std::memcpy(&v, payload.data(), sizeof v);
    records[{hash, digest.lo}] = v;
    ++num_kept;
    return true;
  }

  std::map<std::pair<BlockHash, uint64_t>, uint64_t> records;
  bool refuse_stores = false;
  int num_loads = 0, num_kept = 0;

 private:
  std::vector<uint64_t>& content_;
};

std::vector<TokenId> tokens_from(TokenId first, int n) {
  std::vector<TokenId> out(static_cast<size_t>(n));
  std::iota(out.begin(), out.end(), first);
  return out;
}

class HostTierTest : public ::testing::Test {
 protected:
  // A pool of `num_blocks` over a host tier of `host_blocks` blocks (and `below`, if given).
  void make(int32_t num_blocks, uint64_t host_blocks, LowerTier* below = nullptr,
            bool any_thread = false) {
    kv_.reset();
    host_.reset();
    content_.assign(static_cast<size_t>(num_blocks), 0);
    host_ = std::make_unique<HostTier>(pool_bytes(content_, any_thread),
                                       host_blocks * kEntryBytes, below);
    KvCacheConfig config;
    config.num_blocks = num_blocks;
    config.block_size = kBs;
    kv_ = std::make_unique<KvCacheManager>(config);
    kv_->set_lower_tier(host_.get());
  }

  std::vector<uint64_t> expected(const std::vector<TokenId>& tokens) const {
    std::vector<uint64_t> out;
    PrefixDigest d;
    for (size_t i = 0; i + kBs <= tokens.size(); i += kBs) {
      d = host_->chain(d, 0, std::span<const TokenId>(tokens).subspan(i, kBs));
      out.push_back(d.lo);
    }
    return out;
  }

  // Admits `id` (pool, then the tiers below, waiting for the load to land), "computes" the
  // rest, caches it and checks every cached block's content. Returns the prefix.
  CachedPrefix admit(SequenceId id, const std::vector<TokenId>& tokens) {
    const TokenSequence seq{tokens, {}};
    CachedPrefix p = kv_->get_computed_blocks(seq, 0);
    int32_t added = 0, host = 0;
    if (kv_->start_lower_tier_load(p, seq)) {
      kv_->check_invariants();
      for (int tries = 0; kv_->num_lower_tier_loads() > 0 && tries < 1000; ++tries) {
        kv_->wait_for_lower_tier_loads(std::chrono::milliseconds(10));
        for (const auto& l : kv_->finish_lower_tier_loads()) {
          added += l.num_tokens;
          host += l.num_host_tokens;
        }
      }
      EXPECT_EQ(kv_->num_lower_tier_loads(), 0);
    }
    kv_->check_invariants();
    p = kv_->get_computed_blocks(seq, 0);
    p.num_lower_tier_tokens = std::min(added, p.num_tokens);
    p.num_host_tier_tokens = std::min(host, p.num_lower_tier_tokens);
    const auto n = static_cast<int32_t>(tokens.size());
    EXPECT_TRUE(kv_->allocate_slots(id, 0, n - p.num_tokens, &p));
    kv_->check_invariants();
    const std::vector<uint64_t> want = expected(tokens);
    const std::vector<BlockId>& table = kv_->block_table(id);
    for (size_t i = 0; i < want.size(); ++i) {
      if (static_cast<int32_t>(i) < p.num_tokens / kBs) {
        EXPECT_EQ(content_[static_cast<size_t>(table[i])], want[i]) << "cached block " << i;
      } else {
        content_[static_cast<size_t>(table[i])] = want[i];  // the forward pass
      }
    }
    kv_->cache_full_blocks(id, seq, n);
    kv_->check_invariants();
    return p;
  }

  std::vector<uint64_t> content_;
  std::unique_ptr<HostTier> host_;
  std::unique_ptr<KvCacheManager> kv_;
};

TEST_F(HostTierTest, EvictedBlocksComeBackFromHostMemory) {
  make(5, 16);
  const std::vector<TokenId> a = tokens_from(100, 17);  // 4 full blocks + 1 token
  admit(1, a);
  EXPECT_EQ(host_->stats().blocks, 0u);  // nothing evicted yet: nothing copied
  kv_->free(1);
  admit(2, tokens_from(500, 17));  // takes every block: a's 4 cached ones are evicted
  kv_->free(2);
  EXPECT_EQ(host_->stats().stored_blocks, 4u);
  const CachedPrefix p = admit(3, a);
  EXPECT_EQ(p.num_tokens, 16);
  EXPECT_EQ(p.num_lower_tier_tokens, 16);
  EXPECT_EQ(p.num_host_tier_tokens, 16);
  EXPECT_EQ(kv_->stats().num_host_tier_hit_tokens, 16);
  EXPECT_EQ(host_->stats().hit_blocks, 4u);
}

TEST_F(HostTierTest, TheBoundHoldsAndTheLeastRecentlyUsedGoFirst) {
  make(2, 2);  // host memory for two blocks; each sequence below takes the whole pool
  std::vector<std::vector<TokenId>> seqs;
  for (int i = 0; i < 4; ++i) seqs.push_back(tokens_from(100 * (i + 1), 5));  // 1 full block each
  // Each admission evicts the one cached block of the sequence before it.
  std::vector<BlockHash> hashes;
  for (int i = 0; i < 4; ++i) {
    admit(i + 1, seqs[static_cast<size_t>(i)]);
    hashes.push_back(kv_->pool().hash(kv_->block_table(i + 1)[0]));
    kv_->free(i + 1);
    const HostTierStats s = host_->stats();
    EXPECT_LE(s.bytes, s.max_bytes);
    EXPECT_LE(s.blocks, 2u);
  }
  // Evicted in the order 0, 1, 2 (3 is still in the pool): the host kept the last two.
  EXPECT_EQ(host_->hashes_by_recency(), (std::vector<BlockHash>{hashes[2], hashes[1]}));
  EXPECT_EQ(host_->stats().evicted_blocks, 1u);
  // A hit makes 1 the newest, so when 3 is evicted (for the rest of this sequence's tokens)
  // it is 2, inserted after 1, that goes.
  const CachedPrefix p = admit(5, seqs[1]);
  EXPECT_EQ(p.num_host_tier_tokens, 4);
  EXPECT_EQ(host_->hashes_by_recency(), (std::vector<BlockHash>{hashes[3], hashes[1]}));
  const HostTierStats s = host_->stats();
  EXPECT_EQ(s.evicted_blocks, 2u);
  EXPECT_EQ(s.bytes, 2 * kEntryBytes);
  EXPECT_EQ(s.hit_blocks, 1u);
}

TEST_F(HostTierTest, ABlockDroppedFromHostMemoryFallsToTheTierBelow) {
  BelowTier below(content_);
  below.refuse_stores = true;  // the disk lacks everything: all it has is handed down
  make(2, 1, &below);          // each sequence below takes the whole pool
  const std::vector<TokenId> a = tokens_from(100, 5), b = tokens_from(200, 5);
  admit(1, a);
  kv_->free(1);
  admit(2, b);  // evicts a's block into host memory
  kv_->free(2);
  EXPECT_EQ(host_->stats().handed_down_blocks, 0u);
  admit(3, tokens_from(300, 5));  // evicts b's block: host memory drops a's, down to `below`
  kv_->free(3);
  EXPECT_EQ(host_->stats().handed_down_blocks, 1u);
  EXPECT_EQ(below.num_kept, 1);
  // a comes back from below with the right content (admit checks it).
  const CachedPrefix pa = admit(4, a);
  EXPECT_EQ(pa.num_lower_tier_tokens, 4);
  EXPECT_EQ(pa.num_host_tier_tokens, 0);
  EXPECT_EQ(below.num_loads, 1);
  const KvCacheStats st = kv_->stats();
  EXPECT_EQ(st.num_lower_tier_hit_tokens, 4);
  EXPECT_EQ(st.num_host_tier_hit_tokens, 0);
}

TEST_F(HostTierTest, ALookupSpansThePoolHostMemoryAndTheTierBelow) {
  BelowTier below(content_);
  make(6, 1, &below, /*any_thread=*/true);
  const std::vector<TokenId> a = tokens_from(100, 17);  // 4 full blocks + 1
  admit(1, a);
  EXPECT_EQ(below.records.size(), 4u);  // stored as cached (the disk's write-behind)
  kv_->free(1);
  // Four blocks for a request that ends before its prefill (nothing cached): a's empty tail,
  // the free block, then a's blocks 3 and 2 are evicted. Host memory holds one block: 3 goes
  // (the disk has it), 2 stays.
  const TokenSequence other{tokens_from(500, 16), {}};
  CachedPrefix none = kv_->get_computed_blocks(other, 0);
  ASSERT_TRUE(kv_->allocate_slots(2, 0, 16, &none));
  kv_->free(2);
  EXPECT_EQ(host_->stats().evicted_blocks, 1u);
  const CachedPrefix p = admit(3, a);
  EXPECT_EQ(p.num_tokens, 16);
  EXPECT_EQ(p.num_lower_tier_tokens, 8);  // blocks 0, 1 from the pool
  EXPECT_EQ(p.num_host_tier_tokens, 4);   // block 2 from host memory
  EXPECT_EQ(below.num_loads, 1);          // block 3 from below
  EXPECT_EQ(host_->stats().handed_down_blocks, 0u);  // below had it already
}

TEST_F(HostTierTest, TokensThatDoNotMatchAreAMiss) {
  make(4, 8);
  const std::vector<TokenId> a = tokens_from(100, 5);
  admit(1, a);
  kv_->free(1);
  admit(2, tokens_from(200, 13));  // evicts a's block
  kv_->free(2);
  ASSERT_EQ(host_->stats().blocks, 1u);
  const BlockHash hash = host_->hashes_by_recency()[0];
  PrefixDigest d = host_->chain({}, 0, std::span<const TokenId>(a).subspan(0, kBs));
  const std::vector<TokenId> other = tokens_from(700, kBs);
  EXPECT_TRUE(host_->contains(hash, d));
  EXPECT_FALSE(host_->load(0, hash, d, other));  // the same key, other tokens: never read
  EXPECT_TRUE(host_->load(0, hash, d, std::span<const TokenId>(a).subspan(0, kBs)));
  EXPECT_EQ(content_[0], expected(a)[0]);
}

// A tier below whose every load waits at a gate until the test opens it (the disk, slow), and
// which keeps nothing handed down: a block host memory drops is gone.
class GatedTier final : public LowerTier {
 public:
  PrefixDigest chain(const PrefixDigest& parent, uint64_t, std::span<const TokenId>) const override {
    return parent;
  }
  void store(BlockId, BlockHash, const PrefixDigest&, std::span<const TokenId>) override {}
  bool contains(BlockHash, const PrefixDigest&) const override { return false; }
  bool load(BlockId, BlockHash, const PrefixDigest&, std::span<const TokenId>) override {
    std::unique_lock lock(mutex_);
    waiting_ = true;
    changed_.notify_all();
    changed_.wait(lock, [this] { return open_; });
    return false;
  }
  void wait_until_a_load_waits() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return waiting_; });
  }
  void open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool waiting_ = false, open_ = false;
};

// The blocks a load is to read stay in host memory until it lands, however many blocks the
// step evicts into the tier meanwhile (those go instead), and the load reads every one of them.
TEST(HostTier, ALoadInFlightKeepsTheBlocksItReads) {
  std::vector<uint64_t> content(8, 0);
  GatedTier gate;
  HostTier host(pool_bytes(content, /*any_thread=*/true), 2 * kEntryBytes, &gate);
  const std::vector<TokenId> toks = tokens_from(1, kBs);
  auto key = [](uint64_t n) { return PrefixDigest{n, n}; };
  // Host memory holds blocks 10 and 11 (pool blocks 0 and 1 evicted into it).
  content[0] = 1010;
  content[1] = 1011;
  host.evict(0, 10, key(10), toks);
  host.evict(1, 11, key(11), toks);
  // The load thread is kept busy by a block only the gated tier might have...
  const uint64_t first = host.start_load({{2, 99, key(99), toks}});
  gate.wait_until_a_load_waits();
  // ...while a load of 10 and 11 into pool blocks 3 and 4 waits behind it.
  const uint64_t second = host.start_load({{3, 10, key(10), toks}, {4, 11, key(11), toks}});
  // The step evicts two more blocks into host memory, which holds two: they do not stay.
  content[5] = 1020;
  content[6] = 1021;
  host.evict(5, 20, key(20), toks);
  host.evict(6, 21, key(21), toks);
  EXPECT_TRUE(host.in_memory(10, key(10)));
  EXPECT_TRUE(host.in_memory(11, key(11)));
  EXPECT_FALSE(host.in_memory(21, key(21)));
  EXPECT_LE(host.stats().bytes, host.stats().max_bytes);
  gate.open();
  // (A landed load not yet finished ends every wait at once: each is finished when it lands.)
  std::optional<int32_t> n, n_first;
  for (int tries = 0; !n && tries < 2000; ++tries) {
    host.wait_for_loads(std::chrono::milliseconds(5));
    if (!n_first) n_first = host.finish_load(first);
    n = host.finish_load(second);
  }
  EXPECT_EQ(n_first, 0);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(content[3], 1010u);
  EXPECT_EQ(content[4], 1011u);
  const TierLoadStats loads = host.load_stats();
  EXPECT_EQ(loads.loads, 2u);
  EXPECT_EQ(loads.blocks, 2u);
  EXPECT_GT(loads.seconds, 0.0);
  EXPECT_LE(loads.last_seconds, loads.max_seconds);
  // Landed: 10 and 11 are unpinned, and go as any other block does.
  host.evict(5, 20, key(20), toks);
  host.evict(6, 21, key(21), toks);
  EXPECT_FALSE(host.in_memory(10, key(10)));
  EXPECT_FALSE(host.in_memory(11, key(11)));
  EXPECT_TRUE(host.in_memory(21, key(21)));
}

TEST(HostTier, ABoundBelowOneBlockIsRefused) {
  std::vector<uint64_t> content(4);
  EXPECT_THROW(HostTier tier(pool_bytes(content, false), 4), Error);
}

}  // namespace
}  // namespace pagoda
