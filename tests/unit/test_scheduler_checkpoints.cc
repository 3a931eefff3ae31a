// Prefix caching for hybrid models: the scheduler's state checkpoints (sched/state_checkpoints.h,
// sched/scheduler_checkpoints.cc). A hybrid request's prompt chunk ends at its last full block
// boundary, every step ending on a block boundary saves its state to a checkpoint slot, and
// admission hits only up to the deepest cached block with a live checkpoint. A fake recurrent
// model whose state is the tokens it consumed checks under random load that every step starts
// from the state of exactly the tokens before it, restored checkpoints included.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "core/error.h"
#include "sched/scheduler.h"
#include "sched/state_checkpoints.h"
#include "unit/sched_test_util.h"

namespace pagoda {
namespace {

using test::make_request;

constexpr int32_t kSlots = 4;  // running state slots in these tests unless said

SchedulerConfig make_config(int32_t budget, int32_t num_blocks, int32_t num_checkpoints,
                            int32_t block_size = 4, int32_t max_seqs = kSlots,
                            int32_t state_align = 0) {
  SchedulerConfig c =
      test::state_config(budget, max_seqs, num_blocks, max_seqs, block_size, num_checkpoints);
  c.state_align = state_align;
  return c;
}

std::vector<TokenId> tokens_of(const Sequence& r) {
  std::vector<TokenId> t = r.prompt;
  t.insert(t.end(), r.output.begin(), r.output.end());
  return t;
}

// A recurrent model whose state in a slot is the list of tokens it has consumed: a step's tokens
// must continue exactly the tokens before them (a sequence at position 0 starts afresh).
class FakeStateModel {
 public:
  explicit FakeStateModel(int32_t num_slots) : slots_(static_cast<size_t>(num_slots)) {}

  // `align`: checkpoints are restored and saved only at multiples of it (state_align).
  void run(const Scheduler& s, const StepPlan& plan, int32_t align = 0) {
    for (const ScheduledSequence& r : plan.sequences) {  // restores first, as the engine does
      if (r.restore_state_from >= 0) slot(r.state_slot) = slot(r.restore_state_from);
      if (align > 0 && r.restore_state_from >= 0) {
        EXPECT_EQ(r.start_position % align, 0);
      }
      if (align > 0 && r.save_state_to >= 0) {
        EXPECT_EQ((r.start_position + r.num_new_tokens) % align, 0);
      }
    }
    for (const ScheduledSequence& r : plan.sequences) {
      const std::vector<TokenId> tokens = tokens_of(*s.find(r.seq_id));
      std::vector<TokenId>& state = slot(r.state_slot);
      if (r.start_position == 0) state.clear();
      ASSERT_EQ(state, std::vector<TokenId>(tokens.begin(), tokens.begin() + r.start_position))
          << "request " << r.seq_id << " at " << r.start_position;
      state.insert(state.end(), tokens.begin() + r.start_position,
                   tokens.begin() + r.start_position + r.num_new_tokens);
    }
    for (const ScheduledSequence& r : plan.sequences) {
      if (r.save_state_to >= 0) slot(r.save_state_to) = slot(r.state_slot);
    }
  }

