// Many requests at once over the paged KV cache: the step loop of DESIGN.md.
//
//   plan   = scheduler.schedule()             one token budget; prompt chunks and decodes mixed
//   batch  = build_forward_batch(plan, ...)   every scheduled token of every request
//   copy_kv_blocks(plan.block_copies)         copy-on-write tails of forks, before any write
//   model.forward(batch)                      one call: each weight matrix is read once a step
//   sample one token per needs_sample request, each with its own Sampler
//   scheduler.commit(plan, tokens)            append, stop, free
//
// The Engine is single-threaded: call it from one thread (EngineThread runs it on its own).
// Outputs are returned by step() and abort() as events; nothing is called back.
//
// Parallel sampling (n > 1): the request's first sequence computes the prompt; at the step that
// finishes it, every one of the n samples draws its first token from those same logits, each
// with its own Sampler (seed + index when seeded); after the commit the n - 1 others fork from
// the first, sharing its full blocks, with a copy of the partly filled tail and their own token
// in place of its last one (Scheduler::fork). The prompt is computed once.
//
// Speculative decoding (Speculator): between steps, sequences that decode may ask for proposals
// to be verified; the plan schedules them after each one's token, the forward pass gives their
// logit rows, Sampler::verify keeps the accepted ones and draws the token after them, and
// commit() takes the lot, rolling back the slots of the rejected ones.
//
// Invariants (check_invariants(), on top of the Scheduler's and the Speculator's):
//   - every live scheduler request is a Sequence of a live Group, and every Sequence is either
//     live in the scheduler or a child waiting for its group's first sequence to sample;
//   - a group's num_unfinished equals its Sequence count; children wait only while the first
//     sequence is live and has no output.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/beam_search.h"
#include "engine/engine_stats.h"
#include "engine/sampler.h"
#include "engine/speculator.h"
#include "grammar/token_mask.h"
#include "model/kv_storage.h"
#include "model/model.h"
#include "sched/scheduler.h"

