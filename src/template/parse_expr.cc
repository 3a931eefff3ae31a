// Expression parsing (see parser.h): jinja2's grammar and operator precedence, conditional
// expressions, or, and, not, comparisons (chained, in, not in), + -, ~, * / // %, ** (left
// associative, as in jinja2), unary - +, then postfix (.attr, [item], calls), filters and tests.
#include <algorithm>

#include "template/parser_impl.h"

namespace pagoda::jinja {

bool ExprParser::can_assign(const Expr& e) const {
  if (e.kind == ExprKind::kName || e.kind == ExprKind::kNsRef) return true;
  if (e.kind != ExprKind::kTuple) return false;
  for (const auto& a : e.args) {
    if (!can_assign(*a)) return false;
  }
  return true;
}

ExprPtr ExprParser::parse_assign_target(bool with_tuple, bool name_only,
                                        const std::vector<std::string>& extra_end,
                                        bool with_namespace) {
  ExprPtr target;
  if (name_only) {
    Pos pos = cur().pos;
    target = make(ExprKind::kName, pos);
    target->name = expect_name();
  } else if (with_tuple) {
    target = parse_tuple(true, true, extra_end, false, with_namespace);
  } else {
    target = parse_primary(with_namespace);
  }
  if (!can_assign(*target)) fail_at(target->pos, "cannot assign to this expression");
  return target;
}

ExprPtr ExprParser::parse_expression(bool with_condexpr) {
  DepthGuard guard(this);
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr ExprParser::parse_condexpr() {
  ExprPtr expr1 = parse_or();
  while (at_name("if")) {
    Pos pos = cur().pos;
    next();
    ExprPtr expr2 = parse_or();
    ExprPtr expr3;
    if (skip_name("else")) {
      DepthGuard guard(this);
      expr3 = parse_condexpr();
    }
    ExprPtr e = make(ExprKind::kCondExpr, pos);
    e->args.push_back(std::move(expr2));
    e->args.push_back(std::move(expr1));
    e->args.push_back(std::move(expr3));
    expr1 = finish(std::move(e));
  }
  return expr1;
}

ExprPtr ExprParser::parse_or() {
  ExprPtr left = parse_and();
  while (at_name("or")) {
    Pos pos = cur().pos;
    next();
    left = binary(ExprKind::kOr, pos, std::move(left), parse_and());
  }
  return left;
}

ExprPtr ExprParser::parse_and() {
  ExprPtr left = parse_not();
  while (at_name("and")) {
    Pos pos = cur().pos;
    next();
    left = binary(ExprKind::kAnd, pos, std::move(left), parse_not());
  }
  return left;
}

ExprPtr ExprParser::parse_not() {
  if (at_name("not")) {
    Pos pos = cur().pos;
    next();
    DepthGuard guard(this);
    return unary(ExprKind::kNot, pos, parse_not());
  }
  return parse_compare();
}

ExprPtr ExprParser::parse_compare() {
  Pos pos = cur().pos;
  ExprPtr first = parse_math1();
  ExprPtr e;
  while (true) {
    std::string op;
    const Token& t = cur();
    if (t.type == TokenType::kOperator && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                           t.text == "<=" || t.text == ">" || t.text == ">=")) {
      op = t.text;
      next();
    } else if (at_name("in")) {
      op = "in";
      next();
    } else if (at_name("not") && look().type == TokenType::kName && look().text == "in") {
      op = "notin";
      next();
      next();
    } else {
      break;
    }
    if (!e) {
      e = make(ExprKind::kCompare, pos);
      e->args.push_back(std::move(first));
    }
    e->ops.push_back(op);
    e->args.push_back(parse_math1());
    e = finish(std::move(e));
  }
  return e ? std::move(e) : std::move(first);
}

ExprPtr ExprParser::parse_math1() {
  ExprPtr left = parse_concat();
  while (at_op("+") || at_op("-")) {
    Pos pos = cur().pos;
    std::string op = cur().text;
    next();
    left = binary(ExprKind::kBinary, pos, std::move(left), parse_concat(), op);
  }
  return left;
}

ExprPtr ExprParser::parse_concat() {
  Pos pos = cur().pos;
  ExprPtr first = parse_math2();
  if (!at_op("~")) return first;
  ExprPtr e = make(ExprKind::kConcat, pos);
  e->args.push_back(std::move(first));
  while (skip_op("~")) {
    e->args.push_back(parse_math2());
    e = finish(std::move(e));
  }
  return e;
}

ExprPtr ExprParser::parse_math2() {
  ExprPtr left = parse_pow();
  while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
    Pos pos = cur().pos;
    std::string op = cur().text;
    next();
    left = binary(ExprKind::kBinary, pos, std::move(left), parse_pow(), op);
  }
  return left;
}

