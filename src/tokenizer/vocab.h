// The vocabulary: plain data read from GGUF metadata (tokenizer.ggml.*) or from a Hugging Face
// tokenizer.json. Tokenizers are built from it and never look at the file again.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/token.h"

namespace pagoda {

// As GGUF numbers them (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5,
  kByte = 6,
};

enum class TokenizerKind { kSpm, kBpe, kWordPiece };

struct Vocab {
  TokenizerKind kind = TokenizerKind::kSpm;
  std::string model;  // tokenizer.ggml.model: "llama", "gpt2", "bert", ...
  std::string pre;    // tokenizer.ggml.pre: the pre-tokenizer name ("default" when absent)

  std::vector<std::string> tokens;  // [num_tokens] token text as stored
  std::vector<float> scores;        // [num_tokens] SPM merge scores; empty when absent
  std::vector<TokenType> types;     // [num_tokens]
  std::vector<std::pair<std::string, std::string>> merges;  // BPE; rank = index

  TokenId bos = kNoToken, eos = kNoToken, eot = kNoToken, unk = kNoToken, pad = kNoToken;
  TokenId sep = kNoToken, cls = kNoToken, mask = kNoToken;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = true;  // SPM: prepend "▁" to the first text fragment
  std::vector<TokenId> eog;      // ids that end generation (eos, eot, <end_of_turn>, ...)
  std::string chat_template;     // tokenizer.chat_template, empty when absent

  size_t size() const { return tokens.size(); }
  bool valid(TokenId id) const { return id >= 0 && static_cast<size_t>(id) < tokens.size(); }
  TokenType type(TokenId id) const { return types[static_cast<size_t>(id)]; }
  bool is_special(TokenId id) const {  // control, unknown or user-defined: matched as a whole
    TokenType t = type(id);
    return t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUserDefined;
  }

  // Looks a token up by its exact text; kNoToken when absent. Valid after build_index().
  TokenId find(const std::string& text) const {
    auto it = index_.find(text);
    return it == index_.end() ? kNoToken : it->second;
  }
  // Fills the text index, checks the arrays agree and the special ids are in range (throws
  // Error naming `source` otherwise).
  void build_index(const std::string& source);

 private:
  std::unordered_map<std::string, TokenId> index_;
};

}  // namespace pagoda