namespace pagoda {

// One GenerationRequest: the id its events carry. Each of its samples (or beams) is a sequence of
// its own in the scheduler, under a SequenceId the engine allocates separately.
using RequestId = int64_t;

constexpr int32_t kMaxNumSamples = 64;  // n of one request at most
constexpr int32_t kMaxBeamWidth = 1024;  // beams of one request at most

struct EngineConfig {
  int32_t block_size = kDefaultBlockSize;  // token slots per KV block
  int32_t max_num_batched_tokens = 2048;   // the token budget of one step
  int32_t max_num_seqs = 64;               // sequences running at once
  bool enable_prefix_caching = true;
  // The KV budget, exactly one of: bytes of K/V memory (--kv-cache-gb), or tokens it holds.
  uint64_t kv_cache_bytes = 0;
  int64_t num_kv_cache_tokens = 0;
  int32_t max_model_len = 0;  // prompt + max_tokens at most; 0: only the KV budget limits
  // K/V values (backend/kv_format.h). F32 here, the exact one the conformance tests compare;
  // the commands default to F16.
  KvType kv_type = KvType::kF32;
  SpeculativeConfig speculative;  // proposals to verify per step (off by default)
};

struct GenerationRequest {
  std::vector<TokenId> prompt;  // token ids, not empty
  SamplingParams sampling;
  int32_t max_tokens = 16;        // output tokens per sample at most (a stop id counts)
  std::vector<TokenId> stop_ids;  // EOS / EOG: the sample ends when it draws one
  int32_t n = 1;                  // parallel samples of the same prompt, [1, kMaxNumSamples]
  uint64_t cache_key = 0;         // only requests with equal keys share cached KV blocks
  // Speculative decoding: proposals per step, in [0, kMaxSpeculativeTokens]; -1: the engine's
  // default (EngineConfig::speculative.num_tokens).
  int32_t num_speculative_tokens = -1;
  // Structured output: only tokens this grammar allows are drawn, and a stop id only where the
  // grammar's sentence is complete (the sample ends there when it has no stop ids). Shared by
  // requests with the same grammar, whose masks it caches. No speculation with a grammar.
  std::shared_ptr<GrammarMasks> grammar;
  // Beam search (width > 0): the n best of `width` beams by cumulative log-probability, sampling
  // params ignored; no grammar or speculation with it. The samples arrive at the end, whole.
  BeamParams beam;
};

enum class FinishReason { kStop, kLength, kAbort, kError };
std::string_view to_string(FinishReason reason);

// What one step (or an abort) produced for one sample of one request.
struct OutputEvent {
  RequestId request_id = 0;
  int32_t index = 0;               // which of the request's n samples, [0, n)
  std::vector<TokenId> token_ids;  // new output tokens (a stop id is not among them)
  // [token_ids.size()] when the request asked for logprobs (SamplingParams::logprobs), else empty.
  std::vector<SampleResult> logprobs;
  std::optional<FinishReason> finish_reason;  // set on the sample's last event
  TokenId stop_token = kNoToken;              // kStop: the stop id drawn
  std::string error;                          // kError: what went wrong
  bool request_finished = false;              // the request's last event: every sample has finished
  double cumulative_logprob = 0;              // beam search: the sample's log-probability
  int32_t num_proposed = 0;                   // speculative proposals this step verified
  int32_t num_accepted = 0;                   // of those, accepted (token_ids holds them)
  // Prompt tokens whose K/V came from the prefix cache when the sample's sequence was first
  // admitted (set on events with sampled tokens; forked samples share their parent's prompt).
  int32_t num_cached_tokens = 0;
};

class Engine {
 public:
  // `model` and `backend` must outlive the engine. Throws Error on a bad config (no or two KV
  // budgets, a budget too small for one block, non-positive limits).
  Engine(Model& model, Backend& backend, EngineConfig config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Throws Error naming the first problem: an empty prompt, a token id outside the vocabulary,
  // max_tokens < 1, n outside [1, kMaxNumSamples], bad sampling params, a logit_bias id outside
  // the vocabulary, or prompt + max_tokens beyond max_model_len or the whole KV cache. Reads
  // only what the constructor fixed, so any thread may call it while another runs step().
  void check_request(const GenerationRequest& request) const;

  // Queues a request (after check_request) under a new id, or under `id` (throws Error when it
  // is live). Do not mix both forms in one engine: a chosen id may collide with a later new one.
  RequestId add_request(GenerationRequest request);
  void add_request(RequestId id, GenerationRequest request);

  // Ends every unfinished sample of request `id` now, freeing its blocks, and returns their
  // last events (kAbort). Empty when the id is unknown or finished.
  std::vector<OutputEvent> abort(RequestId id);

  // Runs one scheduler step and returns its events: at most one per sample that drew a token,
  // plus error events. Nothing to do: returns nothing.
  std::vector<OutputEvent> step();

  bool has_work() const { return scheduler_.has_unfinished(); }
  EngineStats stats() const;
  const Scheduler& scheduler() const { return scheduler_; }
  const EngineConfig& config() const { return config_; }
  const KvStorage& kv() const { return *kv_; }
  int32_t num_requests() const { return static_cast<int32_t>(groups_.size()); }

  void check_invariants() const;

 private:
  // One sample of a request: one scheduler request (a "sequence"), under its own id.
  struct Sequence {
    RequestId request_id = 0;
    int32_t index = 0;
    Sampler sampler;
    // Structured output: the grammar, the parse state after the output so far, and the mask
    // for that state when the engine computed it ahead (beside the forward pass).
    std::shared_ptr<GrammarMasks> grammar;
    std::shared_ptr<GrammarState> grammar_state;
    std::shared_ptr<TokenBitmask> mask;
    bool mask_ready = false;
  };
  struct Group {
    int32_t num_unfinished = 0;
    SequenceId parent = 0;                     // sample 0
    std::vector<SequenceId> waiting_children;  // samples to fork from the parent
    // What a child needs to start alone when the parent finished at its first token.
    std::vector<TokenId> prompt;
    int32_t max_tokens = 0;
    std::vector<TokenId> stop_ids;
    uint64_t cache_key = 0;
    // Beam search: the selection, the samples to return, and the params new beams take.
    std::unique_ptr<BeamSearch> beam;
    int32_t num_samples = 1;
    SamplingParams sampling;
  };

  void add_group(RequestId id, GenerationRequest request);
  // Forgets a finished sequence and completes `event` (its last); closes the group at its end.
  void finish_sequence(SequenceId seq_id, FinishReason reason, OutputEvent& event);
  OutputEvent event_for(const Sequence& seq) const;
  // A child of an n > 1 request starts with the first token it drew from the parent's logits.
  void start_child(SequenceId child, std::vector<SampleResult> first,
                   std::vector<OutputEvent>& events);
  // Beam search after the forward pass: each group's round over the beams this step computed.
  // `index_of` maps a beam to its entry in `new_tokens`; dropped beams are added to `drop`.
  void select_beams(
      const std::unordered_map<RequestId, std::vector<BeamCandidates>>& present,
      const std::unordered_map<SequenceId, size_t>& index_of,
      std::vector<std::vector<TokenId>>& new_tokens, std::vector<SequenceId>& drop,
      std::vector<std::pair<RequestId, std::vector<std::pair<SequenceId, TokenId>>>>& forks);
  // After the commit: forks made, dropped beams freed, finished searches answered.
  void finish_beam_round(
      const std::vector<SequenceId>& drop,
      const std::vector<std::pair<RequestId, std::vector<std::pair<SequenceId, TokenId>>>>& forks,
      std::vector<OutputEvent>& events);
  // Ends a beam search: the n best hypotheses as the request's samples.
  void close_beam_group(RequestId id, std::vector<OutputEvent>& events, bool aborted);
  // The first sequence of a request failed before its children started: they end too.
  void abort_children_of(SequenceId parent_seq, std::vector<OutputEvent>& events);
  // Structured output: masks `logits` ([vocab]) to what seq's grammar allows now. Returns false
  // when it allows nothing more (the grammar ended and the sample has no stop id to draw).
  bool apply_grammar(Sequence& seq, std::span<float> logits, const std::vector<TokenId>& stop_ids);
  // Moves seq's grammar past `token`.
  void advance_grammar(Sequence& seq, TokenId token, const std::vector<TokenId>& stop_ids);
  void start_mask_job();
  void wait_mask_job();

  Model& model_;
  Backend& backend_;
  EngineConfig config_;
  int32_t vocab_size_;
  std::unique_ptr<KvStorage> kv_;
  Scheduler scheduler_;
  std::unique_ptr<Speculator> speculator_;
  std::unordered_map<RequestId, Group> groups_;         // live requests, by RequestId
  std::unordered_map<SequenceId, Sequence> sequences_;  // by sequence (scheduler) id
  RequestId next_request_id_ = 1;
  SequenceId next_sequence_id_ = 1;
  SamplerScratch scratch_;
  // Masks of the grammar sequences for their next sample, computed while the forward pass runs.
  std::future<void> mask_job_;
  std::vector<float> logits_;  // [num logit rows, vocab_size]
  int64_t num_finished_requests_ = 0;
  int64_t num_computed_tokens_ = 0;
  int64_t num_generated_tokens_ = 0;
  int64_t num_block_copies_ = 0;
};

}  // namespace pagoda
