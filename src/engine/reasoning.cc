// Splitting thinking from the answer (see reasoning.h).
#include "engine/reasoning.h"

#include <algorithm>

namespace pagoda {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";
// A harmony prompt that ends inside an analysis message.
constexpr std::string_view kHarmonyOpen = "<|channel|>analysis<|message|>";

bool space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t leading_spaces(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && space(s[n])) ++n;
  return n;
}

size_t trailing_spaces(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && space(s[s.size() - 1 - n])) ++n;
  return n;
}

// The longest suffix of `s` that is a proper prefix of `tag` (its length).
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(tag.size() - 1, s.size()); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

class NoReasoning final : public ReasoningParser {
 public:
  ReasoningParts feed(std::string_view text) override { return {"", std::string(text)}; }
  ReasoningParts finish() override { return {}; }
  bool thinking() const override { return false; }
};

class ThinkTagParser final : public SteppingReasoningParser {
 public:
  explicit ThinkTagParser(bool starts_inside)
      : state_(starts_inside ? State::kThinking : State::kStart) {}

  ReasoningParts finish() override {
    ReasoningParts out = drain();
    if (state_ == State::kThinking) {
      std::string_view rest = held_;
      if (trim_front_) rest.remove_prefix(leading_spaces(rest));
      rest.remove_suffix(trailing_spaces(rest));
      out.reasoning += rest;
    } else if (state_ == State::kContent && trim_front_) {
      // Only spaces were left after </think>.
    } else {
      out.content += held_;  // kStart: spaces or the beginning of a tag that never came
    }
    held_.clear();
    return out;
  }

  bool thinking() const override { return state_ == State::kThinking; }

 private:
  enum class State { kStart, kThinking, kContent };

  // One move on the held text; false when it must wait for more.
  bool step(ReasoningParts& out) override {
    switch (state_) {
      case State::kStart: return step_start(out);
      case State::kThinking: return step_thinking(out);
      case State::kContent: return step_content(out);
    }
    return false;
  }

  bool step_start(ReasoningParts&) {
    const size_t lead = leading_spaces(held_);
    const std::string_view rest = std::string_view(held_).substr(lead);
    if (rest.substr(0, kOpen.size()) == kOpen) {
      held_.erase(0, lead + kOpen.size());
      state_ = State::kThinking;
      trim_front_ = true;
      return true;
    }
    if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return false;
    state_ = State::kContent;  // the output does not open with thinking
    trim_front_ = false;
    return true;
  }

  bool step_thinking(ReasoningParts& out) {
    if (trim_front_) {
      held_.erase(0, leading_spaces(held_));
      if (held_.empty()) return false;
      trim_front_ = false;
    }
    const size_t close = held_.find(kClose);
    if (close != std::string::npos) {
      std::string_view inside = std::string_view(held_).substr(0, close);
      inside.remove_suffix(trailing_spaces(inside));
      out.reasoning += inside;
      held_.erase(0, close + kClose.size());
      state_ = State::kContent;
      trim_front_ = true;
      return true;
    }
    // Keep a tail that may begin the closing tag, and the spaces before it (trimmed at the end).
    std::string_view s = held_;
    size_t keep = partial_tag(s, kClose);
    keep += trailing_spaces(s.substr(0, s.size() - keep));
    out.reasoning += s.substr(0, s.size() - keep);
    held_.erase(0, s.size() - keep);
    return false;
  }

  bool step_content(ReasoningParts& out) {
    if (trim_front_) {
      held_.erase(0, leading_spaces(held_));
      if (held_.empty()) return false;
      trim_front_ = false;
    }
    out.content += held_;
    held_.clear();
    return false;
  }

  State state_;
  bool trim_front_ = true;   // spaces at the front of held_ are dropped
};

}  // namespace

std::unique_ptr<ReasoningParser> make_reasoning_parser(ReasoningSyntax syntax,
                                                       bool starts_inside) {
  if (syntax == ReasoningSyntax::kThinkTags) return std::make_unique<ThinkTagParser>(starts_inside);
  if (syntax == ReasoningSyntax::kHarmony) return make_harmony_parser(starts_inside);
  return std::make_unique<NoReasoning>();
}

bool prompt_opens_thinking(ReasoningSyntax syntax, std::string_view prompt) {
  if (syntax == ReasoningSyntax::kNone) return false;
  const std::string_view open =
      syntax == ReasoningSyntax::kHarmony ? kHarmonyOpen : std::string_view(kOpen);
  prompt.remove_suffix(trailing_spaces(prompt));
  return prompt.size() >= open.size() && prompt.substr(prompt.size() - open.size()) == open;
}

std::string_view thinking_end_text(ReasoningSyntax syntax) {
  switch (syntax) {
    case ReasoningSyntax::kThinkTags: return "\n</think>\n\n";
    case ReasoningSyntax::kHarmony: return "<|end|><|start|>assistant<|channel|>final<|message|>";
    case ReasoningSyntax::kNone: break;
  }
  return "";
}

}  // namespace pagoda
