// Many requests at once over the paged KV cache: the step loop of DESIGN.md. step() runs its
// phases in order:
//
//   plan_step()          speculator.plan_lookahead; plan = scheduler.schedule() (one token
//                        budget, prompt chunks and decodes mixed); speculator.propose
//   run_forward()        build_forward_batch; copy_kv_blocks (copy-on-write tails of forks,
//                        before any write); model.forward: each weight matrix read once a step
//   sample_rows()        per needs_sample sequence, by its kind: a beam holds its candidates; a
//                        sample has its grammar mask applied, then draws one token or verifies
//                        its proposals, and a parent with waiting children draws theirs too
//   choose_beams()       each beam search's round over its candidates
//   commit_and_finish()  scheduler.commit (append, roll back rejected proposals, stop, free);
//                        speculator.observe; finished samples' last events; children fork;
//                        dropped beams freed, new beams forked, finished searches answered
//   start_mask_job()     grammar masks for the next step, computed beside its forward pass
//
// The Engine is single-threaded: call it from one thread (EngineThread runs it on its own).
// Outputs are returned by step() and abort() as events; nothing is called back.
//
// Parallel sampling (n > 1): the request's first sequence computes the prompt; at the step that
// finishes it, every one of the n samples draws its first token from those same logits, each
// with its own Sampler (seed + index when seeded); after the commit the n - 1 others fork from
// the first, sharing its full blocks, with a copy of the partly filled tail and their own token
// in place of its last one (Scheduler::fork); on a hybrid model, with a copy of its recurrent
// state too (StepPlan::state_copies). The prompt is computed once.
//
// Speculative decoding (Speculator): between steps, sequences that decode may ask for proposals
// to be verified; the plan schedules them after each one's token, the forward pass gives their
// logit rows, Sampler::verify keeps the accepted ones and draws the token after them, and
// commit() takes the lot, rolling back the slots of the rejected ones (and, on a hybrid model,
// the recurrent state to a snapshot the forward pass kept at the accepted ones).
//
// Beam search: each beam is a sequence. Its row gives its best 2 * width candidates, and a
// placeholder token goes to the commit; choose_beams() replaces the placeholders of the beams
// that go on, and the beams dropped are freed after the commit (their placeholder with them).
//
// Invariants (check_invariants(), on top of the Scheduler's and the Speculator's):
//   - each live request is in exactly one of sample_groups_, beam_groups_ and
//     embedding_requests_ (whose sequences, in embeddings_, are live prompt-only ones);
//   - every live scheduler sequence has a SequenceState of a live group, and every
//     SequenceState is either live in the scheduler or a child waiting for its group's first
//     sequence to sample;
//   - a sample group's num_unfinished, and a beam group's num_beams, equal its SequenceState
//     count; children wait only while the first sequence is live and has no output.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/beam_search.h"
#include "engine/engine_stats.h"
#include "engine/kv_disk.h"
#include "engine/prefix_file.h"
#include "engine/sampler.h"
#include "engine/speculator.h"
#include "engine/thinking_budget.h"
#include "grammar/token_mask.h"
#include "model/kv_storage.h"
#include "model/model.h"
#include "sched/scheduler.h"

namespace pagoda {

class LoraBackend;

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
  KvDiskConfig kv_disk;           // the prefix cache's disk tier (--kv-disk); off by default
  uint64_t kv_offload_bytes = 0;  // its host-memory tier (--kv-offload-gb, kv/host_tier.h); 0: none
  // Hybrid models with prefix caching: recurrent-state checkpoints kept for cache hits
  // (sched/state_checkpoints.h), one state slot each; -1: num_state_checkpoints()'s default.
  int32_t num_state_checkpoints = -1;
  // Hybrid models: state snapshots for speculative decoding's roll-back, one per proposal a step
  // verifies (the step's proposals are bounded by it); -1: num_state_snapshots()'s default.
  int32_t num_state_snapshots = -1;
};

// The state checkpoints an engine keeps: 0 for a model without recurrent layers or without
// prefix caching; config.num_state_checkpoints when given; else twice max_num_seqs, at most what
// 512 MiB holds (at least 1; a slot of the 0.8B shape takes about 20 MiB).
int32_t num_state_checkpoints(const EngineConfig& config, const ModelConfig& model);
// The state snapshots an engine of a hybrid model budgets (0 for other models):
// config.num_state_snapshots when given; else enough for every sequence that may speculate at
// once (SpeculativeConfig::max_num_running, at most max_num_seqs) to propose
// kMaxSpeculativeTokens, at most what 512 MiB holds (at least 1). Allocated on first use,
// counted in the memory check at start.
int32_t num_state_snapshots(const EngineConfig& config, const ModelConfig& model);

