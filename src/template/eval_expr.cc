// The evaluator, part 2: expressions, attribute and item lookup (jinja2's getattr/getitem rules
// in its sandbox), loop attributes, call arguments and builtin parameter binding (see
// evaluator.h).
#include <algorithm>

#include "template/evaluator.h"
#include "template/text.h"

namespace pagoda::jinja {
namespace {

std::string fingerprint(const Value& v) {
  try {
    return hash_key(v);
  } catch (const RenderError&) {
    return "r" + repr(v);
  }
}

// loop.index, loop.first, ..., loop.cycle() and loop.changed() of a for loop.
Value loop_attribute(const Value& obj, const std::string& name) {
  LoopState& l = obj.loop();
  int64_t n = static_cast<int64_t>(l.items->size());
  int64_t i = l.index0;
  if (name == "index") return Value::integer(i + 1);
  if (name == "index0") return Value::integer(i);
  if (name == "revindex") return Value::integer(n - i);
  if (name == "revindex0") return Value::integer(n - i - 1);
  if (name == "first") return Value::boolean(i == 0);
  if (name == "last") return Value::boolean(i == n - 1);
  if (name == "length") return Value::integer(n);
  if (name == "depth") return Value::integer(1);
  if (name == "depth0") return Value::integer(0);
  if (name == "previtem") {
    return i > 0 ? (*l.items)[i - 1] : Value::undefined("there is no previous item");
  }
  if (name == "nextitem") {
    return i + 1 < n ? (*l.items)[i + 1] : Value::undefined("there is no next item");
  }
  if (name == "cycle" || name == "changed") {
    auto fn = std::make_shared<Function>();
    fn->name = "loop." + name;
    fn->depth = l.depth + 1;
    Value self = obj;
    if (name == "cycle") {
      fn->call = [self](Evaluator&, CallArgs& args) {
        if (args.args.empty()) raise("TypeError: no items for cycling given");
        size_t k = static_cast<size_t>(self.loop().index0) % args.args.size();
        return args.args[k];
      };
    } else {
      fn->call = [self](Evaluator&, CallArgs& args) {
        std::string key;
        for (const Value& v : args.args) key += fingerprint(v) + "\x1f";
        LoopState& st = self.loop();
        bool changed = !st.changed_called || key != st.last_changed;
        st.changed_called = true;
        st.last_changed = std::move(key);
        return Value::boolean(changed);
      };
    }
    return Value::function(std::move(fn));
  }
  return Value::undefined("'jinja2.runtime.LoopContext object' has no attribute " + py_repr(name));
}

}  // namespace

void Evaluator::eval_args(const Expr& e, size_t first, const ScopePtr& scope, CallArgs* out) {
  for (size_t k = first; k < e.args.size(); ++k) out->args.push_back(eval(*e.args[k], scope));
  for (const auto& [key, value] : e.kwargs) out->kwargs.emplace_back(key, eval(*value, scope));
  if (e.dyn_args) {
    for (Value& v : iterate(eval(*e.dyn_args, scope))) out->args.push_back(std::move(v));
  }
  if (e.dyn_kwargs) {
    Value d = eval(*e.dyn_kwargs, scope);
    if (!d.is_dict()) raise("TypeError: argument after ** must be a mapping, not ", type_name(d));
    for (const auto& [key, value] : d.dict().items) {
      if (!key.is_string()) raise("TypeError: keywords must be strings");
      out->kwargs.emplace_back(key.s(), value);
    }
  }
}

Value Evaluator::eval_filter(const Expr& e, const ScopePtr& scope, const Value* block_input) {
  Value input;
  if (e.args[0] == nullptr) {
    input = *block_input;
  } else if (block_input != nullptr && e.args[0]->kind == ExprKind::kFilter) {
    input = eval_filter(*e.args[0], scope, block_input);
  } else {
    input = eval(*e.args[0], scope);
  }
  CallArgs args;
  eval_args(e, 1, scope, &args);
  try {
    return call_filter(e.name, input, args);
  } catch (RenderError& err) {
    err.set_pos(e.pos);
    throw;
  }
}

// Slices are plain Python subscripts in jinja2 (not its getitem), so misuse raises.
Value Evaluator::eval_slice(const Value& obj, const Expr& slice, const ScopePtr& scope) {
  std::optional<int64_t> parts[3];
  bool valid = true;
  for (int k = 0; k < 3; ++k) {
    if (slice.args[k] == nullptr) continue;
    Value v = eval(*slice.args[k], scope);
    if (v.is_integral()) {
      parts[k] = v.i();
    } else if (!v.is_none()) {
      valid = false;
    }
  }
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) raise("TypeError: unhashable type: 'slice'");
  if (!obj.is_list() && !obj.is_string()) {
    raise("TypeError: '", type_name(obj), "' object is not subscriptable");
  }
  if (!valid) {
    raise("TypeError: slice indices must be integers or None or have an __index__ method");
  }
  return slice_value(*this, obj, parts[0], parts[1], parts[2]);
}

