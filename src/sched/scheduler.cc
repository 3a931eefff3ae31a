#include "sched/scheduler.h"

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "core/error.h"

namespace pagoda {

Scheduler::Scheduler(SchedulerConfig config)
    : config_(std::move(config)),
      kv_(config_.kv),
      checkpoints_(std::max(0, config_.num_state_slots),
                   std::max(0, config_.num_state_checkpoints)) {
  if (config_.max_num_batched_tokens < 1) {
    fail("scheduler: max_num_batched_tokens must be positive, got ",
         config_.max_num_batched_tokens);
  }
  if (config_.max_num_seqs < 1) {
    fail("scheduler: max_num_seqs must be positive, got ", config_.max_num_seqs);
  }
  if (config_.num_state_slots < 0) {
    fail("scheduler: num_state_slots must not be negative, got ", config_.num_state_slots);
  }
  if (config_.num_state_checkpoints < 0 ||
      (config_.num_state_checkpoints > 0 && config_.num_state_slots == 0)) {
    fail("scheduler: num_state_checkpoints must be 0, or positive with state slots, got ",
         config_.num_state_checkpoints);
  }
  if (config_.state_align < 0 || config_.state_align % config_.kv.block_size != 0) {
    fail("scheduler: state_align must be 0 or a multiple of the block size (",
         config_.kv.block_size, "), got ", config_.state_align);
  }
  for (int32_t slot = config_.num_state_slots - 1; slot >= 0; --slot) {
    free_state_slots_.push_back(slot);
  }
}

void Scheduler::release_state_slot(Sequence& r) {
  if (r.state_slot < 0) return;
  free_state_slots_.push_back(r.state_slot);
  std::sort(free_state_slots_.begin(), free_state_slots_.end(), std::greater<>());
  r.state_slot = -1;
}

Sequence& Scheduler::get(SequenceId id) {
  auto it = requests_.find(id);
  PAGODA_CHECK(it != requests_.end());
  return it->second;
}

KvCacheManager& Scheduler::kv_between_steps() {
  if (step_in_flight()) fail("scheduler: the KV cache is changed while a step is in flight");
  return kv_;
}

const Sequence* Scheduler::find(SequenceId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : &it->second;
}

void Scheduler::add_sequence(Sequence request) {
  const SequenceId id = request.id;
  if (requests_.count(id)) fail("request ", id, ": the id is already in use");
  if (request.prompt.empty()) fail("request ", id, ": the prompt is empty");
  if (request.max_tokens < 1) fail("request ", id, ": max_tokens must be at least 1");
  if (request.num_output_tokens() >= request.max_tokens) {
    fail("request ", id, ": already has max_tokens output tokens");
  }
  if (request.is_prompt_only() && (!request.output.empty() || request.prompt_logits)) {
    fail("request ", id, ": a prompt-only request has no output and no prompt logits");
  }
  // The last sampled token never needs a KV slot; a prompt-only request samples none.
  const int64_t num_kv_tokens = int64_t(request.num_prompt_tokens()) +
                                (request.is_prompt_only() ? 0 : request.max_tokens - 1);
  const int32_t num_blocks = kv_.num_blocks_for(num_kv_tokens);
  if (num_blocks > kv_.num_blocks()) {
    fail("request ", id, ": ", request.num_prompt_tokens(), " prompt tokens + max_tokens ",
         request.max_tokens, " need ", num_blocks, " KV blocks; the cache has ", kv_.num_blocks());
  }
  request.num_computed_tokens = 0;
  request.status = SequenceStatus::kWaiting;
  request.arrival_order = next_arrival_++;
  request.num_cached_tokens = 0;
  request.num_preemptions = 0;
  request.num_lost_tokens = 0;
  requests_.emplace(id, std::move(request));
  waiting_.push_back(id);
}

StepPlan Scheduler::schedule() {
  if (step_in_flight()) fail("scheduler: schedule() while step ", in_flight_step_, " is in flight");
  StepPlan plan;
  plan.step_id = next_step_id_++;
  int32_t budget = config_.max_num_batched_tokens;
  // Forked children's states first, while every source slot still holds its parent's state at
  // the fork (a slot freed since is taken by nobody before the step's copies run). A child
  // preempted below just starts afresh from its first token in another slot.
  for (const auto& [child, copy] : pending_state_copies_) plan.state_copies.push_back(copy);
  pending_state_copies_.clear();
  land_lower_tier_loads();
  // After a preemption, admitting new work would only take the blocks back.
  if (!schedule_running(plan, budget)) schedule_waiting(plan, budget);

  for (const auto& [child, copy] : pending_copies_) {
    if (!kv_.has(child)) continue;  // preempted since the fork: its tail is recomputed
    const std::vector<BlockId>& table = kv_.block_table(child);
    if (std::find(table.begin(), table.end(), copy.dst) != table.end()) {
      plan.block_copies.push_back(copy);
    }
  }
  pending_copies_.clear();
  checkpoints_.drop_stale(kv_.pool());  // blocks evicted by this step's allocations
  num_tokens_last_step_ = plan.num_scheduled_tokens;
  if (!plan.sequences.empty()) {
    in_flight_step_ = plan.step_id;
    in_flight_num_tokens_ = plan.num_scheduled_tokens;
    in_flight_num_requests_ = static_cast<int32_t>(plan.sequences.size());
  }
  return plan;
}

bool Scheduler::schedule_running(StepPlan& plan, int32_t& budget) {
  bool any_preempted = false;
  // A prompt chunk that shares the step with other requests, or holds up waiting ones, takes at
  // most half the budget, so one long prompt cannot hold the queue for its whole prefill; and
  // since its attention reads every earlier token of the prompt, past half the budget the chunk
  // shrinks so that its queries x keys stay what half the budget costs at the prompt's start
  // (else, late in a long prompt, one step's attention alone takes seconds and every decode
  // beside it waits). Alone, a prompt takes the whole budget. A hybrid prompt's chunk is at
  // least state_align() tokens, where its splits fall (align_chunk).
  const int64_t half = std::max(kv_.block_size(), config_.max_num_batched_tokens / 2);
  const int64_t least = config_.num_state_slots > 0 ? state_align() : kv_.block_size();
  auto prefill_cap = [&](const Sequence& r) -> int32_t {
    if (waiting_.empty() && plan.sequences.empty()) return budget;
    const int64_t keys = std::max<int64_t>(half, r.num_computed_tokens);
    return static_cast<int32_t>(std::max<int64_t>(least, half * half / keys));
  };
  // Decodes first, then prompt chunks (each pass in admission order): a request already
  // generating gets its token every step, whatever prompt is being computed beside it.
  const std::vector<SequenceId> order = running_;
  for (const bool decodes : {true, false}) {
    if (!decodes) prompt_room_ = budget;  // what this step's prompts start from
    for (SequenceId id : order) {
      if (budget <= 0) break;
      const Sequence* found = find(id);
      if (found == nullptr || found->status != SequenceStatus::kRunning || in_flight_.count(id)) {
        continue;  // preempted this step, or already planned
      }
      Sequence& r = get(id);
      const int32_t num_wanted = r.num_tokens() - r.num_computed_tokens;
      PAGODA_CHECK(num_wanted > 0);
      if ((num_wanted == 1) != decodes) continue;
      // A decode may verify proposals after its token: as many as asked, the budget allows and
      // max_tokens leaves room for (the accepted ones and the token after them are output).
      const int32_t num_proposed =
          decodes ? std::max(0, std::min({r.num_lookahead_tokens, budget - 1,
                                          r.max_tokens - r.num_output_tokens() - 1}))
                  : 0;
      const int32_t num_new =
          (decodes ? std::min({num_wanted, budget, 1})
                   : align_chunk(r, r.num_computed_tokens,
                                 std::min({num_wanted, budget, prefill_cap(r)}),
                                 std::min(prompt_room_, prefill_cap(r)))) +
          num_proposed;
      if (num_new == 0) continue;  // a hybrid prompt waiting for room to split where it should
      bool allocated = false;
      for (;;) {
        if (kv_.allocate_slots(r.id, r.num_computed_tokens, num_new)) {
          allocated = true;
          break;
        }
        // The newest running request gives its blocks back, even one planned already (its
        // tokens leave the plan); a request may preempt itself.
        const SequenceId victim = running_.back();
        unplan(victim, plan, budget);
        preempt(victim, plan);
        any_preempted = true;
        if (victim == r.id) break;
      }
      if (!allocated) continue;
      add_to_plan(plan, r, num_new, num_proposed);
      budget -= num_new;
    }
  }
  return any_preempted;
}

void Scheduler::unplan(SequenceId id, StepPlan& plan, int32_t& budget) {
  auto it = in_flight_.find(id);
  if (it == in_flight_.end()) return;
  budget += it->second.num_new_tokens;
  plan.num_scheduled_tokens -= it->second.num_new_tokens;
  in_flight_.erase(it);
  for (const ScheduledSequence& s : plan.sequences) {
    if (s.seq_id == id) finish_checkpoint_save(s, nullptr);
  }
  std::erase_if(plan.sequences, [id](const ScheduledSequence& s) { return s.seq_id == id; });
}

void Scheduler::schedule_waiting(StepPlan& plan, int32_t& budget) {
  const bool with_state = config_.num_state_slots > 0;
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int32_t>(running_.size()) < config_.max_num_seqs &&
         (!with_state || !free_state_slots_.empty())) {
    Sequence& r = get(waiting_.front());
    // A prompt-only request wants the hidden states of positions a cache hit would skip; a
    // hybrid model's hit needs its recurrent state after the hit, kept in a checkpoint.
    CachedPrefix prefix = r.is_prompt_only() || (with_state && !checkpointing(r))
                              ? CachedPrefix{}
                              : kv_.get_computed_blocks(r.tokens(), r.cache_key);
    const int32_t restore = with_state ? take_checkpoint_hit(prefix) : -1;
    // What the pool lacks may be below it: read it first, off the step, while the requests
    // behind this one go on.
    if (start_lower_tier_load(r, prefix)) continue;
    if (auto loaded = loaded_.find(r.id); loaded != loaded_.end()) {
      prefix.num_lower_tier_tokens = std::min(loaded->second.num_tokens, prefix.num_tokens);
      prefix.num_host_tier_tokens =
          std::min(loaded->second.num_host_tokens, prefix.num_lower_tier_tokens);
    }
    const int32_t num_new = align_chunk(
        r, prefix.num_tokens, std::min(r.num_tokens() - prefix.num_tokens, budget), prompt_room_);
    // First come, first served: a request that does not fit blocks the ones behind it (a hybrid
    // one waiting for room to split where it should, too).
    if (num_new == 0 || !kv_.allocate_slots(r.id, 0, num_new, &prefix)) break;
    waiting_.pop_front();
    loaded_.erase(r.id);
    if (r.status == SequenceStatus::kWaiting) r.num_cached_tokens = prefix.num_tokens;
    num_recomputed_tokens_ += std::max(0, r.num_lost_tokens - prefix.num_tokens);
    r.num_lost_tokens = 0;
    r.num_computed_tokens = prefix.num_tokens;
    r.status = SequenceStatus::kRunning;
    if (with_state) {
      r.state_slot = free_state_slots_.back();
      free_state_slots_.pop_back();
    }
    running_.push_back(r.id);
    // Used now: a save of this step takes another slot unless it is the only one (the engine
    // restores before it saves).
    if (restore >= 0) checkpoints_.touch(restore);
    add_to_plan(plan, r, num_new, 0);
    plan.sequences.back().restore_state_from = restore;
    budget -= num_new;
  }
}

