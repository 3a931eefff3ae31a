// Stop-string matching over streamed text (see text_output.h).
#include "server/text_output.h"

#include <algorithm>

namespace pagoda::server {

size_t stop_prefix_length(const std::string& text, const std::vector<std::string>& stop) {
  size_t best = 0;
  for (const std::string& s : stop) {
    const size_t longest = std::min(text.size(), s.size() - 1);
    for (size_t len = longest; len > best; --len) {
      if (text.compare(text.size() - len, len, s, 0, len) == 0) {
        best = len;
        break;
      }
    }
  }
  return best;
}

TextOutput::TextOutput(const Tokenizer& tokenizer, std::vector<std::string> stop,
                       std::span<const TokenId> prompt)
    : decoder_(tokenizer), stop_(std::move(stop)) {
  decoder_.continue_after(prompt);
}

size_t TextOutput::find_stop(const std::string& text) {
  size_t first = std::string::npos;
  for (const std::string& s : stop_) {
    const size_t at = text.find(s);
    if (at < first) {
      first = at;
      matched_ = s;
    }
  }
  return first;
}

std::string TextOutput::release(std::string text) {
  sent_ += text;
  return text;
}

std::string TextOutput::feed(TokenId token) {
  if (stopped_) return "";
  held_ += decoder_.feed(token);
  const size_t first = find_stop(held_);
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return release(std::move(out));
  }
  const size_t keep = stop_prefix_length(held_, stop_);
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return release(std::move(out));
}

std::string TextOutput::finish() {
  if (stopped_) return "";
  std::string out = std::move(held_) + decoder_.flush();
  held_.clear();
  // The flushed tail may complete a stop string too.
  const size_t first = find_stop(out);
  if (first != std::string::npos) {
    stopped_ = true;
    out.resize(first);
  }
  return release(std::move(out));
}

}  // namespace pagoda::server
