// Methods of str, dict, list and tuple values (`s.strip()`, `d.items()`, `l.index(x)`) and the
// global functions (range, namespace, dict, raise_exception, strftime_now, joiner). Methods that
// mutate a list or dict are refused the way jinja2's ImmutableSandboxedEnvironment refuses them.
#include <ctime>
#include <unordered_map>
#include <unordered_set>

#include "template/evaluator.h"
#include "template/text.h"

namespace pagoda::jinja {
namespace {

using MethodFn = Value (*)(Evaluator&, const Value&, CallArgs&);

Value bind(const Value& self, const std::string& name, MethodFn fn) {
  auto f = std::make_shared<Function>();
  f->name = name;
  f->kind = FunctionKind::kMethod;
  f->depth = self.depth() + 1;
  f->call = [self, fn](Evaluator& ev, CallArgs& args) { return fn(ev, self, args); };
  return Value::function(std::move(f));
}

Value unsupported_method(const Value& self, const std::string& name) {
  auto f = std::make_shared<Function>();
  std::string full = type_name(self) + "." + name;
  f->name = name;
  f->kind = FunctionKind::kMethod;
  f->call = [full](Evaluator&, CallArgs&) -> Value { raise(full, "() is not supported"); };
  return Value::function(std::move(f));
}

std::string arg_str(const std::string& fn, const Value& v) {
  if (!v.is_string()) {
    raise("TypeError: ", fn, "() argument must be str, not ", type_name(v));
  }
  return v.s();
}

// Code-point substring s[start:end] with Python's clamping, for the start/end arguments;
// nullopt when start lies past end (Python then answers False / 0).
std::optional<std::string> sub_range(const std::string& s, const Params& p, size_t first) {
  if (!p.has(first) && !p.has(first + 1)) return s;
  std::u32string cps = decode_utf8(s);
  int64_t len = static_cast<int64_t>(cps.size());
  int64_t start = p.get_int(first, 0);
  int64_t end = p.get_int(first + 1, len);
  if (start < 0) start = std::max<int64_t>(0, start + len);
  if (end < 0) end = std::max<int64_t>(0, end + len);
  end = std::min(end, len);
  if (start > end) return std::nullopt;
  return encode_utf8(std::u32string_view(cps).substr(start, end - start));
}

Value s_affix(const Value& self, CallArgs& a, const char* name, bool suffix) {
  Params p(name, a, {"prefix", "start", "end"}, 1);
  std::optional<std::string> range = sub_range(self.s(), p, 1);
  if (!range) return Value::boolean(false);
  const std::string& s = *range;
  std::vector<Value> options =
      p.get(0).is_tuple() ? p.get(0).list().items : std::vector<Value>{p.get(0)};
  for (const Value& o : options) {
    std::string affix = arg_str(name, o);
    if (affix.size() > s.size()) continue;
    if (suffix ? s.compare(s.size() - affix.size(), affix.size(), affix) == 0
               : s.compare(0, affix.size(), affix) == 0) {
      return Value::boolean(true);
    }
  }
  return Value::boolean(false);
}

Value s_startswith(Evaluator&, const Value& self, CallArgs& a) {
  return s_affix(self, a, "startswith", false);
}
Value s_endswith(Evaluator&, const Value& self, CallArgs& a) {
  return s_affix(self, a, "endswith", true);
}

Value strip_impl(const Value& self, CallArgs& a, const char* name, bool left, bool right) {
  Params p(name, a, {"chars"}, 0);
  if (p.has(0) && !p.get(0).is_none()) {
    std::string chars = arg_str(name, p.get(0));
    return Value::string(py_strip(self.s(), &chars, left, right));
  }
  return Value::string(py_strip(self.s(), nullptr, left, right));
}
Value s_strip(Evaluator&, const Value& self, CallArgs& a) {
  return strip_impl(self, a, "strip", true, true);
}
Value s_lstrip(Evaluator&, const Value& self, CallArgs& a) {
  return strip_impl(self, a, "lstrip", true, false);
}
Value s_rstrip(Evaluator&, const Value& self, CallArgs& a) {
  return strip_impl(self, a, "rstrip", false, true);
}

Value to_list(const std::vector<std::string>& parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (const auto& s : parts) items.push_back(Value::string(s));
  return Value::list(std::move(items));
}

Value split_impl(Evaluator& ev, const Value& self, CallArgs& a, bool reverse) {
  Params p(reverse ? "rsplit" : "split", a, {"sep", "maxsplit"}, 0);
  ev.charge_bytes(self.s().size());
  int64_t maxsplit = p.get_int(1, -1);
  if (p.has(0) && !p.get(0).is_none()) {
    std::string sep = arg_str("split", p.get(0));
    return to_list(reverse ? py_rsplit(self.s(), &sep, maxsplit)
                           : py_split(self.s(), &sep, maxsplit));
  }
  return to_list(reverse ? py_rsplit(self.s(), nullptr, maxsplit)
                         : py_split(self.s(), nullptr, maxsplit));
}
Value s_split(Evaluator& ev, const Value& self, CallArgs& a) {
  return split_impl(ev, self, a, false);
}
Value s_rsplit(Evaluator& ev, const Value& self, CallArgs& a) {
  return split_impl(ev, self, a, true);
}
Value s_splitlines(Evaluator& ev, const Value& self, CallArgs& a) {
  Params p("splitlines", a, {"keepends"}, 0);
  ev.charge_bytes(self.s().size());
  return to_list(py_splitlines(self.s(), p.get_bool(0, false)));
}

Value s_upper(Evaluator&, const Value& self, CallArgs& a) {
  Params p("upper", a, {}, 0);
  return Value::string(to_upper(self.s()));
}
Value s_lower(Evaluator&, const Value& self, CallArgs& a) {
  Params p("lower", a, {}, 0);
  return Value::string(to_lower(self.s()));
}
Value s_title(Evaluator&, const Value& self, CallArgs& a) {
  Params p("title", a, {}, 0);
  return Value::string(py_title(self.s()));
}
Value s_capitalize(Evaluator&, const Value& self, CallArgs& a) {
  Params p("capitalize", a, {}, 0);
  return Value::string(py_capitalize(self.s()));
}
Value s_swapcase(Evaluator&, const Value& self, CallArgs& a) {
  Params p("swapcase", a, {}, 0);
  return Value::string(py_swapcase(self.s()));
}

Value s_replace(Evaluator& ev, const Value& self, CallArgs& a) {
  Params p("replace", a, {"old", "new", "count"}, 2);
  ev.charge_bytes(self.s().size());
  return Value::string(py_replace(self.s(), arg_str("replace", p.get(0)),
                                  arg_str("replace", p.get(1)), p.get_int(2, -1),
                                  static_cast<size_t>(ev.settings().max_output_bytes)));
}

Value find_impl(const Value& self, CallArgs& a, const char* name, bool reverse, bool must) {
  Params p(name, a, {"sub", "start", "end"}, 1);
  int64_t start = p.get_int(1, 0);
  int64_t end = p.get_int(2, INT64_MAX);
  int64_t r = py_find(self.s(), arg_str(name, p.get(0)), start, end, reverse);
  if (r < 0 && must) raise("ValueError: substring not found");
  return Value::integer(r);
}
Value s_find(Evaluator&, const Value& self, CallArgs& a) {
  return find_impl(self, a, "find", false, false);
}
Value s_rfind(Evaluator&, const Value& self, CallArgs& a) {
  return find_impl(self, a, "rfind", true, false);
}
Value s_index(Evaluator&, const Value& self, CallArgs& a) {
  return find_impl(self, a, "index", false, true);
}
Value s_rindex(Evaluator&, const Value& self, CallArgs& a) {
  return find_impl(self, a, "rindex", true, true);
}

Value s_count(Evaluator&, const Value& self, CallArgs& a) {
  Params p("count", a, {"sub", "start", "end"}, 1);
  std::optional<std::string> s = sub_range(self.s(), p, 1);
  if (!s) return Value::integer(0);
  return Value::integer(py_count(*s, arg_str("count", p.get(0))));
}

Value s_join(Evaluator& ev, const Value& self, CallArgs& a) {
  Params p("join", a, {"iterable"}, 1);
  std::string out;
  size_t k = 0;
  for (const Value& item : iterate(p.get(0))) {
    if (!item.is_string()) {
      raise("TypeError: sequence item ", k, ": expected str instance, ", type_name(item), " found");
    }
    if (k++ > 0) out += self.s();
    out += item.s();
    ev.check_size(out.size());
  }
  ev.charge_bytes(out.size());
  return Value::string(std::move(out));
}

Value s_format(Evaluator& ev, const Value& self, CallArgs& a) {
  return Value::string(str_format(ev, self.s(), a));
}

Value pad_impl(Evaluator& ev, const Value& self, CallArgs& a, const char* name, int where) {
  Params p(name, a, {"width", "fillchar"}, 1);
  int64_t width = p.get_int(0, 0);
  std::string fill = p.has(1) ? arg_str(name, p.get(1)) : " ";
  if (num_code_points(fill) != 1) {
    raise("TypeError: The fill character must be exactly one character long");
  }
  int64_t len = static_cast<int64_t>(num_code_points(self.s()));
  if (width <= len) return self;
  ev.check_size(static_cast<size_t>(width) * fill.size());
  int64_t pad = width - len;
  int64_t left = where < 0 ? 0 : where > 0 ? pad : pad / 2 + (pad & width & 1);
  std::string out;
  for (int64_t k = 0; k < left; ++k) out += fill;
  out += self.s();
  for (int64_t k = 0; k < pad - left; ++k) out += fill;
  return Value::string(std::move(out));
}
Value s_center(Evaluator& ev, const Value& self, CallArgs& a) {
  return pad_impl(ev, self, a, "center", 0);
}
Value s_ljust(Evaluator& ev, const Value& self, CallArgs& a) {
  return pad_impl(ev, self, a, "ljust", -1);
}
Value s_rjust(Evaluator& ev, const Value& self, CallArgs& a) {
  return pad_impl(ev, self, a, "rjust", 1);
}
Value s_zfill(Evaluator& ev, const Value& self, CallArgs& a) {
  Params p("zfill", a, {"width"}, 1);
  int64_t width = p.get_int(0, 0);
  const std::string& s = self.s();
  int64_t len = static_cast<int64_t>(num_code_points(s));
  if (width <= len) return self;
  ev.check_size(static_cast<size_t>(width));
  size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
  return Value::string(s.substr(0, sign) + std::string(width - len, '0') + s.substr(sign));
}

Value affix_remove(const Value& self, CallArgs& a, const char* name, bool suffix) {
  Params p(name, a, {"affix"}, 1);
  std::string affix = arg_str(name, p.get(0));
  const std::string& s = self.s();
  if (affix.size() > s.size()) return self;
  if (suffix && s.compare(s.size() - affix.size(), affix.size(), affix) == 0) {
    return Value::string(s.substr(0, s.size() - affix.size()));
  }
  if (!suffix && s.compare(0, affix.size(), affix) == 0) {
    return Value::string(s.substr(affix.size()));
  }
  return self;
}
Value s_removeprefix(Evaluator&, const Value& self, CallArgs& a) {
  return affix_remove(self, a, "removeprefix", false);
}
Value s_removesuffix(Evaluator&, const Value& self, CallArgs& a) {
  return affix_remove(self, a, "removesuffix", true);
}

Value partition_impl(const Value& self, CallArgs& a, bool reverse) {
  Params p(reverse ? "rpartition" : "partition", a, {"sep"}, 1);
  std::string sep = arg_str("partition", p.get(0));
  if (sep.empty()) raise("ValueError: empty separator");
  const std::string& s = self.s();
  size_t hit = reverse ? s.rfind(sep) : s.find(sep);
  if (hit == std::string::npos) {
    Value empty = Value::string("");
    return reverse ? Value::list({empty, empty, self}, true)
                   : Value::list({self, empty, empty}, true);
  }
  return Value::list({Value::string(s.substr(0, hit)), Value::string(sep),
                      Value::string(s.substr(hit + sep.size()))},
                     true);
}
Value s_partition(Evaluator&, const Value& self, CallArgs& a) {
  return partition_impl(self, a, false);
}
Value s_rpartition(Evaluator&, const Value& self, CallArgs& a) {
  return partition_impl(self, a, true);
}

template <bool (*Pred)(char32_t)>
Value all_chars(Evaluator&, const Value& self, CallArgs& a) {
  Params p("is", a, {}, 0);
  const std::string& s = self.s();
  if (s.empty()) return Value::boolean(false);
  size_t pos = 0;
  while (pos < s.size()) {
    if (!Pred(next_code_point(s, &pos))) return Value::boolean(false);
  }
  return Value::boolean(true);
}
bool is_alnum_char(char32_t c) { return is_word_char(c) && c != '_'; }
bool is_numeric_char(char32_t c) { return is_word_char(c) && c != '_' && !is_alpha_char(c); }
Value s_islower(Evaluator&, const Value& self, CallArgs& a) {
  Params p("islower", a, {}, 0);
  return Value::boolean(py_islower(self.s()));
}
Value s_isupper(Evaluator&, const Value& self, CallArgs& a) {
  Params p("isupper", a, {}, 0);
  return Value::boolean(py_isupper(self.s()));
}

// ---- dict, list and tuple ----

Value d_get(Evaluator&, const Value& self, CallArgs& a) {
  Params p("get", a, {"key", "default"}, 1);
  const Value* v = self.dict().find(p.get(0));
  return v != nullptr ? *v : p.get_or(1, Value::none());
}
Value d_items(Evaluator& ev, const Value& self, CallArgs& a) {
  Params p("items", a, {}, 0);
  std::vector<Value> out;
  ev.charge(static_cast<int64_t>(self.dict().items.size() / 8));
  for (const auto& [key, value] : self.dict().items) out.push_back(Value::list({key, value}, true));
  return Value::list(std::move(out));
}
Value d_keys(Evaluator&, const Value& self, CallArgs& a) {
  Params p("keys", a, {}, 0);
  return Value::list(iterate(self));
}
Value d_values(Evaluator&, const Value& self, CallArgs& a) {
  Params p("values", a, {}, 0);
  std::vector<Value> out;
  for (const auto& item : self.dict().items) out.push_back(item.second);
  return Value::list(std::move(out));
}
Value copy_self(Evaluator&, const Value& self, CallArgs& a) {
  Params p("copy", a, {}, 0);
  return self;
}
Value l_index(Evaluator&, const Value& self, CallArgs& a) {
  Params p("index", a, {"value", "start", "stop"}, 1);
  const auto& items = self.list().items;
  int64_t n = static_cast<int64_t>(items.size());
  int64_t start = p.get_int(1, 0);
  int64_t stop = p.get_int(2, n);
  if (start < 0) start = std::max<int64_t>(0, start + n);
  if (stop < 0) stop = std::max<int64_t>(0, stop + n);
  for (int64_t k = start; k < std::min(stop, n); ++k) {
    if (equals(items[static_cast<size_t>(k)], p.get(0))) return Value::integer(k);
  }
  raise("ValueError: ", repr(p.get(0)), " is not in ", type_name(self));
}
Value l_count(Evaluator&, const Value& self, CallArgs& a) {
  Params p("count", a, {"value"}, 1);
  int64_t n = 0;
  for (const Value& v : self.list().items) n += equals(v, p.get(0)) ? 1 : 0;
  return Value::integer(n);
}

const std::unordered_map<std::string, MethodFn>& str_methods() {
  static const auto* table = new std::unordered_map<std::string, MethodFn>{
      {"startswith", s_startswith},
      {"endswith", s_endswith},
      {"strip", s_strip},
      {"lstrip", s_lstrip},
      {"rstrip", s_rstrip},
      {"split", s_split},
      {"rsplit", s_rsplit},
      {"splitlines", s_splitlines},
      {"upper", s_upper},
      {"lower", s_lower},
      {"casefold", s_lower},
      {"title", s_title},
      {"capitalize", s_capitalize},
      {"swapcase", s_swapcase},
      {"replace", s_replace},
      {"find", s_find},
      {"rfind", s_rfind},
      {"index", s_index},
      {"rindex", s_rindex},
      {"count", s_count},
      {"join", s_join},
      {"format", s_format},
      {"center", s_center},
      {"ljust", s_ljust},
      {"rjust", s_rjust},
      {"zfill", s_zfill},
      {"removeprefix", s_removeprefix},
      {"removesuffix", s_removesuffix},
      {"partition", s_partition},
      {"rpartition", s_rpartition},
      {"isalpha", all_chars<is_alpha_char>},
      {"isalnum", all_chars<is_alnum_char>},
      {"isdigit", all_chars<is_digit_char>},
      {"isdecimal", all_chars<is_decimal_char>},
      {"isnumeric", all_chars<is_numeric_char>},
      {"isspace", all_chars<is_space>},
      {"islower", s_islower},
      {"isupper", s_isupper},
  };
  return *table;
}

bool in_set(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (name == n) return true;
  }
  return false;
}

Value unsafe(const Value& self, const std::string& name) {
  return Value::undefined("access to attribute " + py_repr(name) + " of " +
                              py_repr(type_name(self)) + " object is unsafe.",
                          true);
}

// ---- globals ----

Value g_range(Evaluator& ev, CallArgs& a) {
  if (!a.kwargs.empty()) raise("TypeError: range() takes no keyword arguments");
  if (a.args.empty() || a.args.size() > 3) {
    raise("TypeError: range expected 1 to 3 arguments, got ", a.args.size());
  }
  int64_t v[3] = {0, 0, 1};
  for (size_t k = 0; k < a.args.size(); ++k) {
    if (!a.args[k].is_integral()) {
      raise("TypeError: '", type_name(a.args[k]), "' object cannot be interpreted as an integer");
    }
  }
  if (a.args.size() == 1) {
    v[1] = a.args[0].i();
  } else {
    v[0] = a.args[0].i();
    v[1] = a.args[1].i();
    if (a.args.size() == 3) v[2] = a.args[2].i();
  }
  if (v[2] == 0) raise("ValueError: range() arg 3 must not be zero");
  __int128 span = static_cast<__int128>(v[1]) - v[0];
  __int128 count = 0;
  if (v[2] > 0 && span > 0) count = (span - 1) / v[2] + 1;
  if (v[2] < 0 && span < 0) count = (-span - 1) / (-static_cast<__int128>(v[2])) + 1;
  if (count > 100000) {
    raise(
        "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  ev.charge(static_cast<int64_t>(count / 16));
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) {
    out.push_back(Value::integer(static_cast<int64_t>(v[0] + static_cast<__int128>(k) * v[2])));
  }
  return Value::list(std::move(out));
}

// dict(*args, **kwargs) as Python builds it: a mapping or pairs, then the keywords.
std::shared_ptr<Dict> build_dict(const char* name, CallArgs& a) {
  auto d = std::make_shared<Dict>();
  if (a.args.size() > 1)
    raise("TypeError: ", name, " expected at most 1 argument, got ", a.args.size());
  if (!a.args.empty()) {
    const Value& src = a.args[0];
    if (src.is_dict()) {
      for (const auto& [key, value] : src.dict().items) d->set(key, value);
    } else {
      for (const Value& pair : iterate(src)) {
        std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2) {
          raise("ValueError: dictionary update sequence element has length ", kv.size(),
                "; 2 is required");
        }
        d->set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [key, value] : a.kwargs) d->set(Value::string(key), value);
  return d;
}

Value g_dict(Evaluator&, CallArgs& a) { return Value::dict(build_dict("dict", a)); }

Value g_namespace(Evaluator& ev, CallArgs& a) {
  std::shared_ptr<Dict> d = build_dict("namespace", a);
  Namespace* ns = ev.new_namespace();
  for (const auto& [key, value] : d->items) {
    if (!key.is_string()) raise("TypeError: namespace attribute names must be strings");
    ns->set(key.s(), value);
  }
  return Value::ns(ns);
}

Value g_raise_exception(Evaluator&, CallArgs& a) {
  std::string message = a.args.empty() ? "" : to_str(a.args[0]);
  raise("raise_exception: ", message);
}

Value g_strftime_now(Evaluator& ev, CallArgs& a) {
  Params p("strftime_now", a, {"format"}, 1);
  std::string format = to_str(p.get(0));
  if (format.size() > 256) raise("strftime_now: format too long");
  std::time_t now = ev.settings().now_unix >= 0 ? static_cast<std::time_t>(ev.settings().now_unix)
                                                : std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[2048];
  size_t n = format.empty() ? 0 : std::strftime(buf, sizeof buf, format.c_str(), &tm);
  return Value::string(std::string(buf, n));
}

Value g_joiner(Evaluator&, CallArgs& a) {
  Params p("joiner", a, {"sep"}, 0);
  std::string sep = p.get_str(0, ", ");
  auto used = std::make_shared<bool>(false);
  auto f = std::make_shared<Function>();
  f->name = "joiner";
  f->call = [sep, used](Evaluator&, CallArgs&) {
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return Value::string(sep);
  };
  return Value::function(std::move(f));
}

Value make_global(const char* name, Value (*fn)(Evaluator&, CallArgs&)) {
  auto f = std::make_shared<Function>();
  f->name = name;
  f->call = fn;
  return Value::function(std::move(f));
}

}  // namespace

std::optional<Value> get_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) {
    auto it = str_methods().find(name);
    if (it != str_methods().end()) return bind(obj, name, it->second);
    if (in_set(name, {"encode", "expandtabs", "format_map", "isascii", "isidentifier",
                      "isprintable", "istitle", "maketrans", "translate"})) {
      return unsupported_method(obj, name);
    }
    return std::nullopt;
  }
  if (obj.is_dict()) {
    if (name == "get") return bind(obj, name, d_get);
    if (name == "items") return bind(obj, name, d_items);
    if (name == "keys") return bind(obj, name, d_keys);
    if (name == "values") return bind(obj, name, d_values);
    if (name == "copy") return bind(obj, name, copy_self);
    if (in_set(name, {"clear", "pop", "popitem", "setdefault", "update"})) return unsafe(obj, name);
    if (name == "fromkeys") return unsupported_method(obj, name);
    return std::nullopt;
  }
  if (obj.is_list()) {
    if (name == "index") return bind(obj, name, l_index);
    if (name == "count") return bind(obj, name, l_count);
    if (obj.is_tuple()) return std::nullopt;
    if (name == "copy") return bind(obj, name, copy_self);
    if (in_set(name, {"append", "clear", "pop", "reverse", "insert", "sort", "extend", "remove"})) {
      return unsafe(obj, name);
    }
  }
  return std::nullopt;
}

std::optional<Value> get_global(const std::string& name) {
  static const auto* table = new std::unordered_map<std::string, Value>{
      {"range", make_global("range", g_range)},
      {"dict", make_global("dict", g_dict)},
      {"namespace", make_global("namespace", g_namespace)},
      {"raise_exception", make_global("raise_exception", g_raise_exception)},
      {"strftime_now", make_global("strftime_now", g_strftime_now)},
      {"joiner", make_global("joiner", g_joiner)},
  };
  auto it = table->find(name);
  if (it == table->end()) return std::nullopt;
  return it->second;
}

}  // namespace pagoda::jinja
