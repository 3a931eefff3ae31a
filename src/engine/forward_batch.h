// From the scheduler's integers to the model's input: build_forward_batch() lays out every token
// a StepPlan schedules (prompt chunks and decodes of many requests, mixed) as one ForwardBatch,
// so one Model::forward call runs them all through each weight matrix once.
#pragma once

#include <cstdint>
#include <functional>

#include "model/model.h"
#include "sched/scheduler.h"
#include "sched/step_plan.h"

namespace pagoda {

// A live request of the plan by id; never null for an id the plan schedules.
using FindRequest = std::function<const Sequence*(SequenceId)>;

// Sequence s of the batch is plan.sequences[s]: its tokens [start_position, start_position +
// num_new_tokens) of prompt + output, at those positions, written to the slots its block table
// names; proposals (ScheduledSequence::proposed) follow the known tokens. Block table rows are
// padded with kNoBlock past a request's own blocks (attention reads only up to each token's
// position). logit_rows holds, for every request with needs_sample in plan order (the order
// Scheduler::commit() wants the new tokens in), its num_logit_rows() last rows.
// Throws Error when a scheduled request is unknown or its table does not cover its tokens.
// A prompt-only request gets hidden_state_rows() rows, marked in hidden_row. With state slots,
// a request verifying proposals keeps its recurrent state before each (state_snapshots).
// A request with Sequence::prompt_logits also gets, before those, a row for each scheduled prompt
// position but the last (whose row is the first sample's): prompt_logit_rows() of them.
ForwardBatch build_forward_batch(const StepPlan& plan, const FindRequest& find_request,
                                 int32_t block_size);

// The rows of `s`'s prompt positions [first_position, first_position + count) the forward pass
// gives `r` this step (count 0 unless r.prompt_logits): each row scores the next prompt token.
struct PromptRows {
  int32_t first_position = 0;
  int32_t count = 0;
};
PromptRows prompt_logit_rows(const ScheduledSequence& s, const Sequence& r);
// The rows of a prompt-only sequence `r` (an embedding) whose final hidden states this step
// gives (ForwardBatch::hidden_row): every scheduled position, the first or the last of its prompt
// when this step computes it. Count 0 for other sequences.
PromptRows hidden_state_rows(const ScheduledSequence& s, const Sequence& r);
ForwardBatch build_forward_batch(const StepPlan& plan, const Scheduler& scheduler);

}  // namespace pagoda
