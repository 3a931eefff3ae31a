// A cap on a reasoning model's thinking: after `max_tokens` tokens inside the thinking, the
// engine forces the tokens that close it (the syntax's end text, e.g. "\n</think>\n\n") and the
// model goes on with its answer. The thinking is found in the output's text by the same parser
// the server splits it with (reasoning.h), so any tokenization of the tags counts.
//
// Counted: each token generated while the text before it was inside the thinking (the tokens of
// the opening tag are not; the token that completes the closing tag is). The forced tokens are
// ordinary output tokens: they count against max_tokens, pass through a request's grammar
// (one that refuses them ends the output there, as any grammar dead end does) and get
// log-probabilities when asked for. A request with a budget is not speculated.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/reasoning.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

struct ThinkingBudget {
  int32_t max_tokens = -1;  // thinking tokens at most; < 0: no budget
  ReasoningSyntax syntax = ReasoningSyntax::kNone;
  bool starts_inside = false;       // the prompt opened the thinking
  std::vector<TokenId> end_tokens;  // forced when the budget is spent; not empty
  const Tokenizer* tokenizer = nullptr;  // the output's text; must outlive the request
  bool active() const { return max_tokens >= 0 && syntax != ReasoningSyntax::kNone; }
};

// One sequence's thinking as its tokens come.
class ThinkingCap {
 public:
  explicit ThinkingCap(const ThinkingBudget& budget);
  // The token the next step must give, when the budget is spent.
  std::optional<TokenId> forced() const;
  // Every output token of the sequence, in order (forced ones too).
  void accept(TokenId token);
  int32_t spent() const { return spent_; }

 private:
  void check_budget();

  ThinkingBudget budget_;
  std::unique_ptr<ReasoningParser> parser_;
  int32_t spent_ = 0;
  int32_t next_forced_ = -1;  // index into end_tokens while forcing; -1: not forcing
  bool closed_ = false;        // the end was forced once; never again
};

}  // namespace pagoda
