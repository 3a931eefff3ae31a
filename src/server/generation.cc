// Events to choices (see generation.h).
#include "server/generation.h"

#include <algorithm>

#include "core/error.h"
#include "server/api_error.h"

namespace pagoda::server {
namespace {

std::string reason_text(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    default: return "abort";
  }
}

}  // namespace

Generation::Generation(EngineThread& engine, const Tokenizer& tokenizer, const ApiRequest& request,
                       Clock::time_point arrival)
    : engine_(engine), request_(request), arrival_(arrival) {
  for (size_t p = 0; p < request.prompts.size(); ++p) {
    for (int32_t i = 0; i < request.n; ++i) {
      choices_.emplace_back(TextOutput(tokenizer, request.stop, request.prompts[p]));
      if (request.reasoning != ReasoningSyntax::kNone) {
        choices_.back().parser =
            make_reasoning_parser(request.reasoning, request.thinking_in_prompt);
      }
    }
    num_prompt_tokens_ += static_cast<int64_t>(request.prompts[p].size());
  }
  num_open_ = static_cast<int32_t>(choices_.size());
  num_cached_tokens_.assign(request.prompts.size(), 0);
  prompt_logprobs_.resize(request.prompts.size());
  for (const auto& prompt : request.prompts) {
    GenerationRequest g;
    g.prompt = prompt;
    g.sampling = request.sampling;
    g.max_tokens = std::max(request.max_tokens, 1);  // 0: one token, dropped (see apply)
    g.prompt_logprobs = request.echo && request.logprobs;
    g.n = request.n;
    if (!request.ignore_eos) g.stop_ids = tokenizer.vocab().eog;
    g.num_speculative_tokens = request.num_speculative_tokens;
    g.grammar = request.grammar;
    g.beam = request.beam;
    g.thinking = request.thinking;
    g.adapter = request.adapter;
    if (request.adapter != 0) g.cache_key = request.adapter_digest;
    try {
      streams_.push_back(engine.submit(std::move(g)));
    } catch (const Error& e) {
      abort();
      throw ApiError(400, "invalid_request_error", e.what());
    }
  }
}

Generation::~Generation() {
  if (!done()) abort();
}

void Generation::abort() {
  for (auto& s : streams_) engine_.abort(s->id());
  for (Choice& c : choices_) {
    if (c.finish_reason.empty()) c.finish_reason = "abort";
  }
  num_open_ = 0;
}

std::vector<ChoiceDelta> Generation::abort_with_deltas() {
  for (auto& s : streams_) engine_.abort(s->id());
  std::vector<ChoiceDelta> deltas;
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (!choices_[i].finish_reason.empty()) continue;
    ChoiceDelta d;
    d.index = static_cast<int32_t>(i);
    close_choice(choices_[i], d, "abort");
    deltas.push_back(std::move(d));
  }
  return deltas;
}

void Generation::set_listener(const std::function<void()>& listener) {
  for (auto& s : streams_) s->set_listener(listener);
}

std::vector<ChoiceDelta> Generation::take() {
  std::vector<ChoiceDelta> deltas;
  for (size_t p = 0; p < streams_.size(); ++p) {
    while (auto e = streams_[p]->try_next()) apply(*e, p, deltas);
  }
  return deltas;
}

int64_t Generation::num_cached_tokens() const {
  int64_t total = 0;
  for (int32_t n : num_cached_tokens_) total += n;
  return total;
}

int64_t Generation::num_completion_tokens() const {
  int64_t total = 0;
  for (const Choice& c : choices_) total += c.num_tokens;
  return total;
}

double Generation::ttft_s() const {
  if (!first_token_) return -1;
  return std::chrono::duration<double>(*first_token_ - arrival_).count();
}

double Generation::tpot_s() const {
  if (!first_token_ || max_choice_tokens_ < 2) return -1;
  return std::chrono::duration<double>(*last_token_ - *first_token_).count() /
         static_cast<double>(max_choice_tokens_ - 1);
}

double Generation::e2e_s() const {
  if (!last_token_) return -1;
  return std::chrono::duration<double>(*last_token_ - arrival_).count();
}