struct GenerationRequest {
  std::vector<TokenId> prompt;  // token ids, not empty
  SamplingParams sampling;
  int32_t max_tokens = 16;        // output tokens per sample at most (a stop id counts)
  std::vector<TokenId> stop_ids;  // EOS / EOG: the sample ends when it draws one
  int32_t n = 1;                  // parallel samples of the same prompt, [1, kMaxNumSamples]
  uint64_t cache_key = 0;         // only requests with equal keys share cached KV blocks
  // The LoRA adapter it runs with (0: none; k: the engine's LoRA backend's adapter k, see
  // Engine::set_lora). Its cache_key must name the adapter's contents (LoraAdapter::digest).
  int32_t adapter = 0;
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
  // Reasoning models: the thinking ends after this many tokens (thinking_budget.h). Not with
  // beam search.
  ThinkingBudget thinking;
  // Prompt log-probabilities: the log-probability of each prompt token after the first (and the
  // sampling.num_logprobs most likely there), on sample 0's first event. The prompt is computed
  // in full (no prefix-cache hits). Not with beam search.
  bool prompt_logprobs = false;
  // Embeddings (engine_embed.cc): a prompt-only request, scheduled beside generation under the
  // same token budget, whose one event carries the final-norm hidden state of its prompt pooled
  // (OutputEvent::embedding): the mean of every position (kAllRows), the first or the last. It
  // samples nothing and keeps no KV blocks; it runs with `adapter`; max_tokens, sampling,
  // stop_ids and cache_key are not read; n > 1, beams, a grammar, a thinking budget,
  // speculation and prompt_logprobs are refused.
  PromptOnly embedding = PromptOnly::kNo;
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
  // GenerationRequest::prompt_logprobs: [prompt size - 1], for prompt tokens 1, 2, ...
  std::vector<SampleResult> prompt_logprobs;
  // An embedding request's event (finish_reason kStop): its pooled hidden state, not normalised.
  std::vector<float> embedding;
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
  // LoRA adapters: `lora` is the backend the engine was made with (or nullptr: none), told
  // before each forward pass which adapter each row takes (GenerationRequest::adapter).
  void set_lora(LoraBackend* lora) { lora_ = lora; }
  // The disk tier's counters (zero without one); any thread.
  KvDiskStats kv_disk_stats() const { return kv_disk_ ? kv_disk_->stats() : KvDiskStats{}; }
  HostTierStats kv_host_stats() const { return kv_host_ ? kv_host_->stats() : HostTierStats{}; }
  TierLoadStats kv_load_stats() const;  // the loads of the tier under the pool (kv_host.cc)
  const Scheduler& scheduler() const { return scheduler_; }

  // Explicit prefix save and restore (engine_kv_save.cc, engine/prefix_file.h), between steps on
  // the engine's thread. export_prefix: the cached full blocks of `prompt` under `cache_key`
  // (from its start up to the first the cache lacks) with their K/V bytes. import_prefix: puts
  // saved blocks back into the prefix cache as ordinary cached blocks; returns how many tokens
  // of blocks.tokens are now cached. Both throw Error when the KV cache is not in host memory,
  // prefix caching is off, or a draft model is set (its K/V would not be restored).
  PrefixBlocks export_prefix(std::span<const TokenId> prompt, uint64_t cache_key);
  int32_t import_prefix(const PrefixBlocks& blocks);
  uint64_t kv_block_bytes() const;
  const EngineConfig& config() const { return config_; }
  const KvStorage& kv() const { return *kv_; }
  int32_t num_requests() const {
    return static_cast<int32_t>(sample_groups_.size() + beam_groups_.size() +
                                embedding_requests_.size());
  }

  void check_invariants() const;

