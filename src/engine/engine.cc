// The engine's requests: checking, adding and aborting them, and the invariants. The step is in
// engine_step.cc, beam search's side of it in engine_beam.cc.
#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "model/delta_net.h"
#include "model/lora.h"
#include "core/error.h"
#include "core/memory.h"

namespace pagoda {
namespace {

int32_t num_kv_blocks_in_budget(const EngineConfig& config, const ModelConfig& model) {
  if (config.block_size < 1) fail("engine: block size must be positive, got ", config.block_size);
  if ((config.kv_cache_bytes > 0) == (config.num_kv_cache_tokens > 0)) {
    fail("engine: give the KV cache budget either in bytes or in tokens (exactly one)");
  }
  if (config.num_kv_cache_tokens > 0) {
    const int64_t num_blocks =
        (config.num_kv_cache_tokens + config.block_size - 1) / config.block_size;
    if (num_blocks > std::numeric_limits<int32_t>::max()) {
      fail("engine: a KV cache of ", config.num_kv_cache_tokens, " tokens is too large");
    }
    return static_cast<int32_t>(num_blocks);
  }
  return BlockPool::num_blocks_for_budget(
      config.kv_cache_bytes, KvStorage::token_bytes(model, config.kv_type),
      config.block_size);
}

// The blocks the budget gives, refused up front when they cannot fit in memory: the kernel
// would otherwise kill the process once the cache is touched, with no message.
int32_t num_kv_blocks(const EngineConfig& config, const ModelConfig& model) {
  const int32_t num_blocks = num_kv_blocks_in_budget(config, model);
  const uint64_t bytes = static_cast<uint64_t>(num_blocks) * static_cast<uint64_t>(config.block_size) *
                         KvStorage::token_bytes(model, config.kv_type);
  check_memory_available(
      bytes,
      str_cat("the KV cache of ", static_cast<int64_t>(num_blocks) * config.block_size, " tokens"),
      "give a smaller context (run -c), KV budget (serve --kv-cache-gb, --kv-tokens) or "
      "--kv-type f16");
  return num_blocks;
}

SchedulerConfig scheduler_config(const EngineConfig& config, const ModelConfig& model,
                                 int32_t num_blocks) {
  SchedulerConfig s;
  s.max_num_batched_tokens = config.max_num_batched_tokens;
  s.max_num_seqs = config.max_num_seqs;
  s.kv.num_blocks = num_blocks;
  s.kv.block_size = config.block_size;
  s.kv.enable_prefix_caching = config.enable_prefix_caching;
  if (model.hybrid()) {  // a recurrent state slot per running sequence, and checkpoints
    s.num_state_slots = config.max_num_seqs;
    s.num_state_checkpoints = num_state_checkpoints(config, model);
    // Prompts split where the delta rule's chunks start anyway (see delta_net.h).
    s.state_align = std::lcm(config.block_size, static_cast<int32_t>(kDeltaChunk));
  }
  return s;
}

}  // namespace

std::string_view to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "?";
}

Engine::Engine(Model& model, Backend& backend, EngineConfig config)
    : model_(model),
      backend_(backend),
      config_(config),
      vocab_size_(static_cast<int32_t>(model.config().vocab_size)),
      kv_(std::make_unique<KvStorage>(model.config(), num_kv_blocks(config, model.config()),
                                      config.block_size, config.kv_type, &backend)),
      scheduler_(scheduler_config(config, model.config(), kv_->num_blocks())) {
  if (config_.max_model_len < 0) fail("engine: max_model_len must not be negative");
  model_.prepare(backend_);
  const Model* draft = config_.speculative.draft_model;
  if (draft != nullptr && draft->config().vocab_size != model_.config().vocab_size) {
    fail("engine: the draft model's vocabulary has ", draft->config().vocab_size,
         " entries, the model's ", model_.config().vocab_size);
  }
  if (model_.config().hybrid()) setup_hybrid();
  speculator_ = std::make_unique<Speculator>(config_.speculative, backend_, kv_->num_blocks(),
                                             config_.block_size, config_.kv_type);
  if (!config_.kv_disk.folder.empty() || config_.kv_offload_bytes > 0) open_kv_tiers();
}

