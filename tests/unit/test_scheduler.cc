// Scheduler: one token budget, chunked prefill, FCFS admission with prefix-cache hits,
// preemption of the newest request, abort, stop conditions, fork. Fake requests, no model.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include <numeric>
#include <vector>

#include "core/error.h"
#include "sched/scheduler.h"
#include "unit/sched_test_util.h"

namespace pagoda {
namespace {

using test::make_request;
using test::scheduled;

SchedulerConfig make_config(int32_t budget, int32_t max_seqs, int32_t num_blocks,
                            int32_t block_size = 4) {
  SchedulerConfig config;
  config.max_num_batched_tokens = budget;
  config.max_num_seqs = max_seqs;
  config.kv.num_blocks = num_blocks;
  config.kv.block_size = block_size;
  return config;
}


// A stand-in for the model: the next token only depends on how long the sequence is.
TokenId next_token(const Sequence& r) { return 1000 + r.num_tokens(); }

struct StepOutcome {
  StepPlan plan;
  std::vector<Sequence> finished;
};

// schedule + commit with fake sampled tokens, checking invariants after each.
StepOutcome step(Scheduler& s) {
  StepOutcome out;
  out.plan = s.schedule();
  s.check_invariants();
  std::vector<TokenId> sampled;
  for (const ScheduledSequence& r : out.plan.sequences) {
    if (r.needs_sample) sampled.push_back(next_token(*s.find(r.seq_id)));
  }
  out.finished = s.commit(out.plan, sampled);
  s.check_invariants();
  return out;
}


TEST(SchedulerTest, OneRequestPrefillsThenDecodes) {
  Scheduler s(make_config(64, 4, 16));
  s.add_sequence(make_request(1, 10, 3));
  s.check_invariants();
  EXPECT_EQ(s.find(1)->status, SequenceStatus::kWaiting);

  StepOutcome a = step(s);
  ASSERT_EQ(a.plan.sequences.size(), 1u);
  EXPECT_EQ(a.plan.sequences[0].start_position, 0);
  EXPECT_EQ(a.plan.sequences[0].num_new_tokens, 10);
  EXPECT_TRUE(a.plan.sequences[0].needs_sample);
  EXPECT_EQ(a.plan.sequences[0].block_table.size(), 3u);  // 10 slots in 4-token blocks
  EXPECT_EQ(a.plan.num_scheduled_tokens, 10);
  EXPECT_EQ(s.find(1)->status, SequenceStatus::kRunning);
  EXPECT_EQ(s.find(1)->output, (std::vector<TokenId>{1010}));
  EXPECT_EQ(s.find(1)->num_computed_tokens, 10);

  StepOutcome b = step(s);
  ASSERT_EQ(b.plan.sequences.size(), 1u);
  EXPECT_EQ(b.plan.sequences[0].start_position, 10);
  EXPECT_EQ(b.plan.sequences[0].num_new_tokens, 1);
  EXPECT_EQ(s.stats().num_tokens_last_step, 1);

  StepOutcome c = step(s);
  ASSERT_EQ(c.finished.size(), 1u);
  EXPECT_EQ(c.finished[0].status, SequenceStatus::kFinishedLength);
  EXPECT_EQ(c.finished[0].output, (std::vector<TokenId>{1010, 1011, 1012}));
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(s.stats().kv.num_used_blocks, 0);
  EXPECT_TRUE(s.schedule().empty());
}

TEST(SchedulerTest, LongPromptIsChunkedByTheBudget) {
  Scheduler s(make_config(8, 4, 16));
  s.add_sequence(make_request(1, 20, 2));
  std::vector<int> starts, sizes, tables;
  std::vector<bool> samples;
  while (s.has_unfinished()) {
    StepOutcome o = step(s);
    ASSERT_EQ(o.plan.sequences.size(), 1u);
    EXPECT_LE(o.plan.num_scheduled_tokens, 8);
    starts.push_back(o.plan.sequences[0].start_position);
    sizes.push_back(o.plan.sequences[0].num_new_tokens);
    tables.push_back(static_cast<int>(o.plan.sequences[0].block_table.size()));
    samples.push_back(o.plan.sequences[0].needs_sample);
  }
  EXPECT_EQ(starts, (std::vector<int>{0, 8, 16, 20}));
  EXPECT_EQ(sizes, (std::vector<int>{8, 8, 4, 1}));
  EXPECT_EQ(tables, (std::vector<int>{2, 4, 5, 6}));
  EXPECT_EQ(samples, (std::vector<bool>{false, false, true, true}));
}

TEST(SchedulerTest, RunningFirstThenWaitingWithWhatIsLeft) {
  Scheduler s(make_config(16, 4, 32));
  s.add_sequence(make_request(1, 12, 10));
  step(s);  // request 1 prefilled, now decoding
  s.add_sequence(make_request(2, 30, 4, 500));
  s.add_sequence(make_request(3, 5, 10, 900));
  StepOutcome o = step(s);
  ASSERT_EQ(o.plan.sequences.size(), 2u);  // 1 + 15: nothing left for request 3
  EXPECT_EQ(o.plan.sequences[0].seq_id, 1);
  EXPECT_EQ(o.plan.sequences[0].num_new_tokens, 1);
  EXPECT_EQ(o.plan.sequences[1].seq_id, 2);
  EXPECT_EQ(o.plan.sequences[1].num_new_tokens, 15);
  EXPECT_FALSE(o.plan.sequences[1].needs_sample);
  EXPECT_EQ(o.plan.num_scheduled_tokens, 16);
  EXPECT_EQ(s.find(3)->status, SequenceStatus::kWaiting);
  // Sequence 2's next chunk shares the step with request 1's decode and holds up request 3: its
  // queries x keys stay within half the budget squared (8 x 8 / 15 keys: 4), and request 3 is
  // admitted with what is left.
  o = step(s);
  ASSERT_EQ(o.plan.sequences.size(), 3u);
  EXPECT_EQ(o.plan.sequences[1].seq_id, 2);
  EXPECT_EQ(o.plan.sequences[1].num_new_tokens, 4);
  EXPECT_FALSE(o.plan.sequences[1].needs_sample);
  EXPECT_EQ(o.plan.sequences[2].seq_id, 3);
  EXPECT_EQ(o.plan.sequences[2].start_position, 0);
  EXPECT_EQ(o.plan.sequences[2].num_new_tokens, 5);
  EXPECT_EQ(o.plan.num_scheduled_tokens, 10);
  // Then requests 1 and 3 decode in every step and request 2 takes a block a step (8 x 8 / 19
  // and / 23 are below one) until the last 3 tokens of its prompt.
  std::vector<int32_t> chunks;
  while (!o.plan.sequences.back().needs_sample || o.plan.sequences.back().seq_id != 2) {
    o = step(s);
    ASSERT_EQ(o.plan.sequences.size(), 3u);
    EXPECT_EQ(o.plan.sequences[0].seq_id, 1);
    EXPECT_EQ(o.plan.sequences[1].seq_id, 3);
    EXPECT_EQ(o.plan.sequences[1].num_new_tokens, 1);
    EXPECT_EQ(o.plan.sequences[2].seq_id, 2);
    chunks.push_back(o.plan.sequences[2].num_new_tokens);
  }
  EXPECT_EQ(chunks, (std::vector<int32_t>{4, 4, 3}));
}

// Late in a long prompt a chunk beside decodes shrinks with the tokens before it, so the step
// that computes it costs what a chunk of half the budget costs at the prompt's start.
TEST(SchedulerTest, ALongPromptsChunksShrinkBesideDecodes) {
  Scheduler s(make_config(64, 4, 256));  // half the budget: 32, so 32 x 32 queries x keys
  s.add_sequence(make_request(1, 3, 300));
  step(s);  // request 1 prefilled, now decoding
  s.add_sequence(make_request(2, 600, 2, 500));
  std::vector<int32_t> chunks;
  while (s.find(2)->num_computed_tokens < 600) {
    const int32_t before = s.find(2)->num_computed_tokens;
    const StepOutcome o = step(s);
    const ScheduledSequence* decode = scheduled(o.plan, 1);
    ASSERT_NE(decode, nullptr);
    EXPECT_EQ(decode->num_new_tokens, 1);  // request 1 decodes in every step
    const ScheduledSequence* chunk = scheduled(o.plan, 2);
    ASSERT_NE(chunk, nullptr);
    chunks.push_back(chunk->num_new_tokens);
    if (before > 0 && before + chunk->num_new_tokens < 600) {  // the last chunk is what is left
      EXPECT_TRUE(chunk->num_new_tokens == 4 || chunk->num_new_tokens * before <= 32 * 32)
          << "a chunk of " << chunk->num_new_tokens << " after " << before << " tokens";
    }
  }
  ASSERT_GE(chunks.size(), 4u);
  EXPECT_EQ(chunks[0], 63);  // admitted with what the decode leaves
  EXPECT_EQ(chunks[1], 16);  // 1024 / 63
  EXPECT_GE(std::count(chunks.begin(), chunks.end(), 4), 80);  // past 256 tokens, a block a step
  for (size_t i = 2; i < chunks.size(); ++i) EXPECT_LE(chunks[i], chunks[i - 1]);
}

TEST(SchedulerTest, DecodesAreNotHeldBackByAnOlderLongPrompt) {
  Scheduler s(make_config(16, 4, 64));
  s.add_sequence(make_request(1, 200, 4));  // admitted first: the oldest running request
  step(s);
  s.add_sequence(make_request(2, 3, 20, 500));
  s.add_sequence(make_request(3, 3, 20, 900));
  step(s);  // (no room yet: request 1 takes the budget)
  int64_t steps_with_both_decoding = 0;
  while (s.find(1) != nullptr && s.find(1)->num_computed_tokens < 199) {
    const StepOutcome o = step(s);
    std::map<SequenceId, int32_t> tokens;
    for (const ScheduledSequence& r : o.plan.sequences) tokens[r.seq_id] = r.num_new_tokens;
    ASSERT_LE(o.plan.num_scheduled_tokens, 16);
    // Once requests 2 and 3 decode, every step gives each of them its token.
    if (s.find(2) && s.find(2)->num_output_tokens() > 1 && s.find(3) &&
        s.find(3)->num_output_tokens() > 1) {
      EXPECT_EQ(tokens[2], 1);
      EXPECT_EQ(tokens[3], 1);
      ++steps_with_both_decoding;
    }
  }
  EXPECT_GE(steps_with_both_decoding, 5);  // the prompt's chunks ran beside their decodes
}

TEST(SchedulerTest, PreemptedRequestsAreNeverInThePlan) {
  // Tight caches with long prompts chunked beside decodes: a prompt chunk planned after the
  // decodes may need blocks that only preempting a newer, already planned decode frees.
  int64_t num_preempted = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    Scheduler s(make_config(6 + static_cast<int32_t>(rng() % 10), 4, 8));
    SequenceId next_id = 1;
    for (int i = 0; i < 400 && (s.has_unfinished() || next_id < 12); ++i) {
      if (next_id < 12 && rng() % 3 == 0) {
        const int num_prompt = rng() % 2 ? 2 + static_cast<int>(rng() % 3) : 12 + static_cast<int>(rng() % 12);
        s.add_sequence(make_request(next_id, num_prompt, 2 + static_cast<int>(rng() % 6), TokenId(100 * next_id)));
        ++next_id;
      }
      const StepOutcome o = step(s);
      std::set<SequenceId> planned;
      int32_t total = 0;
      for (const ScheduledSequence& r : o.plan.sequences) {
        EXPECT_TRUE(planned.insert(r.seq_id).second);
        total += r.num_new_tokens;
      }
      for (SequenceId p : o.plan.preempted) EXPECT_EQ(planned.count(p), 0u) << "seed " << seed;
      EXPECT_EQ(total, o.plan.num_scheduled_tokens);
      num_preempted += static_cast<int64_t>(o.plan.preempted.size());
    }
    EXPECT_FALSE(s.has_unfinished()) << "seed " << seed;
  }
  EXPECT_GT(num_preempted, 0);  // the caches were tight enough to preempt
}

TEST(SchedulerTest, MaxNumSeqsCapsConcurrency) {
  Scheduler s(make_config(100, 2, 32));
  for (SequenceId id = 1; id <= 3; ++id) s.add_sequence(make_request(id, 4, 3, TokenId(100 * id)));
  StepOutcome o = step(s);
  EXPECT_EQ(o.plan.sequences.size(), 2u);
  EXPECT_EQ(s.num_running(), 2);
  EXPECT_EQ(s.num_waiting(), 1);
  step(s);
  o = step(s);  // requests 1 and 2 finish here
  EXPECT_EQ(o.finished.size(), 2u);
  o = step(s);
  ASSERT_EQ(o.plan.sequences.size(), 1u);
  EXPECT_EQ(o.plan.sequences[0].seq_id, 3);
}

TEST(SchedulerTest, FirstComeFirstServedWhenBlocksAreShort) {
  Scheduler s(make_config(100, 8, 8));
  s.add_sequence(make_request(1, 16, 8));       // 4 blocks
  s.add_sequence(make_request(2, 20, 8, 300));  // 5 blocks: does not fit next to request 1
  s.add_sequence(make_request(3, 4, 2, 600));   // would fit, but waits its turn
  StepOutcome o = step(s);
  ASSERT_EQ(o.plan.sequences.size(), 1u);
  EXPECT_EQ(s.find(2)->status, SequenceStatus::kWaiting);
  EXPECT_EQ(s.find(3)->status, SequenceStatus::kWaiting);
}

TEST(SchedulerTest, SharedPrefixIsComputedOnce) {
  Scheduler s(make_config(256, 4, 64, 16));
  s.add_sequence(make_request(1, 48, 2));
  while (s.has_unfinished()) step(s);
  // 40 tokens of request 1's prompt, then 10 of its own: blocks 0 and 1 are cached.
  Sequence b = make_request(2, 50, 2);
  for (int i = 40; i < 50; ++i) b.prompt[static_cast<size_t>(i)] = 7000 + i;
  s.add_sequence(b);
  StepOutcome o = step(s);
  const ScheduledSequence* r = scheduled(o.plan, 2);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->start_position, 32);
  EXPECT_EQ(r->num_new_tokens, 18);
  EXPECT_TRUE(r->needs_sample);
  EXPECT_EQ(s.find(2)->num_cached_tokens, 32);
  const SchedulerStats stats = s.stats();
  EXPECT_EQ(stats.kv.num_queried_tokens, 48 + 50);
  EXPECT_EQ(stats.kv.num_hit_tokens, 32);
  EXPECT_EQ(stats.num_tokens_last_step, 18);
}

