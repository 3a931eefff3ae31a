// Runtime values: construction, equality, ordering, hashing and iteration with Python's rules
// (see value.h; str/repr and JSON output are in value_format.cc).
#include "template/value.h"

#include <algorithm>
#include <cmath>

#include "template/text.h"

namespace pagoda::jinja {
namespace {

const std::string kEmpty;

void check_depth(int depth) {
  if (depth > kMaxValueDepth) raise("value nested too deeply (more than ", kMaxValueDepth, ")");
}

int max_item_depth(const std::vector<Value>& items) {
  int d = 0;
  for (const Value& v : items) d = std::max(d, v.depth());
  return d;
}

[[noreturn]] void fail_undefined(const Value& v) { raise(v.s()); }

// Exact comparison of an int with a double (Python compares them without rounding).
int compare_int_float(int64_t n, double x) {
  long double ln = static_cast<long double>(n);
  long double lx = static_cast<long double>(x);
  return ln < lx ? -1 : (ln > lx ? 1 : 0);
}

bool numbers_equal(const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral()) return a.i() == b.i();
  if (a.is_float() && b.is_float()) return a.f() == b.f();
  const Value& n = a.is_float() ? b : a;
  const Value& x = a.is_float() ? a : b;
  if (std::isnan(x.f())) return false;
  return compare_int_float(n.i(), x.f()) == 0;
}

const char* op_symbol(CmpOp op) {
  switch (op) {
    case CmpOp::kLt:
      return "<";
    case CmpOp::kLe:
      return "<=";
    case CmpOp::kGt:
      return ">";
    case CmpOp::kGe:
      return ">=";
  }
  return "?";
}

template <typename T>
bool apply_op(const T& a, const T& b, CmpOp op) {
  switch (op) {
    case CmpOp::kLt:
      return a < b;
    case CmpOp::kLe:
      return a <= b;
    case CmpOp::kGt:
      return a > b;
    case CmpOp::kGe:
      return a >= b;
  }
  return false;
}

bool compare_impl(const Value& a, const Value& b, CmpOp op, int depth) {
  check_depth(depth);
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return apply_op(a.i(), b.i(), op);
    if (a.is_float() && b.is_float()) return apply_op(a.f(), b.f(), op);
    const Value& x = a.is_float() ? a : b;
    if (std::isnan(x.f())) return false;
    int c = a.is_float() ? -compare_int_float(b.i(), a.f()) : compare_int_float(a.i(), b.f());
    return apply_op(c, 0, op);
  }
  if (a.is_string() && b.is_string()) return apply_op(a.s().compare(b.s()), 0, op);
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    size_t n = std::min(x.size(), y.size());
    for (size_t k = 0; k < n; ++k) {
      if (!equals(x[k], y[k])) return compare_impl(x[k], y[k], op, depth + 1);
    }
    return apply_op(x.size(), y.size(), op);
  }
  raise("TypeError: '", op_symbol(op), "' not supported between instances of '", type_name(a),
        "' and '", type_name(b), "'");
}