 private:
  // The engine's side of one scheduler sequence (a sample or a beam of a request), under its own
  // SequenceId.
  struct SequenceState {
    RequestId request_id = 0;
    int32_t index = 0;
    Sampler sampler;
    // Structured output: the grammar, the parse state after the output so far, and the mask
    // for that state when the engine computed it ahead (beside the forward pass).
    std::shared_ptr<GrammarMasks> grammar = nullptr;
    std::shared_ptr<GrammarState> grammar_state = nullptr;
    std::shared_ptr<TokenBitmask> mask = nullptr;
    bool mask_ready = false;
    // The thinking budget's count, and the closing tokens it forces once spent; null: none.
    std::shared_ptr<ThinkingCap> thinking = nullptr;
    // Prompt log-probabilities, position by position as the prompt is computed, until sent.
    bool wants_prompt_logprobs = false;
    std::vector<SampleResult> prompt_logprobs = {};
  };
  // A request that samples (n >= 1): its first sequence computes the prompt; the n - 1 others
  // wait until it samples, then fork from it (the top of this file).
  struct SampleGroup {
    int32_t num_unfinished = 0;                // its sequences
    SequenceId parent = 0;                     // sample 0
    std::vector<SequenceId> waiting_children;  // samples to fork from the parent
    // What a child needs to start alone when the parent finished at its first token.
    std::vector<TokenId> prompt;
    int32_t max_tokens = 0;
    std::vector<TokenId> stop_ids;
    uint64_t cache_key = 0;
    int32_t adapter = 0;
  };
  // A beam search: one sequence computes the prompt; beams fork from one another as the search
  // goes, and the n best arrive together when it is done.
  struct BeamGroup {
    int32_t num_beams = 0;    // its sequences
    int32_t num_samples = 1;  // n
    SamplingParams sampling;  // what the samplers of new beams take
    BeamSearch search;
  };
  // What sampling the rows of one step produced, carried to the commit.
  struct StepOutput {
    std::vector<OutputEvent> events;
    std::vector<std::vector<TokenId>> new_tokens;  // per needs_sample sequence, in plan order
    std::vector<std::pair<SequenceId, size_t>> event_of;  // a sampled sequence -> its event
    // Waiting children of a parent that sampled: the first token each drew from its logits.
    std::vector<std::pair<SequenceId, std::vector<SampleResult>>> first_samples;
    // Beam search: each group's candidates, each beam's entry in new_tokens (its best token
    // until choose_beams() decides), then the beams dropped and forked.
    std::unordered_map<RequestId, std::vector<BeamCandidates>> beam_present;
    std::unordered_map<SequenceId, size_t> beam_index;
    std::vector<SequenceId> beam_drop;
    std::vector<std::pair<RequestId, std::vector<std::pair<SequenceId, TokenId>>>> beam_forks;

    // seq's event this step, or nullptr (a beam, or a sample that ended before the commit).
    OutputEvent* event_of_sequence(SequenceId seq);
  };

  bool has_request(RequestId id) const;
  // The tiers under the scheduler's prefix cache: host memory (kv_host.cc), then the disk.
  void open_kv_tiers();
  void check_prefix_transfer(const char* what) const;  // export_prefix / import_prefix
  // A hybrid model (engine_hybrid.cc): its state slots, and the features it refuses.
  void setup_hybrid();
  // The plan's checkpoint restores (before the forward pass) or saves (after it).
  void copy_state_checkpoints(const StepPlan& plan, bool restores);
  // Its state slots between steps: forked children's copied before the forward pass (the
  // plan's state_copies), and after the commit each verifying sequence's rolled back to its
  // accepted proposals (the snapshots the forward pass kept, ForwardBatch::state_snapshots).
  void copy_states(const StepPlan& plan);
  void roll_back_states(const StepPlan& plan);

  // Embedding requests (engine_embed.cc): one prompt-only sequence each.
  struct EmbeddingState {
    RequestId request_id = 0;
    std::vector<double> sum;  // of the rows pooled so far
    int64_t num_rows = 0;
  };
  void check_embedding_request(const GenerationRequest& request) const;
  void add_embedding(RequestId id, GenerationRequest request);
  // Ends embedding request `id` with a kAbort event; false when it is no embedding request.
  bool abort_embedding(RequestId id, std::vector<OutputEvent>& events);
  // Pools the hidden-state rows the step gave prompt-only sequences (in logits_ from `offset`,
  // after the logit rows); returns the floats read.
  size_t pool_hidden_rows(const StepPlan& plan, size_t offset);
  // A prompt-only sequence the commit finished: its request's event, with the embedding.
  void finish_embedding(const Sequence& r, std::vector<OutputEvent>& events);
  // Embedding sequences live in the scheduler; returns how many there are.
  int64_t check_embedding_invariants() const;
  void add_sample_group(RequestId id, GenerationRequest request);
  void add_beam_group(RequestId id, GenerationRequest request);
  // Adds the sequence that computes a request's prompt to the scheduler.
  void schedule_prompt(SequenceId seq_id, GenerationRequest& request);
  // Forgets a finished sequence and completes `event` (its last); closes the group at its end.
  void finish_sequence(SequenceId seq_id, FinishReason reason, OutputEvent& event);
  OutputEvent event_for(const SequenceState& seq) const;

