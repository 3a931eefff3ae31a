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
ForwardBatch build_forward_batch(const StepPlan& plan, const FindRequest& find_request,
                                 int32_t block_size);
ForwardBatch build_forward_batch(const StepPlan& plan, const Scheduler& scheduler);

}  // namespace pagoda
