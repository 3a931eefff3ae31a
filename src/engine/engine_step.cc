// Engine::step() and its phases (the top of engine.h), with what sampling a sequence's rows
// needs: its grammar mask, speculative verification, and the first tokens of its waiting
// children. Beam search's side is in engine_beam.cc.
#include <algorithm>
#include <chrono>
#include <limits>
#include <span>
#include <utility>

#include "core/error.h"
#include "model/lora.h"
#include "engine/engine.h"
#include "engine/forward_batch.h"

namespace pagoda {
namespace {

// The tokens of `samples` up to the first stop id, which they end with, as commit() ends them;
// `samples` is cut to match.
std::vector<TokenId> tokens_until_stop(std::vector<SampleResult>& samples,
                                       const std::vector<TokenId>& stop_ids) {
  std::vector<TokenId> tokens;
  for (size_t i = 0; i < samples.size(); ++i) {
    tokens.push_back(samples[i].token);
    if (std::find(stop_ids.begin(), stop_ids.end(), samples[i].token) != stop_ids.end()) {
      samples.resize(i + 1);
      break;
    }
  }
  return tokens;
}

}  // namespace

std::vector<OutputEvent> Engine::step() {
  if (!has_work()) return {};
  const StepPlan plan = plan_step();
  const int32_t num_tokens = run_forward(plan);
  StepOutput out = sample_rows(plan, num_tokens);
  choose_beams(out);
  commit_and_finish(plan, out);
  start_mask_job();
  return std::move(out.events);
}

StepPlan Engine::plan_step() {
  speculator_->plan_lookahead(scheduler_);
  StepPlan plan = scheduler_.schedule();
  // Nothing to run until some request's blocks are read from the disk tier: wait for them a
  // little rather than step empty at once (new requests are taken between steps).
  if (plan.sequences.empty() && scheduler_.num_loading() > 0) {
    scheduler_.wait_for_lower_tier(std::chrono::milliseconds(5));
  }
  for (SequenceId id : plan.preempted) speculator_->preempted(id);
  speculator_->propose(plan, scheduler_);
  return plan;
}

int32_t Engine::run_forward(const StepPlan& plan) {
  const ForwardBatch batch = build_forward_batch(plan, scheduler_);
  model_.copy_kv_blocks(backend_, *kv_, plan.block_copies);
  copy_states(plan);
  speculator_->copy_blocks(plan.block_copies);
  num_block_copies_ += static_cast<int64_t>(plan.block_copies.size());
  // The route holds for this pass only: other passes on the backend (embeddings) run without.
  if (lora_ != nullptr) lora_->route(batch.adapters, batch.logit_rows);
  // Hybrid prefix caching: a hit starts from its checkpoint's state, and a step ending on a
  // block boundary leaves a checkpoint (all restores before any save: a slot may be both).
  copy_state_checkpoints(plan, true);
  if (batch.num_tokens() > 0) model_.forward(backend_, batch, *kv_, logits_);
  copy_state_checkpoints(plan, false);
  if (lora_ != nullptr) lora_->route({}, {});
  num_computed_tokens_ += batch.num_tokens();
  return batch.num_tokens();
}

Engine::StepOutput Engine::sample_rows(const StepPlan& plan, int32_t num_tokens) {
  wait_mask_job();  // the grammar masks computed beside the forward pass
  StepOutput out;
  const auto vocab = static_cast<size_t>(vocab_size_);
  size_t row = 0;
  for (const ScheduledSequence& s : plan.sequences) {
    if (const Sequence* r = scheduler_.find(s.seq_id); r != nullptr && r->prompt_logits) {
      const auto count = static_cast<size_t>(prompt_logit_rows(s, *r).count);
      score_prompt_rows(s, std::span<const float>(logits_.data() + row * vocab, count * vocab));
      row += count;
    }
    if (!s.needs_sample) continue;
    const auto num_rows = static_cast<size_t>(s.num_logit_rows());
    const std::span<float> logits(logits_.data() + row * vocab, num_rows * vocab);
    row += num_rows;
    const RequestId id = sequences_.at(s.seq_id).request_id;
    if (auto beam = beam_groups_.find(id); beam != beam_groups_.end()) {
      hold_beam_place(s, logits.first(vocab), id, beam->second, out);
    } else {
      sample_sequence(s, logits, out);
    }
  }
  const size_t num_hidden_floats = pool_hidden_rows(plan, row * vocab);
  PAGODA_CHECK(row * vocab + num_hidden_floats == logits_.size() || num_tokens == 0);
  return out;
}

void Engine::score_prompt_rows(const ScheduledSequence& s, std::span<const float> rows) {
  SequenceState& seq = sequences_.at(s.seq_id);
  const Sequence& r = *scheduler_.find(s.seq_id);
  const PromptRows pr = prompt_logit_rows(s, r);
  const auto vocab = static_cast<size_t>(vocab_size_);
  for (int32_t i = 0; i < pr.count; ++i) {
    const int32_t pos = pr.first_position + i;
    // A position scored before (the prompt recomputed after a preemption) is not scored again.
    if (!seq.wants_prompt_logprobs || pos != static_cast<int32_t>(seq.prompt_logprobs.size())) {
      continue;
    }
    seq.prompt_logprobs.push_back(seq.sampler.score(
        rows.subspan(static_cast<size_t>(i) * vocab, vocab), r.prompt[static_cast<size_t>(pos) + 1],
        scratch_));
  }
}

void Engine::sample_sequence(const ScheduledSequence& s, std::span<float> logits,
                             StepOutput& out) {
  SequenceState& seq = sequences_.at(s.seq_id);
  OutputEvent e = event_for(seq);
  if (seq.wants_prompt_logprobs) {
    e.prompt_logprobs = std::move(seq.prompt_logprobs);
    seq.wants_prompt_logprobs = false;
  }
  const Sequence& scheduled = *scheduler_.find(s.seq_id);
  e.num_cached_tokens = scheduled.num_cached_tokens;
  const std::vector<TokenId>& stop_ids = scheduled.stop_ids;
  // A sequence that ends here still gives commit() a token, which it never reads: commit()
  // skips a sequence aborted since schedule().
  std::vector<TokenId> tokens = {0};
  const bool forced = seq.thinking && seq.thinking->forced();
  if (forced) seq.mask_ready = false;  // a forced token skips the grammar's mask
  if (!forced && seq.grammar && !apply_grammar(seq, logits, stop_ids)) {
    // The grammar's sentence is complete and nothing may follow it.
    end_before_commit(s.seq_id, FinishReason::kStop, e, out.events);
  } else {
    try {
      tokens = draw_tokens(s, seq, logits, stop_ids, e, out);
    } catch (const Error& error) {
      // E.g. every token banned by logit_bias: this sample ends, the others go on.
      e.error = error.what();
      end_before_commit(s.seq_id, FinishReason::kError, e, out.events);
    }
  }
  out.new_tokens.push_back(std::move(tokens));
  out.events.push_back(std::move(e));
}

std::vector<TokenId> Engine::draw_tokens(const ScheduledSequence& s, SequenceState& seq,
                                         std::span<float> logits,
                                         const std::vector<TokenId>& stop_ids, OutputEvent& e,
                                         StepOutput& out) {
  std::vector<SampleResult> samples;
  const auto vocab = static_cast<size_t>(vocab_size_);
  if (auto forced = seq.thinking ? seq.thinking->forced() : std::nullopt) {
    samples.push_back(seq.sampler.score(logits.first(vocab), *forced, scratch_));
    seq.sampler.accept(*forced);
  } else if (s.num_proposed > 0) {
    samples =
        seq.sampler.verify(logits, s.proposed, speculator_->distributions(s.seq_id), scratch_);
  } else {
    samples.push_back(seq.sampler.sample(logits, scratch_));
    seq.sampler.accept(samples.back().token);
  }
  if (seq.grammar) advance_grammar(seq, samples[0].token, stop_ids);
  if (seq.thinking) seq.thinking->accept(samples[0].token);
  std::vector<TokenId> tokens = tokens_until_stop(samples, stop_ids);
  e.num_proposed = s.num_proposed;
  e.num_accepted = std::min(s.num_proposed, static_cast<int32_t>(samples.size()) - 1);
  e.token_ids = tokens;
  num_generated_tokens_ += static_cast<int64_t>(tokens.size());
  SampleGroup& group = sample_groups_.at(seq.request_id);
  if (!group.waiting_children.empty() && s.seq_id == group.parent) {
    draw_first_tokens(group, logits, stop_ids, out);
  }
  if (seq.sampler.params().logprobs) e.logprobs = std::move(samples);
  out.event_of.emplace_back(s.seq_id, out.events.size());
  return tokens;
}

void Engine::draw_first_tokens(SampleGroup& group, std::span<const float> logits,
                               const std::vector<TokenId>& stop_ids, StepOutput& out) {
  // The prompt is computed: every sample of the request draws its first token from these same
  // logits, and the others fork from the parent after the commit.
  std::vector<std::pair<SequenceId, std::vector<SampleResult>>> firsts;
  for (SequenceId child : group.waiting_children) {
    SequenceState& c = sequences_.at(child);
    const auto forced = c.thinking ? c.thinking->forced() : std::nullopt;
    std::vector<SampleResult> first = {forced ? c.sampler.score(logits, *forced, scratch_)
                                              : c.sampler.sample(logits, scratch_)};
    c.sampler.accept(first[0].token);
    if (c.grammar) advance_grammar(c, first[0].token, stop_ids);
    if (c.thinking) c.thinking->accept(first[0].token);
    firsts.emplace_back(child, std::move(first));
  }
  for (auto& f : firsts) out.first_samples.push_back(std::move(f));
}

void Engine::end_before_commit(SequenceId seq_id, FinishReason reason, OutputEvent& e,
                               std::vector<OutputEvent>& events) {
  abort_children_of(seq_id, events);
  scheduler_.abort(seq_id);
  finish_sequence(seq_id, reason, e);
}

void Engine::commit_and_finish(const StepPlan& plan, StepOutput& out) {
  std::vector<Sequence> finished = scheduler_.commit(plan, out.new_tokens);
  roll_back_states(plan);
  for (const ScheduledSequence& s : plan.sequences) {
    if (!s.needs_sample) continue;
    const Sequence* r = scheduler_.find(s.seq_id);
    const OutputEvent* e = out.event_of_sequence(s.seq_id);
    speculator_->observe(s, e == nullptr ? 0 : e->num_accepted, r ? r->num_computed_tokens : -1);
  }
  for (const Sequence& r : finished) {
    if (r.is_prompt_only()) {
      finish_embedding(r, out.events);
      continue;
    }
    if (out.beam_index.count(r.id)) continue;  // a dropped beam: finish_beam_round frees it
    OutputEvent* e = out.event_of_sequence(r.id);
    PAGODA_CHECK(e != nullptr);
    finish_committed(r, *e);
  }
  // Between steps again: each waiting sample starts from the parent's blocks with its own first
  // token (or alone, when the parent already finished).
  for (auto& [child, first] : out.first_samples) start_child(child, std::move(first), out.events);
  if (!out.beam_present.empty()) finish_beam_round(out);
}

OutputEvent* Engine::StepOutput::event_of_sequence(SequenceId seq) {
  auto it = std::find_if(event_of.begin(), event_of.end(),
                         [&](const auto& p) { return p.first == seq; });
  return it == event_of.end() ? nullptr : &events[it->second];
}

void Engine::finish_committed(const Sequence& r, OutputEvent& e) {
  if (r.status == SequenceStatus::kFinishedStopped) {
    e.stop_token = e.token_ids.back();
    e.token_ids.pop_back();
    if (!e.logprobs.empty()) e.logprobs.pop_back();
    finish_sequence(r.id, FinishReason::kStop, e);
  } else {
    PAGODA_CHECK(r.status == SequenceStatus::kFinishedLength);
    finish_sequence(r.id, FinishReason::kLength, e);
  }
}

void Engine::start_child(SequenceId child, std::vector<SampleResult> first,
                         std::vector<OutputEvent>& events) {
  SequenceState& c = sequences_.at(child);
  SampleGroup& group = sample_groups_.at(c.request_id);
  std::erase(group.waiting_children, child);
  OutputEvent e = event_for(c);
  const TokenId token = first[0].token;
  e.token_ids = {token};
  ++num_generated_tokens_;
  if (c.sampler.params().logprobs) e.logprobs = std::move(first);
  const Sequence* parent = scheduler_.find(group.parent);
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
    Sequence q;
    q.id = child;
    q.prompt = group.prompt;
    q.output = {token};
    q.max_tokens = group.max_tokens;
    q.stop_ids = stop_ids;
    q.cache_key = group.cache_key;
    q.adapter = group.adapter;
    scheduler_.add_sequence(std::move(q));
  }
  events.push_back(std::move(e));
}