Value Evaluator::eval(const Expr& e, const ScopePtr& scope) {
  FrameGuard guard(this);
  try {
    charge(1);
    return eval_inner(e, scope);
  } catch (RenderError& err) {
    err.set_pos(e.pos);
    throw;
  }
}

Value Evaluator::eval_concat(const Expr& e, const ScopePtr& scope) {
  std::string s;
  for (const auto& a : e.args) {
    std::string part = to_str(eval(*a, scope));
    check_size(s.size() + part.size());
    s += part;
  }
  charge_bytes(s.size());
  return Value::string(std::move(s));
}

// Python's chained comparison: a < b < c is (a < b) and (b < c), each operand evaluated once.
Value Evaluator::eval_compare(const Expr& e, const ScopePtr& scope) {
  Value left = eval(*e.args[0], scope);
  for (size_t k = 0; k < e.ops.size(); ++k) {
    Value right = eval(*e.args[k + 1], scope);
    const std::string& op = e.ops[k];
    bool ok;
    if (op == "==") {
      ok = equals(left, right);
    } else if (op == "!=") {
      ok = !equals(left, right);
    } else if (op == "in") {
      ok = contains(right, left);
    } else if (op == "notin") {
      ok = !contains(right, left);
    } else {
      CmpOp cmp = op == "<"    ? CmpOp::kLt
                  : op == "<=" ? CmpOp::kLe
                  : op == ">"  ? CmpOp::kGt
                               : CmpOp::kGe;
      ok = compare(left, right, cmp);
    }
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Evaluator::eval_inner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::kConst:
      return e.value;
    case ExprKind::kName:
      return lookup(e.name, scope);
    case ExprKind::kNsRef:
    case ExprKind::kSlice:
      raise("a slice or namespace reference is not allowed here");
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a, scope));
      return Value::list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      auto d = std::make_shared<Dict>();
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k], scope);
        d->set(key, eval(*e.args[k + 1], scope));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetAttr:
      return getattr(eval(*e.args[0], scope), e.name);
    case ExprKind::kGetItem: {
      Value obj = eval(*e.args[0], scope);
      if (e.args[1]->kind == ExprKind::kSlice) return eval_slice(obj, *e.args[1], scope);
      return getitem(obj, eval(*e.args[1], scope));
    }
    case ExprKind::kCall: {
      Value callee = eval(*e.args[0], scope);
      CallArgs args;
      eval_args(e, 1, scope, &args);
      return call(callee, args);
    }
    case ExprKind::kFilter:
      return eval_filter(e, scope, nullptr);
    case ExprKind::kTest: {
      Value input = eval(*e.args[0], scope);
      CallArgs args;
      eval_args(e, 1, scope, &args);
      return Value::boolean(call_test(e.name, input, args));
    }
    case ExprKind::kNeg:
    case ExprKind::kPos:
      return unary_minus(eval(*e.args[0], scope), e.kind == ExprKind::kNeg);
    case ExprKind::kNot:
      return Value::boolean(!truthy(eval(*e.args[0], scope)));
    case ExprKind::kBinary: {
      Value a = eval(*e.args[0], scope);
      Value b = eval(*e.args[1], scope);
      return binary_op(*this, e.name, a, b);
    }
    case ExprKind::kAnd: {
      Value a = eval(*e.args[0], scope);
      return truthy(a) ? eval(*e.args[1], scope) : a;
    }
    case ExprKind::kOr: {
      Value a = eval(*e.args[0], scope);
      return truthy(a) ? a : eval(*e.args[1], scope);
    }
    case ExprKind::kConcat:
      return eval_concat(e, scope);
    case ExprKind::kCompare:
      return eval_compare(e, scope);
    case ExprKind::kCondExpr:
      if (truthy(eval(*e.args[0], scope))) return eval(*e.args[1], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return Value::undefined(
          "the inline if-expression evaluated to false and no else section was defined");
  }
  raise("internal error: unknown expression");
}

