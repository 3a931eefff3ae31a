#include "tokenizer/vocab.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {

void Vocab::build_index(const std::string& source) {
  if (tokens.empty()) fail(source, ": the vocabulary is empty");
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) fail(source, ": the vocabulary is too large");
  if (!scores.empty() && scores.size() != tokens.size()) {
    fail(source, ": ", scores.size(), " scores for ", tokens.size(), " tokens");
  }
  if (types.empty()) types.assign(tokens.size(), TokenType::kNormal);
  if (types.size() != tokens.size()) {
    fail(source, ": ", types.size(), " token types for ", tokens.size(), " tokens");
  }
  index_.clear();
  index_.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    index_.emplace(tokens[i], static_cast<TokenId>(i));  // first occurrence wins
  }
  auto check = [&](TokenId& id, const char* what) {
    if (id != kNoToken && !valid(id)) {
      fail(source, ": ", what, " token id ", id, " is outside the vocabulary of ", tokens.size());
    }
  };
  check(bos, "BOS");
  check(eos, "EOS");
  check(eot, "EOT");
  check(unk, "unknown");
  check(pad, "padding");
  check(sep, "separator");
  check(cls, "CLS");
  check(mask, "mask");
  eog.clear();
  for (TokenId id : {eos, eot}) {
    if (id != kNoToken) eog.push_back(id);
  }
  // Chat models end a turn with one of these; they stop generation like EOS does.
  for (const char* text : {"<end_of_turn>", "<|eot_id|>", "<|im_end|>", "<|end|>", "<|endoftext|>",
                           "<|eom_id|>", "<EOT>", "<|return|>", "<|call|>"}) {
    TokenId id = find(text);
    if (id != kNoToken && type(id) == TokenType::kControl &&
        std::find(eog.begin(), eog.end(), id) == eog.end()) {
      eog.push_back(id);
    }
  }
  // gpt-oss (harmony): <|end|> ends a message, not the turn (its analysis is followed by the
  // final message); <|return|> ends the answer and <|call|> a tool call.
  const TokenId end = find("<|end|>");
  auto ends = [&](const char* text) {
    const TokenId id = find(text);
    return id != kNoToken && std::find(eog.begin(), eog.end(), id) != eog.end();
  };
  if (end != kNoToken && ends("<|return|>") && ends("<|call|>")) {
    eog.erase(std::remove(eog.begin(), eog.end(), end), eog.end());
  }
}

}  // namespace pagoda