TEST(SchedulerTest, WholePromptCachedStillComputesTheLastBlock) {
  Scheduler s(make_config(256, 4, 64, 16));
  s.add_sequence(make_request(1, 48, 1));
  while (s.has_unfinished()) step(s);
  s.add_sequence(make_request(2, 48, 1));  // the same prompt, all three blocks cached
  StepOutcome o = step(s);
  ASSERT_EQ(o.plan.sequences.size(), 1u);
  EXPECT_EQ(o.plan.sequences[0].start_position, 32);
  EXPECT_EQ(o.plan.sequences[0].num_new_tokens, 16);
  EXPECT_TRUE(o.plan.sequences[0].needs_sample);
  ASSERT_EQ(o.finished.size(), 1u);
  EXPECT_EQ(o.finished[0].output, (std::vector<TokenId>{1048}));
}

TEST(SchedulerTest, NewestRunningRequestIsPreemptedAndResumes) {
  // 6 blocks of 4: two requests of 8 prompt tokens + 12 output need 5 blocks each at the end.
  SchedulerConfig config = make_config(64, 4, 6);
  std::vector<SequenceId> preempted_log;
  config.on_preempt = [&](const Sequence& r) { preempted_log.push_back(r.id); };
  Scheduler s(config);
  s.add_sequence(make_request(1, 8, 12));
  s.add_sequence(make_request(2, 8, 12, 500));
  std::vector<Sequence> done;
  bool saw_preemption = false;
  for (int i = 0; i < 100 && s.has_unfinished(); ++i) {
    StepOutcome o = step(s);
    if (!o.plan.preempted.empty() && !saw_preemption) {
      saw_preemption = true;
      EXPECT_EQ(o.plan.preempted, (std::vector<SequenceId>{2}));  // the newest
      const Sequence* r = s.find(2);
      ASSERT_NE(r, nullptr);
      EXPECT_EQ(r->status, SequenceStatus::kPreempted);
      EXPECT_EQ(r->num_computed_tokens, 0);
      EXPECT_FALSE(r->output.empty());  // kept; recomputed as part of the sequence
      ASSERT_EQ(o.plan.sequences.size(), 1u);
      EXPECT_EQ(o.plan.sequences[0].seq_id, 1);
      EXPECT_EQ(s.stats().kv.num_used_blocks,
                static_cast<int>(o.plan.sequences[0].block_table.size()));
      EXPECT_EQ(scheduled(o.plan, 2), nullptr);
    }
    for (Sequence& r : o.finished) done.push_back(std::move(r));
  }
  EXPECT_TRUE(saw_preemption);
  EXPECT_EQ(s.stats().num_preemptions, static_cast<int64_t>(preempted_log.size()));
  EXPECT_GE(preempted_log.size(), 1u);
  ASSERT_EQ(done.size(), 2u);
  for (const Sequence& r : done) {
    EXPECT_EQ(r.status, SequenceStatus::kFinishedLength);
    EXPECT_EQ(r.num_output_tokens(), 12);
    // next_token() depends on the length only: a recomputed request continues where it was.
    for (int k = 0; k < 12; ++k) EXPECT_EQ(r.output[static_cast<size_t>(k)], 1008 + k);
  }
  EXPECT_GT(done[1].num_preemptions + done[0].num_preemptions, 0);
  EXPECT_EQ(s.stats().kv.num_used_blocks, 0);
}

