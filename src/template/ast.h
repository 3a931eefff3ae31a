// Syntax tree of a parsed template: expressions and statements as plain tagged structs. The
// tree is immutable after parsing and shared by concurrent renders.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/errors.h"
#include "template/value.h"

namespace pagoda::jinja {

// Expression nesting allowed by the parser; keeps evaluation and destruction recursion shallow.
constexpr int kMaxExprDepth = 128;

enum class ExprKind {
  kConst,     // value
  kName,      // name
  kNsRef,     // name.attr as an assignment target (name = namespace, attr in `attr`)
  kList,      // args
  kTuple,     // args
  kDict,      // args: key, value, key, value, ...
  kGetAttr,   // args[0].attr
  kGetItem,   // args[0][args[1]]
  kSlice,     // args[0]:args[1]:args[2], each may be null
  kCall,      // args[0](args[1:], kwargs, *dyn_args, **dyn_kwargs)
  kFilter,    // args[0] | name(args[1:], ...); args[0] null inside filter blocks
  kTest,      // args[0] is name(args[1:], ...)
  kNeg,       // -args[0]
  kPos,       // +args[0]
  kNot,       // not args[0]
  kBinary,    // args[0] op args[1], op in + - * / // % **
  kAnd,       // args[0] and args[1]
  kOr,        // args[0] or args[1]
  kConcat,    // args[0] ~ args[1] ~ ...
  kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...
  kCondExpr,  // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kConst;
  Pos pos;
  Value value;
  std::string name;  // name, attribute, filter, test or operator
  std::string attr;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args;
  ExprPtr dyn_kwargs;
  std::vector<std::string> ops;  // kCompare: == != < <= > >= in notin
  int depth = 1;
};

enum class StmtKind {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches, else_body
  kFor,          // target in expr [if test]: body, else_body
  kSet,          // target = expr
  kSetBlock,     // {% set target | filter %}body{% endset %}; expr = filter chain or null
  kMacro,        // text = name; params, defaults; body
  kCallBlock,    // expr = the call; params/defaults of caller; body
  kFilterBlock,  // expr = filter chain (innermost operand null); body
  kWith,         // assignments; body
  kBreak,
  kContinue,
  kScope,  // {% generation %}: renders body
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  Pos pos;
  std::string text;
  ExprPtr target;
  ExprPtr expr;
  ExprPtr test;
  std::vector<std::pair<ExprPtr, std::vector<Stmt>>> branches;
  std::vector<Stmt> body;
  std::vector<Stmt> else_body;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  std::vector<std::pair<ExprPtr, ExprPtr>> assignments;
  bool uses_varargs = false;
  bool uses_kwargs = false;
  bool uses_caller = false;
};

}  // namespace pagoda::jinja
