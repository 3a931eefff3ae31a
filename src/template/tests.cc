// jinja2's built-in tests (`x is defined`, `x is divisibleby 3`, ...), with Python's type rules:
// bool counts as a number, undefined is iterable and a sequence, strings and dicts are sequences.
#include <unordered_map>

#include "template/evaluator.h"
#include "template/text.h"

namespace pagoda::jinja {
namespace {

using TestFn = bool (*)(Evaluator&, const Value&, CallArgs&);

const Value& one_arg(const std::string& name, CallArgs& a) {
  if (a.args.size() != 1 || !a.kwargs.empty()) {
    raise("TypeError: test '", name, "' takes exactly one argument");
  }
  return a.args[0];
}

void no_args(const std::string& name, CallArgs& a) {
  if (!a.args.empty() || !a.kwargs.empty()) {
    raise("TypeError: test '", name, "' takes no arguments");
  }
}

bool t_defined(Evaluator&, const Value& v, CallArgs& a) {
  no_args("defined", a);
  return !v.is_undefined();
}
bool t_undefined(Evaluator&, const Value& v, CallArgs& a) {
  no_args("undefined", a);
  return v.is_undefined();
}
bool t_none(Evaluator&, const Value& v, CallArgs& a) {
  no_args("none", a);
  return v.is_none();
}
bool t_boolean(Evaluator&, const Value& v, CallArgs& a) {
  no_args("boolean", a);
  return v.is_bool();
}
bool t_true(Evaluator&, const Value& v, CallArgs& a) {
  no_args("true", a);
  return v.is_bool() && v.b();
}
bool t_false(Evaluator&, const Value& v, CallArgs& a) {
  no_args("false", a);
  return v.is_bool() && !v.b();
}
bool t_integer(Evaluator&, const Value& v, CallArgs& a) {
  no_args("integer", a);
  return v.is_int();
}
bool t_float(Evaluator&, const Value& v, CallArgs& a) {
  no_args("float", a);
  return v.is_float();
}
bool t_number(Evaluator&, const Value& v, CallArgs& a) {
  no_args("number", a);
  return v.is_number();
}
bool t_string(Evaluator&, const Value& v, CallArgs& a) {
  no_args("string", a);
  return v.is_string();
}
bool t_mapping(Evaluator&, const Value& v, CallArgs& a) {
  no_args("mapping", a);
  return v.is_dict();
}
bool t_sequence(Evaluator&, const Value& v, CallArgs& a) {
  no_args("sequence", a);
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_iterable(Evaluator&, const Value& v, CallArgs& a) {
  no_args("iterable", a);
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined() || v.is_generator() ||
         v.is_loop();
}
bool t_callable(Evaluator&, const Value& v, CallArgs& a) {
  no_args("callable", a);
  return v.is_function() || v.is_loop() || v.is_undefined();
}
bool t_escaped(Evaluator&, const Value& v, CallArgs& a) {
  no_args("escaped", a);
  return v.is_markup();
}
bool t_lower(Evaluator&, const Value& v, CallArgs& a) {
  no_args("lower", a);
  return py_islower(to_str(v));
}
bool t_upper(Evaluator&, const Value& v, CallArgs& a) {
  no_args("upper", a);
  return py_isupper(to_str(v));
}
bool t_odd(Evaluator& ev, const Value& v, CallArgs& a) {
  no_args("odd", a);
  return equals(binary_op(ev, "%", v, Value::integer(2)), Value::integer(1));
}
bool t_even(Evaluator& ev, const Value& v, CallArgs& a) {
  no_args("even", a);
  return equals(binary_op(ev, "%", v, Value::integer(2)), Value::integer(0));
}
bool t_divisibleby(Evaluator& ev, const Value& v, CallArgs& a) {
  return equals(binary_op(ev, "%", v, one_arg("divisibleby", a)), Value::integer(0));
}
bool t_sameas(Evaluator&, const Value& v, CallArgs& a) {
  const Value& other = one_arg("sameas", a);
  if (v.kind() != other.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::kNone:
    case Value::Kind::kUndefined:
      return v.is_none();
    case Value::Kind::kBool:
      return v.b() == other.b();
    case Value::Kind::kInt:
      return v.i() == other.i() && v.i() >= -5 && v.i() <= 256;  // CPython's cached ints
    case Value::Kind::kString:
      return v.s() == other.s();
    case Value::Kind::kFloat:
      return false;
    default:
      return v.identity() == other.identity();
  }
}
bool t_in(Evaluator&, const Value& v, CallArgs& a) { return contains(one_arg("in", a), v); }
bool t_eq(Evaluator&, const Value& v, CallArgs& a) { return equals(v, one_arg("eq", a)); }
bool t_ne(Evaluator&, const Value& v, CallArgs& a) { return !equals(v, one_arg("ne", a)); }
bool t_lt(Evaluator&, const Value& v, CallArgs& a) {
  return compare(v, one_arg("lt", a), CmpOp::kLt);
}
bool t_le(Evaluator&, const Value& v, CallArgs& a) {
  return compare(v, one_arg("le", a), CmpOp::kLe);
}
bool t_gt(Evaluator&, const Value& v, CallArgs& a) {
  return compare(v, one_arg("gt", a), CmpOp::kGt);
}
bool t_ge(Evaluator&, const Value& v, CallArgs& a) {
  return compare(v, one_arg("ge", a), CmpOp::kGe);
}
bool t_filter(Evaluator&, const Value& v, CallArgs& a) {
  no_args("filter", a);
  return v.is_string() && has_filter(v.s());
}
bool t_test(Evaluator&, const Value& v, CallArgs& a) {
  no_args("test", a);
  return v.is_string() && has_test(v.s());
}

const std::unordered_map<std::string, TestFn>& tests() {
  static const auto* table = new std::unordered_map<std::string, TestFn>{
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"sequence", t_sequence},
      {"iterable", t_iterable},
      {"callable", t_callable},
      {"escaped", t_escaped},
      {"lower", t_lower},
      {"upper", t_upper},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"sameas", t_sameas},
      {"in", t_in},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"filter", t_filter},
      {"test", t_test},
  };
  return *table;
}

}  // namespace

bool has_test(const std::string& name) { return tests().count(name) > 0; }

bool apply_test(Evaluator& ev, const std::string& name, const Value& input, CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) raise("no test named '", name, "'");
  return it->second(ev, input, args);
}

}  // namespace pagoda::jinja
