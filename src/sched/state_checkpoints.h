// Prefix caching for hybrid models (Qwen3.5): a K/V cache hit alone cannot skip a prompt's
// prefix, since the Gated DeltaNet layers' recurrent state after that prefix is needed too. A
// checkpoint is a copy of that state after exactly the tokens of a chain of full blocks, kept in
// a bounded set of state slots beside the running ones (model/state_storage.h) and named by the
// PrefixId of the chain's last block (kv/block_hash.h: PrefixIds are never reused, so a
// checkpoint can only match the very cached content it was taken after; if that block is
// evicted and computed again, it gets a new PrefixId and the old checkpoint never matches).
// Integers only: which slot holds what. The scheduler decides when to save and restore
// (sched/scheduler_checkpoints.cc), the engine copies the state.
//
// A checkpoint slot is in one of three states:
//   free      holds nothing;
//   reserved  the step in flight copies a running sequence's state into it after its forward
//             pass; bound to its block's PrefixId at commit, or freed (the sequence aborted,
//             or its block turned out cached with a checkpoint already);
//   live      the state after the block chain ending in (hash, prefix_id); least recently used
//             first to go when a save needs a slot and none is free.
//
// Invariants (check_invariants()):
//   - the slots are [first_slot, first_slot + num_slots), each in exactly one state; the map
//     from PrefixId names exactly the live slots, each under its own PrefixId;
//   - live slots' last-use ticks are distinct and below the next tick;
//   - no slot is reserved while no step is in flight;
//   - unless a hash was dropped from the pool since the last drop_stale() (BlockPool::
//     num_unhashed), every live checkpoint's block is cached under its PrefixId.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"

namespace pagoda {

class StateCheckpoints {
 public:
  // Slots [first_slot, first_slot + num_slots) of the state storage; num_slots may be 0.
  StateCheckpoints(int32_t first_slot, int32_t num_slots);

  int32_t num_slots() const { return static_cast<int32_t>(slots_.size()); }
  int32_t num_live() const { return static_cast<int32_t>(live_.size()); }

  // The slot of the live checkpoint after the block named `prefix_id`, or -1. Changes nothing.
  int32_t find(PrefixId prefix_id) const;
  // Marks a live slot used now (a restore): the least recently used is evicted first.
  void touch(int32_t slot);

  // A slot for a save by the step being planned: a free one, else the least recently used
  // live checkpoint's (dropped); -1 when every slot is reserved. With `replacing`, the live
  // checkpoint of that PrefixId gives its slot first (a sequence's previous checkpoint past its
  // prompt, which its next one supersedes).
  int32_t reserve(PrefixId replacing = kRootPrefixId);
  // A reserved slot now holds the state after the block (hash, prefix_id): it goes live, unless
  // a checkpoint of that PrefixId is live already (then that one is touched and this slot
  // freed). Returns the live slot.
  int32_t bind(int32_t slot, BlockHash hash, PrefixId prefix_id);
  // A reserved slot back to free (the save was not made, or not needed).
  void release(int32_t slot);

  // Frees the live checkpoints whose block the pool no longer caches under their PrefixId.
  void drop_stale(const BlockPool& pool);

  void check_invariants(const BlockPool& pool, bool step_in_flight) const;

 private:
  enum class State { kFree, kReserved, kLive };
  struct Slot {
    State state = State::kFree;
    BlockHash hash = 0;
    PrefixId prefix_id = kRootPrefixId;
    uint64_t last_used = 0;
  };
  Slot& at(int32_t slot);
  void drop(int32_t slot);

  int32_t first_slot_;
  std::vector<Slot> slots_;                        // [num_slots]
  std::unordered_map<PrefixId, int32_t> live_;     // PrefixId -> slot
  uint64_t next_tick_ = 1;
  uint64_t unhashed_at_sweep_ = 0;  // BlockPool::num_unhashed() at the last drop_stale()
};

}  // namespace pagoda
