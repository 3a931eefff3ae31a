// Arithmetic, membership and slicing with Python's semantics (floor division and modulo signs,
// int/float mixing, str and list repetition and concatenation). Integers are 64-bit: results that
// Python would grow into big integers fail with an overflow error instead.
#include <cmath>
#include <limits>

#include "template/evaluator.h"
#include "template/text.h"

namespace pagoda::jinja {
namespace {

[[noreturn]] void overflow() { raise("OverflowError: integer overflow (integers are 64-bit)"); }

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  raise("TypeError: unsupported operand type(s) for ", op, ": '", type_name(a), "' and '",
        type_name(b), "'");
}

int64_t add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}
int64_t sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}
int64_t mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

Value int_pow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 0) raise("ZeroDivisionError: 0.0 cannot be raised to a negative power");
    return Value::number(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  }
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) result = mul(result, base);
    exp >>= 1;
    if (exp > 0) base = mul(base, base);
  }
  return Value::integer(result);
}

Value int_op(const std::string& op, int64_t a, int64_t b) {
  if (op == "+") return Value::integer(add(a, b));
  if (op == "-") return Value::integer(sub(a, b));
  if (op == "*") return Value::integer(mul(a, b));
  if (op == "/") {
    if (b == 0) raise("ZeroDivisionError: division by zero");
    return Value::number(static_cast<double>(a) / static_cast<double>(b));
  }
  if (op == "//") {
    if (b == 0) raise("ZeroDivisionError: integer division or modulo by zero");
    if (a == std::numeric_limits<int64_t>::min() && b == -1) overflow();
    int64_t q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0))) --q;
    return Value::integer(q);
  }
  if (op == "%") {
    if (b == 0) raise("ZeroDivisionError: integer modulo by zero");
    if (b == -1) return Value::integer(0);
    int64_t m = a % b;
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    return Value::integer(m);
  }
  return int_pow(a, b);  // "**"
}

Value float_op(const std::string& op, double a, double b) {
  if (op == "+") return Value::number(a + b);
  if (op == "-") return Value::number(a - b);
  if (op == "*") return Value::number(a * b);
  if (op == "/") {
    if (b == 0) raise("ZeroDivisionError: float division by zero");
    return Value::number(a / b);
  }
  if (op == "//" || op == "%") {
    if (b == 0) {
      raise("ZeroDivisionError: ", op == "%" ? "float modulo" : "float floor division by zero");
    }
    // CPython's float_divmod.
    double mod = std::fmod(a, b);
    double div = (a - mod) / b;
    if (mod != 0) {
      if ((b < 0) != (mod < 0)) {
        mod += b;
        div -= 1.0;
      }
    } else {
      mod = std::copysign(0.0, b);
    }
    if (op == "%") return Value::number(mod);
    double floordiv;
    if (div != 0) {
      floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
      floordiv = std::copysign(0.0, a / b);
    }
    return Value::number(floordiv);
  }
  // "**"
  if (a == 0 && b < 0) raise("ZeroDivisionError: 0.0 cannot be raised to a negative power");
  if (a < 0 && b != std::floor(b) && std::isfinite(b)) {
    raise("ValueError: negative number cannot be raised to a fractional power");
  }
  double r = std::pow(a, b);
  if (std::isinf(r) && std::isfinite(a) && std::isfinite(b)) {
    raise("OverflowError: (34, 'Numerical result out of range')");
  }
  return Value::number(r);
}

Value repeat(Evaluator& ev, const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string() && (n == 0 || seq.s().empty())) return Value::string("");
  if (seq.is_list() && (n == 0 || seq.list().items.empty())) {
    return Value::list({}, seq.is_tuple());
  }
  if (seq.is_string()) {
    const std::string& s = seq.s();
    if (!s.empty() && static_cast<uint64_t>(n) > (uint64_t{1} << 40) / s.size()) {
      ev.check_size(SIZE_MAX);
    }
    size_t total = s.size() * static_cast<size_t>(n);
    ev.check_size(total);
    ev.charge_bytes(total);
    std::string out;
    out.reserve(total);
    for (int64_t k = 0; k < n; ++k) out += s;
    return seq.is_markup() ? Value::markup(std::move(out)) : Value::string(std::move(out));
  }
  const auto& items = seq.list().items;
  if (!items.empty() && static_cast<uint64_t>(n) > (uint64_t{1} << 40) / items.size()) {
    ev.charge(std::numeric_limits<int64_t>::max() / 2);
  }
  int64_t total = static_cast<int64_t>(items.size()) * n;
  ev.charge(total);
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(total));
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), seq.is_tuple());
}

}  // namespace

[[noreturn]] void fail_undefined(const Value& v) { raise(v.s()); }

Value unary_minus(const Value& v, bool negate) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_integral()) {
    if (!negate) return Value::integer(v.i());
    if (v.i() == std::numeric_limits<int64_t>::min()) overflow();
    return Value::integer(-v.i());
  }
  if (v.is_float()) return Value::number(negate ? -v.f() : v.f());
  raise("TypeError: bad operand type for unary ", negate ? "-" : "+", ": '", type_name(v), "'");
}

