// gpt-oss's harmony messages split into reasoning and content (see reasoning.h, kHarmony).
//
// The parser holds the text of a header until its <|message|> arrives (or until it cannot be a
// header), and of a body only a tail that may begin one of the markers ending it, so feeding a
// text in any pieces gives the same parts as feeding it whole.
#include <algorithm>
#include <array>

#include "engine/reasoning.h"

namespace pagoda {
namespace {

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kConstrain = "<|constrain|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kEnd = "<|end|>";
constexpr std::string_view kReturn = "<|return|>";
constexpr std::string_view kCall = "<|call|>";
constexpr std::string_view kTo = " to=";
constexpr std::string_view kFunctions = "functions.";

// Markers that end a body (<|start|> only when a model forgot the <|end|> before it).
constexpr std::array<std::string_view, 4> kBodyEnds = {kEnd, kReturn, kCall, kStart};

// A header longer than this is not one: its text goes out as content.
constexpr size_t kMaxHeader = 256;

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// True when `s` is a proper prefix of `marker` or starts with it.
bool may_start(std::string_view s, std::string_view marker) {
  return s.size() < marker.size() ? starts_with(marker, s) : starts_with(s, marker);
}

// Letters, digits and the punctuation of roles, channels, recipients and content types.
bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '-' || c == '.' || c == '/';
}

// Whether `h` (holding no <|message|>) can still be the beginning of a message header:
// [<|start|>ROLE] then <|channel|> or " to=", then names, spaces, '=' and the <|channel|> and
// <|constrain|> markers.
bool header_prefix(std::string_view h) {
  if (h.size() > kMaxHeader) return false;
  if (may_start(h, kStart)) {
    if (h.size() <= kStart.size()) return true;
    h.remove_prefix(kStart.size());
    while (!h.empty() && name_char(h.front())) h.remove_prefix(1);
    if (h.empty()) return true;
  }
  if (!may_start(h, kChannel) && !may_start(h, kTo)) return false;
  size_t i = 0;
  while (i < h.size()) {
    if (name_char(h[i]) || h[i] == ' ' || h[i] == '=') {
      ++i;
      continue;
    }
    const std::string_view rest = h.substr(i);
    bool marker = false;
    for (std::string_view m : {kChannel, kConstrain, kMessage}) {
      if (rest.size() < m.size() && starts_with(m, rest)) return true;  // unfinished, at the end
      if (m != kMessage && starts_with(rest, m)) {
        i += m.size();
        marker = true;
        break;
      }
    }
    if (!marker) return false;
  }
  return true;
}

// The name after `key` in a header ("" when the key is absent).
std::string_view header_value(std::string_view h, std::string_view key) {
  const size_t at = h.find(key);
  if (at == std::string_view::npos) return {};
  std::string_view v = h.substr(at + key.size());
  size_t n = 0;
  while (n < v.size() && name_char(v[n])) ++n;
  return v.substr(0, n);
}

class HarmonyParser final : public SteppingReasoningParser {
 public:
  explicit HarmonyParser(bool starts_inside) {
    if (starts_inside) {
      state_ = State::kBody;
      route_ = Route::kReasoning;
    }
  }

  ReasoningParts finish() override {
    ReasoningParts out = drain();
    if (state_ == State::kBody) {
      emit(out, held_);
      if (route_ == Route::kCall) out.content += kCall;
    } else if (state_ == State::kPlain) {
      out.content += held_;
    }
    // kHeader: a header the output's end cut off (max_tokens) is structure, not text: dropped.
    held_.clear();
    return out;
  }

  bool thinking() const override {
    return state_ == State::kBody && route_ == Route::kReasoning;
  }

 private:
  enum class State { kHeader, kBody, kPlain };
  enum class Route { kReasoning, kContent, kCall };

  bool step(ReasoningParts& out) override {
    switch (state_) {
      case State::kHeader: return step_header(out);
      case State::kBody: return step_body(out);
      case State::kPlain:
        out.content += held_;
        held_.clear();
        return false;
    }
    return false;
  }

  bool step_header(ReasoningParts& out) {
    const size_t at = held_.find(kMessage);
    const std::string_view header = std::string_view(held_).substr(0, at);
    if (!header_prefix(header)) {
      // Not harmony: plain text from here on (a model that never opened a message, or a
      // header that went wrong), as written.
      state_ = State::kPlain;
      return true;
    }
    if (at == std::string::npos) return false;
    open_message(header, out);
    held_.erase(0, at + kMessage.size());
    state_ = State::kBody;
    return true;
  }

  void open_message(std::string_view header, ReasoningParts& out) {
    const std::string_view channel = header_value(header, kChannel);
    const std::string_view recipient = header_value(header, kTo);
    if (starts_with(recipient, kFunctions) && recipient.size() > kFunctions.size()) {
      route_ = Route::kCall;
      out.content += "to=";
      out.content += recipient;
      out.content += kMessage;
    } else if (channel == "analysis" && recipient.empty()) {
      route_ = Route::kReasoning;
    } else {
      route_ = Route::kContent;  // final, a commentary preamble, or another channel
    }
  }

  bool step_body(ReasoningParts& out) {
    size_t end = std::string::npos;
    std::string_view marker;
    for (std::string_view m : kBodyEnds) {
      const size_t at = held_.find(m);
      if (at < end) {
        end = at;
        marker = m;
      }
    }
    if (end != std::string::npos) {
      emit(out, std::string_view(held_).substr(0, end));
      if (route_ == Route::kCall) out.content += kCall;
      held_.erase(0, end + (marker == kStart ? 0 : marker.size()));
      state_ = State::kHeader;
      return true;
    }
    // Keep a tail that may begin an end marker.
    size_t keep = 0;
    const size_t lt = held_.rfind('<');
    if (lt != std::string::npos) {
      const std::string_view tail = std::string_view(held_).substr(lt);
      for (std::string_view m : kBodyEnds) {
        if (tail.size() < m.size() && starts_with(m, tail)) keep = tail.size();
      }
    }
    emit(out, std::string_view(held_).substr(0, held_.size() - keep));
    held_.erase(0, held_.size() - keep);
    return false;
  }

  void emit(ReasoningParts& out, std::string_view text) const {
    (route_ == Route::kReasoning ? out.reasoning : out.content) += text;
  }

  State state_ = State::kHeader;
  Route route_ = Route::kContent;
};

}  // namespace

std::unique_ptr<ReasoningParser> make_harmony_parser(bool starts_inside) {
  return std::make_unique<HarmonyParser>(starts_inside);
}

}  // namespace pagoda
