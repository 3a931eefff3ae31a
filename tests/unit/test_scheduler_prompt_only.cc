// Prompt-only sequences (embedding requests) in the scheduler: computed under the same token
// budget as prompt chunks, beside generation, chunked, preempted and recomputed from their start;
// they sample nothing, finish when their prompt is computed, and neither hit nor fill the prefix
// cache. Fake requests, no model; invariants checked after every operation.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/error.h"
#include "sched/scheduler.h"
#include "unit/sched_test_util.h"

namespace pagoda {
namespace {

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

Sequence generation(SequenceId id, int num_prompt, int max_tokens, TokenId first = 100) {
  return test::make_request(id, num_prompt, max_tokens, first);
}

Sequence embedding(SequenceId id, int num_prompt, TokenId first = 100,
                   PromptOnly rows = PromptOnly::kAllRows) {
  Sequence r = generation(id, num_prompt, 1, first);
  r.prompt_only = rows;
  return r;
}

struct StepOutcome {
  StepPlan plan;
  std::vector<Sequence> finished;
};

// schedule + commit; the fake model's next token depends on the sequence's length only.
StepOutcome step(Scheduler& s) {
  StepOutcome out;
  out.plan = s.schedule();
  s.check_invariants();
  std::vector<TokenId> sampled;
  for (const ScheduledSequence& r : out.plan.sequences) {
    const Sequence* q = s.find(r.seq_id);
    if (q->is_prompt_only()) {
      EXPECT_FALSE(r.needs_sample);
    }
    if (r.needs_sample) sampled.push_back(1000 + q->num_tokens());
  }
  out.finished = s.commit(out.plan, sampled);
  s.check_invariants();
  return out;
}


TEST(SchedulerPromptOnlyTest, ComputesItsPromptFinishesAndFreesEverything) {
  Scheduler s(make_config(64, 4, 16));
  s.add_sequence(embedding(1, 10));
  const StepOutcome o = step(s);
  ASSERT_EQ(o.plan.sequences.size(), 1u);
  EXPECT_EQ(o.plan.sequences[0].num_new_tokens, 10);
  EXPECT_EQ(o.plan.sequences[0].num_logit_rows(), 0);
  ASSERT_EQ(o.finished.size(), 1u);
  EXPECT_EQ(o.finished[0].status, SequenceStatus::kFinishedPrompt);
  EXPECT_TRUE(o.finished[0].output.empty());
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(s.stats().kv.num_used_blocks, 0);
  EXPECT_EQ(s.stats().kv.num_cached_blocks, 0);  // never entered into the prefix cache
}

TEST(SchedulerPromptOnlyTest, SharesStepsWithGenerationUnderOneBudgetAndIsChunked) {
  Scheduler s(make_config(16, 8, 64));
  s.add_sequence(generation(1, 6, 12));
  step(s);  // request 1's prompt: it decodes from here on
  s.add_sequence(embedding(2, 40));
  s.add_sequence(embedding(3, 5, 300));
  std::vector<TokenId> output;
  int embedding_steps = 0, finished_embeddings = 0;
  while (s.has_unfinished()) {
    const StepOutcome o = step(s);
    EXPECT_LE(o.plan.num_scheduled_tokens, 16);
    if (const ScheduledSequence* g = scheduled(o.plan, 1)) {
      EXPECT_EQ(g->num_new_tokens, 1);  // its decode is never held back by the embeddings
    } else {
      EXPECT_EQ(s.find(1), nullptr);
    }
    if (scheduled(o.plan, 2) != nullptr && scheduled(o.plan, 1) != nullptr) ++embedding_steps;
    for (const Sequence& r : o.finished) {
      if (r.id == 1) output = r.output;
      if (r.is_prompt_only()) {
        ++finished_embeddings;
        EXPECT_EQ(r.num_computed_tokens, r.num_tokens());
      }
    }
  }
  EXPECT_GE(embedding_steps, 3);  // 40 tokens in chunks beside the decodes
  EXPECT_EQ(finished_embeddings, 2);
  ASSERT_EQ(output.size(), 12u);
  for (int k = 0; k < 12; ++k) EXPECT_EQ(output[static_cast<size_t>(k)], 1006 + k);
  EXPECT_EQ(s.stats().kv.num_used_blocks, 0);
}

TEST(SchedulerPromptOnlyTest, NeitherHitsNorFillsThePrefixCache) {
  Scheduler s(make_config(64, 4, 32));
  s.add_sequence(generation(1, 12, 1));
  step(s);
  const int32_t cached = s.stats().kv.num_cached_blocks;
  EXPECT_EQ(cached, 3);  // the 12 prompt tokens' full blocks
  // The same prompt as an embedding: computed in full, not from the cached blocks.
  s.add_sequence(embedding(2, 12));
  StepOutcome o = step(s);
  ASSERT_NE(scheduled(o.plan, 2), nullptr);
  EXPECT_EQ(scheduled(o.plan, 2)->start_position, 0);
  EXPECT_EQ(scheduled(o.plan, 2)->num_new_tokens, 12);
  EXPECT_EQ(s.stats().kv.num_cached_blocks, cached);
  // A new prompt embedded first is not cached for the generation that follows.
  s.add_sequence(embedding(3, 12, 700));
  step(s);
  s.add_sequence(generation(4, 12, 1, 700));
  o = step(s);
  ASSERT_NE(scheduled(o.plan, 4), nullptr);
  EXPECT_EQ(scheduled(o.plan, 4)->start_position, 0);
}

TEST(SchedulerPromptOnlyTest, IsPreemptedAndRecomputedFromItsStart) {
  // 7 blocks of 4: the generation (27 slots at the end) grows until a block is short; the
  // embedding, admitted later, is the newest and gives its blocks back mid-prompt.
  Scheduler s(make_config(8, 4, 7));
  s.add_sequence(generation(1, 4, 24));
  step(s);
  s.add_sequence(embedding(2, 20));
  bool preempted = false, restarted = false;
  for (int i = 0; i < 200 && s.has_unfinished(); ++i) {
    const StepOutcome o = step(s);
    for (SequenceId id : o.plan.preempted) preempted |= id == 2;
    if (const ScheduledSequence* e = scheduled(o.plan, 2); e != nullptr && preempted) {
      restarted |= e->start_position == 0;
    }
  }
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_TRUE(preempted);
  EXPECT_TRUE(restarted);
  EXPECT_EQ(s.stats().kv.num_used_blocks, 0);
}

TEST(SchedulerPromptOnlyTest, AbortFreesItsBlocksAndMisuseIsRefused) {
  Scheduler s(make_config(4, 4, 16));
  s.add_sequence(embedding(1, 10));
  step(s);  // a first chunk of 4
  ASSERT_NE(s.find(1), nullptr);
  EXPECT_GT(s.stats().kv.num_used_blocks, 0);
  EXPECT_EQ(s.abort(1)->status, SequenceStatus::kFinishedAborted);
  EXPECT_EQ(s.stats().kv.num_used_blocks, 0);
  s.check_invariants();

  Sequence with_output = embedding(2, 4);
  with_output.output = {5};
  with_output.max_tokens = 4;
  EXPECT_THROW(s.add_sequence(with_output), Error);
  Sequence with_logits = embedding(3, 4);
  with_logits.prompt_logits = true;
  EXPECT_THROW(s.add_sequence(with_logits), Error);
  EXPECT_THROW(s.add_sequence(embedding(4, 65)), Error);  // 16 blocks of 4 hold 64
  s.add_sequence(embedding(5, 4));
  EXPECT_THROW(s.fork(5, 6), Error);
  s.check_invariants();
}

}  // namespace
}  // namespace pagoda