 private:
  std::vector<TokenId>& slot(int32_t i) {
    EXPECT_GE(i, 0);
    EXPECT_LT(i, static_cast<int32_t>(slots_.size()));
    return slots_.at(static_cast<size_t>(i));
  }
  std::vector<std::vector<TokenId>> slots_;
};

// One step: schedule, run the fake model, sample 1000 + the request's length, commit.
std::vector<Sequence> step(Scheduler& s, FakeStateModel& model, StepPlan* plan_out = nullptr) {
  StepPlan plan = s.schedule();
  s.check_invariants();
  model.run(s, plan, s.config().state_align);
  std::vector<TokenId> sampled;
  for (const ScheduledSequence& r : plan.sequences) {
    if (r.needs_sample) sampled.push_back(1000 + s.find(r.seq_id)->num_tokens());
  }
  std::vector<Sequence> done = s.commit(plan, sampled);
  s.check_invariants();
  if (plan_out != nullptr) *plan_out = std::move(plan);
  return done;
}

std::vector<Sequence> run_all(Scheduler& s, FakeStateModel& model) {
  std::vector<Sequence> done;
  for (int guard = 0; s.has_unfinished() && guard < 1000; ++guard) {
    for (Sequence& r : step(s, model)) done.push_back(std::move(r));
  }
  EXPECT_FALSE(s.has_unfinished());
  return done;
}

Sequence with_prompt(SequenceId id, std::vector<TokenId> prompt, int32_t max_tokens) {
  Sequence r = make_request(id, 1, max_tokens);
  r.prompt = std::move(prompt);
  return r;
}

// Adds `r` and runs everything to the end; returns where r's first step started (its hit).
int32_t first_start_of(Scheduler& s, FakeStateModel& model, Sequence r) {
  const SequenceId id = r.id;
  s.add_sequence(std::move(r));
  StepPlan plan;
  step(s, model, &plan);
  const ScheduledSequence* first = test::scheduled(plan, id);
  EXPECT_NE(first, nullptr);
  run_all(s, model);
  return first != nullptr ? first->start_position : -1;
}

TEST(StateCheckpointsTest, ReserveBindFindEvictLeastRecentlyUsed) {
  BlockPool pool(8, 4);
  std::vector<std::pair<BlockHash, PrefixId>> blocks;
  for (BlockId b : pool.allocate(4)) {
    BlockKey key;
    key.hash = 100 + static_cast<BlockHash>(b);
    const std::vector<TokenId> tokens(4, b);
    blocks.emplace_back(key.hash, pool.cache(b, key, tokens));
  }
  StateCheckpoints c(4, 2);  // slots 4 and 5
  const int32_t a = c.reserve();
  const int32_t b = c.reserve();
  EXPECT_EQ(c.reserve(), -1);  // both reserved by the step in flight
  EXPECT_EQ(std::min(a, b), 4);
  EXPECT_EQ(std::max(a, b), 5);
  EXPECT_EQ(c.bind(a, blocks[0].first, blocks[0].second), a);
  EXPECT_EQ(c.bind(b, blocks[1].first, blocks[1].second), b);
  c.check_invariants(pool, false);
  EXPECT_EQ(c.find(blocks[0].second), a);
  EXPECT_EQ(c.find(blocks[2].second), -1);
  c.touch(a);  // b is now the least recently used
  const int32_t d = c.reserve();
  EXPECT_EQ(d, b);
  EXPECT_EQ(c.find(blocks[1].second), -1);
  // A save of a block that has a checkpoint already frees its slot and keeps the old one.
  EXPECT_EQ(c.bind(d, blocks[0].first, blocks[0].second), a);
  EXPECT_EQ(c.num_live(), 1);
  // A sequence's own checkpoint gives its slot to the next one first.
  const int32_t e = c.reserve(blocks[0].second);
  EXPECT_EQ(e, a);
  EXPECT_EQ(c.find(blocks[0].second), -1);
  c.release(e);
  c.check_invariants(pool, false);
}

TEST(StateCheckpointsTest, CheckpointOfAnEvictedBlockIsDropped) {
  BlockPool pool(2, 4);
  const BlockId block = pool.allocate(1)[0];
  BlockKey key;
  key.hash = 7;
  const PrefixId id = pool.cache(block, key, std::vector<TokenId>(4, 1));
  StateCheckpoints c(1, 1);
  c.bind(c.reserve(), key.hash, id);
  pool.release(block);  // cached, free
  c.drop_stale(pool);
  EXPECT_EQ(c.find(id), 0 + 1);
  pool.allocate(2);  // evicts it
  c.check_invariants(pool, false);  // an eviction since the sweep: not yet dropped, still legal
  c.drop_stale(pool);
  EXPECT_EQ(c.find(id), -1);
  c.check_invariants(pool, false);
}

TEST(SchedulerCheckpointsTest, NeedsStateSlots) {
  SchedulerConfig config = make_config(64, 16, 2);
  config.num_state_slots = 0;
  EXPECT_THROW(Scheduler{config}, Error);
}

// A 21-token prompt (blocks of 4) is computed as 20 + 1 tokens, the state after 20 saved.
TEST(SchedulerCheckpointsTest, PromptChunkEndsAtTheLastFullBlock) {
  Scheduler s(make_config(64, 32, 4));
  FakeStateModel model(kSlots + 4);
  s.add_sequence(make_request(1, 21, 1));
  StepPlan plan;
  step(s, model, &plan);
  ASSERT_EQ(plan.sequences.size(), 1u);
  EXPECT_EQ(plan.sequences[0].num_new_tokens, 20);
  EXPECT_FALSE(plan.sequences[0].needs_sample);
  EXPECT_GE(plan.sequences[0].save_state_to, kSlots);
  EXPECT_EQ(s.stats().num_state_checkpoints, 1);
  step(s, model, &plan);
  EXPECT_EQ(plan.sequences[0].num_new_tokens, 1);
  EXPECT_TRUE(plan.sequences[0].needs_sample);
  EXPECT_EQ(plan.sequences[0].save_state_to, -1);
  EXPECT_FALSE(s.has_unfinished());
  // A prompt that fits in a block, or ends on one, is not cut.
  s.add_sequence(make_request(2, 3, 1, 500));
  s.add_sequence(make_request(3, 8, 1, 600));
  step(s, model, &plan);
  EXPECT_EQ(plan.sequences[0].num_new_tokens, 3);
  EXPECT_EQ(plan.sequences[1].num_new_tokens, 4);  // 8 tokens: the hit would leave the last
  step(s, model, &plan);
  EXPECT_EQ(plan.sequences[0].num_new_tokens, 4);
  EXPECT_GE(plan.sequences[0].save_state_to, kSlots);  // the end of the prompt: a turn's end
}

// The same prompt again hits up to the checkpoint, restores it and computes only the rest.
TEST(SchedulerCheckpointsTest, SecondRequestHitsAtTheCheckpoint) {
  Scheduler s(make_config(64, 32, 4));
  FakeStateModel model(kSlots + 4);
  s.add_sequence(make_request(1, 21, 2));
  run_all(s, model);
  s.add_sequence(make_request(2, 21, 2));
  StepPlan plan;
  step(s, model, &plan);
  ASSERT_EQ(plan.sequences.size(), 1u);
  EXPECT_EQ(plan.sequences[0].start_position, 20);
  EXPECT_EQ(plan.sequences[0].num_new_tokens, 1);
  EXPECT_GE(plan.sequences[0].restore_state_from, kSlots);
  EXPECT_EQ(s.find(2)->num_cached_tokens, 20);
  EXPECT_EQ(s.stats().kv.num_hit_tokens, 20);
  run_all(s, model);
}

// Cached blocks without a checkpoint are not a hit: with one checkpoint slot, a 12-token
// prompt's checkpoint after 12 replaced the one after 8, and the same prompt again (whose lookup
// leaves its last block) finds its 8 tokens cached but no state: computed from zero. With two
// slots the one after 8 is kept and hit.
TEST(SchedulerCheckpointsTest, HitOnlyAtACheckpointedBlock) {
  for (const int32_t num_checkpoints : {1, 2}) {
    SCOPED_TRACE(num_checkpoints);
    Scheduler s(make_config(64, 32, num_checkpoints));
    FakeStateModel model(kSlots + num_checkpoints);
    s.add_sequence(make_request(1, 12, 1));
    run_all(s, model);
    s.add_sequence(make_request(2, 12, 1));
    StepPlan plan;
    step(s, model, &plan);
    EXPECT_EQ(plan.sequences[0].start_position, num_checkpoints == 1 ? 0 : 8);
    EXPECT_EQ(s.stats().kv.num_hit_tokens, num_checkpoints == 1 ? 0 : 8);
    run_all(s, model);
  }
}

// While decoding, each block boundary saves the state and replaces the request's previous
// checkpoint past its prompt: a request ending with 18 tokens (17 computed) leaves checkpoints
// after 4 (its prompt's) and 16. A chat's next turn (its prompt holds all 18) hits 16; a prompt
// sharing 12 tokens with it finds 12 cached but only the checkpoint after 4.
TEST(SchedulerCheckpointsTest, DecodeKeepsTheLatestCheckpointPerRequest) {
  Scheduler s(make_config(64, 32, 8));
  FakeStateModel model(kSlots + 8);
  s.add_sequence(make_request(1, 6, 12));
  std::vector<Sequence> done = run_all(s, model);
  ASSERT_EQ(done.size(), 1u);
  const std::vector<TokenId> first = tokens_of(done[0]);
  ASSERT_EQ(first.size(), 18u);
  EXPECT_EQ(s.stats().num_state_checkpoints, 2);

  std::vector<TokenId> turn = first;
  turn.insert(turn.end(), {7, 8, 9});
  EXPECT_EQ(first_start_of(s, model, with_prompt(2, turn, 1)), 16);

  std::vector<TokenId> branch(first.begin(), first.begin() + 13);
  branch.push_back(5);
  EXPECT_EQ(first_start_of(s, model, with_prompt(3, branch, 1)), 4);
}

// A long prompt run in chunks keeps two checkpoints of its prompt, not one per chunk: its latest
// before the prompt's last boundary (each replaces the one before) and the one at that boundary.
// 30 tokens at budget 8 (blocks of 4): saves after 8, 16, 24 and 28; 24 and 28 stay, and the
// output's latest (32) beside them. A prompt that shares 26 tokens with it hits 24.
TEST(SchedulerCheckpointsTest, ALongPromptKeepsItsLatestChunkCheckpoint) {
  Scheduler s(make_config(8, 64, 8));
  FakeStateModel model(kSlots + 8);
  s.add_sequence(make_request(1, 30, 5));
  std::vector<Sequence> done = run_all(s, model);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(s.stats().num_state_checkpoints, 3);
  std::vector<TokenId> branch(done[0].prompt.begin(), done[0].prompt.begin() + 26);
  branch.insert(branch.end(), {7, 7, 7, 7, 7, 7});
  EXPECT_EQ(first_start_of(s, model, with_prompt(2, branch, 1)), 24);
}

// A checkpoint whose block the pool evicted is dropped and never hit.
TEST(SchedulerCheckpointsTest, EvictedBlockDropsItsCheckpoint) {
  Scheduler s(make_config(64, 4, 4));  // 4 blocks of 4
  FakeStateModel model(kSlots + 4);
  s.add_sequence(make_request(1, 8, 1));
  run_all(s, model);
  EXPECT_EQ(s.stats().num_state_checkpoints, 2);  // after 4 and after 8
  s.add_sequence(make_request(2, 15, 1, 500));    // takes every block
  run_all(s, model);
  EXPECT_EQ(s.stats().num_state_checkpoints, 1);  // its own, after 12
  EXPECT_EQ(first_start_of(s, model, make_request(3, 8, 1)), 0);
}

// A preempted request resumes from its latest checkpoint rather than from zero.
TEST(SchedulerCheckpointsTest, PreemptedRequestResumesFromItsCheckpoint) {
  // 6 blocks of 4: two requests of 8 prompt tokens + 12 output cannot both finish in place.
  Scheduler s(make_config(64, 6, 8));
  FakeStateModel model(kSlots + 8);
  s.add_sequence(make_request(1, 8, 12));
  s.add_sequence(make_request(2, 8, 12, 500));
  bool resumed_with_hit = false;
  for (int i = 0; i < 200 && s.has_unfinished(); ++i) {
    StepPlan plan;
    step(s, model, &plan);
    for (const ScheduledSequence& r : plan.sequences) {
      if (r.restore_state_from >= 0 && s.find(r.seq_id) != nullptr &&
          s.find(r.seq_id)->num_preemptions > 0) {
        resumed_with_hit = true;
      }
    }
  }
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_GT(s.stats().num_preemptions, 0);
  EXPECT_TRUE(resumed_with_hit);
}

// Random budgets, caches, block sizes, slot and checkpoint counts; prompts drawn from a few
// shared stems (so that hits happen), arrivals and aborts at random: every step's tokens
// continue their slot's state, and every invariant holds after every step.
// With state_align 8 (blocks of 4), a prompt is split at multiples of 8 whenever the budget left
// for prompts holds 8: alone at budget 10 in chunks of 8; beside 2 decodes (8 left) still so;
// beside 3 (7 left), in whatever fits (progress first). Checkpoints only at multiples of 8.
TEST(SchedulerCheckpointsTest, PromptSplitsFallOnStateAlign) {
  Scheduler s(make_config(10, 64, 8, 4, kSlots, 8));
  FakeStateModel model(kSlots + 8);
  s.add_sequence(make_request(1, 30, 5));
  StepPlan plan;
  std::vector<int32_t> chunks;
  while (s.find(1)->num_computed_tokens < 30) {
    step(s, model, &plan);
    chunks.push_back(plan.sequences.at(0).num_new_tokens);
  }
  EXPECT_EQ(chunks, (std::vector<int32_t>{8, 8, 8, 6}));
  run_all(s, model);

  for (const int32_t num_decodes : {2, 3}) {
    Scheduler t(make_config(10, 64, 8, 4, kSlots, 8));
    FakeStateModel m(kSlots + 8);
    for (SequenceId id = 1; id <= num_decodes; ++id) t.add_sequence(make_request(id, 2, 50));
    step(t, m);  // their prompts: now they decode
    t.add_sequence(make_request(9, 30, 5));
    step(t, m, &plan);
    const ScheduledSequence* p = test::scheduled(plan, 9);
    ASSERT_NE(p, nullptr) << num_decodes << " decodes";
    EXPECT_EQ(p->num_new_tokens, num_decodes == 2 ? 8 : 7) << num_decodes << " decodes";
  }
}

TEST(SchedulerCheckpointsTest, RandomLoadKeepsEveryStateContinuous) {
  int64_t hits = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int32_t max_seqs = uniform(1, 6);
    const int32_t num_checkpoints = uniform(1, 6);
    const int32_t block_size = uniform(2, 8);
    Scheduler s(make_config(uniform(3, 48), uniform(12, 40), num_checkpoints, block_size,
                            max_seqs, block_size * uniform(0, 3)));
    FakeStateModel model(max_seqs + num_checkpoints);
    SequenceId next_id = 1;
    for (int i = 0; i < 200; ++i) {
      if (uniform(0, 3) == 0) {
        Sequence r = make_request(next_id++, uniform(1, 24), uniform(1, 10), 100);
        const int32_t cut = uniform(0, static_cast<int>(r.prompt.size()) - 1);
        for (size_t k = static_cast<size_t>(cut); k < r.prompt.size(); ++k) {
          r.prompt[k] = static_cast<TokenId>(uniform(0, 2) == 0 ? 200 + uniform(0, 3) : 100 + k);
        }
        try {
          s.add_sequence(std::move(r));
        } catch (const Error&) {
          // too large for the whole cache: refused up front
        }
      }
      if (uniform(0, 20) == 0 && next_id > 1) s.abort(uniform(1, static_cast<int>(next_id - 1)));
      s.check_invariants();
      step(s, model);
      if (HasFatalFailure()) FAIL() << "seed " << seed;
    }
    run_all(s, model);
    if (HasFatalFailure()) FAIL() << "seed " << seed;
    EXPECT_EQ(s.num_free_state_slots(), max_seqs) << "seed " << seed;
    hits += s.stats().kv.num_hit_tokens;
  }
  EXPECT_GT(hits, 0);
}

}  // namespace
}  // namespace pagoda