void Generation::add_text(Choice& c, ChoiceDelta& d, const std::string& text, bool last) {
  if (!c.parser) {
    d.text += text;
    return;
  }
  ReasoningParts parts = c.parser->feed(text);
  if (last) {
    ReasoningParts rest = c.parser->finish();
    parts.reasoning += rest.reasoning;
    parts.content += rest.content;
  }
  c.reasoning += parts.reasoning;
  c.split_content += parts.content;
  d.reasoning += parts.reasoning;
  d.text += parts.content;
}

void Generation::close_choice(Choice& c, ChoiceDelta& d, std::string reason) {
  if (!c.finish_reason.empty()) return;
  add_text(c, d, c.text.finish(), true);
  c.finish_reason = std::move(reason);
  d.finish_reason = c.finish_reason;
  --num_open_;
}

// When every choice of a prompt has stopped on a stop string, its engine request still runs:
// end it so its blocks are freed now.
void Generation::abort_prompt_if_stopped(size_t prompt) {
  const size_t first = prompt * static_cast<size_t>(request_.n);
  for (size_t i = first; i < first + static_cast<size_t>(request_.n); ++i) {
    if (choices_[i].finish_reason.empty()) return;
  }
  if (!streams_[prompt]->done()) engine_.abort(streams_[prompt]->id());
}

void Generation::apply(const OutputEvent& e, size_t prompt, std::vector<ChoiceDelta>& deltas) {
  if (e.finish_reason == FinishReason::kError) {
    throw ApiError(500, "server_error", "the engine failed on this request: " + e.error);
  }
  const size_t index = prompt * static_cast<size_t>(request_.n) + static_cast<size_t>(e.index);
  Choice& c = choices_.at(index);
  if (!c.finish_reason.empty()) return;  // stopped on a stop string earlier
  ChoiceDelta d;
  d.index = static_cast<int32_t>(index);
  const Clock::time_point now = Clock::now();
  num_cached_tokens_[prompt] = std::max(num_cached_tokens_[prompt], e.num_cached_tokens);
  num_proposed_ += e.num_proposed;
  num_accepted_ += e.num_accepted;
  num_verify_steps_ += e.num_proposed > 0 ? 1 : 0;
  for (const SampleResult& s : e.prompt_logprobs) {
    prompt_logprobs_[prompt].push_back({s.token, s.logprob, s.top_logprobs});
  }
  if (request_.max_tokens == 0) {
    // The prompt alone was asked for: its scores came with the first event; the token is not.
    close_choice(c, d, "length");
    abort_prompt_if_stopped(prompt);
    deltas.push_back(std::move(d));
    return;
  }
  for (size_t t = 0; t < e.token_ids.size() && !c.text.stopped(); ++t) {
    if (!first_token_) first_token_ = now;
    last_token_ = now;
    ++c.num_tokens;
    add_text(c, d, c.text.feed(e.token_ids[t]), false);
    if (t < e.logprobs.size()) {
      const SampleResult& s = e.logprobs[t];
      d.logprobs.push_back({s.token, s.logprob, s.top_logprobs});
    }
  }
  if (c.text.stopped()) {
    close_choice(c, d, "stop");
  } else if (e.finish_reason) {
    if (e.stop_token != kNoToken) ++c.num_tokens;  // the end-of-generation token counts
    close_choice(c, d, reason_text(*e.finish_reason));
  }
  max_choice_tokens_ = std::max(max_choice_tokens_, c.num_tokens);
  c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  if (!c.finish_reason.empty()) abort_prompt_if_stopped(prompt);
  if (!d.text.empty() || !d.reasoning.empty() || !d.logprobs.empty() || !d.finish_reason.empty()) {
    deltas.push_back(std::move(d));
  }
}

std::vector<ChoiceDelta> Generation::poll(std::chrono::milliseconds timeout) {
  // Everything already there, from every prompt; then, if nothing was, wait on one.
  std::vector<ChoiceDelta> deltas = take();
  if (!deltas.empty() || done()) return deltas;
  for (size_t p = 0; p < streams_.size(); ++p) {
    if (streams_[p]->done()) continue;
    if (auto e = streams_[p]->next_for(timeout)) apply(*e, p, deltas);
    break;
  }
  return deltas;
}

}  // namespace pagoda::server
