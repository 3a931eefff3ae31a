// Continuous batching with one token budget per step (vLLM v1 style): no prefill or decode
// phases. Every running request asks for num_tokens - num_computed_tokens new tokens (a prompt
// chunk, a whole prompt, or the one token sampled last step); long prompts are chunked by the
// budget; waiting requests are admitted first come, first served while budget, sequence slots
// and blocks last; when a running request cannot get a block, the most recently admitted running
// request is preempted: its cached blocks stay in the prefix cache (and, evicted, go down to a
// lower tier that keeps them), so on resume what is still cached is found, the rest recomputed
// (SchedulerStats::num_recomputed_tokens). A waiting request whose blocks the pool lacks but
// the lower tier holds leaves the queue while they are read (off the step) and comes back to
// its front when they land. See docs/SCHEDULER.md.
//
// The step:  plan = schedule();  ...the engine runs the plan...;  commit(plan, sampled_tokens).
//
// Invariants (check_invariants(), on top of KvCacheManager's):
//   - every live request is in exactly one of the waiting queue (status waiting or preempted,
//     num_computed_tokens 0, no block table), the loading set (the same, its blocks being read
//     from the lower tier by a load KvCacheManager holds) and the running list (status
//     running, a table); a request whose load landed is in the waiting queue;
//   - running.size() <= max_num_seqs;
//   - a running request has 0 <= num_computed_tokens < num_tokens between steps, and its table
//     covers exactly num_computed_tokens (+ the tokens scheduled for it, proposals included,
//     while a step is in flight) slots; with prefix caching, every full computed block is
//     hashed after commit; proposals are scheduled only after all of a request's known tokens;
//   - unfinished requests have output.size() < max_tokens;
//   - the step in flight scheduled <= max_num_batched_tokens tokens and <= max_num_seqs requests;
//   - with state slots (a hybrid model's recurrent state), every running request holds one slot
//     of its own, no other request holds any, and the free slots are exactly the rest; each
//     pending state copy (from fork()) goes into the slot its running child holds;
//   - with state checkpoints (hybrid prefix caching, sched/state_checkpoints.h: slots
//     [num_state_slots, num_state_slots + num_state_checkpoints), so never a running one),
//     StateCheckpoints' invariants, and a checkpoint slot is reserved only by a save of the
//     step in flight (a hit of H tokens restores the live checkpoint after exactly those H
//     tokens: scheduler_checkpoints.cc; the tests' fake recurrent model checks it).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "sched/sequence.h"
#include "sched/state_checkpoints.h"
#include "sched/step_plan.h"

namespace pagoda {

struct SchedulerConfig {
  int32_t max_num_batched_tokens = 2048;  // the token budget of one step
  int32_t max_num_seqs = 64;              // running requests at most
  KvCacheConfig kv;
  // Hybrid models (Qwen3.5): the recurrent state slots (model/state_storage.h) a running
  // request holds one of, taken at admission and given back with its blocks (preemption, end).
  // Such a request takes a prefix-cache hit only where a checkpoint of its state is kept (next).
  // A child forked from a running one takes a free slot of its own and a copy of the parent's
  // state (StepPlan::state_copies); with no slot free it waits, like one without blocks, and is
  // computed from its first token (or a checkpoint hit) when admitted. 0: the model keeps no
  // per-sequence state.
  int32_t num_state_slots = 0;
  // Hybrid prefix caching: state checkpoint slots after the running ones, each the recurrent
  // state after a chain of full blocks, least recently used evicted (sched/state_checkpoints.h).
  // A hybrid request's prompt chunk is cut to end at its last boundary (a multiple of
  // state_align, next), and every step that ends on one saves one. 0: no hits for hybrid
  // requests.
  int32_t num_state_checkpoints = 0;
  // Hybrid models: where a prompt is split, in tokens (a multiple of the block size; 0: the block
  // size). A prompt chunk that stops short of the prompt's end is cut back to a multiple of it
  // (where that leaves nothing, it waits for a step with room, unless the step's budget for
  // prompts is below one: then it goes uncut), and checkpoints are kept only at multiples of it. The engine gives the delta rule's chunk (rounded up to whole
  // blocks), so that a prompt's chunks of the delta rule are the same however it is split: its
  // values do not depend on the step budget or on what else runs (model/delta_net.h).
  int32_t state_align = 0;
  std::function<void(const Sequence&)> on_preempt;  // told of each preemption (e.g. to log it)
};

struct SchedulerStats {
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  KvCacheStats kv;  // blocks used / free / cached, utilization, prefix-cache hit rate in tokens
  int64_t num_preemptions = 0;
  // Tokens a preemption dropped that were computed again (the prefix cache, with its tiers,
  // gave back the rest: swapped in rather than recomputed).
  int64_t num_recomputed_tokens = 0;
  int32_t num_tokens_last_step = 0;
  int64_t num_steps = 0;
  int32_t num_state_checkpoints = 0;  // live ones (hybrid prefix caching)
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerConfig config);

