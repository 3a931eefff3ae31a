#include "engine/engine.h"

#include <algorithm>
#include <limits>
#include <span>
#include <utility>

#include "core/error.h"
#include "core/memory.h"
#include "engine/forward_batch.h"
#include "engine/kv_copy.h"

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
  const size_t value_bytes = config.kv_type == DType::kF16 ? 2 : sizeof(float);
  return BlockPool::num_blocks_for_budget(
      config.kv_cache_bytes, model.kv_bytes_per_token(value_bytes), config.block_size);
}

// The blocks the budget gives, refused up front when they cannot fit in memory: the kernel
// would otherwise kill the process once the cache is touched, with no message.
int32_t num_kv_blocks(const EngineConfig& config, const ModelConfig& model) {
  const int32_t num_blocks = num_kv_blocks_in_budget(config, model);
  const uint64_t bytes = static_cast<uint64_t>(num_blocks) * static_cast<uint64_t>(config.block_size) *
                         KvStorage::slot_bytes(model, config.kv_type) * 2 * model.num_layers;
  check_memory_available(
      bytes,
      str_cat("the KV cache of ", static_cast<int64_t>(num_blocks) * config.block_size, " tokens"),
      "give a smaller context (run -c), KV budget (serve --kv-cache-gb, --kv-tokens) or "
      "--kv-type f16");
  return num_blocks;
}

SchedulerConfig scheduler_config(const EngineConfig& config, int32_t num_blocks) {
  SchedulerConfig s;
  s.max_num_batched_tokens = config.max_num_batched_tokens;
  s.max_num_seqs = config.max_num_seqs;
  s.kv.num_blocks = num_blocks;
  s.kv.block_size = config.block_size;
  s.kv.enable_prefix_caching = config.enable_prefix_caching;
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
                                      config.block_size, config.kv_type)),
      scheduler_(scheduler_config(config, kv_->num_blocks())) {
  if (config_.max_model_len < 0) fail("engine: max_model_len must not be negative");
  model_.prepare(backend_);
}

void Engine::check_request(const GenerationRequest& r) const {
  if (r.prompt.empty()) fail("the prompt is empty (no tokens)");
  for (TokenId id : r.prompt) {
    if (id < 0 || id >= vocab_size_) {
      fail("prompt token id ", id, " is outside the vocabulary [0, ", vocab_size_, ")");
    }
  }
  if (r.max_tokens < 1) fail("max_tokens must be at least 1, got ", r.max_tokens);
  if (r.n < 1 || r.n > kMaxNumSamples) {
    fail("n must be in [1, ", kMaxNumSamples, "], got ", r.n);
  }
  r.sampling.validate();
  for (const auto& [id, bias] : r.sampling.logit_bias) {
    if (id < 0 || id >= vocab_size_) {
      fail("logit_bias token id ", id, " is outside the vocabulary [0, ", vocab_size_, ")");
    }
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
  while (groups_.count(next_request_id_)) ++next_request_id_;
  const RequestId id = next_request_id_++;
  add_request(id, std::move(request));
  return id;
}

RequestId Engine::add_request(std::vector<TokenId> prompt, SamplingParams sampling,
                              int32_t max_tokens, std::vector<TokenId> stop_ids, int32_t n) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling = std::move(sampling);
  r.max_tokens = max_tokens;
  r.stop_ids = std::move(stop_ids);
  r.n = n;
  return add_request(std::move(r));
}

void Engine::add_request(RequestId id, GenerationRequest request) {
  if (groups_.count(id)) fail("request id ", id, " is already in use");
  check_request(request);
  add_group(id, std::move(request));
}