TEST(SchedulerTest, AbortFreesBlocksAtOnce) {
  Scheduler s(make_config(64, 4, 16));
  s.add_sequence(make_request(1, 10, 5));
  s.add_sequence(make_request(2, 10, 5, 300));
  step(s);
  s.add_sequence(make_request(3, 10, 5, 600));
  EXPECT_EQ(s.stats().kv.num_used_blocks, 6);
  std::optional<Sequence> r = s.abort(1);
  s.check_invariants();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, SequenceStatus::kFinishedAborted);
  EXPECT_EQ(s.stats().kv.num_used_blocks, 3);
  EXPECT_TRUE(s.abort(3).has_value());  // waiting: no blocks, just gone
  s.check_invariants();
  EXPECT_FALSE(s.abort(3).has_value());
  EXPECT_FALSE(s.abort(77).has_value());
  // Aborted between schedule() and commit(): its sampled token is dropped.
  StepPlan plan = s.schedule();
  ASSERT_EQ(plan.sequences.size(), 1u);
  EXPECT_TRUE(s.abort(2).has_value());
  s.check_invariants();
  EXPECT_EQ(s.stats().kv.num_used_blocks, 0);
  EXPECT_TRUE(s.commit(plan, std::vector<TokenId>{5}).empty());
  s.check_invariants();
  EXPECT_FALSE(s.has_unfinished());
}

