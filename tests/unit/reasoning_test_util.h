// Shared by the reasoning parsers' tests: a text fed to a parser in pieces.
#pragma once

#include <cstddef>
#include <string_view>

#include "engine/reasoning.h"

namespace pagoda::test {

// `text` fed to a `syntax` parser in pieces of `size` bytes, then finished: all it returned.
inline ReasoningParts parse_in_pieces(ReasoningSyntax syntax, std::string_view text, size_t size,
                                      bool inside) {
  auto p = make_reasoning_parser(syntax, inside);
  ReasoningParts out;
  for (size_t at = 0; at < text.size(); at += size) {
    ReasoningParts d = p->feed(text.substr(at, size));
    out.reasoning += d.reasoning;
    out.content += d.content;
  }
  ReasoningParts rest = p->finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  return out;
}

}  // namespace pagoda::test