void Scheduler::add_to_plan(StepPlan& plan, Sequence& r, int32_t num_new_tokens,
                            int32_t num_proposed) {
  ScheduledSequence s;
  s.seq_id = r.id;
  s.num_new_tokens = num_new_tokens;
  s.start_position = r.num_computed_tokens;
  s.block_table = kv_.block_table(r.id);
  s.state_slot = r.state_slot;
  s.needs_sample = r.num_computed_tokens + num_new_tokens - num_proposed == r.num_tokens() &&
                   !r.is_prompt_only();
  s.num_proposed = num_proposed;
  plan_checkpoint_save(r, s);
  plan.sequences.push_back(std::move(s));
  plan.num_scheduled_tokens += num_new_tokens;
  in_flight_[r.id] = {num_new_tokens, num_proposed};
}

void Scheduler::set_num_lookahead_tokens(SequenceId id, int32_t num_tokens) {
  if (step_in_flight()) fail("scheduler: set_num_lookahead_tokens() while a step is in flight");
  auto it = requests_.find(id);
  if (it != requests_.end()) it->second.num_lookahead_tokens = std::max(0, num_tokens);
}

void Scheduler::preempt(SequenceId id, StepPlan& plan) {
  Sequence& r = get(id);
  PAGODA_CHECK(r.status == SequenceStatus::kRunning && !in_flight_.count(id));
  running_.erase(std::find(running_.begin(), running_.end(), id));
  kv_.free(id);
  r.num_lost_tokens = r.num_computed_tokens;
  release_state_slot(r);
  r.num_computed_tokens = 0;
  r.status = SequenceStatus::kPreempted;
  ++r.num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(id);  // victims are taken newest first, so the oldest ends up in front
  plan.preempted.push_back(id);
  if (config_.on_preempt) config_.on_preempt(r);
}