void Engine::add_group(RequestId id, GenerationRequest r) {
  const auto num_prompt = static_cast<int32_t>(r.prompt.size());
  const bool fork =
      r.n > 1 && num_prompt >= 2 &&
      std::find(r.stop_ids.begin(), r.stop_ids.end(), r.prompt.back()) == r.stop_ids.end();
  // Samplers first: they are what can still throw.
  std::vector<Sequence> seqs;
  for (int32_t k = 0; k < r.n; ++k) {
    SamplingParams params = r.sampling;
    if (params.has_seed) params.seed += static_cast<uint64_t>(k);
    seqs.push_back(Sequence{id, k, Sampler(std::move(params), r.prompt, vocab_size_)});
  }
  Group group;
  group.num_unfinished = r.n;
  std::vector<RequestId> seq_ids;
  for (int32_t k = 0; k < r.n; ++k) seq_ids.push_back(next_sequence_id_++);
  group.parent = seq_ids[0];

  Request base;
  base.prompt = std::move(r.prompt);
  base.max_tokens = r.max_tokens;
  base.stop_ids = std::move(r.stop_ids);
  base.cache_key = r.cache_key;
  if (fork) {
    // The parent's prompt stops one token short; that token comes back as its first "output",
    // so it may have one output token more. Forked children inherit both.
    seqs[0].prompt_phase = true;
    seqs[0].last_prompt_token = base.prompt.back();
    base.prompt.pop_back();
    base.max_tokens += 1;
    base.id = seq_ids[0];
    scheduler_.add_request(std::move(base));
    group.waiting_children.assign(seq_ids.begin() + 1, seq_ids.end());
  } else {
    for (int32_t k = 0; k < r.n; ++k) {
      Request q = base;
      q.id = seq_ids[k];
      scheduler_.add_request(std::move(q));
    }
  }
  for (int32_t k = 0; k < r.n; ++k) sequences_.emplace(seq_ids[k], std::move(seqs[k]));
  groups_.emplace(id, std::move(group));
}

OutputEvent Engine::event_for(const Sequence& seq) const {
  OutputEvent e;
  e.request_id = seq.request_id;
  e.index = seq.index;
  return e;
}

void Engine::finish_sequence(RequestId seq_id, FinishReason reason, OutputEvent& event) {
  auto it = sequences_.find(seq_id);
  PAGODA_CHECK(it != sequences_.end());
  Group& group = groups_.at(it->second.request_id);
  sequences_.erase(it);
  event.finish_reason = reason;
  if (--group.num_unfinished == 0) {
    event.request_finished = true;
    groups_.erase(event.request_id);
    ++num_finished_requests_;
  }
}

std::vector<OutputEvent> Engine::abort(RequestId id) {
  std::vector<OutputEvent> events;
  auto it = groups_.find(id);
  if (it == groups_.end()) return events;
  std::vector<RequestId> seq_ids;
  for (const auto& [seq_id, seq] : sequences_) {
    if (seq.request_id == id) seq_ids.push_back(seq_id);
  }
  std::sort(seq_ids.begin(), seq_ids.end());  // sample order; the last event closes the request
  for (RequestId seq_id : seq_ids) {
    scheduler_.abort(seq_id);  // nullopt for a child still waiting for its fork
    events.push_back(event_for(sequences_.at(seq_id)));
    finish_sequence(seq_id, FinishReason::kAbort, events.back());
  }
  return events;
}

void Engine::fork_children(Group& group) {
  for (RequestId child : group.waiting_children) scheduler_.fork(group.parent, child);
  group.waiting_children.clear();
}

