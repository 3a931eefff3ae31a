#include "engine/engine.h"

#include <algorithm>
#include <limits>
#include <span>
#include <utility>

#include "core/error.h"
#include "core/memory.h"
#include "engine/forward_batch.h"
#include "kv/kv_copy.h"

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
      config.kv_cache_bytes, KvStorage::slot_bytes(model, config.kv_type) * 2 * model.num_layers,
      config.block_size);
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
                                      config.block_size, config.kv_type, &backend)),
      scheduler_(scheduler_config(config, kv_->num_blocks())) {
  if (config_.max_model_len < 0) fail("engine: max_model_len must not be negative");
  model_.prepare(backend_);
  const Model* draft = config_.speculative.draft_model;
  if (draft != nullptr && draft->config().vocab_size != model_.config().vocab_size) {
    fail("engine: the draft model's vocabulary has ", draft->config().vocab_size,
         " entries, the model's ", model_.config().vocab_size);
  }
  speculator_ = std::make_unique<Speculator>(config_.speculative, backend_, kv_->num_blocks(),
                                             config_.block_size, config_.kv_type);
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
  validate(r.sampling, vocab_size_);
  if (r.beam.width < 0 || r.beam.width > kMaxBeamWidth) {
    fail("the beam width must be in [1, ", kMaxBeamWidth, "], got ", r.beam.width);
  }
  if (r.beam.width > 0) {
    if (r.n > r.beam.width) fail("n (", r.n, ") must not exceed the beam width (", r.beam.width, ")");
    if (r.grammar) fail("beam search does not take a grammar");
    if (!std::isfinite(r.beam.length_penalty)) fail("the length penalty must be a number");
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
  while (groups_.count(next_request_id_)) ++next_request_id_;
  const RequestId id = next_request_id_++;
  add_request(id, std::move(request));
  return id;
}

Engine::~Engine() { wait_mask_job(); }

void Engine::add_request(RequestId id, GenerationRequest request) {
  wait_mask_job();
  if (groups_.count(id)) fail("request id ", id, " is already in use");
  check_request(request);
  add_group(id, std::move(request));
}

void Engine::add_group(RequestId id, GenerationRequest r) {
  if (r.beam.width > 0) {
    // One sequence computes the prompt; beams fork from it as the search goes.
    const SequenceId seq_id = next_sequence_id_++;
    Sequence seq{id, 0, Sampler(r.sampling, r.prompt, vocab_size_)};
    Group group;
    group.num_unfinished = 1;
    group.parent = seq_id;
    group.num_samples = r.n;
    group.sampling = r.sampling;
    group.beam = std::make_unique<BeamSearch>(r.beam, static_cast<int32_t>(r.prompt.size()),
                                              r.max_tokens, r.stop_ids, seq_id);
    Request base;
    base.id = seq_id;
    base.prompt = std::move(r.prompt);
    base.max_tokens = r.max_tokens;
    base.stop_ids = std::move(r.stop_ids);
    base.cache_key = r.cache_key;
    scheduler_.add_request(std::move(base));
    sequences_.emplace(seq_id, std::move(seq));
    groups_.emplace(id, std::move(group));
    return;
  }
  // Samplers first: they are what can still throw.
  std::vector<Sequence> seqs;
  for (int32_t k = 0; k < r.n; ++k) {
    SamplingParams params = r.sampling;
    if (params.has_seed) params.seed += static_cast<uint64_t>(k);
    seqs.push_back(Sequence{id, k, Sampler(std::move(params), r.prompt, vocab_size_)});
    if (r.grammar) {
      seqs.back().grammar = r.grammar;
      seqs.back().grammar_state =
          std::make_shared<GrammarState>(initial_state(r.grammar->grammar()));
      seqs.back().mask = std::make_shared<TokenBitmask>(r.grammar->trie().vocab_size());
    }
  }
  Group group;
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
  }

  // Only the first sequence runs the prompt; the others fork from it once it samples (see the
  // top of engine.h).
  Request base;
  base.prompt = std::move(r.prompt);
  base.max_tokens = r.max_tokens;
  base.stop_ids = std::move(r.stop_ids);
  base.cache_key = r.cache_key;
  base.id = seq_ids[0];
  scheduler_.add_request(std::move(base));
  const int32_t num_speculative = r.num_speculative_tokens < 0 ? config_.speculative.num_tokens
                                                               : r.num_speculative_tokens;
  for (int32_t k = 0; k < r.n; ++k) {
    if (num_speculative > 0 && !r.grammar) {
      speculator_->add(seq_ids[k], r.num_speculative_tokens, seqs[k].sampler.params());
    }
    sequences_.emplace(seq_ids[k], std::move(seqs[k]));
  }
  groups_.emplace(id, std::move(group));
}

