// jinja2's filters over strings and numbers, and the filter table (sequence filters are in
// filters_seq.cc). `tojson` is the one Hugging Face transformers installs:
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
#include <cmath>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>

#include "core/markup.h"
#include "template/filter_util.h"
#include "template/text.h"

namespace pagoda::jinja {
namespace {

// str methods of a Markup return Markup (markupsafe wraps them).
Value same_kind(const Value& v, std::string s) {
  return v.is_markup() ? Value::markup(std::move(s)) : Value::string(std::move(s));
}

Value f_abs(Evaluator&, const Value& v, CallArgs& a) {
  Params p("abs", a, {}, 0);
  if (v.is_integral()) {
    if (v.i() == INT64_MIN) raise("OverflowError: integer overflow (integers are 64-bit)");
    return Value::integer(v.i() < 0 ? -v.i() : v.i());
  }
  if (v.is_float()) return Value::number(std::fabs(v.f()));
  raise("TypeError: bad operand type for abs(): '", type_name(v), "'");
}

Value f_attr(Evaluator& ev, const Value& v, CallArgs& a) {
  Params p("attr", a, {"name"}, 1);
  std::string name = p.get_str(0, "");
  if (v.is_dict() || v.is_list() || v.is_string()) {
    if (auto m = get_method(v, name)) return *m;
    return Value::undefined(py_repr(object_type_repr(v)) + " has no attribute " + py_repr(name));
  }
  return ev.getattr(v, name);
}

Value f_capitalize(Evaluator&, const Value& v, CallArgs& a) {
  Params p("capitalize", a, {}, 0);
  return same_kind(v, py_capitalize(to_str(v)));
}

Value f_center(Evaluator& ev, const Value& v, CallArgs& a) {
  Params p("center", a, {"width"}, 0);
  std::string s = to_str(v);
  int64_t width = p.get_int(0, 80);
  int64_t len = static_cast<int64_t>(num_code_points(s));
  if (width <= len) return same_kind(v, s);
  ev.check_size(static_cast<size_t>(width));
  int64_t pad = width - len;
  int64_t left = pad / 2 + (pad & width & 1);
  return same_kind(v, std::string(left, ' ') + s + std::string(pad - left, ' '));
}

Value f_default(Evaluator&, const Value& v, CallArgs& a) {
  Params p("default", a, {"default_value", "boolean"}, 0);
  if (v.is_undefined() || (p.get_bool(1, false) && !truthy(v))) {
    return p.get_or(0, Value::string(""));
  }
  return v;
}

Value f_escape(Evaluator& ev, const Value& v, CallArgs& a) {
  Params p("escape", a, {}, 0);
  if (v.is_markup()) return v;
  std::string s = escape_markup(to_str(v));
  ev.check_size(s.size());
  return Value::markup(std::move(s));
}

Value f_forceescape(Evaluator& ev, const Value& v, CallArgs& a) {
  Params p("forceescape", a, {}, 0);
  std::string s = escape_markup(to_str(v));
  ev.check_size(s.size());
  return Value::markup(std::move(s));
}

Value f_float(Evaluator&, const Value& v, CallArgs& a) {
  Params p("float", a, {"default"}, 0);
  Value fallback = p.get_or(0, Value::number(0.0));
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_number()) return Value::number(v.f());
  double d = 0;
  if (v.is_string() && parse_py_float(v.s(), &d)) return Value::number(d);
  return fallback;
}

Value f_format(Evaluator& ev, const Value& v, CallArgs& a) {
  if (!a.args.empty() && !a.kwargs.empty()) {
    raise("can't handle positional and keyword arguments at the same time");
  }
  Value args;
  if (!a.kwargs.empty()) {
    auto d = std::make_shared<Dict>();
    for (auto& [key, value] : a.kwargs) d->set(Value::string(key), value);
    args = Value::dict(std::move(d));
  } else {
    args = Value::list(a.args, true);
  }
  return Value::string(percent_format(ev, to_str(v), args));
}

Value f_indent(Evaluator& ev, const Value& v, CallArgs& a) {
  Params p("indent", a, {"width", "first", "blank"}, 0);
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string()) {
    raise("TypeError: unsupported operand type(s) for +=: '", type_name(v), "' and 'str'");
  }
  std::string indention;
  if (p.has(0) && p.get(0).is_string()) {
    indention = p.get(0).s();
  } else {
    int64_t width = p.get_int(0, 4);
    ev.check_size(static_cast<size_t>(std::max<int64_t>(width, 0)));
    indention = std::string(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
  }
  std::vector<std::string> lines = py_splitlines(v.s() + "\n", false);
  ev.check_size(v.s().size() + lines.size() * (indention.size() + 1));
  ev.charge_bytes(v.s().size());
  std::string rv;
  if (p.get_bool(2, false)) {
    for (size_t k = 0; k < lines.size(); ++k) {
      if (k > 0) rv += "\n" + indention;
      rv += lines[k];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) {
      rv += "\n";
      if (!lines[k].empty()) rv += indention;
      rv += lines[k];
    }
  }
  if (p.get_bool(1, false)) rv = indention + rv;
  return Value::string(std::move(rv));
}

Value f_int(Evaluator&, const Value& v, CallArgs& a) {
  Params p("int", a, {"default", "base"}, 0);
  Value fallback = p.get_or(0, Value::integer(0));
  int64_t base = p.get_int(1, 10);
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_integral()) return Value::integer(v.i());
  auto from_float = [&](double d) {
    if (std::isinf(d)) raise("OverflowError: cannot convert float infinity to integer");
    if (std::isnan(d)) return fallback;
    if (std::fabs(d) >= 9.2e18) raise("OverflowError: integer overflow (integers are 64-bit)");
    return Value::integer(static_cast<int64_t>(d));
  };
  if (v.is_float()) return from_float(v.f());
  if (v.is_string()) {
    int64_t n = 0;
    if (parse_py_int(v.s(), static_cast<int>(base), &n)) return Value::integer(n);
    double d = 0;
    if (parse_py_float(v.s(), &d)) {
      if (std::isinf(d)) return fallback;
      return from_float(d);
    }
  }
  return fallback;
}

