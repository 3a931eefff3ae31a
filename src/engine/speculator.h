// Speculative decoding inside the batching engine. Between steps the Speculator decides, per
// decoding sequence, how many tokens to propose (Sequence::num_lookahead_tokens); after the
// scheduler has made room for them it writes the proposals into the plan; after the step it
// counts what the verifier accepted. Proposals come from n-gram lookup in the sequence's own
// tokens, from a draft model, or from both (n-gram first, the draft when it finds nothing).
//
// The draft model keeps its K/V in a KvStorage of its own with the same block ids as the
// target's: the scheduler's block tables serve both, so prefix sharing, forks and preemption
// need no second control plane. Its progress is tracked per sequence (draft_num_computed): the
// draft catches up on tokens the target computed without it (a prompt, an n-gram step, a
// sequence that was preempted) before it proposes, from the blocks the target already holds.
// A hybrid draft (Qwen3.5) also keeps a recurrent state slot per sequence it drafts for (taken
// when it first drafts, given back when the sequence is preempted or removed; none free: no
// draft for it this step); its proposal forwards keep the state after each but the last in the
// draft's snapshots, and observe() copies back the one at the accepted proposals.
//
// Invariants (check_invariants()):
//   - every state's k is in [1, max_k] when max_k > 0;
//   - draft_num_computed <= the sequence's num_computed_tokens between steps;
//   - a hybrid draft's slots are each held by one state or free, never both.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/ngram.h"
#include "engine/sampler.h"
#include "model/kv_storage.h"
#include "model/model.h"
#include "sched/scheduler.h"

namespace pagoda {

constexpr int32_t kMaxSpeculativeTokens = 8;

enum class SpecMethod { kNgram, kDraft, kBoth };

struct SpeculativeConfig {
  // Proposals per step for requests that do not say (GenerationRequest::num_speculative_tokens);
  // 0: off unless a request asks. At most kMaxSpeculativeTokens.
  int32_t num_tokens = 0;
  SpecMethod method = SpecMethod::kNgram;
  NgramConfig ngram;
  Model* draft_model = nullptr;  // needed by kDraft and kBoth; same vocabulary as the target
  // No proposals in a step while more sequences than this are running: a large batch already
  // fills the step with useful rows, and rejected proposals would only slow it.
  int32_t max_num_running = 8;
  // Shrink a sequence's k when its proposals keep being rejected, grow it back when accepted.
  bool adaptive = true;
  // Proposals of one step, summed over its sequences, at most; -1: no bound. A hybrid model
  // keeps a state snapshot per proposal (model/state_storage.h), so the engine sets this to the
  // snapshots it budgeted (EngineConfig::num_state_snapshots); a hybrid draft bounds it too.
  int32_t max_proposals_per_step = -1;
  // Lowers max_proposals_per_step to `n` (a bound of its own, where there was none).
  void bound_proposals_per_step(int32_t n) {
    max_proposals_per_step = max_proposals_per_step < 0 ? n : std::min(max_proposals_per_step, n);
  }
};

struct SpeculativeStats {
  int64_t num_verify_steps = 0;  // sequence-steps that verified at least one proposal
  int64_t num_proposed = 0;
  int64_t num_accepted = 0;
  int64_t num_draft_tokens = 0;  // token rows the draft model ran (catch-up and proposals)
  // Proposals withheld by SpeculativeConfig::max_proposals_per_step (a hybrid model's state
  // snapshots): what the sequences would have proposed past the step's bound.
  int64_t num_trimmed = 0;
  std::array<int64_t, kMaxSpeculativeTokens> proposed_at{};  // proposals at position i
  std::array<int64_t, kMaxSpeculativeTokens> accepted_at{};
  double acceptance_rate() const {
    return num_proposed ? double(num_accepted) / double(num_proposed) : 0.0;
  }
  // Tokens per verifying step: the accepted proposals and the token after them.
  double mean_accepted_length() const {
    return num_verify_steps ? double(num_accepted + num_verify_steps) / double(num_verify_steps)
                            : 0.0;
  }
};

class Speculator {
 public:
  // `num_blocks`, `block_size`, `kv_type`: the target's KV cache, which the draft's mirrors.
  // Throws Error when the config asks for a draft without one, or k is out of range.
  Speculator(const SpeculativeConfig& config, Backend& backend, int32_t num_blocks,
             int32_t block_size, KvType kv_type);

  // A sequence the engine runs: `num_tokens` proposals per step (-1: the config's default; 0:
  // none), drawn for a draft with `params`' temperature and truncation.
  void add(SequenceId seq, int32_t num_tokens, const SamplingParams& params);
  void remove(SequenceId seq);

  // Between steps: sets every speculating sequence's lookahead in the scheduler (running the
  // draft's catch-up where it is behind).
  void plan_lookahead(Scheduler& scheduler);
  // After schedule(): fills ScheduledSequence::proposed of every request with proposals.
  void propose(StepPlan& plan, const Scheduler& scheduler);
  // The distributions the proposals of `seq` in the step were drawn from (see Sampler::verify);
  // empty when they were deterministic.
  const std::vector<ProposalDistribution>& distributions(SequenceId seq) const;
  // Copy-on-write into the draft's cache too, before the step's writes.
  void copy_blocks(std::span<const BlockCopy> copies);
  // After commit(): what the step accepted of `s`'s proposals; `num_computed_tokens` is the
  // sequence's count after the commit (or -1 when it finished).
  void observe(const ScheduledSequence& s, int32_t num_accepted, int32_t num_computed_tokens);
  // The sequence lost its blocks: the draft starts over with it.
  void preempted(SequenceId seq);

  const SpeculativeStats& stats() const { return stats_; }
  uint64_t draft_kv_bytes() const { return draft_kv_ ? draft_kv_->bytes() : 0; }
  void check_invariants(const Scheduler& scheduler) const;

 private:
  struct State {
    int32_t max_k = 0;
    int32_t k = 0;
    SamplingParams params;
    std::mt19937_64 rng;
    std::vector<TokenId> ngram;  // this step's n-gram proposal, when it found one
    std::vector<ProposalDistribution> q;
    int32_t draft_num_computed = 0;
    int32_t draft_slot = -1;     // a hybrid draft's state slot; -1: none held
    int32_t snapshot_base = -1;  // its first snapshot in this step's proposal forwards
  };

  bool uses_draft() const { return config_.method != SpecMethod::kNgram; }
  // A hybrid draft's recurrent state (null for other drafts), and its slots.
  StateStorage* draft_state() const { return draft_kv_ ? draft_kv_->state() : nullptr; }
  bool take_draft_slot(State& st);
  void release_draft_slot(State& st);
  // Runs the draft over tokens [draft_num_computed, num_computed) of the sequences in `ids`,
  // at most `budget` tokens in all; returns the ones now caught up.
  std::vector<SequenceId> catch_up(const Scheduler& scheduler, const std::vector<SequenceId>& ids);
  TokenId draft_token(State& st, std::span<const float> logits, bool keep_q);

  SpeculativeConfig config_;
  Backend& backend_;
  int32_t block_size_;
  std::unique_ptr<KvStorage> draft_kv_;
  std::unordered_map<SequenceId, State> states_;
  std::vector<int32_t> free_draft_slots_;  // a hybrid draft's; the lowest last
  std::vector<float> draft_logits_;
  SamplerScratch scratch_;
  SpeculativeStats stats_;
  int32_t catch_up_budget_ = 512;  // draft tokens per step spent catching up
  // A draft at most this many tokens behind catches up inside its first proposal forward.
  static constexpr int32_t kInlineCatchUp = 8;
};

}  // namespace pagoda
