// Template parser (see parser.h): statements and block structure as jinja2 parses them; the
// expression grammar is in parse_expr.cc.
#include "template/parser.h"

#include <algorithm>

#include "template/parser_impl.h"
#include "template/text.h"

namespace pagoda::jinja {
namespace {

std::string join_quoted(const std::vector<std::string>& names) {
  std::string out;
  for (size_t k = 0; k < names.size(); ++k) {
    if (k > 0) out += k + 1 == names.size() ? " or " : ", ";
    out += "'" + names[k] + "'";
  }
  return out;
}

void collect_names(const Expr* e, std::vector<std::string>* names) {
  if (e == nullptr) return;
  if (e->kind == ExprKind::kName) names->push_back(e->name);
  for (const auto& a : e->args) collect_names(a.get(), names);
  for (const auto& kw : e->kwargs) collect_names(kw.second.get(), names);
  collect_names(e->dyn_args.get(), names);
  collect_names(e->dyn_kwargs.get(), names);
}

void collect_names(const std::vector<Stmt>& body, std::vector<std::string>* names) {
  for (const Stmt& s : body) {
    collect_names(s.target.get(), names);
    collect_names(s.expr.get(), names);
    collect_names(s.test.get(), names);
    for (const auto& [test, branch] : s.branches) {
      collect_names(test.get(), names);
      collect_names(branch, names);
    }
    collect_names(s.body, names);
    collect_names(s.else_body, names);
    for (const auto& d : s.defaults) collect_names(d.get(), names);
    for (const auto& [t, v] : s.assignments) {
      collect_names(t.get(), names);
      collect_names(v.get(), names);
    }
  }
}

void mark_special_names(Stmt* s) {
  std::vector<std::string> names;
  collect_names(s->body, &names);
  for (const auto& d : s->defaults) collect_names(d.get(), &names);
  auto has = [&](const char* n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  s->uses_varargs = has("varargs");
  s->uses_kwargs = has("kwargs");
  s->uses_caller = has("caller");
}

bool is_end_tag_name(const std::string& name) {
  static const char* kNames[] = {"endif",    "endfor",        "else",         "elif",    "endmacro",
                                 "endcall",  "endfilter",     "endset",       "endwith", "endraw",
                                 "endblock", "endautoescape", "endgeneration"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

class Parser : public ExprParser {
 public:
  Parser(std::vector<Token> tokens, int max_block_depth)
      : ExprParser(std::move(tokens)), max_block_depth_(max_block_depth) {}

  std::vector<Stmt> parse() { return subparse({}); }

 private:
  struct OpenBlock {
    std::string tag;
    Pos pos;
    std::vector<std::string> end_tags;
  };

  std::vector<Stmt> subparse(const std::vector<std::string>& end_tags) {
    std::vector<Stmt> body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kData) {
        Stmt s;
        s.kind = StmtKind::kText;
        s.pos = t.pos;
        s.text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == TokenType::kVariableBegin) {
        Stmt s;
        s.kind = StmtKind::kOutput;
        s.pos = t.pos;
        next();
        s.expr = parse_tuple(false, true, {}, false, false);
        expect_type(TokenType::kVariableEnd, "end of print statement '}}'");
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        next();
        if (cur().type == TokenType::kName &&
            std::find(end_tags.begin(), end_tags.end(), cur().text) != end_tags.end()) {
          return body;
        }
        body.push_back(parse_statement());
        expect_type(TokenType::kBlockEnd, "end of statement block '%}'");
      } else if (t.type == TokenType::kEof) {
        return body;
      } else {
        fail(t, "unexpected " + describe(t));
      }
    }
  }

  std::vector<Stmt> parse_statements(const std::string& tag, Pos pos,
                                     std::vector<std::string> end_tags, bool drop_needle) {
    skip_op(":");
    expect_type(TokenType::kBlockEnd, "end of statement block '%}'");
    if (static_cast<int>(open_.size()) >= max_block_depth_ ||
        stack_used_since(stack_base_) > kMaxStackBytes) {
      fail_at(pos, "blocks nested too deeply (more than " + std::to_string(max_block_depth_) +
                       " levels)");
    }
    open_.push_back({tag, pos, end_tags});
    std::vector<Stmt> body = subparse(end_tags);
    if (cur().type == TokenType::kEof) {
      const OpenBlock& b = open_.back();
      fail(cur(), "unexpected end of template: the '" + b.tag + "' tag at " +
                      std::to_string(b.pos.line) + ":" + std::to_string(b.pos.col) +
                      " was never closed (expected " + join_quoted(b.end_tags) + ")");
    }
    open_.pop_back();
    if (drop_needle) next();
    return body;
  }

  Stmt parse_statement() {
    const Token& t = cur();
    if (t.type != TokenType::kName) fail(t, "expected a tag name, got " + describe(t));
    const std::string name = t.text;
    if (name == "for") return parse_for();
    if (name == "if") return parse_if();
    if (name == "set") return parse_set();
    if (name == "macro") return parse_macro();
    if (name == "call") return parse_call_block();
    if (name == "filter") return parse_filter_block();
    if (name == "with") return parse_with();
    if (name == "print") return parse_print();
    if (name == "generation") return parse_block_scope("generation", "endgeneration");
    if (name == "break" || name == "continue") {
      Stmt s;
      s.kind = name == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      s.pos = t.pos;
      if (loop_depth_ == 0) fail(t, "'" + name + "' outside of a for loop");
      next();
      return s;
    }
    if (name == "include" || name == "import" || name == "from" || name == "extends") {
      fail(t, "tag '" + name + "' is not supported: templates cannot load other templates");
    }
    if (name == "block" || name == "autoescape") {
      fail(t, "tag '" + name + "' is not supported");
    }
    if (!open_.empty()) {
      const OpenBlock& b = open_.back();
      bool expected_elsewhere = false;
      for (const OpenBlock& o : open_) {
        if (std::find(o.end_tags.begin(), o.end_tags.end(), name) != o.end_tags.end()) {
          expected_elsewhere = true;
        }
      }
      if (expected_elsewhere || is_end_tag_name(name)) {
        fail(t, "unexpected tag '" + name + "': the innermost open block is '" + b.tag + "' at " +
                    std::to_string(b.pos.line) + ":" + std::to_string(b.pos.col) +
                    ", which expects " + join_quoted(b.end_tags));
      }
    } else if (is_end_tag_name(name)) {
      fail(t, "unexpected tag '" + name + "': no open block expects it");
    }
    fail(t, "unknown tag '" + name + "'");
  }

  Stmt parse_for() {
    Stmt s;
    s.kind = StmtKind::kFor;
    s.pos = cur().pos;
    next();
    s.target = parse_assign_target(true, false, {"in"}, false);
    if (!skip_name("in")) fail(cur(), "expected 'in', got " + describe(cur()));
    s.expr = parse_tuple(false, false, {"recursive"}, false, false);
    if (skip_name("if")) s.test = parse_expression(true);
    if (at_name("recursive")) fail(cur(), "recursive for loops are not supported");
    ++loop_depth_;
    s.body = parse_statements("for", s.pos, {"endfor", "else"}, false);
    --loop_depth_;
    bool is_else = at_name("else");
    next();
    if (is_else) s.else_body = parse_statements("for", s.pos, {"endfor"}, true);
    return s;
  }

  Stmt parse_if() {
    Stmt s;
    s.kind = StmtKind::kIf;
    s.pos = cur().pos;
    next();
    while (true) {
      ExprPtr test = parse_tuple(false, false, {}, false, false);
      std::vector<Stmt> body = parse_statements("if", s.pos, {"elif", "else", "endif"}, false);
      s.branches.emplace_back(std::move(test), std::move(body));
      std::string which = cur().text;
      next();
      if (which == "elif") continue;
      if (which == "else") s.else_body = parse_statements("if", s.pos, {"endif"}, true);
      break;
    }
    return s;
  }

  Stmt parse_set() {
    Stmt s;
    s.pos = cur().pos;
    next();
    s.target = parse_assign_target(true, false, {}, true);
    if (skip_op("=")) {
      s.kind = StmtKind::kSet;
      s.expr = parse_tuple(false, true, {}, false, false);
      return s;
    }
    s.kind = StmtKind::kSetBlock;
    if (at_op("|")) s.expr = parse_filter(nullptr, false);
    s.body = parse_statements("set", s.pos, {"endset"}, true);
    return s;
  }

  void parse_signature(Stmt* s) {
    expect_op("(");
    while (!at_op(")")) {
      if (!s->params.empty()) expect_op(",");
      std::string name = expect_name();
      if (skip_op("=")) {
        s->defaults.push_back(parse_expression(true));
      } else if (!s->defaults.empty()) {
        fail(cur(), "non-default argument follows default argument");
      }
      s->params.push_back(name);
    }
    expect_op(")");
  }

  Stmt parse_macro() {
    Stmt s;
    s.kind = StmtKind::kMacro;
    s.pos = cur().pos;
    next();
    s.text = expect_name();
    parse_signature(&s);
    parse_callable_body(&s, "macro", "endmacro");
    return s;
  }

  // The body of a macro or call block: loop controls inside it belong to its own loops only.
  void parse_callable_body(Stmt* s, const char* tag, const char* end_tag) {
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_statements(tag, s->pos, {end_tag}, true);
    loop_depth_ = saved;
    mark_special_names(s);
  }

  Stmt parse_call_block() {
    Stmt s;
    s.kind = StmtKind::kCallBlock;
    s.pos = cur().pos;
    next();
    if (at_op("(")) parse_signature(&s);
    s.expr = parse_expression(true);
    if (s.expr->kind != ExprKind::kCall) fail_at(s.pos, "{% call %} needs a macro call");
    parse_callable_body(&s, "call", "endcall");
    return s;
  }

  Stmt parse_filter_block() {
    Stmt s;
    s.kind = StmtKind::kFilterBlock;
    s.pos = cur().pos;
    next();
    s.expr = parse_filter(nullptr, true);
    s.body = parse_statements("filter", s.pos, {"endfilter"}, true);
    return s;
  }

  Stmt parse_with() {
    Stmt s;
    s.kind = StmtKind::kWith;
    s.pos = cur().pos;
    next();
    while (cur().type != TokenType::kBlockEnd) {
      if (!s.assignments.empty()) expect_op(",");
      ExprPtr target = parse_assign_target(true, false, {}, false);
      expect_op("=");
      ExprPtr value = parse_expression(true);
      s.assignments.emplace_back(std::move(target), std::move(value));
    }
    s.body = parse_statements("with", s.pos, {"endwith"}, true);
    return s;
  }

  Stmt parse_print() {
    Stmt s;
    s.kind = StmtKind::kScope;
    s.pos = cur().pos;
    next();
    while (cur().type != TokenType::kBlockEnd) {
      if (!s.body.empty()) expect_op(",");
      Stmt out;
      out.kind = StmtKind::kOutput;
      out.pos = cur().pos;
      out.expr = parse_expression(true);
      s.body.push_back(std::move(out));
    }
    return s;
  }

  Stmt parse_block_scope(const std::string& tag, const std::string& end_tag) {
    Stmt s;
    s.kind = StmtKind::kScope;
    s.pos = cur().pos;
    next();
    s.body = parse_statements(tag, s.pos, {end_tag}, true);
    return s;
  }

  int max_block_depth_;
  std::vector<OpenBlock> open_;
  int loop_depth_ = 0;
};

}  // namespace

std::vector<Stmt> parse_template(std::vector<Token> tokens, int max_block_depth) {
  Parser parser(std::move(tokens), max_block_depth);
  return parser.parse();
}

}  // namespace pagoda::jinja