TEST(SchedulerTest, StopTokenFinishesTheRequest) {
  Scheduler s(make_config(64, 4, 16));
  s.add_sequence(make_request(1, 6, 50, 100, {1008}));  // next_token gives 1006, 1007, 1008
  std::vector<Sequence> done;
  while (s.has_unfinished()) {
    for (Sequence& r : step(s).finished) done.push_back(std::move(r));
  }
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, SequenceStatus::kFinishedStopped);
  EXPECT_EQ(done[0].output, (std::vector<TokenId>{1006, 1007, 1008}));
}

TEST(SchedulerTest, ForkSharesBlocksAndPlansTheTailCopy) {
  Scheduler s(make_config(64, 4, 16));
  s.add_sequence(make_request(1, 10, 4));
  step(s);  // 10 computed: blocks 0 1 full, block 2 holds 2 tokens; one output token
  const std::vector<BlockId> parent = s.kv().block_table(1);
  s.fork(1, 2);
  s.check_invariants();
  const Sequence* child = s.find(2);
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(child->status, SequenceStatus::kRunning);
  EXPECT_EQ(child->parent, std::optional<SequenceId>(1));
  EXPECT_EQ(child->output, s.find(1)->output);
  EXPECT_EQ(child->num_computed_tokens, 10);
  const std::vector<BlockId> table = s.kv().block_table(2);
  EXPECT_EQ(table[0], parent[0]);
  EXPECT_EQ(table[1], parent[1]);
  EXPECT_NE(table[2], parent[2]);
  EXPECT_EQ(s.kv().pool().ref_count(parent[0]), 2);

  StepOutcome o = step(s);
  EXPECT_EQ(o.plan.block_copies, (std::vector<BlockCopy>{{parent[2], table[2]}}));
  ASSERT_EQ(o.plan.sequences.size(), 2u);
  EXPECT_EQ(o.plan.sequences[1].seq_id, 2);
  EXPECT_EQ(o.plan.sequences[1].start_position, 10);
  EXPECT_TRUE(step(s).plan.block_copies.empty());  // copied once
  while (s.has_unfinished()) step(s);
  EXPECT_EQ(s.stats().kv.num_used_blocks, 0);

  EXPECT_THROW(s.fork(1, 3), Error);  // finished: not live
}

