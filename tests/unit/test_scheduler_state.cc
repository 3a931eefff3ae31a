// Scheduler with state slots (a hybrid model's recurrent state, model/state_storage.h): each
// running request holds one slot of its own, taken at admission and given back at preemption
// and at the end; no prefix-cache hit for such requests; a forked child takes a free slot and a
// copy of its parent's (StepPlan::state_copies), or waits without one. A fake recurrent model
// checks under random load and forks that every step's tokens continue the state their slot
// holds.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <set>

#include "core/error.h"
#include "sched/scheduler.h"
#include "unit/sched_test_util.h"

namespace pagoda {
namespace {

using test::make_request;

TokenId next_token(const Sequence& r) { return 1000 + r.num_tokens(); }

// A recurrent model's state per slot: the tokens it has consumed. A step's tokens must start
// where the slot's state ends, or at position 0 (the state starts afresh), and the state must be
// the sequence's own first tokens. The plan's state copies run before the step.
class FakeRecurrentModel {
 public:
  explicit FakeRecurrentModel(int32_t num_slots) : slots_(static_cast<size_t>(num_slots)) {}

  void run(const Scheduler& s, const StepPlan& plan) {
    for (const StateCopy& c : plan.state_copies) {
      ASSERT_NE(c.src, c.dst);
      slots_.at(static_cast<size_t>(c.dst)) = slots_.at(static_cast<size_t>(c.src));
    }
    std::set<int32_t> used;
    for (const ScheduledSequence& r : plan.sequences) {
      ASSERT_GE(r.state_slot, 0);
      ASSERT_TRUE(used.insert(r.state_slot).second) << "two sequences in slot " << r.state_slot;
      std::vector<TokenId>& slot = slots_[static_cast<size_t>(r.state_slot)];
      const Sequence* seq = s.find(r.seq_id);
      ASSERT_NE(seq, nullptr);
      if (r.start_position == 0) slot.clear();
      ASSERT_EQ(static_cast<int32_t>(slot.size()), r.start_position);
      for (int32_t p = 0; p < r.start_position + r.num_new_tokens; ++p) {
        const int32_t num_prompt = seq->num_prompt_tokens();
        const TokenId t = p < num_prompt ? seq->prompt[static_cast<size_t>(p)]
                                         : seq->output[static_cast<size_t>(p - num_prompt)];
        if (p < r.start_position) {
          ASSERT_EQ(slot[static_cast<size_t>(p)], t)
              << "slot " << r.state_slot << " holds another's state at position " << p;
        } else {
          slot.push_back(t);
        }
      }
    }
  }