Value binary_op(Evaluator& ev, const std::string& op, const Value& a, const Value& b) {
  // str.__mod__ takes any right operand, undefined included (printed as "").
  if (op == "%" && a.is_string()) {
    if (!a.is_markup()) return Value::string(percent_format(ev, a.s(), b));
    // Markup.__mod__ escapes what it substitutes (numbers stay numbers for %d and the like).
    auto escape = [&](const Value& v) {
      CallArgs none;
      return v.is_number() ? v : apply_filter(ev, "escape", v, none);
    };
    Value args;
    if (b.is_tuple()) {
      std::vector<Value> items;
      for (const Value& v : b.list().items) items.push_back(escape(v));
      args = Value::list(std::move(items), true);
    } else if (b.is_dict()) {
      auto d = std::make_shared<Dict>();
      for (const auto& [key, value] : b.dict().items) d->set(key, escape(value));
      args = Value::dict(std::move(d));
    } else if (b.is_list() || b.is_undefined()) {
      args = b;  // a mapping-like argument stays one (unused, it is no error)
    } else {
      args = escape(b);
    }
    return Value::markup(percent_format(ev, a.s(), args));
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return int_op(op, a.i(), b.i());
    return float_op(op, a.f(), b.f());
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.is_markup() || b.is_markup()) {
        // Markup.__add__ / __radd__ escape the plain str operand.
        CallArgs none1, none2;
        Value x = apply_filter(ev, "escape", a, none1);
        Value y = apply_filter(ev, "escape", b, none2);
        ev.check_size(x.s().size() + y.s().size());
        return Value::markup(x.s() + y.s());
      }
      ev.check_size(a.s().size() + b.s().size());
      ev.charge_bytes(a.s().size() + b.s().size());
      return Value::string(a.s() + b.s());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      const auto& x = a.list().items;
      const auto& y = b.list().items;
      ev.charge(static_cast<int64_t>(x.size() + y.size()) / 8);
      std::vector<Value> out;
      out.reserve(x.size() + y.size());
      out.insert(out.end(), x.begin(), x.end());
      out.insert(out.end(), y.begin(), y.end());
      return Value::list(std::move(out), a.is_tuple());
    }
    if (a.is_string() || a.is_list()) {
      raise("TypeError: can only concatenate ", type_name(a), " (not \"", type_name(b), "\") to ",
            type_name(a));
    }
    unsupported(op, a, b);
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && b.is_integral()) return repeat(ev, a, b.i());
    if ((b.is_string() || b.is_list()) && a.is_integral()) return repeat(ev, b, a.i());
    if ((a.is_string() || a.is_list()) || (b.is_string() || b.is_list())) {
      raise("TypeError: can't multiply sequence by non-int of type '",
            type_name(a.is_string() || a.is_list() ? b : a), "'");
    }
    unsupported(op, a, b);
  }
  unsupported(op == "**" ? "** or pow()" : op, a, b);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        raise("TypeError: 'in <string>' requires string as left operand, not ", type_name(item));
      }
      return container.s().find(item.s()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.list().items) {
        if (equals(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return container.dict().find(item) != nullptr;
    case Value::Kind::kGenerator: {
      Generator& g = container.gen();
      while (g.pos < g.items.size()) {
        if (equals(g.items[g.pos++], item)) return true;
      }
      return false;
    }
    default:
      raise("TypeError: argument of type '", type_name(container), "' is not iterable");
  }
}

Value slice_value(Evaluator& ev, const Value& obj, const std::optional<int64_t>& start_in,
                  const std::optional<int64_t>& stop_in, const std::optional<int64_t>& step_in) {
  if (!obj.is_list() && !obj.is_string()) {
    return Value::undefined(object_type_repr(obj) + " has no element slice");
  }
  int64_t step = step_in.value_or(1);
  if (step == 0) raise("ValueError: slice step cannot be zero");
  if (step < -std::numeric_limits<int64_t>::max()) step = -std::numeric_limits<int64_t>::max();
  std::u32string cps;
  int64_t len;
  if (obj.is_string()) {
    cps = decode_utf8(obj.s());
    len = static_cast<int64_t>(cps.size());
  } else {
    len = static_cast<int64_t>(obj.list().items.size());
  }
  auto adjust = [&](const std::optional<int64_t>& v, int64_t fallback) {
    if (!v) return fallback;
    int64_t x = *v;
    if (x < 0) {
      x += len;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= len) {
      x = step < 0 ? len - 1 : len;
    }
    return x;
  };
  int64_t start = adjust(start_in, step < 0 ? len - 1 : 0);
  int64_t stop = adjust(stop_in, step < 0 ? -1 : len);
  int64_t count = 0;
  if (step > 0 && start < stop) count = (stop - start - 1) / step + 1;
  if (step < 0 && stop < start) count = (start - stop - 1) / (-step) + 1;
  ev.charge(count / 16);
  if (obj.is_string()) {
    std::u32string out;
    out.reserve(static_cast<size_t>(count));
    for (int64_t k = 0; k < count; ++k) out.push_back(cps[static_cast<size_t>(start + k * step)]);
    return Value::string(encode_utf8(out));
  }
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(count));
  const auto& items = obj.list().items;
  for (int64_t k = 0; k < count; ++k) out.push_back(items[static_cast<size_t>(start + k * step)]);
  return Value::list(std::move(out), obj.is_tuple());
}

}  // namespace pagoda::jinja