std::vector<Sequence> Scheduler::commit(const StepPlan& plan,
                                       std::span<const TokenId> sampled_tokens) {
  std::vector<std::vector<TokenId>> new_tokens;
  new_tokens.reserve(sampled_tokens.size());
  for (TokenId t : sampled_tokens) new_tokens.push_back({t});
  return commit(plan, new_tokens);
}

std::vector<Sequence> Scheduler::commit(const StepPlan& plan,
                                       std::span<const std::vector<TokenId>> new_tokens) {
  if (static_cast<int32_t>(new_tokens.size()) != plan.num_samples()) {
    fail("scheduler: step ", plan.step_id, " needs ", plan.num_samples(),
         " lists of new tokens, got ", new_tokens.size());
  }
  if (plan.sequences.empty()) return {};
  if (plan.step_id != in_flight_step_) {
    fail("scheduler: commit() of step ", plan.step_id, ", which is not the step in flight");
  }
  std::vector<Sequence> finished;
  size_t k = 0;
  for (const ScheduledSequence& s : plan.sequences) {
    const std::vector<TokenId>* tokens = s.needs_sample ? &new_tokens[k++] : nullptr;
    auto it = in_flight_.find(s.seq_id);
    if (it == in_flight_.end()) {  // aborted since schedule()
      finish_checkpoint_save(s, nullptr);
      continue;
    }
    Sequence& r = get(s.seq_id);
    PAGODA_CHECK(r.status == SequenceStatus::kRunning && r.num_computed_tokens == s.start_position &&
                 it->second.num_new_tokens == s.num_new_tokens &&
                 it->second.num_proposed == s.num_proposed);
    if (tokens == nullptr) {
      r.num_computed_tokens += s.num_new_tokens;
      if (!r.is_prompt_only()) {
        kv_.cache_full_blocks(r.id, r.tokens(), r.num_computed_tokens);
        finish_checkpoint_save(s, &r);
      } else if (r.num_computed_tokens == r.num_tokens()) {
        // Its hidden states were this step's output: nothing of it is kept.
        finished.push_back(finish(r.id, SequenceStatus::kFinishedPrompt));
      }
      continue;
    }
    // Accepted proposals first, then the one token sampled after them.
    const auto num_accepted = static_cast<int32_t>(tokens->size()) - 1;
    if (num_accepted < 0 || num_accepted > s.num_proposed ||
        static_cast<int32_t>(s.proposed.size()) < num_accepted ||
        !std::equal(tokens->begin(), tokens->begin() + num_accepted, s.proposed.begin())) {
      fail("scheduler: step ", plan.step_id, " gives request ", r.id, " ", tokens->size(),
           " tokens that are not its accepted proposals and one more");
    }
    r.num_computed_tokens += s.num_new_tokens - (s.num_proposed - num_accepted);
    if (num_accepted < s.num_proposed) kv_.truncate(r.id, r.num_computed_tokens);
    // Hash what is now computed: the accepted proposals are known tokens from here on.
    r.output.insert(r.output.end(), tokens->begin(), tokens->begin() + num_accepted);
    kv_.cache_full_blocks(r.id, r.tokens(), r.num_computed_tokens);
    finish_checkpoint_save(s, &r);
    r.output.resize(r.output.size() - static_cast<size_t>(num_accepted));
    for (TokenId token : *tokens) {
      if (append_and_check_stop(r, token)) {
        finished.push_back(finish(r.id, r.status));
        break;
      }
    }
  }
  in_flight_.clear();
  in_flight_step_ = -1;
  in_flight_num_tokens_ = 0;
  in_flight_num_requests_ = 0;
  return finished;
}