bool equals_impl(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) return numbers_equal(a, b);
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.s() == b.s();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple()) return false;
      const auto& x = a.list().items;
      const auto& y = b.list().items;
      if (x.size() != y.size()) return false;
      for (size_t k = 0; k < x.size(); ++k) {
        if (!equals_impl(x[k], y[k], depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& x = a.dict();
      const Dict& y = b.dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [key, value] : x.items) {
        const Value* other = y.find(key);
        if (other == nullptr || !equals_impl(value, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.ns() == &b.ns();
    case Value::Kind::kFunction:
      return &a.fn() == &b.fn();
    case Value::Kind::kLoop:
      return &a.loop() == &b.loop();
    case Value::Kind::kGenerator:
      return &a.gen() == &b.gen();
    default:
      return false;
  }
}

// tag + text, built without `"x" + std::string` (which trips a GCC 12 -Wrestrict false alarm).
std::string tagged(char tag, std::string_view text) {
  std::string out;
  out.reserve(text.size() + 1);
  out.push_back(tag);
  out.append(text);
  return out;
}

}  // namespace

Value Value::undefined(std::string hint, bool unsafe) {
  Value v;
  v.u_.i = unsafe ? 1 : 0;
  if (!hint.empty()) v.ptr_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.u_.i = b ? 1 : 0;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.u_.i = i;
  return v;
}

Value Value::number(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.u_.f = f;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.ptr_ = std::make_shared<std::string>(std::move(s));
  return v;
}

Value Value::markup(std::string s) {
  Value v = string(std::move(s));
  v.u_.i = 1;
  return v;
}

Value Value::list(std::vector<Value> items, bool tuple, bool group) {
  auto l = std::make_shared<List>();
  l->depth = max_item_depth(items) + 1;
  check_depth(l->depth);
  l->items = std::move(items);
  l->is_tuple = tuple;
  l->is_group = group;
  Value v;
  v.kind_ = Kind::kList;
  v.ptr_ = std::move(l);
  return v;
}

Value Value::dict(std::shared_ptr<Dict> d) {
  int depth = 0;
  for (const auto& [key, value] : d->items) depth = std::max({depth, key.depth(), value.depth()});
  d->depth = depth + 1;
  check_depth(d->depth);
  Value v;
  v.kind_ = Kind::kDict;
  v.ptr_ = std::move(d);
  return v;
}

Value Value::generator(std::vector<Value> items) {
  auto g = std::make_shared<Generator>();
  g->depth = max_item_depth(items) + 1;
  check_depth(g->depth);
  g->items = std::move(items);
  Value v;
  v.kind_ = Kind::kGenerator;
  v.ptr_ = std::move(g);
  return v;
}

Value Value::ns(Namespace* ns) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.u_.ns = ns;
  return v;
}

Value Value::function(std::shared_ptr<Function> fn) {
  check_depth(fn->depth);
  Value v;
  v.kind_ = Kind::kFunction;
  v.ptr_ = std::move(fn);
  return v;
}

Value Value::loop(std::shared_ptr<LoopState> loop) {
  check_depth(loop->depth);
  Value v;
  v.kind_ = Kind::kLoop;
  v.ptr_ = std::move(loop);
  return v;
}

bool Value::is_tuple() const { return kind_ == Kind::kList && list().is_tuple; }

const std::string& Value::s() const {
  if (ptr_ == nullptr) {
    static const std::string kUndefinedMessage = "value is undefined";
    return kind_ == Kind::kUndefined ? kUndefinedMessage : kEmpty;
  }
  return *static_cast<const std::string*>(ptr_.get());
}
const List& Value::list() const { return *static_cast<const List*>(ptr_.get()); }
const Dict& Value::dict() const { return *static_cast<const Dict*>(ptr_.get()); }
Generator& Value::gen() const { return *static_cast<Generator*>(ptr_.get()); }
const Function& Value::fn() const { return *static_cast<const Function*>(ptr_.get()); }
LoopState& Value::loop() const { return *static_cast<LoopState*>(ptr_.get()); }

int Value::depth() const {
  switch (kind_) {
    case Kind::kList:
      return list().depth;
    case Kind::kDict:
      return dict().depth;
    case Kind::kGenerator:
      return gen().depth;
    case Kind::kFunction:
      return fn().depth;
    case Kind::kLoop:
      return loop().depth;
    default:
      return 0;
  }
}

const Value* Dict::find(const Value& key) const {
  auto it = index.find(hash_key(key));
  return it == index.end() ? nullptr : &items[it->second].second;
}

const Value* Dict::find(std::string_view key) const {
  std::string k = "s";
  k.append(key);
  auto it = index.find(k);
  return it == index.end() ? nullptr : &items[it->second].second;
}

void Dict::set(const Value& key, Value value) {
  std::string k = hash_key(key);
  auto it = index.find(k);
  if (it != index.end()) {
    items[it->second].second = std::move(value);
    return;
  }
  index.emplace(std::move(k), items.size());
  items.emplace_back(key, std::move(value));
}

const Value* Namespace::find(std::string_view name) const {
  for (const auto& [key, value] : attrs) {
    if (key == name) return &value;
  }
  return nullptr;
}

void Namespace::set(const std::string& name, Value value) {
  for (auto& [key, old] : attrs) {
    if (key == name) {
      old = std::move(value);
      return;
    }
  }
  attrs.emplace_back(name, std::move(value));
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.is_tuple() ? "tuple" : "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kGenerator:
      return "generator";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kFunction:
      return v.fn().kind == FunctionKind::kMacro ? "Macro" : "builtin_function_or_method";
    case Value::Kind::kLoop:
      return "LoopContext";
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.is_namespace()) return "jinja2.utils.Namespace object";
  if (v.is_loop()) return "jinja2.runtime.LoopContext object";
  if (v.is_function() && v.fn().kind == FunctionKind::kMacro) {
    return "jinja2.runtime.Macro object";
  }
  return type_name(v) + " object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
    case Value::Kind::kInt:
      return v.i() != 0;
    case Value::Kind::kFloat:
      return v.f() != 0.0;
    case Value::Kind::kString:
      return !v.s().empty();
    case Value::Kind::kList:
      return !v.list().items.empty();
    case Value::Kind::kDict:
      return !v.dict().items.empty();
    default:
      return true;
  }
}

