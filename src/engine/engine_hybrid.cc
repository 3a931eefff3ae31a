// Hybrid models (Qwen3.5's Gated DeltaNet layers beside full attention): each running sequence
// holds a recurrent state slot (model/state_storage.h) that the scheduler hands out with its
// blocks; prefix-cache hits restore the state from checkpoint slots after those
// (sched/state_checkpoints.h). Forks (n > 1, beam search) copy the parent's slot into the
// child's before the next forward pass (StepPlan::state_copies); speculative decoding keeps the
// state before each proposal in snapshots during the verifying pass and copies back the one at
// the accepted proposals after the commit. The features whose K/V handling does not yet carry
// the state along are refused in one line: saved prefixes, the host-memory and disk tiers.
#include <algorithm>

#include "core/error.h"
#include "core/memory.h"
#include "engine/engine.h"

namespace pagoda {

int32_t num_state_checkpoints(const EngineConfig& config, const ModelConfig& model) {
  if (!model.hybrid() || !config.enable_prefix_caching) return 0;
  if (config.num_state_checkpoints >= 0) return config.num_state_checkpoints;
  return StateStorage::slots_within(uint64_t{512} << 20, 2 * uint64_t(config.max_num_seqs), model);
}

int32_t num_state_snapshots(const EngineConfig& config, const ModelConfig& model) {
  if (!model.hybrid()) return 0;
  if (config.num_state_snapshots >= 0) return config.num_state_snapshots;
  const int32_t speculating =
      std::max(1, std::min(config.max_num_seqs, config.speculative.max_num_running));
  return StateStorage::slots_within(uint64_t{512} << 20,
                                    uint64_t(speculating) * kMaxSpeculativeTokens, model);
}

void Engine::setup_hybrid() {
  const std::string arch = model_.config().architecture;
  if (!config_.kv_disk.folder.empty() || config_.kv_offload_bytes > 0) {
    fail(config_.kv_disk.folder.empty() ? "--kv-offload-gb" : "--kv-disk",
         " is not supported for the hybrid model ", arch,
         " (its recurrent state is not stored with the blocks)");
  }
  // One slot per sequence the engine runs at once (about 20 MiB each for the 0.8B shape), then
  // the prefix cache's checkpoints, then the snapshots speculative decoding may take (allocated
  // on first use, counted here): a step verifies no more proposals than there are snapshots.
  const int32_t num_checkpoints = scheduler_.config().num_state_checkpoints;
  const int32_t num_snapshots = num_state_snapshots(config_, model_.config());
  check_memory_available(
      StateStorage::slot_bytes(model_.config()) *
          static_cast<uint64_t>(config_.max_num_seqs + num_checkpoints + num_snapshots),
      str_cat("the recurrent state of ", config_.max_num_seqs, " sequences, ", num_checkpoints,
              " prefix-cache checkpoints and ", num_snapshots, " speculative-decoding snapshots"),
      "give fewer sequences at once (serve --max-seqs), checkpoints (--state-checkpoints) or "
      "snapshots (--state-snapshots)");
  auto state = std::make_unique<StateStorage>(model_.config(),
                                              config_.max_num_seqs + num_checkpoints, &backend_);
  state->set_max_snapshots(num_snapshots);
  kv_->set_state(std::move(state));
  config_.speculative.bound_proposals_per_step(num_snapshots);
}

void Engine::copy_state_checkpoints(const StepPlan& plan, bool restores) {
  for (const ScheduledSequence& s : plan.sequences) {
    const int32_t checkpoint = restores ? s.restore_state_from : s.save_state_to;
    if (checkpoint < 0) continue;
    PAGODA_CHECK(kv_->state() != nullptr && s.state_slot >= 0);
    if (restores) {
      kv_->state()->copy(checkpoint, s.state_slot);
    } else {
      kv_->state()->copy(s.state_slot, checkpoint);
    }
  }
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
