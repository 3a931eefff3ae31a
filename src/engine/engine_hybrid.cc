// Hybrid models (Qwen3.5's Gated DeltaNet layers beside full attention): each running sequence
// holds a recurrent state slot (model/state_storage.h) that the scheduler hands out with its
// blocks. The features whose K/V handling does not yet carry that state along are refused in
// one line: prefix-cache hits (the cache is off), speculative decoding (no state roll-back),
// n > 1 and beam search (no state fork), saved prefixes, the host-memory and disk tiers.
#include "core/error.h"
#include "core/memory.h"
#include "engine/engine.h"

namespace pagoda {

void Engine::setup_hybrid() {
  const std::string arch = model_.config().architecture;
  if (config_.speculative.draft_model != nullptr || config_.speculative.num_tokens > 0) {
    fail("speculative decoding is not supported for the hybrid model ", arch,
         " (its recurrent state is not rolled back)");
  }
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

void Engine::check_hybrid_request(const GenerationRequest& r) const {
  const std::string& arch = model_.config().architecture;
  if (r.n > 1) fail("n > 1 is not supported for the hybrid model ", arch, " yet");
  if (r.beam.width > 0) fail("beam search is not supported for the hybrid model ", arch, " yet");
  if (r.num_speculative_tokens > 0) {
    fail("speculative decoding is not supported for the hybrid model ", arch, " yet");
  }
}

}  // namespace pagoda
