// Shared by the scheduler's and the forward batch's tests: fake requests and plan lookups.
#pragma once

#include <numeric>
#include <utility>
#include <vector>

#include "sched/scheduler.h"

namespace pagoda::test {

// A sequence whose prompt is num_prompt ids counting up from `first`.
inline Sequence make_request(SequenceId id, int num_prompt, int max_tokens, TokenId first = 100,
                             std::vector<TokenId> stop_ids = {}) {
  Sequence r;
  r.id = id;
  r.prompt.resize(static_cast<size_t>(num_prompt));
  std::iota(r.prompt.begin(), r.prompt.end(), first);
  r.max_tokens = max_tokens;
  r.stop_ids = std::move(stop_ids);
  return r;
}

// The plan's entry for sequence `id`, or nullptr.
inline const ScheduledSequence* scheduled(const StepPlan& plan, SequenceId id) {
  for (const ScheduledSequence& r : plan.sequences) {
    if (r.seq_id == id) return &r;
  }
  return nullptr;
}

}  // namespace pagoda::test
