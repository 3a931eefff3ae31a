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

// A scheduler with prefix caching and `num_slots` recurrent state slots (a hybrid model's),
// with `num_checkpoints` state checkpoints after them.
inline SchedulerConfig state_config(int32_t budget, int32_t max_seqs, int32_t num_blocks,
                                    int32_t num_slots, int32_t block_size = 4,
                                    int32_t num_checkpoints = 0) {
  SchedulerConfig config;
  config.max_num_batched_tokens = budget;
  config.max_num_seqs = max_seqs;
  config.kv.num_blocks = num_blocks;
  config.kv.block_size = block_size;
  config.kv.enable_prefix_caching = true;
  config.num_state_slots = num_slots;
  config.num_state_checkpoints = num_checkpoints;
  return config;
}

// The plan's entry for sequence `id`, or nullptr.
inline const ScheduledSequence* scheduled(const StepPlan& plan, SequenceId id) {
  for (const ScheduledSequence& r : plan.sequences) {
    if (r.seq_id == id) return &r;
  }
  return nullptr;
}

}  // namespace pagoda::test
