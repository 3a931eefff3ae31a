#include "sched/state_checkpoints.h"

#include "core/error.h"

namespace pagoda {

StateCheckpoints::StateCheckpoints(int32_t first_slot, int32_t num_slots)
    : first_slot_(first_slot), slots_(static_cast<size_t>(num_slots)) {
  if (first_slot < 0 || num_slots < 0) {
    fail("state checkpoints: slots [", first_slot, ", +", num_slots, ") are not valid");
  }
}

StateCheckpoints::Slot& StateCheckpoints::at(int32_t slot) {
  PAGODA_CHECK(slot >= first_slot_ && slot < first_slot_ + num_slots());
  return slots_[static_cast<size_t>(slot - first_slot_)];
}

int32_t StateCheckpoints::find(PrefixId prefix_id) const {
  auto it = live_.find(prefix_id);
  return it == live_.end() ? -1 : it->second;
}

void StateCheckpoints::touch(int32_t slot) {
  Slot& s = at(slot);
  PAGODA_CHECK(s.state == State::kLive);
  s.last_used = next_tick_++;
}

void StateCheckpoints::drop(int32_t slot) {
  Slot& s = at(slot);
  PAGODA_CHECK(s.state == State::kLive);
  live_.erase(s.prefix_id);
  s = Slot{};
}

int32_t StateCheckpoints::reserve(PrefixId replacing) {
  int32_t chosen = replacing != kRootPrefixId ? find(replacing) : -1;
  if (chosen < 0) {
    uint64_t oldest = UINT64_MAX;
    for (int32_t i = 0; i < num_slots(); ++i) {
      const Slot& s = slots_[static_cast<size_t>(i)];
      if (s.state == State::kFree) {
        chosen = first_slot_ + i;
        break;
      }
      if (s.state == State::kLive && s.last_used < oldest) {
        oldest = s.last_used;
        chosen = first_slot_ + i;
      }
    }
  }
  if (chosen < 0) return -1;
  if (at(chosen).state == State::kLive) drop(chosen);
  at(chosen).state = State::kReserved;
  return chosen;
}

int32_t StateCheckpoints::bind(int32_t slot, BlockHash hash, PrefixId prefix_id) {
  PAGODA_CHECK(at(slot).state == State::kReserved && prefix_id != kRootPrefixId);
  if (const int32_t existing = find(prefix_id); existing >= 0) {
    release(slot);
    touch(existing);
    return existing;
  }
  Slot& s = at(slot);
  s = {State::kLive, hash, prefix_id, next_tick_++};
  live_.emplace(prefix_id, slot);
  return slot;
}

void StateCheckpoints::release(int32_t slot) {
  Slot& s = at(slot);
  PAGODA_CHECK(s.state == State::kReserved);
  s = Slot{};
}

void StateCheckpoints::drop_stale(const BlockPool& pool) {
  unhashed_at_sweep_ = pool.num_unhashed();
  for (int32_t i = 0; i < num_slots(); ++i) {
    const Slot& s = slots_[static_cast<size_t>(i)];
    if (s.state == State::kLive && !pool.caches(s.hash, s.prefix_id)) drop(first_slot_ + i);
  }
}

void StateCheckpoints::check_invariants(const BlockPool& pool, bool step_in_flight) const {
  size_t num_live = 0;
  std::unordered_map<uint64_t, int> ticks;
  const bool none_dropped = pool.num_unhashed() == unhashed_at_sweep_;
  for (int32_t i = 0; i < num_slots(); ++i) {
    const Slot& s = slots_[static_cast<size_t>(i)];
    const int32_t slot = first_slot_ + i;
    if (s.state == State::kReserved) PAGODA_CHECK(step_in_flight);
    if (s.state != State::kLive) {
      PAGODA_CHECK(s.prefix_id == kRootPrefixId && s.last_used == 0);
      continue;
    }
    ++num_live;
    auto it = live_.find(s.prefix_id);
    PAGODA_CHECK(it != live_.end() && it->second == slot);
    PAGODA_CHECK(s.last_used > 0 && s.last_used < next_tick_ && ticks[s.last_used]++ == 0);
    if (none_dropped) PAGODA_CHECK(pool.caches(s.hash, s.prefix_id));
  }
  PAGODA_CHECK(num_live == live_.size());
}

}  // namespace pagoda
