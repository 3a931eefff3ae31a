// What one engine step computes, in integers: the scheduler's output and the input of
// build_forward_batch(). Token ids are read from the requests (Scheduler::find()).
#pragma once

#include <cstdint>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_cache_manager.h"

namespace pagoda {

// A recurrent state slot copied whole into another (Scheduler::fork of a hybrid model's
// sequence).
struct StateCopy {
  int32_t src = -1;
  int32_t dst = -1;
  bool operator==(const StateCopy&) const = default;
};

struct ScheduledSequence {
  SequenceId seq_id = 0;             // the scheduled Sequence's id
  int32_t num_new_tokens = 0;        // tokens [start_position, start_position + num_new_tokens)
  int32_t start_position = 0;        // = the request's num_computed_tokens before the step
  std::vector<BlockId> block_table;  // after this step's allocation; covers every new token
  // The scheduled tokens reach the end of the request's known tokens: the step samples from the
  // logits of its last known position. A chunk of a longer prompt does not.
  bool needs_sample = false;
  // Speculative decoding: the last num_proposed of the new tokens are proposals, positions past
  // the known tokens, which the step verifies from num_proposed + 1 logit rows (the last known
  // position and each proposal's). The scheduler sets the count; the engine writes the tokens
  // before the forward pass.
  int32_t num_proposed = 0;
  std::vector<TokenId> proposed;  // [num_proposed] once the engine has filled it
  int32_t state_slot = -1;        // its recurrent state slot (hybrid models); -1: none
  // Hybrid prefix caching (sched/state_checkpoints.h): the checkpoint slot whose state the
  // engine copies into state_slot before the step (a cache hit: the step starts after it), and
  // the one it copies state_slot into after the step (its tokens end on a block boundary).
  int32_t restore_state_from = -1;
  int32_t save_state_to = -1;

  // Logit rows this request takes: 0 for a prompt chunk, else 1 + num_proposed.
  int32_t num_logit_rows() const { return needs_sample ? 1 + num_proposed : 0; }
};

struct StepPlan {
  int64_t step_id = -1;
  std::vector<ScheduledSequence> sequences; // running requests first, then newly admitted
  std::vector<BlockCopy> block_copies;     // run in order, before any K/V write of the step
  // Hybrid models: recurrent state slots to copy (a forked child's state from its parent's at
  // the fork), run in order before the step's forward pass, like block_copies.
  std::vector<StateCopy> state_copies;
  std::vector<SequenceId> preempted;       // requests this step preempted (their blocks are gone)
  int32_t num_scheduled_tokens = 0;        // sum of num_new_tokens, <= max_num_batched_tokens

  bool empty() const {
    return sequences.empty() && block_copies.empty() && state_copies.empty();
  }
  int32_t num_samples() const {
    int32_t n = 0;
    for (const ScheduledSequence& r : sequences) n += r.needs_sample ? 1 : 0;
    return n;
  }
  int32_t num_logit_rows() const {
    int32_t n = 0;
    for (const ScheduledSequence& r : sequences) n += r.num_logit_rows();
    return n;
  }
};

}  // namespace pagoda