Value f_lower(Evaluator&, const Value& v, CallArgs& a) {
  Params p("lower", a, {}, 0);
  return same_kind(v, to_lower(to_str(v)));
}

Value f_upper(Evaluator&, const Value& v, CallArgs& a) {
  Params p("upper", a, {}, 0);
  return same_kind(v, to_upper(to_str(v)));
}

Value f_title(Evaluator&, const Value& v, CallArgs& a) {
  Params p("title", a, {}, 0);
  return Value::string(jinja_title(to_str(v)));
}

Value f_replace(Evaluator& ev, const Value& v, CallArgs& a) {
  Params p("replace", a, {"old", "new", "count"}, 2);
  std::string s = to_str(v);
  ev.charge_bytes(s.size());
  return Value::string(py_replace(s, to_str(p.get(0)), to_str(p.get(1)), p.get_int(2, -1),
                                  static_cast<size_t>(ev.settings().max_output_bytes)));
}

double round_half_even_digits(double x, int64_t ndigits) {
  if (!std::isfinite(x) || ndigits > 330) return x;
  if (ndigits < -330) return 0.0 * x;
  if (ndigits >= 0) {
    // glibc prints the exactly rounded decimal (half-even on the binary value), as CPython's
    // round() does through dtoa.
    std::vector<char> buf(static_cast<size_t>(ndigits) + 400);
    std::snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(ndigits), x);
    return std::strtod(buf.data(), nullptr);
  }
  double p = std::pow(10.0, static_cast<double>(-ndigits));
  return std::nearbyint(x / p) * p;
}

Value f_round(Evaluator&, const Value& v, CallArgs& a) {
  Params p("round", a, {"precision", "method"}, 0);
  int64_t precision = p.get_int(0, 0);
  std::string method = p.get_str(1, "common");
  if (method != "common" && method != "ceil" && method != "floor") {
    raise("method must be common, ceil or floor");
  }
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) raise("TypeError: type ", type_name(v), " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_integral()) {
      int64_t n = v.i();
      if (precision >= 0) return Value::integer(n);
      if (precision < -18) return Value::integer(0);
      int64_t pw = 1;
      for (int64_t k = 0; k < -precision; ++k) pw *= 10;
      int64_t q = n / pw;
      int64_t r = n % pw;
      if (r < 0) {
        r += pw;
        --q;
      }
      if (2 * r > pw || (2 * r == pw && (q & 1))) ++q;
      int64_t out = 0;
      if (__builtin_mul_overflow(q, pw, &out)) raise("OverflowError: integer overflow");
      return Value::integer(out);
    }
    return Value::number(round_half_even_digits(v.f(), precision));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.f() * scale;
  double r = method == "ceil" ? std::ceil(x) : std::floor(x);
  return Value::number(r / scale);
}