bool Scheduler::append_and_check_stop(Sequence& r, TokenId token) {
  r.output.push_back(token);
  if (std::find(r.stop_ids.begin(), r.stop_ids.end(), token) != r.stop_ids.end()) {
    r.status = SequenceStatus::kFinishedStopped;
    return true;
  }
  if (r.num_output_tokens() >= r.max_tokens) {
    r.status = SequenceStatus::kFinishedLength;
    return true;
  }
  return false;
}

Sequence Scheduler::finish(SequenceId id, SequenceStatus status) {
  auto it = requests_.find(id);
  PAGODA_CHECK(it != requests_.end() && is_finished(status));
  kv_.free(id);
  release_state_slot(it->second);
  auto run = std::find(running_.begin(), running_.end(), id);
  auto wait = std::find(waiting_.begin(), waiting_.end(), id);
  if (run != running_.end()) {
    running_.erase(run);
  } else if (wait != waiting_.end()) {
    waiting_.erase(wait);
  } else {
    // Its blocks are being read: the load lands later for the prefix cache alone.
    std::erase_if(loading_, [id](const auto& l) { return l.second == id; });
  }
  loaded_.erase(id);
  in_flight_.erase(id);
  own_checkpoints_.erase(id);  // the checkpoints themselves stay for later requests
  std::erase_if(pending_copies_, [id](const auto& c) { return c.first == id; });
  std::erase_if(pending_state_copies_, [id](const auto& c) { return c.first == id; });
  Sequence r = std::move(it->second);
  requests_.erase(it);
  r.status = status;
  return r;
}