void Engine::check_request(const GenerationRequest& r) const {
  if (r.prompt.empty()) fail("the prompt is empty (no tokens)");
  const int32_t num_adapters = lora_ != nullptr ? lora_->num_adapters() : 0;
  if (r.adapter < 0 || r.adapter > num_adapters) {
    fail("LoRA adapter ", r.adapter, " asked for; the engine has ", num_adapters);
  }
  for (TokenId id : r.prompt) {
    if (id < 0 || id >= vocab_size_) {
      fail("prompt token id ", id, " is outside the vocabulary [0, ", vocab_size_, ")");
    }
  }
  if (r.embedding != PromptOnly::kNo) return check_embedding_request(r);
  if (r.max_tokens < 1) fail("max_tokens must be at least 1, got ", r.max_tokens);
  if (r.n < 1 || r.n > kMaxNumSamples) {
    fail("n must be in [1, ", kMaxNumSamples, "], got ", r.n);
  }
  validate(r.sampling, vocab_size_);
  if (r.beam.width < 0 || r.beam.width > kMaxBeamWidth) {
    fail("the beam width must be in [1, ", kMaxBeamWidth, "], got ", r.beam.width);
  }
  if (r.beam.width > 0) {
    if (r.n > r.beam.width) fail("n (", r.n, ") must not exceed the beam width (", r.beam.width, ")");
    if (r.grammar) fail("beam search does not take a grammar");
    if (!std::isfinite(r.beam.length_penalty)) fail("the length penalty must be a number");
    if (r.thinking.active()) fail("beam search does not take a thinking budget");
    if (r.prompt_logprobs) fail("beam search does not give prompt log-probabilities");
  }
  if (r.thinking.active()) {
    if (r.thinking.tokenizer == nullptr || r.thinking.end_tokens.empty()) {
      fail("a thinking budget needs the tokenizer and the tokens that end the thinking");
    }
    for (TokenId id : r.thinking.end_tokens) {
      if (id < 0 || id >= vocab_size_) fail("thinking end token ", id, " is outside the vocabulary");
    }
  }
  if (r.num_speculative_tokens < -1 || r.num_speculative_tokens > kMaxSpeculativeTokens) {
    fail("num_speculative_tokens must be in [0, ", kMaxSpeculativeTokens, "], got ",
         r.num_speculative_tokens);
  }
  const int64_t num_tokens = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
  if (config_.max_model_len > 0 && num_tokens > config_.max_model_len) {
    fail("the prompt has ", r.prompt.size(), " tokens and max_tokens is ", r.max_tokens,
         ": together more than the ", config_.max_model_len, " tokens of the context");
  }
  // The last sampled token never needs a KV slot.
  const int64_t num_kv_tokens = num_tokens - 1;
  const int64_t capacity = int64_t{kv_->num_blocks()} * config_.block_size;
  if (num_kv_tokens > capacity) {
    fail("the prompt has ", r.prompt.size(), " tokens and max_tokens is ", r.max_tokens,
         ": together more than the ", capacity, " tokens the KV cache holds");
  }
}

RequestId Engine::add_request(GenerationRequest request) {
  while (has_request(next_request_id_)) ++next_request_id_;
  const RequestId id = next_request_id_++;
  add_request(id, std::move(request));
  return id;
}

Engine::~Engine() { wait_mask_job(); }

void Engine::add_request(RequestId id, GenerationRequest request) {
  wait_mask_job();
  if (has_request(id)) fail("request id ", id, " is already in use");
  check_request(request);
  if (request.embedding != PromptOnly::kNo) {
    add_embedding(id, std::move(request));
  } else if (request.beam.width > 0) {
    add_beam_group(id, std::move(request));
  } else {
    add_sample_group(id, std::move(request));
  }
}