  // Queues a request (status, counters and arrival order are set here). Throws Error on a
  // duplicate id, an empty prompt, max_tokens < 1, output already at max_tokens, or a request
  // that could not fit in the whole KV cache even alone.
  void add_sequence(Sequence request);

  // Plans the next step and allocates its blocks. At most one step may be in flight.
  StepPlan schedule();

  // The result of the step `plan`: `new_tokens` holds, for each request of the plan with
  // needs_sample, in plan order (nothing for the others), the tokens the step gives it: the
  // proposals the verifier accepted (a prefix of ScheduledSequence::proposed) and one sampled
  // token after them. Advances num_computed_tokens past the accepted tokens, gives back the
  // slots of rejected ones, hashes newly full blocks (accepted tokens only), appends the tokens
  // one by one until a stop id or max_tokens, and frees finished requests, which are returned
  // (moved out of the scheduler). Requests aborted since schedule() are skipped.
  std::vector<Sequence> commit(const StepPlan& plan,
                              std::span<const std::vector<TokenId>> new_tokens);
  // The same for a plan without proposals: one sampled token per request with needs_sample.
  std::vector<Sequence> commit(const StepPlan& plan, std::span<const TokenId> sampled_tokens);

  // Speculative decoding: how many proposals to verify in `id`'s next decoding step (see
  // Sequence::num_lookahead_tokens). Between steps; an unknown id is ignored.
  void set_num_lookahead_tokens(SequenceId id, int32_t num_tokens);

  // Ends a live request at once, freeing its blocks; returns it (status finished_aborted), or
  // nullopt when the id is unknown or already finished.
  std::optional<Sequence> abort(SequenceId id);

  // Parallel sampling: `child` continues from a copy of `parent`'s tokens (prompt and output so
  // far) with the same limits; with `last_token`, the child's last output token is that one
  // instead of the parent's (one of several tokens sampled from the same logits: its K/V is not
  // computed yet, so the two share everything before it). A running parent that fits shares
  // its full blocks with a running child, whose partly filled tail is copied by the next plan's
  // block_copies; otherwise the child waits (its prefix cache hits still share blocks). With
  // state slots the running child also needs a free slot, into which the next plan's
  // state_copies copies the parent's state as it is now (the parent's next step runs after). Not
  // while a step is in flight. Throws Error when the parent is unknown, the child id is taken,
  // or last_token is given for a parent without output.
  void fork(SequenceId parent, SequenceId child, std::optional<TokenId> last_token = std::nullopt);

