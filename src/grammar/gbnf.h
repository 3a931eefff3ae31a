// GBNF, the grammar format of llama.cpp, which its users already have grammars written in:
//   root ::= "yes" | "no"            rules: name ::= alternatives separated by |
//   "literal"  [a-z0-9_] [^"\\]  .   strings and classes (\n \t \r \\ \" \xHH \uHHHH \UHHHHHHHH;
//                                    \u and \U name Unicode scalar values: no surrogates, at
//                                    most U+10FFFF)
//   ( group )  x*  x+  x?  x{m}  x{m,}  x{m,n}
//   # comment to the end of the line
// A rule's alternatives may continue on lines that start with '|', and anything inside
// parentheses may span lines.
#pragma once

#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace pagoda {

// Parses and compiles `text`; throws Error "grammar LINE:COL: problem", or GrammarLimitError
// past `budget`'s limits (nullptr: none).
Grammar parse_gbnf(std::string_view text, const std::string& root = "root",
                   GrammarBudget* budget = nullptr);

// A GBNF string literal matching exactly `text` (quotes, backslashes and control bytes as \xHH),
// for grammars written by code.
std::string gbnf_literal(std::string_view text);

}  // namespace pagoda