ExprPtr ExprParser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (at_op("**")) {
    Pos pos = cur().pos;
    next();
    left = binary(ExprKind::kBinary, pos, std::move(left), parse_unary(true), "**");
  }
  return left;
}

ExprPtr ExprParser::parse_unary(bool with_filter) {
  DepthGuard guard(this);
  ExprPtr node;
  Pos pos = cur().pos;
  if (skip_op("-")) {
    node = unary(ExprKind::kNeg, pos, parse_unary(false));
  } else if (skip_op("+")) {
    node = unary(ExprKind::kPos, pos, parse_unary(false));
  } else {
    node = parse_primary(false);
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr ExprParser::constant(Pos pos, Value v) {
  ExprPtr e = make(ExprKind::kConst, pos);
  e->value = std::move(v);
  return e;
}

ExprPtr ExprParser::parse_primary(bool with_namespace) {
  const Token& t = cur();
  Pos pos = t.pos;
  switch (t.type) {
    case TokenType::kName: {
      std::string name = t.text;
      next();
      if (name == "true" || name == "True") return constant(pos, Value::boolean(true));
      if (name == "false" || name == "False") return constant(pos, Value::boolean(false));
      if (name == "none" || name == "None") return constant(pos, Value::none());
      if (with_namespace && at_op(".")) {
        next();
        ExprPtr e = make(ExprKind::kNsRef, pos);
        e->name = name;
        e->attr = expect_name();
        return e;
      }
      ExprPtr e = make(ExprKind::kName, pos);
      e->name = name;
      return e;
    }
    case TokenType::kString: {
      std::string s;
      while (cur().type == TokenType::kString) {
        s += cur().text;
        next();
      }
      return constant(pos, Value::string(std::move(s)));
    }
    case TokenType::kInteger: {
      int64_t v = t.int_value;
      next();
      return constant(pos, Value::integer(v));
    }
    case TokenType::kFloat: {
      double v = t.float_value;
      next();
      return constant(pos, Value::number(v));
    }
    default:
      break;
  }
  if (at_op("(")) {
    DepthGuard guard(this);
    next();
    ExprPtr e = parse_tuple(false, true, {}, true, false);
    expect_op(")");
    return e;
  }
  if (at_op("[")) return parse_list();
  if (at_op("{")) return parse_dict();
  fail(t, "unexpected " + describe(t));
}

bool ExprParser::is_tuple_end(const std::vector<std::string>& extra_end) const {
  if (cur().type == TokenType::kVariableEnd || cur().type == TokenType::kBlockEnd) return true;
  if (at_op(")")) return true;
  for (const auto& name : extra_end) {
    if (at_name(name)) return true;
  }
  return false;
}

ExprPtr ExprParser::parse_tuple(bool simplified, bool with_condexpr,
                                const std::vector<std::string>& extra_end,
                                bool explicit_parentheses, bool with_namespace) {
  Pos pos = cur().pos;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    args.push_back(simplified ? parse_primary(with_namespace) : parse_expression(with_condexpr));
    if (at_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parentheses) fail(cur(), "expected an expression, got " + describe(cur()));
  }
  ExprPtr e = make(ExprKind::kTuple, pos);
  e->args = std::move(args);
  return finish(std::move(e));
}

ExprPtr ExprParser::parse_list() {
  DepthGuard guard(this);
  ExprPtr e = make(ExprKind::kList, cur().pos);
  expect_op("[");
  while (!at_op("]")) {
    if (!e->args.empty()) expect_op(",");
    if (at_op("]")) break;
    e->args.push_back(parse_expression(true));
  }
  expect_op("]");
  return finish(std::move(e));
}

ExprPtr ExprParser::parse_dict() {
  DepthGuard guard(this);
  ExprPtr e = make(ExprKind::kDict, cur().pos);
  expect_op("{");
  while (!at_op("}")) {
    if (!e->args.empty()) expect_op(",");
    if (at_op("}")) break;
    e->args.push_back(parse_expression(true));
    expect_op(":");
    e->args.push_back(parse_expression(true));
  }
  expect_op("}");
  return finish(std::move(e));
}

ExprPtr ExprParser::parse_postfix(ExprPtr node) {
  while (true) {
    if (at_op(".") || at_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (at_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr ExprParser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (at_op("|")) {
      node = parse_filter(std::move(node), false);
    } else if (at_name("is")) {
      node = parse_test(std::move(node));
    } else if (at_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr ExprParser::parse_subscript(ExprPtr node) {
  Pos pos = cur().pos;
  if (skip_op(".")) {
    const Token& attr = cur();
    if (attr.type == TokenType::kName) {
      ExprPtr e = make(ExprKind::kGetAttr, attr.pos);
      e->name = attr.text;
      next();
      e->args.push_back(std::move(node));
      return finish(std::move(e));
    }
    if (attr.type != TokenType::kInteger) fail(attr, "expected a name or number after '.'");
    ExprPtr key = constant(attr.pos, Value::integer(attr.int_value));
    next();
    return binary(ExprKind::kGetItem, pos, std::move(node), std::move(key));
  }
  DepthGuard guard(this);
  expect_op("[");
  std::vector<ExprPtr> args;
  while (!at_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  ExprPtr key;
  if (args.size() == 1) {
    key = std::move(args[0]);
  } else {
    key = make(ExprKind::kTuple, pos);
    key->args = std::move(args);
    key = finish(std::move(key));
  }
  return binary(ExprKind::kGetItem, pos, std::move(node), std::move(key));
}

ExprPtr ExprParser::parse_subscribed() {
  Pos pos = cur().pos;
  std::vector<ExprPtr> args;
  if (skip_op(":")) {
    args.push_back(nullptr);
  } else {
    ExprPtr node = parse_expression(true);
    if (!at_op(":")) return node;
    next();
    args.push_back(std::move(node));
  }
  if (at_op(":")) {
    args.push_back(nullptr);
  } else if (!at_op("]") && !at_op(",")) {
    args.push_back(parse_expression(true));
  } else {
    args.push_back(nullptr);
  }
  if (skip_op(":")) {
    args.push_back(!at_op("]") && !at_op(",") ? parse_expression(true) : nullptr);
  } else {
    args.push_back(nullptr);
  }
  ExprPtr e = make(ExprKind::kSlice, pos);
  e->args = std::move(args);
  return finish(std::move(e));
}

void ExprParser::parse_call_args(Expr* e) {
  DepthGuard guard(this);
  Pos pos = cur().pos;
  expect_op("(");
  bool require_comma = false;
  auto ensure = [&](bool ok) {
    if (!ok) fail_at(pos, "invalid syntax for function call expression");
  };
  while (!at_op(")")) {
    if (require_comma) {
      expect_op(",");
      if (at_op(")")) break;
    }
    if (skip_op("*")) {
      ensure(!e->dyn_args && !e->dyn_kwargs);
      e->dyn_args = parse_expression(true);
    } else if (skip_op("**")) {
      ensure(!e->dyn_kwargs);
      e->dyn_kwargs = parse_expression(true);
    } else if (cur().type == TokenType::kName && look().type == TokenType::kOperator &&
               look().text == "=") {
      ensure(!e->dyn_kwargs);
      std::string key = cur().text;
      next();
      next();
      e->kwargs.emplace_back(key, parse_expression(true));
    } else {
      ensure(!e->dyn_args && !e->dyn_kwargs && e->kwargs.empty());
      e->args.push_back(parse_expression(true));
    }
    require_comma = true;
  }
  expect_op(")");
}

ExprPtr ExprParser::parse_call(ExprPtr node) {
  ExprPtr e = make(ExprKind::kCall, cur().pos);
  e->args.push_back(std::move(node));
  parse_call_args(e.get());
  return finish(std::move(e));
}

std::string ExprParser::parse_dotted_name() {
  std::string name = expect_name();
  while (skip_op(".")) {
    name.push_back('.');
    name += expect_name();
  }
  return name;
}

ExprPtr ExprParser::parse_filter(ExprPtr node, bool start_inline) {
  while (at_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    ExprPtr e = make(ExprKind::kFilter, cur().pos);
    e->name = parse_dotted_name();
    e->args.push_back(std::move(node));
    if (at_op("(")) parse_call_args(e.get());
    node = finish(std::move(e));
  }
  return node;
}

ExprPtr ExprParser::parse_test(ExprPtr node) {
  Pos pos = cur().pos;
  next();  // 'is'
  bool negated = skip_name("not");
  ExprPtr e = make(ExprKind::kTest, cur().pos);
  e->name = parse_dotted_name();
  e->args.push_back(std::move(node));
  const Token& t = cur();
  if (at_op("(")) {
    parse_call_args(e.get());
  } else if ((t.type == TokenType::kName || t.type == TokenType::kString ||
              t.type == TokenType::kInteger || t.type == TokenType::kFloat || at_op("[") ||
              at_op("{")) &&
             !at_name("else") && !at_name("or") && !at_name("and")) {
    if (at_name("is")) fail(t, "cannot chain multiple tests with 'is'");
    DepthGuard guard(this);
    ExprPtr arg = parse_primary(false);
    e->args.push_back(parse_postfix(std::move(arg)));
  }
  ExprPtr test = finish(std::move(e));
  return negated ? unary(ExprKind::kNot, pos, std::move(test)) : std::move(test);
}

}  // namespace pagoda::jinja