  const Sequence* find(SequenceId id) const;  // a live request, or nullptr
  bool has_unfinished() const { return !requests_.empty(); }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  // Waiting requests, those whose blocks are being read included.
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size() + loading_.size()); }
  bool step_in_flight() const { return in_flight_step_ >= 0; }
  // Requests whose blocks are being read from the lower tier (not in the waiting queue).
  int32_t num_loading() const { return static_cast<int32_t>(loading_.size()); }
  // Waits up to `timeout` for a lower-tier load to land (nothing else to do: no request can
  // run until one does).
  void wait_for_lower_tier(std::chrono::milliseconds timeout) {
    kv_.wait_for_lower_tier_loads(timeout);
  }
  const SchedulerConfig& config() const { return config_; }
  const KvCacheManager& kv() const { return kv_; }
  // The prefix cache to change directly (saved prefixes restored): throws Error while a step
  // is in flight.
  KvCacheManager& kv_between_steps();
  // A tier of KV blocks below the pool (kv/lower_tier.h); before any sequence is added.
  void set_lower_tier(LowerTier* tier) { kv_.set_lower_tier(tier); }
  SchedulerStats stats() const;

  void check_invariants() const;
  int32_t num_free_state_slots() const { return static_cast<int32_t>(free_state_slots_.size()); }
  const StateCheckpoints& state_checkpoints() const { return checkpoints_; }

 private:
  Sequence& get(SequenceId id);
  // Schedules running requests, decodes before prompt chunks, each in admission order,
  // preempting from the newest when blocks run out. Returns whether anything was preempted.
  bool schedule_running(StepPlan& plan, int32_t& budget);
  // Takes a request planned this step back out of the plan (before it is preempted).
  void unplan(SequenceId id, StepPlan& plan, int32_t& budget);
  void schedule_waiting(StepPlan& plan, int32_t& budget);
  // The lower tier (scheduler_loads.cc). Starts reading the blocks below the pool that the
  // front waiting request `r` wants after `prefix`, taking it out of the queue until they land;
  // false when there is nothing to read (or it was read already).
  bool start_lower_tier_load(Sequence& r, const CachedPrefix& prefix);
  // Requests whose reads landed go back to the front of the queue, in arrival order.
  void land_lower_tier_loads();
  void add_to_plan(StepPlan& plan, Sequence& r, int32_t num_new_tokens, int32_t num_proposed);
  void preempt(SequenceId id, StepPlan& plan);
  void check_state_slots() const;
  // Hybrid prefix caching (scheduler_checkpoints.cc).
  bool checkpointing(const Sequence& r) const;
  int32_t state_align() const {
    return config_.state_align > 0 ? config_.state_align : kv_.block_size();
  }
  // A prompt chunk of `num_new` tokens from position `start` of a hybrid request: cut back to a
  // multiple of state_align() when it stops short of r's end, and to end at r's last such
  // boundary before its last token when it would cross it (checkpointing). When the cut leaves
  // nothing, 0 (wait for a step with room) if `room`, the most a step could give it, holds a
  // whole state_align(); else the chunk uncut (progress first, at a split that rounds
  // differently).
  int32_t align_chunk(const Sequence& r, int32_t start, int32_t num_new, int32_t room) const;
  // Cuts `prefix` to its deepest block with a live checkpoint; returns that checkpoint's slot,
  // or -1 (then the prefix is empty).
  int32_t take_checkpoint_hit(CachedPrefix& prefix) const;
  // The record of r's checkpoint that a save ending at `end` replaces, or nullptr (it stays).
  PrefixId* replaced_checkpoint(const Sequence& r, int32_t end);
  // Reserves a checkpoint slot for `s` when its tokens end on a multiple of state_align().
  void plan_checkpoint_save(const Sequence& r, ScheduledSequence& s);
  // At commit (r's blocks hashed) or without it (r null: aborted): binds or frees s's save.
  void finish_checkpoint_save(const ScheduledSequence& s, const Sequence* r);
  // A running request's state slot back to the free ones (none held: nothing).
  void release_state_slot(Sequence& r);
  // Appends `token`; returns whether the request is now finished.
  bool append_and_check_stop(Sequence& r, TokenId token);
  Sequence finish(SequenceId id, SequenceStatus status);

  SchedulerConfig config_;
  KvCacheManager kv_;
  std::unordered_map<SequenceId, Sequence> requests_;  // live requests (waiting or running)
  std::deque<SequenceId> waiting_;                    // FCFS; preempted requests go to the front
  // Waiting requests out of the queue while their blocks are read from the lower tier, by the
  // load's ticket; and those back in it after their load landed, with the tokens it added.
  std::unordered_map<uint64_t, SequenceId> loading_;
  std::unordered_map<SequenceId, KvCacheManager::LandedLoad> loaded_;
  std::vector<SequenceId> running_;                   // in admission order: newest last
  std::vector<int32_t> free_state_slots_;             // the lowest last
  StateCheckpoints checkpoints_;
  // A request's checkpoints that its next one replaces: the latest inside its prompt before the
  // prompt's last boundary (the one at that boundary is kept), and the latest past its prompt.
  struct OwnCheckpoints {
    PrefixId in_prompt = kRootPrefixId;
    PrefixId past_prompt = kRootPrefixId;
  };
  std::unordered_map<SequenceId, OwnCheckpoints> own_checkpoints_;
  std::vector<std::pair<SequenceId, BlockCopy>> pending_copies_;  // from fork(), by child
  std::vector<std::pair<SequenceId, StateCopy>> pending_state_copies_;  // the same, state slots
  struct InFlight {
    int32_t num_new_tokens = 0;  // scheduled this step, proposals included
    int32_t num_proposed = 0;
  };
  std::unordered_map<SequenceId, InFlight> in_flight_;  // the requests of the step in flight
  int64_t in_flight_step_ = -1;
  int32_t in_flight_num_tokens_ = 0;
  int32_t in_flight_num_requests_ = 0;
  int64_t next_step_id_ = 0;
  int64_t next_arrival_ = 0;
  int64_t num_preemptions_ = 0;
  int64_t num_recomputed_tokens_ = 0;
  int32_t num_tokens_last_step_ = 0;
  int32_t prompt_room_ = 0;  // this step's budget left for prompts after its decodes
};

}  // namespace pagoda
