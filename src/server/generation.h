// One API request in flight: its prompts submitted to the engine thread (n samples each), the
// events turned into choices (text through stop strings, token counts, log-probabilities,
// finish reasons), and the latencies the metrics want. Used by one HTTP handler thread.
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine_thread.h"
#include "engine/reasoning.h"
#include "server/openai_request.h"
#include "server/text_output.h"

namespace pagoda::server {

struct TokenLogprob {
  TokenId token = kNoToken;
  float logprob = 0.0f;
  std::vector<std::pair<TokenId, float>> top;
};

// What one poll produced for one choice: new text (the content, when the thinking is split
// out), new reasoning, its tokens' log-probabilities, and the finish reason when the choice
// ended.
struct ChoiceDelta {
  int32_t index = 0;
  std::string text;
  std::string reasoning;
  std::vector<TokenLogprob> logprobs;
  std::string finish_reason;  // "stop", "length", "abort"; empty while running
};

struct Choice {
  explicit Choice(TextOutput out) : text(std::move(out)) {}
  // The whole text after stop strings; content() and reasoning are its parts.
  TextOutput text;
  // The request splits the thinking out: the parser, and the parts so far.
  std::unique_ptr<ReasoningParser> parser;
  std::string reasoning;
  std::string split_content;
  const std::string& content() const { return parser ? split_content : text.text(); }
  int64_t num_tokens = 0;  // completion tokens, the stop token included (as max_tokens counts)
  std::vector<TokenLogprob> logprobs;
  std::string finish_reason;
};

class Generation {
 public:
  using Clock = std::chrono::steady_clock;

  // Submits every prompt. Throws ApiError (400) when the engine rejects one, after aborting the
  // ones already submitted.
  Generation(EngineThread& engine, const Tokenizer& tokenizer, const ApiRequest& request,
             Clock::time_point arrival);
  ~Generation();  // aborts what is still running (a client that went away)
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Waits up to `timeout` for events and returns the choices' changes (empty: nothing yet).
  // Throws ApiError (500) when the engine failed on this request.
  std::vector<ChoiceDelta> poll(std::chrono::milliseconds timeout);
  // The changes of the events already there, without waiting.
  std::vector<ChoiceDelta> take();
  // `listener` is told (on the engine thread) each time an event arrives; see OutputStream.
  void set_listener(const std::function<void()>& listener);
  bool done() const { return num_open_ == 0; }
  // Ends every unfinished choice now (finish_reason "abort") and frees the engine's blocks.
  void abort();
  // As abort(), and returns the last change of each choice it ended: the text held back for
  // stop strings and the finish reason, for a stream that is still being sent.
  std::vector<ChoiceDelta> abort_with_deltas();

  const std::vector<Choice>& choices() const { return choices_; }
  // Echo with logprobs: the log-probabilities of prompt `p`'s tokens after its first.
  const std::vector<TokenLogprob>& prompt_logprobs(size_t p) const { return prompt_logprobs_[p]; }
  int64_t num_prompt_tokens() const { return num_prompt_tokens_; }
  // Prompt tokens whose K/V came from the prefix cache, over every prompt.
  int64_t num_cached_tokens() const;
  int64_t num_completion_tokens() const;
  // Speculative proposals verified for this request, and accepted.
  int64_t num_proposed() const { return num_proposed_; }
  int64_t num_accepted() const { return num_accepted_; }
  int64_t num_verify_steps() const { return num_verify_steps_; }
  // Seconds: first token since arrival; mean gap after the first; last token since arrival.
  // Negative when not measured.
  double ttft_s() const;
  double tpot_s() const;
  double e2e_s() const;

 private:
  void apply(const OutputEvent& event, size_t prompt, std::vector<ChoiceDelta>& deltas);
  void close_choice(Choice& c, ChoiceDelta& d, std::string reason);
  // Text the TextOutput released, into the delta's content and reasoning.
  static void add_text(Choice& c, ChoiceDelta& d, const std::string& text, bool last);
  void abort_prompt_if_stopped(size_t prompt);

  EngineThread& engine_;
  ApiRequest request_;
  std::vector<std::shared_ptr<OutputStream>> streams_;  // one per prompt
  std::vector<Choice> choices_;                         // prompt-major: [prompt * n + index]
  int32_t num_open_ = 0;
  int64_t num_prompt_tokens_ = 0;
  std::vector<int32_t> num_cached_tokens_;  // [prompts]: the largest a sample reported
  std::vector<std::vector<TokenLogprob>> prompt_logprobs_;  // [prompts]
  Clock::time_point arrival_;
  std::optional<Clock::time_point> first_token_, last_token_;
  int64_t max_choice_tokens_ = 0;
  int64_t num_proposed_ = 0, num_accepted_ = 0, num_verify_steps_ = 0;
};

}  // namespace pagoda::server