  // The phases of step(), in order.
  StepPlan plan_step();
  int32_t run_forward(const StepPlan& plan);  // returns the tokens computed
  StepOutput sample_rows(const StepPlan& plan, int32_t num_tokens);
  void choose_beams(StepOutput& out);
  void commit_and_finish(const StepPlan& plan, StepOutput& out);

  // The rows of a sequence's prompt positions: each scores the next prompt token.
  void score_prompt_rows(const ScheduledSequence& s, std::span<const float> rows);
  // One sequence's rows, not a beam's: its tokens for the commit and its event.
  void sample_sequence(const ScheduledSequence& s, std::span<float> logits, StepOutput& out);
  // Its sampled (or verified) tokens up to the first stop id, recorded in `e`; a parent with
  // waiting children draws their first tokens from the same logits.
  std::vector<TokenId> draw_tokens(const ScheduledSequence& s, SequenceState& seq,
                                   std::span<float> logits, const std::vector<TokenId>& stop_ids,
                                   OutputEvent& e, StepOutput& out);
  void draw_first_tokens(SampleGroup& group, std::span<const float> logits,
                         const std::vector<TokenId>& stop_ids, StepOutput& out);
  // A sequence that ends while its rows are sampled (its grammar is done, or an error): its
  // waiting children end too, and the scheduler forgets it before the commit.
  void end_before_commit(SequenceId seq_id, FinishReason reason, OutputEvent& e,
                         std::vector<OutputEvent>& events);
  // A sequence the commit finished (a stop id or max_tokens).
  void finish_committed(const Sequence& r, OutputEvent& e);
  // A child of an n > 1 request starts with the first token it drew from the parent's logits.
  void start_child(SequenceId child, std::vector<SampleResult> first,
                   std::vector<OutputEvent>& events);
  // The first sequence of a request failed before its children started: they end too.
  void abort_children_of(SequenceId parent_seq, std::vector<OutputEvent>& events);

  // Beam search. A beam's row gives its candidates, and a placeholder token in new_tokens until
  // choose_beams() runs each group's round; after the commit finish_beam_round() frees the
  // dropped beams (their placeholder was committed), forks the new ones and answers searches
  // that are done.
  void hold_beam_place(const ScheduledSequence& s, std::span<const float> logits,
                       RequestId id, const BeamGroup& group, StepOutput& out);
  void finish_beam_round(StepOutput& out);
  // Ends a beam search: the n best hypotheses as the request's samples.
  void close_beam_group(RequestId id, std::vector<OutputEvent>& events, bool aborted);

  // Structured output: masks `logits` ([vocab]) to what seq's grammar allows now. Returns false
  // when it allows nothing more (the grammar ended and the sample has no stop id to draw).
  bool apply_grammar(SequenceState& seq, std::span<float> logits,
                     const std::vector<TokenId>& stop_ids);
  // Moves seq's grammar past `token`.
  void advance_grammar(SequenceState& seq, TokenId token, const std::vector<TokenId>& stop_ids);
  void start_mask_job();
  void wait_mask_job();

  Model& model_;
  Backend& backend_;
  LoraBackend* lora_ = nullptr;  // set_lora
  EngineConfig config_;
  int32_t vocab_size_;
  std::unique_ptr<KvStorage> kv_;
  Scheduler scheduler_;
  std::unique_ptr<Speculator> speculator_;
  // Live requests, by RequestId: each in one of the two maps.
  std::unordered_map<RequestId, SampleGroup> sample_groups_;
  std::unordered_map<RequestId, BeamGroup> beam_groups_;
  std::unordered_map<SequenceId, SequenceState> sequences_;  // by sequence (scheduler) id
  std::unordered_map<SequenceId, EmbeddingState> embeddings_;  // embedding requests' sequences
  std::unordered_map<RequestId, SequenceId> embedding_requests_;
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
  // The tiers below the prefix cache, or null, last: they go before the KV memory they copy.
  // The disk tier (kv_disk.h); the host-memory tier above it (its next), after it: it goes first.
  std::unique_ptr<KvDisk> kv_disk_;
  std::unique_ptr<HostTier> kv_host_;
};

}  // namespace pagoda