TEST(SchedulerTest, ForkOfAWaitingRequestWaitsToo) {
  Scheduler s(make_config(64, 4, 16));
  s.add_sequence(make_request(1, 10, 4));
  s.fork(1, 2);
  s.check_invariants();
  EXPECT_EQ(s.find(2)->status, SequenceStatus::kWaiting);
  EXPECT_THROW(s.fork(1, 2), Error);  // id taken
  EXPECT_THROW(s.fork(9, 3), Error);  // unknown parent
  s.schedule();
  EXPECT_THROW(s.fork(1, 4), Error);  // a step is in flight
}

TEST(SchedulerTest, BadRequestsAndMisuseAreRejected) {
  Scheduler s(make_config(64, 4, 4));
  EXPECT_THROW(s.add_sequence(make_request(1, 0, 4)), Error);   // empty prompt
  EXPECT_THROW(s.add_sequence(make_request(1, 4, 0)), Error);   // max_tokens 0
  EXPECT_THROW(s.add_sequence(make_request(1, 14, 4)), Error);  // 17 slots > 4 blocks of 4
  s.add_sequence(make_request(1, 13, 4));                       // 16 slots: fits exactly
  EXPECT_THROW(s.add_sequence(make_request(1, 2, 2)), Error);   // duplicate id
  s.check_invariants();
  StepPlan plan = s.schedule();
  EXPECT_THROW(s.schedule(), Error);                            // one step in flight at a time
  EXPECT_THROW(s.commit(plan, std::vector<TokenId>{}), Error);  // one sample is due
  StepPlan other = plan;
  other.step_id += 1;
  EXPECT_THROW(s.commit(other, std::vector<TokenId>{1}), Error);
  s.check_invariants();
  s.commit(plan, std::vector<TokenId>{1});
  s.check_invariants();
  EXPECT_THROW(Scheduler(make_config(0, 4, 4)), Error);
  EXPECT_THROW(Scheduler(make_config(4, 0, 4)), Error);
}

}  // namespace
}  // namespace pagoda