std::optional<Sequence> Scheduler::abort(SequenceId id) {
  if (!requests_.count(id)) return std::nullopt;
  return finish(id, SequenceStatus::kFinishedAborted);
}

void Scheduler::fork(SequenceId parent, SequenceId child, std::optional<TokenId> last_token) {
  if (step_in_flight()) fail("scheduler: fork() while step ", in_flight_step_, " is in flight");
  auto it = requests_.find(parent);
  if (it == requests_.end()) fail("fork: request ", parent, " is not live");
  if (requests_.count(child)) fail("fork: request id ", child, " is already in use");
  const Sequence& p = it->second;
  if (p.is_prompt_only()) fail("fork: request ", parent, " is prompt-only");
  Sequence c;
  c.id = child;
  c.prompt = p.prompt;
  c.output = p.output;
  if (last_token) {
    if (c.output.empty()) fail("fork: request ", parent, " has no output token to replace");
    c.output.back() = *last_token;
  }
  c.max_tokens = p.max_tokens;
  c.stop_ids = p.stop_ids;
  c.cache_key = p.cache_key;
  c.adapter = p.adapter;
  c.parent = parent;
  c.arrival_order = next_arrival_++;
  c.status = SequenceStatus::kWaiting;
  // With state slots, a running child needs one of its own (else it waits, as without blocks).
  const bool with_state = config_.num_state_slots > 0;
  if (p.status == SequenceStatus::kRunning &&
      static_cast<int32_t>(running_.size()) < config_.max_num_seqs &&
      (!with_state || !free_state_slots_.empty())) {
    if (auto copies = kv_.fork(parent, child, p.num_computed_tokens)) {
      c.num_computed_tokens = p.num_computed_tokens;
      c.status = SequenceStatus::kRunning;
      for (const BlockCopy& copy : *copies) pending_copies_.push_back({child, copy});
      if (with_state) {
        c.state_slot = free_state_slots_.back();
        free_state_slots_.pop_back();
        pending_state_copies_.push_back({child, {p.state_slot, c.state_slot}});
      }
      running_.push_back(child);
    }
  }
  if (c.status == SequenceStatus::kWaiting) waiting_.push_back(child);
  requests_.emplace(child, std::move(c));
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.num_running = num_running();
  s.num_waiting = num_waiting();
  s.kv = kv_.stats();
  s.num_preemptions = num_preemptions_;
  s.num_recomputed_tokens = num_recomputed_tokens_;
  s.num_tokens_last_step = num_tokens_last_step_;
  s.num_steps = next_step_id_;
  s.num_state_checkpoints = checkpoints_.num_live();
  return s;
}

