// Runtime values of the template interpreter, modelled on the Python objects jinja2 sees:
// undefined, None, bool, int, float, str, list/tuple, dict (insertion ordered), generator (the
// one-shot iterators that filters like `map` and `select` return), namespace, callable, loop.
//
// Strings, lists and dicts are immutable and shared. Namespaces are the only mutable
// containers; they live in the render's arena and values point at them, so reference cycles
// through them cannot leak. Containers record their nesting depth and refuse to nest deeper
// than kMaxValueDepth, which keeps every recursive walk (printing, JSON, comparison,
// destruction) bounded.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "template/errors.h"

namespace pagoda::jinja {

constexpr int kMaxValueDepth = 200;

class Value;
class Evaluator;
struct List;
struct Dict;
struct Generator;
struct Namespace;
struct LoopState;
struct Function;

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,  // list or tuple (List::is_tuple)
    kDict,
    kGenerator,
    kNamespace,
    kFunction,
    kLoop,
  };

  Value() = default;  // undefined
  static Value undefined(std::string hint, bool unsafe = false);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  // A markupsafe.Markup string (what `safe` and `escape` return): printed the same, but its repr
  // differs and `markup + str` escapes the str, as in Python.
  static Value markup(std::string s);
  // `group` marks the (grouper, list) tuples of the groupby filter, which have those attributes.
  static Value list(std::vector<Value> items, bool tuple = false, bool group = false);
  static Value dict(std::shared_ptr<Dict> d);
  static Value generator(std::vector<Value> items);
  static Value ns(Namespace* ns);
  static Value function(std::shared_ptr<Function> fn);
  static Value loop(std::shared_ptr<LoopState> loop);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_integral() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }
  bool is_number() const { return is_integral() || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return kind_ == Kind::kString && u_.i != 0; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const;
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_generator() const { return kind_ == Kind::kGenerator; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }
  bool is_loop() const { return kind_ == Kind::kLoop; }

  bool b() const { return u_.i != 0; }
  int64_t i() const { return u_.i; }  // kInt or kBool
  double f() const { return kind_ == Kind::kFloat ? u_.f : static_cast<double>(u_.i); }
  const std::string& s() const;  // kString; the hint of an undefined
  const List& list() const;
  const Dict& dict() const;
  Generator& gen() const;
  Namespace& ns() const { return *u_.ns; }
  const Function& fn() const;
  LoopState& loop() const;
  bool unsafe() const { return kind_ == Kind::kUndefined && u_.i != 0; }
  int depth() const;
  // Object identity for Python's `is` (containers, functions, namespaces).
  const void* identity() const { return kind_ == Kind::kNamespace ? u_.ns : ptr_.get(); }

 private:
  Kind kind_ = Kind::kUndefined;
  union {
    int64_t i;
    double f;
    Namespace* ns;
  } u_{0};
  std::shared_ptr<void> ptr_;
};

struct List {
  std::vector<Value> items;
  bool is_tuple = false;
  bool is_group = false;
  int depth = 1;
};

struct Dict {
  std::vector<std::pair<Value, Value>> items;
  std::unordered_map<std::string, size_t> index;  // hash_key(key) -> position in items
  int depth = 1;

  const Value* find(const Value& key) const;  // throws for unhashable keys
  const Value* find(std::string_view key) const;
  void set(const Value& key, Value value);  // Python order: a new key goes last
};

struct Generator {
  std::vector<Value> items;
  size_t pos = 0;  // items before pos were consumed
  int depth = 1;
};

struct Namespace {
  std::vector<std::pair<std::string, Value>> attrs;
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value value);
};

struct LoopState {
  std::shared_ptr<const std::vector<Value>> items;
  int64_t index0 = 0;
  std::string last_changed;  // hash_key-like fingerprint of the last loop.changed() arguments
  bool changed_called = false;
  int depth = 1;
};

enum class FunctionKind { kBuiltin, kMethod, kMacro };

struct Function {
  std::string name;
  FunctionKind kind = FunctionKind::kBuiltin;
  std::function<Value(Evaluator&, CallArgs&)> call;
  int depth = 1;
};

// Python's type name ("str", "int", "NoneType", "list", ...).
std::string type_name(const Value& v);
// jinja2's object_type_repr for undefined messages ("dict object", "None").
std::string object_type_repr(const Value& v);
bool truthy(const Value& v);
std::string to_str(const Value& v);  // str()
std::string repr(const Value& v);    // repr()
bool equals(const Value& a, const Value& b);
enum class CmpOp { kLt, kLe, kGt, kGe };
bool compare(const Value& a, const Value& b, CmpOp op);  // throws TypeError-like messages
// The identity Python's hash()/== give a hashable value (1, 1.0 and True share one); throws for
// unhashable values.
std::string hash_key(const Value& v);
// Items a Python `for` sees (str -> characters, dict -> keys, generator -> the rest of it).
std::vector<Value> iterate(const Value& v);
// len(); throws when the object has none.
int64_t length(const Value& v);

struct JsonOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// Python's json.dumps with these options; throws for values JSON cannot hold.
std::string to_json(const Value& v, const JsonOptions& options);

// Stable merge sort that only asks less(b, a) and stays memory-safe whatever the comparator
// answers (Python's ordering is not a strict weak order: NaN, mixed types), unlike std::sort.
template <typename T, typename Less>
void merge_sort(std::vector<T>& v, Less less) {
  std::vector<T> buf(v.size());
  for (size_t width = 1; width < v.size(); width *= 2) {
    for (size_t lo = 0; lo < v.size(); lo += 2 * width) {
      size_t mid = std::min(lo + width, v.size());
      size_t hi = std::min(lo + 2 * width, v.size());
      size_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) buf[k++] = less(v[j], v[i]) ? v[j++] : v[i++];
      while (i < mid) buf[k++] = v[i++];
      while (j < hi) buf[k++] = v[j++];
    }
    v.swap(buf);
  }
}

}  // namespace pagoda::jinja