bool Engine::has_request(RequestId id) const {
  return sample_groups_.count(id) > 0 || beam_groups_.count(id) > 0 ||
         embedding_requests_.count(id) > 0;
}

void Engine::schedule_prompt(SequenceId seq_id, GenerationRequest& r) {
  pagoda::Sequence base;
  base.id = seq_id;
  base.prompt = std::move(r.prompt);
  base.max_tokens = r.max_tokens;
  base.stop_ids = std::move(r.stop_ids);
  base.cache_key = r.cache_key;
  base.adapter = r.adapter;
  if (r.prompt_logprobs) {
    // Every position must be computed to be scored: a key no other request has, no cache hits.
    base.prompt_logits = true;
    base.cache_key = ~static_cast<uint64_t>(seq_id);
  }
  scheduler_.add_sequence(std::move(base));
}

void Engine::add_beam_group(RequestId id, GenerationRequest r) {
  // One sequence computes the prompt; beams fork from it as the search goes.
  const SequenceId seq_id = next_sequence_id_++;
  SequenceState seq{id, 0, Sampler(r.sampling, r.prompt, vocab_size_)};
  BeamGroup group{.num_beams = 1,
                  .num_samples = r.n,
                  .sampling = r.sampling,
                  .search = BeamSearch(r.beam, static_cast<int32_t>(r.prompt.size()),
                                       r.max_tokens, r.stop_ids, seq_id)};
  schedule_prompt(seq_id, r);
  sequences_.emplace(seq_id, std::move(seq));
  beam_groups_.emplace(id, std::move(group));
}

void Engine::add_sample_group(RequestId id, GenerationRequest r) {
  // Samplers first: they are what can still throw.
  std::vector<SequenceState> seqs;
  for (int32_t k = 0; k < r.n; ++k) {
    SamplingParams params = r.sampling;
    if (params.has_seed) params.seed += static_cast<uint64_t>(k);
    seqs.push_back(SequenceState{id, k, Sampler(std::move(params), r.prompt, vocab_size_)});
    if (r.grammar) {
      seqs.back().grammar = r.grammar;
      seqs.back().grammar_state =
          std::make_shared<GrammarState>(initial_state(r.grammar->grammar()));
      seqs.back().mask = std::make_shared<TokenBitmask>(r.grammar->trie().vocab_size());
    }
    if (r.thinking.active()) seqs.back().thinking = std::make_shared<ThinkingCap>(r.thinking);
    seqs.back().wants_prompt_logprobs = r.prompt_logprobs && k == 0;
  }
  SampleGroup group;
  group.num_unfinished = r.n;
  std::vector<SequenceId> seq_ids;
  for (int32_t k = 0; k < r.n; ++k) seq_ids.push_back(next_sequence_id_++);
  group.parent = seq_ids[0];
  group.waiting_children.assign(seq_ids.begin() + 1, seq_ids.end());
  if (r.n > 1) {
    group.prompt = r.prompt;
    group.max_tokens = r.max_tokens;
    group.stop_ids = r.stop_ids;
    group.cache_key = r.cache_key;
    group.adapter = r.adapter;
  }
  // Only the first sequence runs the prompt; the others fork from it once it samples (see the
  // top of engine.h).
  schedule_prompt(seq_ids[0], r);
  const int32_t num_speculative = r.num_speculative_tokens < 0 ? config_.speculative.num_tokens
                                                               : r.num_speculative_tokens;
  for (int32_t k = 0; k < r.n; ++k) {
    if (num_speculative > 0 && !r.grammar && !r.thinking.active()) {
      speculator_->add(seq_ids[k], r.num_speculative_tokens, seqs[k].sampler.params());
    }
    sequences_.emplace(seq_ids[k], std::move(seqs[k]));
  }
  sample_groups_.emplace(id, std::move(group));
}