std::vector<OutputEvent> Engine::step() {
  std::vector<OutputEvent> events;
  if (!has_work()) return events;
  const StepPlan plan = scheduler_.schedule();
  const ForwardBatch batch = build_forward_batch(plan, scheduler_);
  copy_kv_blocks(*kv_, model_.config(), plan.block_copies);
  num_block_copies_ += static_cast<int64_t>(plan.block_copies.size());
  if (batch.num_tokens() > 0) model_.forward(backend_, batch, *kv_, logits_);
  num_computed_tokens_ += batch.num_tokens();

  // One token per needs_sample request, in plan order; events for the sampled ones.
  std::vector<TokenId> tokens;
  std::vector<std::pair<RequestId, size_t>> event_of;  // sequence id -> index into events
  std::vector<RequestId> forks;                        // parents whose prompt phase ends now
  size_t row = 0;
  for (const ScheduledRequest& s : plan.requests) {
    if (!s.needs_sample) continue;
    const std::span<const float> logits(logits_.data() + row++ * vocab_size_,
                                        static_cast<size_t>(vocab_size_));
    Sequence& seq = sequences_.at(s.request_id);
    if (seq.prompt_phase) {
      tokens.push_back(seq.last_prompt_token);
      forks.push_back(s.request_id);
      continue;
    }
    OutputEvent e = event_for(seq);
    try {
      SampleResult sample = seq.sampler.sample(logits, scratch_);
      seq.sampler.accept(sample.token);
      tokens.push_back(sample.token);
      e.token_ids.push_back(sample.token);
      if (seq.sampler.params().logprobs) e.logprobs.push_back(std::move(sample));
      ++num_generated_tokens_;
      event_of.emplace_back(s.request_id, events.size());
    } catch (const Error& error) {
      // E.g. every token banned by logit_bias: this sample ends, the others go on. commit()
      // skips a request aborted since schedule(), so its token is never read.
      tokens.push_back(0);
      scheduler_.abort(s.request_id);
      e.error = error.what();
      finish_sequence(s.request_id, FinishReason::kError, e);
    }
    events.push_back(std::move(e));
  }
  PAGODA_CHECK(row * vocab_size_ == logits_.size() || batch.num_tokens() == 0);

  for (Request& r : scheduler_.commit(plan, tokens)) {
    auto it = std::find_if(event_of.begin(), event_of.end(),
                           [&](const auto& p) { return p.first == r.id; });
    PAGODA_CHECK(it != event_of.end());
    OutputEvent& e = events[it->second];
    if (r.status == RequestStatus::kFinishedStopped) {
      e.stop_token = e.token_ids.back();
      e.token_ids.pop_back();
      if (!e.logprobs.empty()) e.logprobs.pop_back();
      finish_sequence(r.id, FinishReason::kStop, e);
    } else {
      PAGODA_CHECK(r.status == RequestStatus::kFinishedLength);
      finish_sequence(r.id, FinishReason::kLength, e);
    }
  }
  // Between steps again: the children start from the parent's blocks.
  for (RequestId parent : forks) {
    auto it = sequences_.find(parent);
    if (it == sequences_.end() || scheduler_.find(parent) == nullptr) continue;
    it->second.prompt_phase = false;
    fork_children(groups_.at(it->second.request_id));
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
  s.kv_cache_bytes = kv_->bytes();
  s.block_size = config_.block_size;
  return s;
}

void Engine::check_invariants() const {
  scheduler_.check_invariants();
  int64_t num_in_scheduler = 0;
  std::unordered_map<RequestId, int32_t> num_seqs_of;
  for (const auto& [seq_id, seq] : sequences_) {
    seq.sampler.check_invariants();
    auto g = groups_.find(seq.request_id);
    PAGODA_CHECK(g != groups_.end());
    ++num_seqs_of[seq.request_id];
    const Group& group = g->second;
    const bool waiting_child =
        std::find(group.waiting_children.begin(), group.waiting_children.end(), seq_id) !=
        group.waiting_children.end();
    const Request* r = scheduler_.find(seq_id);
    PAGODA_CHECK(waiting_child == (r == nullptr));
    if (r != nullptr) ++num_in_scheduler;
    if (seq.prompt_phase) PAGODA_CHECK(r != nullptr && r->output.empty() && seq_id == group.parent);
  }
  PAGODA_CHECK(num_in_scheduler == scheduler_.num_running() + scheduler_.num_waiting());
  for (const auto& [id, group] : groups_) {
    PAGODA_CHECK(num_seqs_of[id] == group.num_unfinished && group.num_unfinished > 0);
    if (!group.waiting_children.empty()) {
      auto parent = sequences_.find(group.parent);
      PAGODA_CHECK(parent != sequences_.end() && parent->second.prompt_phase);
    }
  }
}

}  // namespace pagoda
