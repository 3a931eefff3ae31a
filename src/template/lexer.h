// Template lexer: splits a template into text data and the tokens inside {{ }} and {% %},
// applying jinja2's whitespace rules (trim_blocks, lstrip_blocks, `-`/`+` markers, the single
// trailing newline dropped, newlines normalized to \n) and skipping {# #} comments.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "template/errors.h"

namespace pagoda::jinja {

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

enum class TokenType {
  kData,
  kVariableBegin,
  kVariableEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;  // data, name, decoded string literal, operator
  int64_t int_value = 0;
  double float_value = 0;
  Pos pos;
};

// Throws RenderError (with its position) for malformed input.
std::vector<Token> tokenize(std::string_view source, const LexOptions& options);

}  // namespace pagoda::jinja