void Engine::abort_children_of(SequenceId parent_seq, std::vector<OutputEvent>& events) {
  SampleGroup& group = sample_groups_.at(sequences_.at(parent_seq).request_id);
  if (group.parent != parent_seq) return;
  const std::vector<SequenceId> children = std::move(group.waiting_children);
  group.waiting_children.clear();
  for (SequenceId child : children) {
    events.push_back(event_for(sequences_.at(child)));
    events.back().error = "the first sample of the request failed";
    finish_sequence(child, FinishReason::kError, events.back());
  }
}

bool Engine::apply_grammar(SequenceState& seq, std::span<float> logits,
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

void Engine::advance_grammar(SequenceState& seq, TokenId token,
                             const std::vector<TokenId>& stop_ids) {
  if (std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) return;
  *seq.grammar_state = advance(seq.grammar->grammar(), *seq.grammar_state,
                               seq.grammar->trie().bytes(token));
}

void Engine::start_mask_job() {
  std::vector<SequenceState*> work;
  for (auto& [id, seq] : sequences_) {
    if (seq.grammar && !seq.mask_ready && scheduler_.find(id) != nullptr) work.push_back(&seq);
  }
  if (work.empty()) return;
  mask_job_ = std::async(std::launch::async, [work] {
    for (SequenceState* seq : work) {
      seq->grammar->allowed(*seq->grammar_state, *seq->mask);
      seq->mask_ready = true;
    }
  });
}

void Engine::wait_mask_job() {
  if (mask_job_.valid()) mask_job_.get();
}

}  // namespace pagoda
