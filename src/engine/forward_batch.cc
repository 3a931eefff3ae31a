#include "engine/forward_batch.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {

ForwardBatch build_forward_batch(const StepPlan& plan, const FindRequest& find_request,
                                 int32_t block_size) {
  if (block_size < 1) fail("forward batch: block size must be positive, got ", block_size);
  ForwardBatch b;
  b.block_size = block_size;
  const auto num_seqs = static_cast<int32_t>(plan.sequences.size());
  int32_t max_blocks = 0;
  for (const ScheduledSequence& s : plan.sequences) {
    max_blocks = std::max(max_blocks, static_cast<int32_t>(s.block_table.size()));
  }
  b.max_blocks_per_seq = max_blocks;
  b.token_ids.reserve(static_cast<size_t>(plan.num_scheduled_tokens));
  b.positions.reserve(static_cast<size_t>(plan.num_scheduled_tokens));
  b.slot_mapping.reserve(static_cast<size_t>(plan.num_scheduled_tokens));
  b.query_start.reserve(static_cast<size_t>(num_seqs) + 1);
  b.block_table.assign(static_cast<size_t>(num_seqs) * max_blocks, kNoBlock);
  b.query_start.push_back(0);

  for (int32_t seq = 0; seq < num_seqs; ++seq) {
    const ScheduledSequence& s = plan.sequences[seq];
    const Sequence* r = find_request(s.seq_id);
    if (r == nullptr) fail("forward batch: request ", s.seq_id, " of the plan is not live");
    const int64_t end = int64_t{s.start_position} + s.num_new_tokens;
    const int64_t known_end = end - s.num_proposed;  // proposals come after the known tokens
    const auto num_table_blocks = static_cast<int64_t>(s.block_table.size());
    if (s.start_position < 0 || s.num_new_tokens < 1 || s.num_proposed < 0 ||
        known_end <= s.start_position || known_end > r->num_tokens() ||
        end > num_table_blocks * block_size) {
      fail("forward batch: request ", s.seq_id, " schedules positions [", s.start_position, ", ",
           end, ") of ", r->num_tokens(), " tokens with ", num_table_blocks, " blocks of ",
           block_size);
    }
    if (s.needs_sample != (known_end == r->num_tokens() && !r->is_prompt_only()) ||
        (s.num_proposed > 0 && !s.needs_sample)) {
      fail("forward batch: request ", s.seq_id, " needs_sample disagrees with its tokens");
    }
    if (static_cast<int32_t>(s.proposed.size()) != s.num_proposed) {
      fail("forward batch: request ", s.seq_id, " has ", s.proposed.size(), " proposed tokens for ",
           s.num_proposed, " scheduled");
    }
    if (s.state_slot >= 0) {
      b.state_slots.push_back(s.state_slot);
      b.state_snapshots.push_back(s.num_proposed);  // roll-back points for its proposals
    }
    std::copy(s.block_table.begin(), s.block_table.end(),
              b.block_table.begin() + int64_t{seq} * max_blocks);
    const int32_t num_prompt = r->num_prompt_tokens();
    for (int32_t pos = s.start_position; pos < end; ++pos) {
      b.token_ids.push_back(pos >= known_end   ? s.proposed[pos - known_end]
                            : pos < num_prompt ? r->prompt[pos]
                                               : r->output[pos - num_prompt]);
      b.positions.push_back(pos);
      b.slot_mapping.push_back(int64_t{s.block_table[pos / block_size]} * block_size +
                               pos % block_size);
    }
    if (r->adapter != 0 || !b.adapters.empty()) {  // earlier sequences' tokens: none
      b.adapters.resize(b.token_ids.size() - static_cast<size_t>(end - s.start_position), 0);
      b.adapters.resize(b.token_ids.size(), r->adapter);
    }
    b.query_start.push_back(b.num_tokens());
    const PromptRows prompt_rows = prompt_logit_rows(s, *r);
    for (int32_t i = 0; i < prompt_rows.count; ++i) {
      b.logit_rows.push_back(b.num_tokens() - (end - prompt_rows.first_position - i));
    }
    // The last known position and every proposal's: row i verifies proposal i.
    for (int32_t row = s.num_logit_rows(); row > 0; --row) b.logit_rows.push_back(b.num_tokens() - row);
    b.hidden_row.resize(b.logit_rows.size(), 0);
    const PromptRows hidden = hidden_state_rows(s, *r);
    for (int32_t i = 0; i < hidden.count; ++i) {
      b.logit_rows.push_back(b.num_tokens() - static_cast<int32_t>(end - hidden.first_position - i));
      b.hidden_row.push_back(1);
    }
  }
  if (!b.state_slots.empty() && b.state_slots.size() != plan.sequences.size()) {
    fail("forward batch: some sequences of the plan hold a state slot and some do not");
  }
  if (std::all_of(b.state_snapshots.begin(), b.state_snapshots.end(),
                  [](int32_t n) { return n == 0; })) {
    b.state_snapshots.clear();
  }
  if (std::find(b.hidden_row.begin(), b.hidden_row.end(), 1) == b.hidden_row.end()) {
    b.hidden_row.clear();
  }
  return b;
}

PromptRows hidden_state_rows(const ScheduledSequence& s, const Sequence& r) {
  const int32_t end = s.start_position + s.num_new_tokens;
  switch (r.prompt_only) {
    case PromptOnly::kAllRows:
      return {s.start_position, s.num_new_tokens};
    case PromptOnly::kFirstRow:
      return {0, s.start_position == 0 ? 1 : 0};
    case PromptOnly::kLastRow:
      return {end - 1, end == r.num_tokens() ? 1 : 0};
    case PromptOnly::kNo:
      break;
  }
  return {};
}

PromptRows prompt_logit_rows(const ScheduledSequence& s, const Sequence& r) {
  if (!r.prompt_logits) return {};
  // Positions whose next token is a prompt token: [0, num_prompt - 1).
  const int32_t last = std::min(s.start_position + s.num_new_tokens, r.num_prompt_tokens() - 1);
  return {s.start_position, std::max(0, last - s.start_position)};
}

ForwardBatch build_forward_batch(const StepPlan& plan, const Scheduler& scheduler) {
  return build_forward_batch(
      plan, [&scheduler](SequenceId id) { return scheduler.find(id); },
      scheduler.kv().block_size());
}

}  // namespace pagoda
