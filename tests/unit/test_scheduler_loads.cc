// The scheduler over a lower tier whose reads land later (kv/lower_tier.h's start_load /
// finish_load): a request whose blocks are below the pool leaves the queue while they are read,
// the requests behind it are admitted meanwhile, it comes back to the front and is admitted
// with those blocks as hits once they land; one aborted while loading is gone at once and its
// load lands for the cache alone. Invariants checked after every call.
#include <gtest/gtest.h>

#include <map>

#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace pagoda {
namespace {

using test::make_request;
using test::scheduled;

// Keeps every block; a load lands only when the test says so.
class SlowTier final : public LowerTier {
 public:
  PrefixDigest chain(const PrefixDigest& parent, uint64_t extra,
                     std::span<const TokenId> tokens) const override {
    const uint64_t lo = hash_block(parent.lo, extra ^ 0x33, tokens);
    return {lo, lo ^ parent.hi};
  }
  void store(BlockId, BlockHash hash, const PrefixDigest& digest,
             std::span<const TokenId>) override {
    kept.emplace(std::make_pair(hash, digest.lo), true);
  }
  bool contains(BlockHash hash, const PrefixDigest& digest) const override {
    return kept.count({hash, digest.lo}) > 0;
  }
  bool load(BlockId, BlockHash hash, const PrefixDigest& digest,
            std::span<const TokenId>) override {
    return contains(hash, digest);
  }
  uint64_t start_load(std::vector<BlockLoad> loads) override {
    pending[next] = static_cast<int32_t>(loads.size());
    return next++;
  }
  std::optional<int32_t> finish_load(uint64_t ticket) override {
    auto it = landed.find(ticket);
    if (it == landed.end()) return std::nullopt;
    const int32_t n = it->second;
    landed.erase(it);
    return n;
  }
  void land_all() {
    landed.insert(pending.begin(), pending.end());
    pending.clear();
  }

  std::map<std::pair<BlockHash, uint64_t>, bool> kept;
  std::map<uint64_t, int32_t> pending, landed;
  uint64_t next = 1;
};

class SchedulerLoadsTest : public ::testing::Test {
 protected:
  SchedulerLoadsTest() {
    SchedulerConfig config;
    config.kv.num_blocks = 32;
    config.kv.block_size = 4;
    config.max_num_batched_tokens = 64;
    config.max_num_seqs = 4;
    s_ = std::make_unique<Scheduler>(config);
    s_->set_lower_tier(&tier_);
  }
  // Runs `id` (alone) to completion so its full blocks reach the tier, then restarts the
  // scheduler over the same tier: an empty pool, the blocks below it.
  void compute_then_restart(const Sequence& r) {
    s_->add_sequence(r);
    while (s_->has_unfinished()) {
      const StepPlan plan = s_->schedule();
      std::vector<TokenId> sampled(static_cast<size_t>(plan.num_samples()), 7);
      s_->commit(plan, sampled);
      s_->check_invariants();
    }
    SchedulerConfig config = s_->config();
    s_ = std::make_unique<Scheduler>(config);
    s_->set_lower_tier(&tier_);
  }
  StepPlan step() {
    StepPlan plan = s_->schedule();
    s_->check_invariants();
    return plan;
  }
  void commit(const StepPlan& plan) {
    std::vector<TokenId> sampled(static_cast<size_t>(plan.num_samples()), 7);
    s_->commit(plan, sampled);
    s_->check_invariants();
  }

  SlowTier tier_;
  std::unique_ptr<Scheduler> s_;
};

TEST_F(SchedulerLoadsTest, TheRequestWaitsForItsReadsWhileOthersRun) {
  compute_then_restart(make_request(1, 17, 1, 100));  // 4 full blocks below
  ASSERT_EQ(tier_.kept.size(), 4u);
  s_->add_sequence(make_request(2, 17, 2, 100));  // the same prompt: its blocks are below
  s_->add_sequence(make_request(3, 9, 2, 500));   // another: nothing below
  StepPlan plan = step();
  EXPECT_EQ(scheduled(plan, 2), nullptr);  // reading
  ASSERT_NE(scheduled(plan, 3), nullptr);  // admitted behind it meanwhile
  EXPECT_EQ(s_->num_loading(), 1);
  EXPECT_EQ(s_->num_waiting(), 1);
  commit(plan);
  plan = step();  // not landed yet: still out of the queue
  EXPECT_EQ(scheduled(plan, 2), nullptr);
  commit(plan);
  tier_.land_all();
  plan = step();
  const ScheduledSequence* r2 = scheduled(plan, 2);
  ASSERT_NE(r2, nullptr);
  EXPECT_EQ(r2->start_position, 16);  // the four blocks read are hits
  EXPECT_EQ(r2->num_new_tokens, 1);
  EXPECT_EQ(s_->find(2)->num_cached_tokens, 16);
  EXPECT_EQ(s_->stats().kv.num_lower_tier_hit_tokens, 16);
  EXPECT_EQ(s_->num_loading(), 0);
  commit(plan);
}

TEST_F(SchedulerLoadsTest, AbortedWhileLoadingItsLoadLandsForTheCache) {
  compute_then_restart(make_request(1, 17, 1, 100));
  s_->add_sequence(make_request(2, 17, 2, 100));
  StepPlan plan = step();
  EXPECT_TRUE(plan.sequences.empty());
  EXPECT_EQ(s_->num_loading(), 1);
  const int32_t used = s_->stats().kv.num_used_blocks;
  EXPECT_EQ(used, 4);  // held by the load
  ASSERT_TRUE(s_->abort(2));
  s_->check_invariants();
  EXPECT_FALSE(s_->has_unfinished());
  EXPECT_EQ(s_->num_loading(), 0);
  EXPECT_EQ(s_->stats().kv.num_used_blocks, 4);  // still held: the reads go on
  tier_.land_all();
  step();
  EXPECT_EQ(s_->stats().kv.num_used_blocks, 0);
  EXPECT_EQ(s_->stats().kv.num_cached_blocks, 4);  // landed, cached, found by the next lookup
  s_->add_sequence(make_request(4, 17, 2, 100));
  plan = step();
  ASSERT_NE(scheduled(plan, 4), nullptr);
  EXPECT_EQ(scheduled(plan, 4)->start_position, 16);
  EXPECT_EQ(tier_.pending.size(), 0u);  // served from the pool: no second read
  commit(plan);
}

}  // namespace
}  // namespace pagoda
