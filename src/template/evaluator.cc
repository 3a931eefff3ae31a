// The evaluator, part 1: statements, loops, assignments, macros and call blocks, output and the
// render limits (see evaluator.h; expressions are in eval_expr.cc).
#include "template/evaluator.h"

#include <algorithm>

#include "template/text.h"

namespace pagoda::jinja {

Evaluator::~Evaluator() = default;

std::string Evaluator::render(const std::vector<Stmt>& body, const ScopePtr& root) {
  stack_base_ = stack_position();
  std::string out;
  exec_body(body, root, out);
  return out;
}

void Evaluator::charge(int64_t steps) {
  steps_ += steps;
  if (steps_ > settings_.max_steps) {
    raise("evaluation step limit exceeded (max_steps=", settings_.max_steps, ")");
  }
}

void Evaluator::check_size(size_t bytes) const {
  if (bytes > static_cast<uint64_t>(settings_.max_output_bytes)) {
    raise("string result exceeds the output limit (max_output_bytes=", settings_.max_output_bytes,
          ")");
  }
}

void Evaluator::append(std::string& out, std::string_view s) {
  if (out.size() + s.size() > static_cast<uint64_t>(settings_.max_output_bytes)) {
    raise("output size limit exceeded (max_output_bytes=", settings_.max_output_bytes, ")");
  }
  out.append(s);
}

Namespace* Evaluator::new_namespace() {
  charge(1);
  namespaces_.push_back(std::make_unique<Namespace>());
  return namespaces_.back().get();
}

Evaluator::Flow Evaluator::exec_body(const std::vector<Stmt>& body, const ScopePtr& scope,
                                     std::string& out) {
  for (const Stmt& s : body) {
    Flow f = exec(s, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
  FrameGuard guard(this);
  try {
    charge(1);
    switch (s.kind) {
      case StmtKind::kText:
        append(out, s.text);
        return Flow::kNormal;
      case StmtKind::kOutput:
        append(out, to_str(eval(*s.expr, scope)));
        return Flow::kNormal;
      case StmtKind::kIf:
        for (const auto& [test, branch] : s.branches) {
          if (truthy(eval(*test, scope))) return exec_body(branch, scope, out);
        }
        return exec_body(s.else_body, scope, out);
      case StmtKind::kFor:
        return exec_for(s, scope, out);
      case StmtKind::kSet:
        assign(*s.target, eval(*s.expr, scope), scope);
        return Flow::kNormal;
      case StmtKind::kSetBlock: {
        std::string buf;
        Flow f = exec_body(s.body, scope, buf);
        Value v = Value::string(std::move(buf));
        if (s.expr) v = eval_filter(*s.expr, scope, &v);
        assign(*s.target, v, scope);
        return f;
      }
      case StmtKind::kMacro:
        scope->vars[s.text] = make_macro(s, scope, s.text);
        return Flow::kNormal;
      case StmtKind::kCallBlock:
        exec_call_block(s, scope, out);
        return Flow::kNormal;
      case StmtKind::kFilterBlock: {
        std::string buf;
        Flow f = exec_body(s.body, scope, buf);
        Value v = Value::string(std::move(buf));
        append(out, to_str(eval_filter(*s.expr, scope, &v)));
        return f;
      }
      case StmtKind::kWith: {
        auto inner = std::make_shared<Scope>(scope);
        for (const auto& [target, value] : s.assignments)
          assign(*target, eval(*value, scope), inner);
        return exec_body(s.body, inner, out);
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kScope:
        return exec_body(s.body, scope, out);
    }
    return Flow::kNormal;
  } catch (RenderError& e) {
    e.set_pos(s.pos);
    throw;
  }
}

Evaluator::Flow Evaluator::exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
  std::vector<Value> items = iterate(eval(*s.expr, scope));
  charge(static_cast<int64_t>(items.size() / 16));
  if (s.test) {
    std::vector<Value> kept;
    for (Value& item : items) {
      charge(1);
      auto probe = std::make_shared<Scope>(scope);
      assign(*s.target, item, probe);
      if (truthy(eval(*s.test, probe))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto inner = std::make_shared<Scope>(scope);
    exec_body(s.else_body, inner, out);
    return Flow::kNormal;
  }
  auto state = std::make_shared<LoopState>();
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, item.depth());
  state->depth = depth + 1;
  state->items = std::make_shared<const std::vector<Value>>(std::move(items));
  Value loop_value = Value::loop(state);
  const std::vector<Value>& list = *state->items;
  for (size_t i = 0; i < list.size(); ++i) {
    charge(1);
    state->index0 = static_cast<int64_t>(i);
    auto inner = std::make_shared<Scope>(scope);
    assign(*s.target, list[i], inner);
    inner->vars["loop"] = loop_value;
    if (exec_body(s.body, inner, out) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Value Evaluator::make_macro(const Stmt& def, const ScopePtr& scope, const std::string& name) {
  auto fn = std::make_shared<Function>();
  fn->name = name;
  fn->kind = FunctionKind::kMacro;
  std::weak_ptr<Scope> closure = scope;
  const Stmt* d = &def;
  fn->call = [d, name, closure](Evaluator& ev, CallArgs& args) {
    return ev.call_macro(*d, name, closure, args);
  };
  return Value::function(std::move(fn));
}

Value Evaluator::call_macro(const Stmt& def, const std::string& name,
                            const std::weak_ptr<Scope>& closure, CallArgs& args) {
  ScopePtr parent = closure.lock();
  if (!parent) raise("macro '", name, "' was called after the block that defined it ended");
  if (call_depth_ >= settings_.max_depth) {
    raise("recursion depth limit exceeded (max_depth=", settings_.max_depth, ")");
  }
  auto scope = std::make_shared<Scope>(parent);
  size_t num_params = def.params.size();
  size_t first_default = num_params - def.defaults.size();
  auto take_kwarg = [&](const std::string& key, Value* out) {
    for (auto it = args.kwargs.begin(); it != args.kwargs.end(); ++it) {
      if (it->first == key) {
        *out = std::move(it->second);
        args.kwargs.erase(it);
        return true;
      }
    }
    return false;
  };
  for (size_t k = 0; k < num_params; ++k) {
    const std::string& param = def.params[k];
    Value v;
    if (k < args.args.size()) {
      v = args.args[k];
    } else if (!take_kwarg(param, &v)) {
      if (k >= first_default) {
        v = eval(*def.defaults[k - first_default], scope);
      } else {
        v = Value::undefined("parameter '" + param + "' was not provided");
      }
    }
    scope->vars[param] = std::move(v);
  }
  if (def.uses_caller) {
    Value caller;
    if (!take_kwarg("caller", &caller)) caller = Value::undefined("No caller defined");
    scope->vars["caller"] = std::move(caller);
  }
  if (def.uses_kwargs) {
    auto d = std::make_shared<Dict>();
    for (auto& [key, value] : args.kwargs) d->set(Value::string(key), std::move(value));
    scope->vars["kwargs"] = Value::dict(std::move(d));
  } else if (!args.kwargs.empty()) {
    for (const auto& kw : args.kwargs) {
      if (kw.first == "caller") {
        raise("macro '", name, "' was invoked with two values for the special caller argument");
      }
    }
    raise("macro '", name, "' takes no keyword argument '", args.kwargs[0].first, "'");
  }
  if (def.uses_varargs) {
    std::vector<Value> rest;
    for (size_t k = num_params; k < args.args.size(); ++k) rest.push_back(args.args[k]);
    scope->vars["varargs"] = Value::list(std::move(rest), true);
  } else if (args.args.size() > num_params) {
    raise("macro '", name, "' takes not more than ", num_params, " argument(s)");
  }
  ++call_depth_;
  std::string buf;
  try {
    exec_body(def.body, scope, buf);
  } catch (...) {
    --call_depth_;
    throw;
  }
  --call_depth_;
  return Value::string(std::move(buf));
}

void Evaluator::exec_call_block(const Stmt& s, const ScopePtr& scope, std::string& out) {
  const Expr& call_expr = *s.expr;
  Value callee = eval(*call_expr.args[0], scope);
  CallArgs args;
  eval_args(call_expr, 1, scope, &args);
  auto fn = std::make_shared<Function>();
  fn->name = "caller";
  fn->kind = FunctionKind::kMacro;
  std::weak_ptr<Scope> closure = scope;
  const Stmt* d = &s;
  fn->call = [d, closure](Evaluator& ev, CallArgs& a) {
    return ev.call_macro(*d, "caller", closure, a);
  };
  args.kwargs.emplace_back("caller", Value::function(std::move(fn)));
  Value result;
  try {
    result = call(callee, args);
  } catch (RenderError& e) {
    e.set_pos(call_expr.pos);
    throw;
  }
  append(out, to_str(result));
}

Value Evaluator::call(const Value& callee, CallArgs& args) {
  if (callee.is_function()) return callee.fn().call(*this, args);
  if (callee.is_undefined()) fail_undefined(callee);
  raise("TypeError: '", type_name(callee), "' object is not callable");
}

Value Evaluator::call_filter(const std::string& name, const Value& input, CallArgs& args) {
  return apply_filter(*this, name, input, args);
}

bool Evaluator::call_test(const std::string& name, const Value& input, CallArgs& args) {
  return apply_test(*this, name, input, args);
}

Value Evaluator::lookup(const std::string& name, const ScopePtr& scope) {
  for (const Scope* s = scope.get(); s != nullptr; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  if (auto g = get_global(name)) return *g;
  return Value::undefined("'" + name + "' is undefined");
}

void Evaluator::assign(const Expr& target, const Value& value, const ScopePtr& scope) {
  switch (target.kind) {
    case ExprKind::kName:
      scope->vars[target.name] = value;
      return;
    case ExprKind::kNsRef: {
      Value ns = lookup(target.name, scope);
      if (!ns.is_namespace()) raise("cannot assign attribute on non-namespace object");
      ns.ns().set(target.attr, value);
      return;
    }
    case ExprKind::kTuple: {
      std::vector<Value> items = iterate(value);
      size_t n = target.args.size();
      if (items.size() < n) {
        raise("ValueError: not enough values to unpack (expected ", n, ", got ", items.size(), ")");
      }
      if (items.size() > n) raise("ValueError: too many values to unpack (expected ", n, ")");
      for (size_t k = 0; k < n; ++k) assign(*target.args[k], items[k], scope);
      return;
    }
    default:
      raise("cannot assign to this expression");
  }
}

}  // namespace pagoda::jinja