Value f_safe(Evaluator&, const Value& v, CallArgs& a) {
  Params p("safe", a, {}, 0);
  return Value::markup(to_str(v));
}

Value f_string(Evaluator&, const Value& v, CallArgs& a) {
  Params p("string", a, {}, 0);
  return v.is_string() ? v : Value::string(to_str(v));
}

Value f_tojson(Evaluator& ev, const Value& v, CallArgs& a) {
  Params p("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"}, 0);
  JsonOptions o;
  o.ensure_ascii = p.get_bool(0, false);
  if (p.has(1) && !p.get(1).is_none()) {
    const Value& indent = p.get(1);
    o.has_indent = true;
    if (indent.is_string()) {
      o.indent = indent.s();
    } else if (indent.is_integral()) {
      int64_t n = std::max<int64_t>(indent.i(), 0);
      ev.check_size(static_cast<size_t>(n));
      o.indent = std::string(static_cast<size_t>(n), ' ');
    } else {
      raise("TypeError: can't multiply sequence by non-int of type '", type_name(indent), "'");
    }
    o.item_separator = ",";
  }
  if (p.has(2) && !p.get(2).is_none()) {
    std::vector<Value> seps = iterate(p.get(2));
    if (seps.size() != 2) raise("ValueError: separators must be a pair of strings");
    o.item_separator = to_str(seps[0]);
    o.key_separator = to_str(seps[1]);
  }
  o.sort_keys = p.get_bool(3, false);
  std::string out = to_json(v, o);
  ev.check_size(out.size());
  ev.charge_bytes(out.size());
  return Value::string(std::move(out));
}

Value f_trim(Evaluator&, const Value& v, CallArgs& a) {
  Params p("trim", a, {"chars"}, 0);
  if (p.has(0) && !p.get(0).is_none()) {
    std::string chars = to_str(p.get(0));
    return same_kind(v, py_strip(to_str(v), &chars, true, true));
  }
  return same_kind(v, py_strip(to_str(v), nullptr, true, true));
}

Value f_wordcount(Evaluator&, const Value& v, CallArgs& a) {
  Params p("wordcount", a, {}, 0);
  std::string s = to_str(v);
  int64_t count = 0;
  bool in_word = false;
  size_t pos = 0;
  while (pos < s.size()) {
    bool w = is_word_char(next_code_point(s, &pos));
    if (w && !in_word) ++count;
    in_word = w;
  }
  return Value::integer(count);
}

void add_string_filters(FilterTable* table) {
  table->emplace("abs", f_abs);
  table->emplace("attr", f_attr);
  table->emplace("capitalize", f_capitalize);
  table->emplace("center", f_center);
  table->emplace("d", f_default);
  table->emplace("default", f_default);
  table->emplace("e", f_escape);
  table->emplace("escape", f_escape);
  table->emplace("float", f_float);
  table->emplace("forceescape", f_forceescape);
  table->emplace("format", f_format);
  table->emplace("indent", f_indent);
  table->emplace("int", f_int);
  table->emplace("lower", f_lower);
  table->emplace("replace", f_replace);
  table->emplace("round", f_round);
  table->emplace("safe", f_safe);
  table->emplace("string", f_string);
  table->emplace("title", f_title);
  table->emplace("tojson", f_tojson);
  table->emplace("trim", f_trim);
  table->emplace("upper", f_upper);
  table->emplace("wordcount", f_wordcount);
}

const FilterTable& filters() {
  static const FilterTable* table = [] {
    auto* t = new FilterTable;
    add_string_filters(t);
    add_sequence_filters(t);
    return t;
  }();
  return *table;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) > 0; }

Value apply_filter(Evaluator& ev, const std::string& name, const Value& input, CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) raise("no filter named '", name, "'");
  return it->second(ev, input, args);
}

}  // namespace pagoda::jinja
