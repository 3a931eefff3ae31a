// A multi-turn agent workload on a pool smaller than the conversations at once (the shape of
// bench/kv_tiers.py --conversations 16 --turns 4 --concurrency 4 --kv-tokens 1024): each turn
// sends the whole conversation so far plus a new message, four turns in flight, the next turn
// of the sixteen conversations only after all of the previous one's. Running requests grow and
// preempt one another; no request may wait for its first token longer than the work ahead of
// it (docs/SCHEDULER.md, "How long a request can wait").
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "sched/scheduler.h"

namespace pagoda {
namespace {

struct Workload {
  int conversations = 16;
  int turns = 4;
  int concurrency = 4;
  int message_tokens = 155;  // a 600-byte message
  int answer_tokens = 16;
  int pool_tokens = 1024;
  int step_tokens = 512;
  bool prefix_caching = true;
  bool state_slots = false;  // a hybrid model's: a preempted request recomputes everything
};

struct Result {
  std::vector<int64_t> wait_steps;  // per request: steps from arrival to its first token
  std::vector<int64_t> bound_steps;  // per request: the work ahead of it at arrival (below)
  int64_t num_steps = 0;
  int64_t num_preemptions = 0;
  int32_t max_preemptions_of_one = 0;
};

// Runs the workload to the end with fake sampled tokens; checks the invariants every step.
Result run(const Workload& w) {
  SchedulerConfig config;
  config.max_num_batched_tokens = w.step_tokens;
  config.max_num_seqs = w.concurrency;
  config.kv.block_size = 16;
  config.kv.num_blocks = w.pool_tokens / config.kv.block_size;
  config.kv.enable_prefix_caching = w.prefix_caching;
  config.num_state_slots = w.state_slots ? w.concurrency : 0;
  Scheduler s(config);
  int32_t max_preempted = 0;

  std::vector<std::vector<TokenId>> history(static_cast<size_t>(w.conversations));
  std::map<SequenceId, int64_t> arrived;  // live request -> the step it arrived before
  std::map<SequenceId, int> conversation;
  std::map<SequenceId, int64_t> bound;  // live request -> its wait bound
  // The smallest prompt chunk a step gives (the scheduler's cap past half the budget, for a
  // prompt as long as the pool): every step moves the oldest request on by at least this many
  // prompt tokens or one output token.
  const int64_t half = w.step_tokens / 2;
  const int64_t min_chunk = std::max<int64_t>(config.kv.block_size, half * half / w.pool_tokens);
  auto prefill_steps = [&](int64_t num_tokens) { return (num_tokens + min_chunk - 1) / min_chunk; };
  Result result;
  int turn = 0;
  int next_conversation = 0;  // of this turn, not yet sent
  int num_done = 0;           // of this turn
  SequenceId next_id = 1;
  int64_t step = 0;
  auto send = [&](int c) {
    std::vector<TokenId>& h = history[static_cast<size_t>(c)];
    for (int i = 0; i < w.message_tokens; ++i) {
      h.push_back(static_cast<TokenId>(1000 * (c + 1) + turn * 200 + i % 200));
    }
    Sequence r;
    const SequenceId id = next_id++;
    r.id = id;
    r.prompt = h;
    r.max_tokens = w.answer_tokens;
    // Everything live arrived before it and, first come first served, goes first: at worst
    // each recomputes its whole final context from scratch and then answers; then its own
    // prompt.
    int64_t ahead = prefill_steps(static_cast<int64_t>(r.prompt.size()));
    for (const auto& [other, at] : arrived) {
      ahead += prefill_steps(s.find(other)->num_prompt_tokens() + w.answer_tokens) +
               w.answer_tokens;
    }
    bound[id] = ahead;
    s.add_sequence(std::move(r));
    arrived[id] = step;
    conversation[id] = c;
  };
  while (turn < w.turns) {
    while (next_conversation < w.conversations &&
           static_cast<int>(arrived.size()) < w.concurrency) {
      send(next_conversation++);
    }
    StepPlan plan = s.schedule();
    s.check_invariants();
    ++step;
    if (step > 100000) ADD_FAILURE() << "the workload does not end";
    if (step > 100000) break;
    std::vector<TokenId> sampled;
    for (const ScheduledSequence& q : plan.sequences) {
      if (!q.needs_sample) continue;
      sampled.push_back(static_cast<TokenId>(7 + q.start_position % 50));
      auto it = arrived.find(q.seq_id);
      if (s.find(q.seq_id)->output.empty()) {
        result.wait_steps.push_back(step - it->second);
        result.bound_steps.push_back(bound[q.seq_id]);
      }
    }
    for (Sequence& done : s.commit(plan, sampled)) {
      std::vector<TokenId>& h = history[static_cast<size_t>(conversation[done.id])];
      h.insert(h.end(), done.output.begin(), done.output.end());
      max_preempted = std::max(max_preempted, done.num_preemptions);
      arrived.erase(done.id);
      if (++num_done == w.conversations) {
        ++turn;
        next_conversation = 0;
        num_done = 0;
      }
    }
    s.check_invariants();
  }
  result.num_steps = step;
  result.num_preemptions = s.stats().num_preemptions;
  result.max_preemptions_of_one = max_preempted;
  return result;
}

// Every request's wait to its first token against its bound; prints the spread.
void expect_bounded_waits(const Workload& w) {
  const Result r = run(w);
  std::vector<int64_t> waits = r.wait_steps;
  ASSERT_EQ(waits.size(), static_cast<size_t>(w.conversations * w.turns));
  std::sort(waits.begin(), waits.end());
  std::printf("steps %lld, preemptions %lld (at most %d of one request), wait median %lld, "
              "worst %lld\n",
              static_cast<long long>(r.num_steps), static_cast<long long>(r.num_preemptions),
              r.max_preemptions_of_one, static_cast<long long>(waits[waits.size() / 2]),
              static_cast<long long>(waits.back()));
  // No request waits longer than the work ahead of it at its arrival, done one at a time.
  for (size_t i = 0; i < r.wait_steps.size(); ++i) {
    EXPECT_LE(r.wait_steps[i], r.bound_steps[i]) << "request " << i + 1;
  }
}

TEST(SchedulerStarve, NoTurnWaitsLongerThanTheWorkAheadOfIt) { expect_bounded_waits({}); }

// Without the prefix cache a preempted request recomputes its whole context, as does a hybrid
// model's (its recurrent state at a cache hit is not kept): the bound still holds.
TEST(SchedulerStarve, NoTurnWaitsLongerThanTheWorkAheadOfItWithoutCacheHits) {
  Workload w;
  w.prefix_caching = false;
  expect_bounded_waits(w);
  w.prefix_caching = true;
  w.state_slots = true;
  expect_bounded_waits(w);
}

}  // namespace
}  // namespace pagoda