 private:
  std::vector<std::vector<TokenId>> slots_;
};

std::vector<Sequence> step(Scheduler& s, FakeRecurrentModel* model = nullptr,
                           StepPlan* plan_out = nullptr) {
  StepPlan plan = s.schedule();
  s.check_invariants();
  if (model != nullptr) model->run(s, plan);
  std::vector<TokenId> sampled;
  for (const ScheduledSequence& r : plan.sequences) {
    if (r.needs_sample) sampled.push_back(next_token(*s.find(r.seq_id)));
  }
  std::vector<Sequence> done = s.commit(plan, sampled);
  s.check_invariants();
  if (plan_out != nullptr) *plan_out = std::move(plan);
  return done;
}

TEST(SchedulerStateTest, SlotsAreTakenAtAdmissionAndGivenBackAtTheEnd) {
  Scheduler s(test::state_config(64, 4, 64, 2));  // four sequences allowed, two slots
  for (SequenceId id = 1; id <= 3; ++id) s.add_sequence(make_request(id, 5, 3, 100 * id));
  StepPlan plan;
  step(s, nullptr, &plan);
  ASSERT_EQ(plan.sequences.size(), 2u);  // the third waits for a slot
  EXPECT_EQ(plan.sequences[0].state_slot, 0);
  EXPECT_EQ(plan.sequences[1].state_slot, 1);
  EXPECT_EQ(s.num_free_state_slots(), 0);
  EXPECT_EQ(s.find(3)->status, SequenceStatus::kWaiting);
  EXPECT_EQ(s.find(3)->state_slot, -1);
  int guard = 0;
  while (s.find(1) != nullptr && ++guard < 20) step(s, nullptr, &plan);
  EXPECT_EQ(s.find(2), nullptr);  // both finished in the same step
  step(s, nullptr, &plan);
  ASSERT_NE(s.find(3), nullptr);
  EXPECT_EQ(s.find(3)->state_slot, 0);  // the lowest free one
  while (s.has_unfinished() && ++guard < 40) step(s);
  EXPECT_EQ(s.num_free_state_slots(), 2);
}

TEST(SchedulerStateTest, NoPrefixCacheHitWithStateSlots) {
  Scheduler s(test::state_config(64, 4, 64, 4));
  s.add_sequence(make_request(1, 12, 2));
  while (s.has_unfinished()) step(s);
  s.add_sequence(make_request(2, 12, 2));  // the same prompt: its blocks are cached
  StepPlan plan;
  step(s, nullptr, &plan);
  ASSERT_EQ(plan.sequences.size(), 1u);
  EXPECT_EQ(plan.sequences[0].start_position, 0);
  EXPECT_EQ(plan.sequences[0].num_new_tokens, 12);
  EXPECT_EQ(s.find(2)->num_cached_tokens, 0);
}

TEST(SchedulerStateTest, PreemptionGivesTheSlotBackAndRecomputesFromZero) {
  // 6 blocks of 4: two requests of 8 prompt tokens + 12 output cannot both finish in place.
  Scheduler s(test::state_config(64, 4, 6, 4));
  FakeRecurrentModel model(4);
  s.add_sequence(make_request(1, 8, 12));
  s.add_sequence(make_request(2, 8, 12, 500));
  bool preempted = false;
  for (int i = 0; i < 100 && s.has_unfinished(); ++i) {
    StepPlan plan;
    step(s, &model, &plan);
    for (SequenceId id : plan.preempted) {
      preempted = true;
      EXPECT_EQ(s.find(id)->state_slot, -1);
    }
  }
  EXPECT_TRUE(preempted);
  EXPECT_EQ(s.num_free_state_slots(), 4);
}

TEST(SchedulerStateTest, AForkTakesAFreeSlotWithACopyOfItsParentsState) {
  Scheduler s(test::state_config(64, 4, 64, 4));
  FakeRecurrentModel model(4);
  s.add_sequence(make_request(1, 6, 5));
  step(s, &model);  // the prompt, and its first token
  ASSERT_EQ(s.find(1)->state_slot, 0);
  s.fork(1, 2, TokenId{77});  // another first token: it shares the computed prompt
  s.fork(1, 3);
  s.check_invariants();
  EXPECT_EQ(s.find(2)->status, SequenceStatus::kRunning);
  EXPECT_EQ(s.find(2)->state_slot, 1);
  EXPECT_EQ(s.find(3)->state_slot, 2);
  EXPECT_EQ(s.num_free_state_slots(), 1);
  StepPlan plan;
  step(s, &model, &plan);
  EXPECT_EQ(plan.state_copies, (std::vector<StateCopy>{{0, 1}, {0, 2}}));
  ASSERT_EQ(plan.sequences.size(), 3u);
  for (const ScheduledSequence& r : plan.sequences) EXPECT_EQ(r.start_position, 6);
  // A fork of a fork copies the child's slot; the copies run once.
  s.fork(2, 4);
  step(s, &model, &plan);
  EXPECT_EQ(plan.state_copies, (std::vector<StateCopy>{{1, 3}}));
  step(s, &model, &plan);
  EXPECT_TRUE(plan.state_copies.empty());
  while (s.has_unfinished()) step(s, &model);
  EXPECT_EQ(s.num_free_state_slots(), 4);
}

TEST(SchedulerStateTest, AForkWithoutAFreeSlotWaitsAndStartsAfresh) {
  Scheduler s(test::state_config(64, 4, 64, 1));  // one slot
  FakeRecurrentModel model(1);
  s.add_sequence(make_request(1, 6, 3));
  step(s, &model);
  s.fork(1, 2, TokenId{77});
  s.check_invariants();
  EXPECT_EQ(s.find(2)->status, SequenceStatus::kWaiting);
  EXPECT_EQ(s.find(2)->state_slot, -1);
  StepPlan plan;
  step(s, &model, &plan);
  EXPECT_TRUE(plan.state_copies.empty());
  ASSERT_EQ(plan.sequences.size(), 1u);
  int guard = 0;
  bool started = false;
  while (s.has_unfinished() && ++guard < 20) {
    step(s, &model, &plan);
    for (const ScheduledSequence& r : plan.sequences) {
      if (r.seq_id != 2 || started) continue;
      started = true;
      EXPECT_EQ(r.start_position, 0);  // computed from its first token in the freed slot
      EXPECT_EQ(r.state_slot, 0);
    }
  }
  EXPECT_TRUE(started);
  EXPECT_EQ(s.num_free_state_slots(), 1);
}

TEST(SchedulerStateTest, AChildPreemptedAfterItsForkStartsAfresh) {
  // 5 blocks of 4: the parent and its child outgrow the cache and the child, newest, is preempted.
  Scheduler s(test::state_config(64, 4, 5, 4));
  FakeRecurrentModel model(4);
  s.add_sequence(make_request(1, 7, 10));
  step(s, &model);
  s.fork(1, 2, TokenId{77});
  bool preempted = false;
  for (int i = 0; i < 60 && s.has_unfinished(); ++i) {
    StepPlan plan;
    step(s, &model, &plan);
    for (SequenceId id : plan.preempted) preempted |= id == 2;
  }
  EXPECT_TRUE(preempted);
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(s.num_free_state_slots(), 4);
}

TEST(SchedulerStateTest, AbortGivesTheSlotBack) {
  Scheduler s(test::state_config(64, 4, 64, 1));
  s.add_sequence(make_request(1, 5, 4));
  s.add_sequence(make_request(2, 5, 4));
  step(s);
  EXPECT_EQ(s.num_free_state_slots(), 0);
  ASSERT_TRUE(s.abort(1).has_value());
  s.check_invariants();
  EXPECT_EQ(s.num_free_state_slots(), 1);
  StepPlan plan;
  step(s, nullptr, &plan);
  ASSERT_EQ(plan.sequences.size(), 1u);
  EXPECT_EQ(plan.sequences[0].seq_id, 2);
  EXPECT_EQ(plan.sequences[0].state_slot, 0);
}

// Random budgets, caches, slot counts, prompts, aborts and forks: every step's tokens continue
// their slot's state, and every invariant holds after every step.
TEST(SchedulerStateTest, RandomLoadKeepsEverySlotsStateContinuous) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int32_t slots = uniform(1, 6);
    Scheduler s(
        test::state_config(uniform(4, 48), uniform(1, 8), uniform(12, 40), slots, uniform(2, 8)));
    FakeRecurrentModel model(slots);
    SequenceId next_id = 1;
    for (int i = 0; i < 200; ++i) {
      if (uniform(0, 3) == 0) {
        Sequence r = make_request(next_id++, uniform(1, 20), uniform(1, 10), uniform(0, 50));
        try {
          s.add_sequence(std::move(r));
        } catch (const Error&) {
          // too large for the whole cache: refused up front
        }
      }
      if (uniform(0, 20) == 0 && next_id > 1) s.abort(uniform(1, static_cast<int>(next_id - 1)));
      if (uniform(0, 6) == 0 && next_id > 1) {  // a fork of a live request, as n > 1 and beams do
        const SequenceId parent = uniform(1, static_cast<int>(next_id - 1));
        const Sequence* p = s.find(parent);
        if (p != nullptr && !p->is_prompt_only()) {
          std::optional<TokenId> last;
          if (!p->output.empty() && uniform(0, 1) == 0) last = uniform(0, 50);
          s.fork(parent, next_id++, last);
        }
      }
      s.check_invariants();
      step(s, &model);
      if (HasFatalFailure()) FAIL() << "seed " << seed;
    }
    while (s.has_unfinished()) step(s, &model);
    EXPECT_EQ(s.num_free_state_slots(), slots) << "seed " << seed;
  }
}

}  // namespace
}  // namespace pagoda
