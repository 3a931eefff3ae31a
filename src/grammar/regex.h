// Regular expressions as GBNF text, for the `regex` request field and JSON schema `pattern`.
// The whole output must match (the pattern is anchored at both ends; leading ^ and trailing $
// are accepted and change nothing). Supported: literals and escapes (\n \t \r \\ \. \xHH
// \uHHHH, \d \w \s and their negations), classes [a-z] [^...] with those escapes, ., groups
// ( ) and (?: ), alternation |, quantifiers * + ? {m} {m,} {m,n} (a trailing ? for laziness is
// accepted and changes nothing: every match is allowed). Anything else (backreferences,
// lookaround, named groups, flags) is an Error naming it.
#pragma once

#include <string>
#include <string_view>

namespace pagoda {

struct RegexOptions {
  // Inside a JSON string: '"', '\' and control characters cannot appear unescaped, so they are
  // removed from every class and refused as literals.
  bool json_string = false;
};

// GBNF rules defining `rule_name` as the pattern; helper rules are named rule_name-1, -2, ...
std::string regex_to_gbnf(std::string_view pattern, const std::string& rule_name,
                          const RegexOptions& options = {});

}  // namespace pagoda