bool equals(const Value& a, const Value& b) { return equals_impl(a, b, 0); }

bool compare(const Value& a, const Value& b, CmpOp op) { return compare_impl(a, b, op, 0); }

std::string hash_key(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "u";
    case Value::Kind::kNone:
      return "n";
    case Value::Kind::kBool:
    case Value::Kind::kInt:
      return tagged('i', std::to_string(v.i()));
    case Value::Kind::kFloat: {
      double f = v.f();
      if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 9.2e18) {
        return tagged('i', std::to_string(static_cast<int64_t>(f)));
      }
      return tagged('f', float_repr(f));
    }
    case Value::Kind::kString:
      return tagged('s', v.s());
    case Value::Kind::kList: {
      if (!v.is_tuple()) raise("TypeError: unhashable type: 'list'");
      std::string key = "t";
      for (const Value& item : v.list().items) {
        std::string k = hash_key(item);
        key += std::to_string(k.size());
        key.push_back(':');
        key += k;
      }
      return key;
    }
    case Value::Kind::kNamespace:
      return tagged('p', std::to_string(reinterpret_cast<uintptr_t>(&v.ns())));
    case Value::Kind::kFunction:
      return tagged('p', std::to_string(reinterpret_cast<uintptr_t>(&v.fn())));
    case Value::Kind::kLoop:
      return tagged('p', std::to_string(reinterpret_cast<uintptr_t>(&v.loop())));
    default:
      raise("TypeError: unhashable type: '", type_name(v), "'");
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.list().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.dict().items.size());
      for (const auto& item : v.dict().items) keys.push_back(item.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      const std::string& s = v.s();
      size_t pos = 0;
      while (pos < s.size()) {
        size_t start = pos;
        next_code_point(s, &pos);
        chars.push_back(Value::string(s.substr(start, pos - start)));
      }
      return chars;
    }
    case Value::Kind::kGenerator: {
      Generator& g = v.gen();
      std::vector<Value> rest(g.items.begin() + static_cast<std::ptrdiff_t>(g.pos), g.items.end());
      g.pos = g.items.size();
      return rest;
    }
    default:
      raise("TypeError: '", type_name(v), "' object is not iterable");
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(num_code_points(v.s()));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.list().items.size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict().items.size());
    case Value::Kind::kNamespace:
    default:
      raise("TypeError: object of type '", type_name(v), "' has no len()");
  }
}

}  // namespace pagoda::jinja