Value Evaluator::getattr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  auto missing = [&] {
    return Value::undefined(py_repr(object_type_repr(obj)) + " has no attribute " + py_repr(name));
  };
  if (name.size() > 4 && name.compare(0, 2, "__") == 0 &&
      name.compare(name.size() - 2, 2, "__") == 0) {
    return Value::undefined("access to attribute " + py_repr(name) + " of " +
                                py_repr(type_name(obj)) + " object is unsafe.",
                            true);
  }
  if (auto method = get_method(obj, name)) return *method;
  switch (obj.kind()) {
    case Value::Kind::kDict: {
      const Value* v = obj.dict().find(std::string_view(name));
      return v != nullptr ? *v : missing();
    }
    case Value::Kind::kNamespace: {
      const Value* v = obj.ns().find(name);
      return v != nullptr ? *v : missing();
    }
    case Value::Kind::kList:
      if (obj.list().is_group && (name == "grouper" || name == "list")) {
        return obj.list().items[name == "grouper" ? 0 : 1];
      }
      return missing();
    case Value::Kind::kLoop:
      return loop_attribute(obj, name);
    default:
      return missing();
  }
}

Value Evaluator::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  auto no_element = [&] {
    if (key.is_string()) {
      return Value::undefined(py_repr(object_type_repr(obj)) + " has no attribute " +
                              py_repr(key.s()));
    }
    return Value::undefined(object_type_repr(obj) + " has no element " + repr(key));
  };
  switch (obj.kind()) {
    case Value::Kind::kDict: {
      const Value* v = obj.dict().find(key);
      if (v != nullptr) return *v;
      break;
    }
    case Value::Kind::kList:
    case Value::Kind::kString: {
      if (!key.is_integral()) break;
      int64_t n = obj.is_list() ? static_cast<int64_t>(obj.list().items.size())
                                : static_cast<int64_t>(num_code_points(obj.s()));
      int64_t i = key.i();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return no_element();
      if (obj.is_list()) return obj.list().items[static_cast<size_t>(i)];
      std::u32string cps = decode_utf8(obj.s());
      std::string ch;
      append_utf8(ch, cps[static_cast<size_t>(i)]);
      return Value::string(std::move(ch));
    }
    default:
      break;
  }
  if (key.is_string()) {
    Value v = getattr(obj, key.s());
    return v;
  }
  return no_element();
}

Params::Params(const std::string& fn, CallArgs& args, std::vector<std::string> names,
               size_t required)
    : fn_(fn), names_(std::move(names)), values_(names_.size()) {
  if (args.args.size() > names_.size()) {
    raise("TypeError: ", fn_, "() takes at most ", names_.size(), " argument(s) (",
          args.args.size(), " given)");
  }
  for (size_t k = 0; k < args.args.size(); ++k) values_[k] = args.args[k];
  for (auto& [key, value] : args.kwargs) {
    auto it = std::find(names_.begin(), names_.end(), key);
    if (it == names_.end())
      raise("TypeError: ", fn_, "() got an unexpected keyword argument '", key, "'");
    size_t k = static_cast<size_t>(it - names_.begin());
    if (values_[k].has_value()) {
      raise("TypeError: ", fn_, "() got multiple values for argument '", key, "'");
    }
    values_[k] = value;
  }
  for (size_t k = 0; k < required; ++k) {
    if (!values_[k].has_value()) {
      raise("TypeError: ", fn_, "() missing required argument '", names_[k], "'");
    }
  }
}

int64_t Params::get_int(size_t i, int64_t fallback) const {
  if (!has(i) || get(i).is_none()) return fallback;
  const Value& v = get(i);
  if (!v.is_integral()) {
    raise("TypeError: ", fn_, "() argument '", names_[i], "' must be an integer, not ",
          type_name(v));
  }
  return v.i();
}

bool Params::get_bool(size_t i, bool fallback) const { return has(i) ? truthy(get(i)) : fallback; }

std::string Params::get_str(size_t i, const std::string& fallback) const {
  return has(i) ? to_str(get(i)) : fallback;
}

}  // namespace pagoda::jinja
