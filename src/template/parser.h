// Template parser: tokens to the statement tree, with jinja2's grammar and operator precedence.
// Throws RenderError with the position of the offending token.
#pragma once

#include <vector>

#include "template/ast.h"
#include "template/lexer.h"

namespace pagoda::jinja {

// max_block_depth bounds how deeply block tags ({% if %}, {% for %}, ...) may nest.
std::vector<Stmt> parse_template(std::vector<Token> tokens, int max_block_depth);

}  // namespace pagoda::jinja