void Scheduler::check_invariants() const {
  kv_.check_invariants();
  PAGODA_CHECK(static_cast<int32_t>(running_.size()) <= config_.max_num_seqs);
  PAGODA_CHECK(running_.size() + waiting_.size() + loading_.size() == requests_.size());
  PAGODA_CHECK(static_cast<int32_t>(loading_.size()) <= kv_.num_lower_tier_loads());
  std::unordered_set<SequenceId> seen;
  const int32_t bs = kv_.block_size();
  for (SequenceId id : running_) {
    PAGODA_CHECK(seen.insert(id).second);
    const Sequence* r = find(id);
    PAGODA_CHECK(r && r->status == SequenceStatus::kRunning && kv_.has(id));
    auto it = in_flight_.find(id);
    const InFlight scheduled = it == in_flight_.end() ? InFlight{} : it->second;
    PAGODA_CHECK(r->num_computed_tokens >= 0 && r->num_computed_tokens < r->num_tokens());
    PAGODA_CHECK((scheduled.num_proposed >= 0 &&
                  scheduled.num_proposed < scheduled.num_new_tokens) ||
                 scheduled.num_new_tokens == 0);
    // Proposals only after every known token.
    const int32_t num_known = scheduled.num_new_tokens - scheduled.num_proposed;
    PAGODA_CHECK(r->num_computed_tokens + num_known <= r->num_tokens());
    PAGODA_CHECK(scheduled.num_proposed == 0 ||
                 r->num_computed_tokens + num_known == r->num_tokens());
    PAGODA_CHECK(kv_.num_slots(id) == r->num_computed_tokens + scheduled.num_new_tokens);
    if (r->is_prompt_only()) {
      // Never cached, never sampled from: no hashed block, no proposal, no output.
      PAGODA_CHECK(kv_.num_hashed_blocks(id) == 0 && scheduled.num_proposed == 0 &&
                   r->output.empty());
    } else if (kv_.prefix_caching()) {
      PAGODA_CHECK(kv_.num_hashed_blocks(id) == r->num_computed_tokens / bs);
    }
  }
  for (const auto& [ticket, id] : loading_) {
    PAGODA_CHECK(seen.insert(id).second);
    const Sequence* r = find(id);
    PAGODA_CHECK(r &&
                 (r->status == SequenceStatus::kWaiting || r->status == SequenceStatus::kPreempted));
    PAGODA_CHECK(r->num_computed_tokens == 0 && !kv_.has(id) && !loaded_.count(id));
  }
  for (const auto& [id, landed] : loaded_) {
    PAGODA_CHECK(std::find(waiting_.begin(), waiting_.end(), id) != waiting_.end() &&
                 landed.num_tokens >= landed.num_host_tokens && landed.num_host_tokens >= 0);
  }
  for (SequenceId id : waiting_) {
    PAGODA_CHECK(seen.insert(id).second);
    const Sequence* r = find(id);
    PAGODA_CHECK(r &&
                 (r->status == SequenceStatus::kWaiting || r->status == SequenceStatus::kPreempted));
    PAGODA_CHECK(r->num_computed_tokens == 0 && !kv_.has(id));
  }
  for (const auto& [id, r] : requests_) {
    PAGODA_CHECK(r.id == id && !r.prompt.empty());
    PAGODA_CHECK(r.num_output_tokens() < r.max_tokens);
  }
  for (const auto& [child, copy] : pending_copies_) PAGODA_CHECK(kv_.has(child));
  for (const auto& [child, copy] : pending_state_copies_) {
    const Sequence* c = find(child);
    PAGODA_CHECK(c != nullptr && c->status == SequenceStatus::kRunning &&
                 c->state_slot == copy.dst && copy.src >= 0 && copy.src != copy.dst);
  }
  check_state_slots();
  if (!step_in_flight()) {
    PAGODA_CHECK(in_flight_.empty());
    return;
  }
  PAGODA_CHECK(in_flight_num_tokens_ <= config_.max_num_batched_tokens);
  PAGODA_CHECK(in_flight_num_requests_ <= config_.max_num_seqs);
  int64_t num_in_flight_tokens = 0;
  for (const auto& [id, f] : in_flight_) {
    PAGODA_CHECK(f.num_new_tokens > 0 && kv_.has(id));
    num_in_flight_tokens += f.num_new_tokens;
  }
  PAGODA_CHECK(num_in_flight_tokens <= in_flight_num_tokens_);
}

void Scheduler::check_state_slots() const {
  const int32_t n = config_.num_state_slots;
  std::vector<int> held(static_cast<size_t>(n), 0);
  for (int32_t slot : free_state_slots_) {
    PAGODA_CHECK(slot >= 0 && slot < n && held[static_cast<size_t>(slot)]++ == 0);
  }
  for (const auto& [id, r] : requests_) {
    const bool running = r.status == SequenceStatus::kRunning;
    if (n == 0 || !running) {
      PAGODA_CHECK(r.state_slot == -1);
      continue;
    }
    PAGODA_CHECK(r.state_slot >= 0 && r.state_slot < n &&
                 held[static_cast<size_t>(r.state_slot)]++ == 0);
  }
  for (int h : held) PAGODA_CHECK(h == 1);
  checkpoints_.check_invariants(kv_.pool(), step_in_flight());
}

}  // namespace pagoda