OutputEvent Engine::event_for(const SequenceState& seq) const {
  OutputEvent e;
  e.request_id = seq.request_id;
  e.index = seq.index;
  return e;
}

void Engine::finish_sequence(SequenceId seq_id, FinishReason reason, OutputEvent& event) {
  auto it = sequences_.find(seq_id);
  PAGODA_CHECK(it != sequences_.end());
  speculator_->remove(seq_id);
  SampleGroup& group = sample_groups_.at(it->second.request_id);
  sequences_.erase(it);
  event.finish_reason = reason;
  if (--group.num_unfinished == 0) {
    event.request_finished = true;
    sample_groups_.erase(event.request_id);
    ++num_finished_requests_;
  }
}

std::vector<OutputEvent> Engine::abort(RequestId id) {
  wait_mask_job();
  std::vector<OutputEvent> events;
  if (abort_embedding(id, events)) return events;
  if (beam_groups_.count(id)) {
    close_beam_group(id, events, /*aborted=*/true);
    return events;
  }
  if (!sample_groups_.count(id)) return events;
  std::vector<SequenceId> seq_ids;
  for (const auto& [seq_id, seq] : sequences_) {
    if (seq.request_id == id) seq_ids.push_back(seq_id);
  }
  std::sort(seq_ids.begin(), seq_ids.end());  // sample order; the last event closes the request
  for (SequenceId seq_id : seq_ids) {
    scheduler_.abort(seq_id);  // nullopt for a child still waiting for its fork
    events.push_back(event_for(sequences_.at(seq_id)));
    finish_sequence(seq_id, FinishReason::kAbort, events.back());
  }
  return events;
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.scheduler = scheduler_.stats();
  s.num_requests = num_requests();
  s.num_finished_requests = num_finished_requests_;
  s.num_computed_tokens = num_computed_tokens_;
  s.num_generated_tokens = num_generated_tokens_;
  s.num_block_copies = num_block_copies_;
  s.kv_cache_bytes = kv_->bytes() + speculator_->draft_kv_bytes();
  s.speculative = speculator_->stats();
  s.block_size = config_.block_size;
  s.kv_disk = kv_disk_stats();
  s.kv_host = kv_host_stats();
  s.kv_loads = kv_load_stats();
  return s;
}

void Engine::check_invariants() const {
  scheduler_.check_invariants();
  speculator_->check_invariants(scheduler_);
  int64_t num_in_scheduler = check_embedding_invariants();
  std::unordered_map<RequestId, int32_t> num_seqs_of;
  for (const auto& [seq_id, seq] : sequences_) {
    seq.sampler.check_invariants();
    const auto sample = sample_groups_.find(seq.request_id);
    const bool beam = beam_groups_.count(seq.request_id) > 0;
    PAGODA_CHECK(beam != (sample != sample_groups_.end()));
    ++num_seqs_of[seq.request_id];
    const bool waiting_child = !beam && std::find(sample->second.waiting_children.begin(),
                                                  sample->second.waiting_children.end(),
                                                  seq_id) != sample->second.waiting_children.end();
    const pagoda::Sequence* r = scheduler_.find(seq_id);
    PAGODA_CHECK(waiting_child == (r == nullptr));
    if (r != nullptr) ++num_in_scheduler;
  }
  PAGODA_CHECK(num_in_scheduler == scheduler_.num_running() + scheduler_.num_waiting());
  for (const auto& [id, group] : sample_groups_) {
    PAGODA_CHECK(!beam_groups_.count(id));
    PAGODA_CHECK(num_seqs_of[id] == group.num_unfinished && group.num_unfinished > 0);
    if (!group.waiting_children.empty()) {
      const pagoda::Sequence* parent = scheduler_.find(group.parent);
      PAGODA_CHECK(parent != nullptr && parent->output.empty());
    }
  }
  for (const auto& [id, group] : beam_groups_) {
    PAGODA_CHECK(num_seqs_of[id] == group.num_beams && group.num_beams > 0);
  }
}

}  // namespace pagoda
