// The scheduler's side of the lower tier (scheduler.h): a waiting request's blocks below the
// pool are read while steps go on, and its prefill is scheduled when they have landed.
#include <algorithm>

#include "core/error.h"
#include "sched/scheduler.h"

namespace pagoda {

bool Scheduler::start_lower_tier_load(Sequence& r, const CachedPrefix& prefix) {
  // A prompt scored in full wants no hits; a prompt-only request keeps no blocks.
  if (!kv_.has_lower_tier() || r.prompt_logits || r.is_prompt_only() || loaded_.count(r.id)) {
    return false;
  }
  const std::optional<uint64_t> ticket = kv_.start_lower_tier_load(prefix, r.tokens());
  if (!ticket) return false;
  PAGODA_CHECK(waiting_.front() == r.id);
  waiting_.pop_front();
  loading_.emplace(*ticket, r.id);
  return true;
}

void Scheduler::land_lower_tier_loads() {
  if (kv_.num_lower_tier_loads() == 0) return;
  std::vector<SequenceId> ready;
  for (const KvCacheManager::LandedLoad& landed : kv_.finish_lower_tier_loads()) {
    auto it = loading_.find(landed.ticket);
    if (it == loading_.end()) continue;  // aborted while its blocks were read
    loaded_[it->second] = landed;
    ready.push_back(it->second);
    loading_.erase(it);
  }
  std::sort(ready.begin(), ready.end(), [this](SequenceId a, SequenceId b) {
    return get(a).arrival_order < get(b).arrival_order;
  });
  for (auto id = ready.rbegin(); id != ready.rend(); ++id) waiting_.push_front(*id);
}

}  // namespace pagoda