OutputEvent Engine::event_for(const Sequence& seq) const {
  OutputEvent e;
  e.request_id = seq.request_id;
  e.index = seq.index;
  return e;
}

void Engine::finish_sequence(SequenceId seq_id, FinishReason reason, OutputEvent& event) {
  auto it = sequences_.find(seq_id);
  PAGODA_CHECK(it != sequences_.end());
  speculator_->remove(seq_id);
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
  wait_mask_job();
  std::vector<OutputEvent> events;
  auto it = groups_.find(id);
  if (it == groups_.end()) return events;
  if (it->second.beam) {
    close_beam_group(id, events, /*aborted=*/true);
    return events;
  }
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

std::vector<OutputEvent> Engine::step() {
  std::vector<OutputEvent> events;
  if (!has_work()) return events;
  speculator_->plan_lookahead(scheduler_);
  StepPlan plan = scheduler_.schedule();
  for (SequenceId id : plan.preempted) speculator_->preempted(id);
  speculator_->propose(plan, scheduler_);
  const ForwardBatch batch = build_forward_batch(plan, scheduler_);
  model_.copy_kv_blocks(backend_, *kv_, plan.block_copies);
  speculator_->copy_blocks(plan.block_copies);
  num_block_copies_ += static_cast<int64_t>(plan.block_copies.size());
  if (batch.num_tokens() > 0) model_.forward(backend_, batch, *kv_, logits_);
  num_computed_tokens_ += batch.num_tokens();
  wait_mask_job();

  // The new tokens of every needs_sample request, in plan order; events for them.
  std::vector<std::vector<TokenId>> new_tokens;
  std::vector<std::pair<SequenceId, size_t>> event_of;  // sequence -> index into events
  std::vector<std::pair<SequenceId, std::vector<SampleResult>>> first_samples;  // of forks
  std::unordered_map<RequestId, std::vector<BeamCandidates>> beam_present;      // by request
  std::unordered_map<SequenceId, size_t> beam_index;  // beam -> its entry in new_tokens
  size_t row = 0;
  for (const ScheduledRequest& s : plan.requests) {
    if (!s.needs_sample) continue;
    const auto num_rows = static_cast<size_t>(s.num_logit_rows());
    const std::span<float> logits(logits_.data() + row * vocab_size_,
                                  num_rows * static_cast<size_t>(vocab_size_));
    row += num_rows;
    Sequence& seq = sequences_.at(s.seq_id);
    if (const Group& group = groups_.at(seq.request_id); group.beam) {
      // Beam search chooses across the group after this loop; a placeholder for now.
      std::vector<std::pair<TokenId, double>> top =
          top_logprobs(logits.first(static_cast<size_t>(vocab_size_)), 2 * group.beam->width());
      beam_index[s.seq_id] = new_tokens.size();
      new_tokens.push_back({top.empty() ? 0 : top[0].first});
      beam_present[seq.request_id].push_back({s.seq_id, std::move(top)});
      continue;
    }
    OutputEvent e = event_for(seq);
    std::vector<TokenId> tokens;
    const Request& scheduled = *scheduler_.find(s.seq_id);
    e.num_cached_tokens = scheduled.num_cached_tokens;
    const std::vector<TokenId>& stop_ids = scheduled.stop_ids;
    if (seq.grammar && !apply_grammar(seq, logits, stop_ids)) {
      // The grammar's sentence is complete and nothing may follow it.
      tokens = {0};
      abort_children_of(s.seq_id, events);
      scheduler_.abort(s.seq_id);
      finish_sequence(s.seq_id, FinishReason::kStop, e);
      new_tokens.push_back(std::move(tokens));
      events.push_back(std::move(e));
      continue;
    }
    try {
      std::vector<SampleResult> samples;
      if (s.num_proposed > 0) {
        samples =
            seq.sampler.verify(logits, s.proposed, speculator_->distributions(s.seq_id), scratch_);
      } else {
        samples.push_back(seq.sampler.sample(logits, scratch_));
        seq.sampler.accept(samples.back().token);
      }
      if (seq.grammar) advance_grammar(seq, samples[0].token, stop_ids);
      // The step's tokens end at the first stop id, as commit() ends them.
      for (size_t i = 0; i < samples.size(); ++i) {
        tokens.push_back(samples[i].token);
        if (std::find(stop_ids.begin(), stop_ids.end(), samples[i].token) != stop_ids.end()) {
          samples.resize(i + 1);
          break;
        }
      }
      e.num_proposed = s.num_proposed;
      e.num_accepted = std::min(s.num_proposed, static_cast<int32_t>(samples.size()) - 1);
      e.token_ids = tokens;
      num_generated_tokens_ += static_cast<int64_t>(tokens.size());
      Group& group = groups_.at(seq.request_id);
      if (!group.waiting_children.empty() && s.seq_id == group.parent) {
        // The prompt is computed: every sample of the request draws its first token from
        // these same logits, and the others fork from this sequence after the commit.
        std::vector<std::pair<SequenceId, std::vector<SampleResult>>> firsts;
        for (SequenceId child : group.waiting_children) {
          Sequence& c = sequences_.at(child);
          std::vector<SampleResult> first = {c.sampler.sample(logits, scratch_)};
          c.sampler.accept(first[0].token);
          if (c.grammar) advance_grammar(c, first[0].token, stop_ids);
          firsts.emplace_back(child, std::move(first));
        }
        for (auto& f : firsts) first_samples.push_back(std::move(f));
      }
      if (seq.sampler.params().logprobs) e.logprobs = std::move(samples);
      event_of.emplace_back(s.seq_id, events.size());
    } catch (const Error& error) {
      // E.g. every token banned by logit_bias: this sample ends, the others go on. commit()
      // skips a request aborted since schedule(), so its token is never read.
      tokens = {0};
      abort_children_of(s.seq_id, events);
      scheduler_.abort(s.seq_id);
      e.error = error.what();
      finish_sequence(s.seq_id, FinishReason::kError, e);
    }
    new_tokens.push_back(std::move(tokens));
    events.push_back(std::move(e));
  }
  PAGODA_CHECK(row * static_cast<size_t>(vocab_size_) == logits_.size() || batch.num_tokens() == 0);

  std::vector<SequenceId> beam_drop;
  std::vector<std::pair<RequestId, std::vector<std::pair<SequenceId, TokenId>>>> beam_forks;
  if (!beam_present.empty()) {
    select_beams(beam_present, beam_index, new_tokens, beam_drop, beam_forks);
  }
  std::vector<Request> finished = scheduler_.commit(plan, new_tokens);
  for (const ScheduledRequest& s : plan.requests) {
    if (!s.needs_sample) continue;
    const Request* r = scheduler_.find(s.seq_id);
    auto it = std::find_if(event_of.begin(), event_of.end(),
                           [&](const auto& p) { return p.first == s.seq_id; });
    const int32_t num_accepted = it == event_of.end() ? 0 : events[it->second].num_accepted;
    speculator_->observe(s, num_accepted, r ? r->num_computed_tokens : -1);
  }
  for (Request& r : finished) {
    if (beam_index.count(r.id)) continue;  // a dropped beam: finish_beam_round frees it
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
  // Between steps again: each waiting sample starts from the parent's blocks with its own first
  // token (or alone, when the parent already finished).
  for (auto& [child, first] : first_samples) start_child(child, std::move(first), events);
  if (!beam_present.empty()) finish_beam_round(beam_drop, beam_forks, events);
  start_mask_job();
  return events;
}

void Engine::select_beams(
    const std::unordered_map<RequestId, std::vector<BeamCandidates>>& present,
    const std::unordered_map<SequenceId, size_t>& index_of,
    std::vector<std::vector<TokenId>>& new_tokens, std::vector<SequenceId>& drop,
    std::vector<std::pair<RequestId, std::vector<std::pair<SequenceId, TokenId>>>>& forks) {
  for (const auto& [id, candidates] : present) {
    Group& group = groups_.at(id);
    const BeamSearch::Round round = group.beam->step(
        candidates, [&](int64_t beam) -> const std::vector<TokenId>& {
          return scheduler_.find(beam)->output;
        });
    for (const auto& [beam, token] : round.continues) {
      if (token) {
        new_tokens[index_of.at(beam)] = {*token};
      } else {
        drop.push_back(beam);  // its placeholder is committed, then it is freed
      }
    }
    forks.emplace_back(id, round.forks);
  }
}

void Engine::finish_beam_round(
    const std::vector<SequenceId>& drop,
    const std::vector<std::pair<RequestId, std::vector<std::pair<SequenceId, TokenId>>>>& forks,
    std::vector<OutputEvent>& events) {
  for (SequenceId beam : drop) {
    auto it = sequences_.find(beam);
    PAGODA_CHECK(it != sequences_.end());
    --groups_.at(it->second.request_id).num_unfinished;
    scheduler_.abort(beam);  // frees its blocks (nothing when commit finished it)
    sequences_.erase(it);
  }
  for (const auto& [id, list] : forks) {
    Group& group = groups_.at(id);
    for (const auto& [parent, token] : list) {
      const SequenceId child = next_sequence_id_++;
      scheduler_.fork(parent, child, token);
      sequences_.emplace(child, Sequence{id, 0, Sampler(group.sampling, {}, vocab_size_)});
      ++group.num_unfinished;
      group.beam->add_beam(parent, child, token);
    }
    if (group.beam->done()) close_beam_group(id, events, /*aborted=*/false);
  }
}

void Engine::close_beam_group(RequestId id, std::vector<OutputEvent>& events, bool aborted) {
  Group& group = groups_.at(id);
  std::vector<BeamHypothesis> best;
  if (!aborted) {
    best = group.beam->best(group.num_samples, [&](int64_t beam) -> const std::vector<TokenId>& {
      return scheduler_.find(beam)->output;
    });
  }
  for (int32_t i = 0; i < group.num_samples; ++i) {
    OutputEvent e;
    e.request_id = id;
    e.index = i;
    if (aborted) {
      e.finish_reason = FinishReason::kAbort;
    } else if (static_cast<size_t>(i) < best.size()) {
      e.token_ids = best[static_cast<size_t>(i)].output;
      e.finish_reason = best[static_cast<size_t>(i)].stopped ? FinishReason::kStop
                                                              : FinishReason::kLength;
      e.stop_token = best[static_cast<size_t>(i)].stop_token;
      e.cumulative_logprob = best[static_cast<size_t>(i)].logprob;
      num_generated_tokens_ += static_cast<int64_t>(e.token_ids.size());
    } else {
      e.finish_reason = FinishReason::kLength;
    }
    e.request_finished = i + 1 == group.num_samples;
    events.push_back(std::move(e));
  }
  std::vector<SequenceId> beams;
  for (const auto& [seq_id, seq] : sequences_) {
    if (seq.request_id == id) beams.push_back(seq_id);
  }
  for (SequenceId beam : beams) {
    scheduler_.abort(beam);
    sequences_.erase(beam);
  }
  groups_.erase(id);
  ++num_finished_requests_;
}

bool Engine::apply_grammar(Sequence& seq, std::span<float> logits,
                           const std::vector<TokenId>& stop_ids) {
  if (!seq.mask_ready) seq.grammar->allowed(*seq.grammar_state, *seq.mask);
  seq.mask_ready = false;
  // Stop ids are control tokens, never in a grammar's mask: they may end the sample where its
  // sentence is complete.
  const bool complete = seq.grammar_state->complete;
  std::vector<std::pair<TokenId, float>> stops;
  if (complete) {
    for (TokenId id : stop_ids) {
      if (id >= 0 && id < vocab_size_) stops.emplace_back(id, logits[static_cast<size_t>(id)]);
    }
  }
  const auto mask_size = static_cast<int32_t>(seq.grammar->trie().vocab_size());
  bool any = !stops.empty();
  for (int32_t t = 0; t < vocab_size_; ++t) {
    if (t < mask_size && seq.mask->test(t)) {
      any = true;
    } else {
      logits[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
    }
  }
  for (const auto& [id, value] : stops) logits[static_cast<size_t>(id)] = value;
  return any;
}

void Engine::advance_grammar(Sequence& seq, TokenId token, const std::vector<TokenId>& stop_ids) {
  if (std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) return;
  *seq.grammar_state = advance(seq.grammar->grammar(), *seq.grammar_state,
                               seq.grammar->trie().bytes(token));
}

void Engine::start_mask_job() {
  std::vector<Sequence*> work;
  for (auto& [id, seq] : sequences_) {
    if (seq.grammar && !seq.mask_ready && scheduler_.find(id) != nullptr) work.push_back(&seq);
  }
  if (work.empty()) return;
  mask_job_ = std::async(std::launch::async, [work] {
    for (Sequence* seq : work) {
      seq->grammar->allowed(*seq->grammar_state, *seq->mask);
      seq->mask_ready = true;
    }
  });
}

void Engine::wait_mask_job() {
  if (mask_job_.valid()) mask_job_.get();
}

void Engine::start_child(SequenceId child, std::vector<SampleResult> first,
                         std::vector<OutputEvent>& events) {
  Sequence& c = sequences_.at(child);
  Group& group = groups_.at(c.request_id);
  std::erase(group.waiting_children, child);
  OutputEvent e = event_for(c);
  const TokenId token = first[0].token;
  e.token_ids = {token};
  ++num_generated_tokens_;
  if (c.sampler.params().logprobs) e.logprobs = std::move(first);
  const Request* parent = scheduler_.find(group.parent);
  const std::vector<TokenId>& stop_ids = group.stop_ids;
  const bool stops = std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end();
  if (stops) {
    e.stop_token = token;
    e.token_ids.clear();
    if (!e.logprobs.empty()) e.logprobs.pop_back();
    finish_sequence(child, FinishReason::kStop, e);
  } else if (group.max_tokens <= 1) {
    finish_sequence(child, FinishReason::kLength, e);
  } else if (parent != nullptr) {
    scheduler_.fork(group.parent, child, token);
  } else {
    Request q;
    q.id = child;
    q.prompt = group.prompt;
    q.output = {token};
    q.max_tokens = group.max_tokens;
    q.stop_ids = stop_ids;
    q.cache_key = group.cache_key;
    scheduler_.add_request(std::move(q));
  }
  events.push_back(std::move(e));
}

void Engine::abort_children_of(SequenceId parent_seq, std::vector<OutputEvent>& events) {
  Group& group = groups_.at(sequences_.at(parent_seq).request_id);
  if (group.parent != parent_seq) return;
  const std::vector<SequenceId> children = std::move(group.waiting_children);
  group.waiting_children.clear();
  for (SequenceId child : children) {
    events.push_back(event_for(sequences_.at(child)));
    events.back().error = "the first sample of the request failed";
    finish_sequence(child, FinishReason::kError, events.back());
  }
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
  return s;
}

void Engine::check_invariants() const {
  scheduler_.check_invariants();
  speculator_->check_invariants(scheduler_);
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
  }
  PAGODA_CHECK(num_in_scheduler == scheduler_.num_running() + scheduler_.num_waiting());
  for (const auto& [id, group] : groups_) {
    PAGODA_CHECK(num_seqs_of[id] == group.num_unfinished && group.num_unfinished > 0);
    if (!group.waiting_children.empty()) {
      const Request* parent = scheduler_.find(group.parent);
      PAGODA_CHECK(parent != nullptr && parent->output.empty());
    }
  }
}

}  // namespace pagoda
