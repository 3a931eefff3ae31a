// The thinking budget (see thinking_budget.h).
#include "engine/thinking_budget.h"

#include "core/error.h"

namespace pagoda {

ThinkingCap::ThinkingCap(const ThinkingBudget& budget)
    : budget_(budget), parser_(make_reasoning_parser(budget.syntax, budget.starts_inside)) {
  if (budget_.tokenizer == nullptr || budget_.end_tokens.empty()) {
    fail("a thinking budget needs the tokenizer and the tokens that end the thinking");
  }
  check_budget();
}

std::optional<TokenId> ThinkingCap::forced() const {
  if (next_forced_ < 0) return std::nullopt;
  return budget_.end_tokens[static_cast<size_t>(next_forced_)];
}

void ThinkingCap::accept(TokenId token) {
  const bool inside = parser_->thinking();
  parser_->feed(budget_.tokenizer->token_to_bytes(token));
  if (next_forced_ >= 0) {
    if (++next_forced_ == static_cast<int32_t>(budget_.end_tokens.size())) next_forced_ = -1;
    return;
  }
  if (inside) ++spent_;
  check_budget();
}

void ThinkingCap::check_budget() {
  if (closed_ || !parser_->thinking() || spent_ < budget_.max_tokens) return;
  closed_ = true;
  next_forced_ = 0;
}

}  // namespace pagoda
