// Prefix caching for hybrid models (sched/state_checkpoints.h), the scheduler's side:
//   - the boundaries are multiples of state_align() (the delta rule's chunk in whole blocks: 64
//     tokens for blocks of 16), where prompts are split anyway (align_chunk);
//   - a prompt chunk that would run past the request's last boundary before its last token is
//     cut there (vLLM's "align" mode), so the state after exactly that many tokens exists at a
//     step's end: an identical prompt later hits up to it (a lookup always leaves the last token
//     to compute);
//   - every step whose tokens end on a boundary saves the state there: the chunks of a long
//     prompt, the end of a prompt whose length is a multiple of state_align(), and, while
//     decoding, every state_align()-th token. A request keeps three at most: its latest inside
//     its prompt before the prompt's last boundary, the one at that boundary, and its latest
//     past its prompt (each replaces the one before of its kind), so a long prompt does not
//     fill the set with its chunks, and a finished request leaves one at the last boundary of
//     its prompt and output: a chat's next turn, whose prompt holds this one's prompt and reply,
//     continues from there;
//   - admission takes the deepest cached block whose checkpoint is live as the hit, never the
//     blocks after it (their state is not kept), and the step restores that checkpoint first.
#include <algorithm>

#include "core/error.h"
#include "sched/scheduler.h"

namespace pagoda {

bool Scheduler::checkpointing(const Sequence& r) const {
  // A request scoring its prompt hashes under a key of its own (no hit could use its state).
  return checkpoints_.num_slots() > 0 && kv_.prefix_caching() && !r.is_prompt_only() &&
         !r.prompt_logits;
}

int32_t Scheduler::align_chunk(const Sequence& r, int32_t start, int32_t num_new,
                               int32_t room) const {
  if (config_.num_state_slots == 0) return num_new;
  const int32_t unit = state_align();
  int32_t end = start + num_new;
  if (end < r.num_tokens()) {
    const int32_t aligned = end / unit * unit;
    if (aligned > start) {
      end = aligned;
    } else if (room >= unit) {
      return 0;
    }
  }
  if (!checkpointing(r)) return end - start;
  const int32_t boundary = (r.num_tokens() - 1) / unit * unit;
  return start < boundary && end > boundary ? boundary - start : end - start;
}

int32_t Scheduler::take_checkpoint_hit(CachedPrefix& prefix) const {
  auto n = static_cast<int32_t>(prefix.blocks.size());
  int32_t slot = -1;
  while (n > 0 && (slot = checkpoints_.find(prefix.prefix_ids[static_cast<size_t>(n) - 1])) < 0) {
    --n;
  }
  const auto keep = static_cast<size_t>(n);
  prefix.blocks.resize(keep);
  prefix.hashes.resize(keep);
  prefix.prefix_ids.resize(keep);
  if (!prefix.digests.empty()) prefix.digests.resize(keep);
  prefix.num_tokens = n * kv_.block_size();
  prefix.num_lower_tier_tokens = std::min(prefix.num_lower_tier_tokens, prefix.num_tokens);
  prefix.num_host_tier_tokens = std::min(prefix.num_host_tier_tokens, prefix.num_tokens);
  return slot;
}

// Which of a request's checkpoints a save ending at `end` replaces (kRootPrefixId: none), and
// where it is recorded: one inside the prompt before its last boundary supersedes the request's
// previous such one (a later prompt sharing less of this one hits the latest that it shares),
// one past the prompt the previous past it; the one at the prompt's last boundary stays.
PrefixId* Scheduler::replaced_checkpoint(const Sequence& r, int32_t end) {
  const int32_t unit = state_align();
  const int32_t last_boundary = (r.num_prompt_tokens() - 1) / unit * unit;
  if (end < last_boundary) return &own_checkpoints_[r.id].in_prompt;
  if (end > r.num_prompt_tokens()) return &own_checkpoints_[r.id].past_prompt;
  return nullptr;
}

void Scheduler::plan_checkpoint_save(const Sequence& r, ScheduledSequence& s) {
  if (s.state_slot < 0 || !checkpointing(r) || s.num_proposed > 0) return;
  const int32_t end = s.start_position + s.num_new_tokens;
  if (end % state_align() != 0) return;
  const PrefixId* replaced = replaced_checkpoint(r, end);
  // -1: every slot is reserved this step, no save
  s.save_state_to = checkpoints_.reserve(replaced != nullptr ? *replaced : kRootPrefixId);
}

void Scheduler::finish_checkpoint_save(const ScheduledSequence& s, const Sequence* r) {
  if (s.save_state_to < 0) return;
  const int32_t end = s.start_position + s.num_new_tokens;
  const int32_t index = end / kv_.block_size() - 1;
  if (r == nullptr || kv_.num_hashed_blocks(r->id) <= index) {
    checkpoints_.release(s.save_state_to);
    return;
  }
  const auto [hash, prefix_id] = kv_.hashed_block(r->id, index);
  // A block whose hash another content holds is not cached: its state would never be found.
  if (!kv_.pool().caches(hash, prefix_id)) {
    checkpoints_.release(s.save_state_to);
    return;
  }
  checkpoints_.bind(s.save_state_to, hash, prefix_id);
  if (PrefixId* replaced = replaced_checkpoint(*r, end)) *replaced = prefix_id;
}

}  // namespace pagoda
