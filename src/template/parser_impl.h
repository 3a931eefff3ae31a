// Internal to the parser: the token cursor and the expression parser that the statement parser
// (parser.cc) builds on. Expression grammar: parse_expr.cc.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "template/ast.h"
#include "template/lexer.h"

namespace pagoda::jinja {

class ExprParser {
 public:
  explicit ExprParser(std::vector<Token> tokens)
      : toks_(std::move(tokens)), stack_base_(stack_position()) {}

 protected:
  // Bounds parser recursion (and so the depth of everything built from it).
  class DepthGuard {
   public:
    explicit DepthGuard(ExprParser* p) : p_(p) {
      if (++p_->expr_depth_ > kMaxExprDepth || stack_used_since(p_->stack_base_) > kMaxStackBytes) {
        p_->fail(p_->cur(), "expression nested too deeply (more than " +
                                std::to_string(kMaxExprDepth) + " levels)");
      }
    }
    ~DepthGuard() { --p_->expr_depth_; }

   private:
    ExprParser* p_;
  };

  const Token& cur() const { return toks_[i_]; }
  const Token& look() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  void next() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool at_op(std::string_view op) const {
    return cur().type == TokenType::kOperator && cur().text == op;
  }
  bool at_name(std::string_view name) const {
    return cur().type == TokenType::kName && cur().text == name;
  }
  bool skip_op(std::string_view op) {
    if (!at_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    next();
    return true;
  }

  [[noreturn]] void fail(const Token& t, const std::string& message) const {
    RenderError e(message);
    e.set_pos(t.pos);
    throw e;
  }
  [[noreturn]] void fail_at(Pos pos, const std::string& message) const {
    RenderError e(message);
    e.set_pos(pos);
    throw e;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kData:
        return "template text";
      case TokenType::kVariableBegin:
        return "'{{'";
      case TokenType::kVariableEnd:
        return "end of print statement '}}'";
      case TokenType::kBlockBegin:
        return "'{%'";
      case TokenType::kBlockEnd:
        return "end of statement block '%}'";
      case TokenType::kName:
      case TokenType::kOperator:
        return "'" + t.text + "'";
      case TokenType::kString:
        return "string literal";
      case TokenType::kInteger:
        return "integer literal";
      case TokenType::kFloat:
        return "float literal";
      case TokenType::kEof:
        return "end of template";
    }
    return "token";
  }

  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(cur(), "expected '" + std::string(op) + "', got " + describe(cur()));
  }
  void expect_type(TokenType type, const char* what) {
    if (cur().type != type)
      fail(cur(), std::string("expected ") + what + ", got " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) fail(cur(), "expected a name, got " + describe(cur()));
    std::string name = cur().text;
    next();
    return name;
  }

  ExprPtr make(ExprKind kind, Pos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }
  // Records the node's depth from its children; refuses trees deeper than kMaxExprDepth.
  ExprPtr finish(ExprPtr e) {
    int d = 0;
    for (const auto& a : e->args) {
      if (a) d = std::max(d, a->depth);
    }
    for (const auto& kw : e->kwargs) d = std::max(d, kw.second->depth);
    if (e->dyn_args) d = std::max(d, e->dyn_args->depth);
    if (e->dyn_kwargs) d = std::max(d, e->dyn_kwargs->depth);
    e->depth = d + 1;
    if (e->depth > kMaxExprDepth) {
      fail_at(e->pos, "expression nested too deeply (more than " + std::to_string(kMaxExprDepth) +
                          " levels)");
    }
    return e;
  }
  ExprPtr unary(ExprKind kind, Pos pos, ExprPtr operand) {
    ExprPtr e = make(kind, pos);
    e->args.push_back(std::move(operand));
    return finish(std::move(e));
  }
  ExprPtr binary(ExprKind kind, Pos pos, ExprPtr a, ExprPtr b, std::string op = {}) {
    ExprPtr e = make(kind, pos);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return finish(std::move(e));
  }

  // ---- expressions (parse_expr.cc) ----
  bool can_assign(const Expr& e) const;
  ExprPtr parse_assign_target(bool with_tuple, bool name_only,
                              const std::vector<std::string>& extra_end, bool with_namespace);
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr constant(Pos pos, Value v);
  ExprPtr parse_primary(bool with_namespace);
  bool is_tuple_end(const std::vector<std::string>& extra_end) const;
  ExprPtr parse_tuple(bool simplified, bool with_condexpr,
                      const std::vector<std::string>& extra_end, bool explicit_parentheses,
                      bool with_namespace);
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  void parse_call_args(Expr* e);
  ExprPtr parse_call(ExprPtr node);
  std::string parse_dotted_name();
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  ExprPtr parse_test(ExprPtr node);

  std::vector<Token> toks_;
  size_t i_ = 0;
  int expr_depth_ = 0;
  uintptr_t stack_base_;
};

}  // namespace pagoda::jinja
