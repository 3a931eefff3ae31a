// Hybrid models (Qwen3.5's Gated DeltaNet layers beside full attention): each running sequence
// holds a recurrent state slot (model/state_storage.h) that the scheduler hands out with its
// blocks. Forks (n > 1, beam search) copy the parent's slot into the child's before the next
// forward pass (StepPlan::state_copies); speculative decoding keeps the state before each
// proposal in snapshots during the verifying pass and copies back the one at the accepted
// proposals after the commit. The features whose K/V handling does not yet carry that state
// along are refused in one line: prefix-cache hits (the cache is off), saved prefixes, the
// host-memory and disk tiers.
#include "core/error.h"
#include "core/memory.h"
#include "engine/engine.h"

namespace pagoda {

void Engine::setup_hybrid() {
  const std::string arch = model_.config().architecture;
  if (!config_.kv_disk.folder.empty() || config_.kv_offload_bytes > 0) {
    fail(config_.kv_disk.folder.empty() ? "--kv-offload-gb" : "--kv-disk",
         " is not supported for the hybrid model ", arch,
         " (its recurrent state is not stored with the blocks)");
  }
  config_.enable_prefix_caching = false;  // a hit would skip the recurrence over the prefix
  // One slot per sequence the engine runs at once (about 20 MiB each for the 0.8B shape).
  check_memory_available(
      StateStorage::slot_bytes(model_.config()) * static_cast<uint64_t>(config_.max_num_seqs),
      str_cat("the recurrent state of ", config_.max_num_seqs, " sequences"),
      "give fewer sequences at once (serve --max-seqs)");
  kv_->set_state(std::make_unique<StateStorage>(model_.config(), config_.max_num_seqs, &backend_));
}

void Engine::copy_states(const StepPlan& plan) {
  if (plan.state_copies.empty()) return;
  StateStorage* state = kv_->state();
  PAGODA_CHECK(state != nullptr);
  for (const StateCopy& c : plan.state_copies) state->copy(c.src, c.dst);
}

void Engine::roll_back_states(const StepPlan& plan) {
  StateStorage* state = kv_->state();
  if (state == nullptr) return;
  // The snapshots of the plan's verifying sequences, in plan order (build_forward_batch's).
  int32_t base = 0;
  for (const ScheduledSequence& s : plan.sequences) {
    if (s.num_proposed == 0) continue;
    const int32_t first = base;
    base += s.num_proposed;
    const Sequence* r = scheduler_.find(s.seq_id);
    if (r == nullptr || r->state_slot != s.state_slot) continue;  // finished or aborted
    const int32_t num_known = s.start_position + s.num_new_tokens - s.num_proposed;
    const int32_t num_accepted = r->num_computed_tokens - num_known;
    PAGODA_CHECK(num_accepted >= 0 && num_accepted <= s.num_proposed);
    if (num_accepted < s.num_proposed) state->restore_snapshot(first + num_accepted, s.state_slot);
  }
}

}  // namespace pagoda
