// The tree-walking evaluator: runs statements into an output string under the render limits,
// evaluates expressions, and offers the operations filters, tests and methods share (calls,
// attribute and item lookup, step accounting, namespaces).
//
// Scopes form a chain: the root scope holds the render's variables and top-level assignments;
// each for-loop iteration, macro call and {% with %} gets a child scope, so assignments inside
// them do not leak out (as in jinja2). Macros hold their defining scope weakly to avoid cycles.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "template/ast.h"
#include "template/value.h"

namespace pagoda::jinja {

struct EvalSettings {
  int64_t max_steps = 1'000'000;
  int64_t max_output_bytes = 1 << 22;
  int max_depth = 64;
  int64_t now_unix = -1;  // strftime_now's clock; < 0 means the real time
};

struct Scope {
  explicit Scope(std::shared_ptr<Scope> p) : parent(std::move(p)) {}
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> vars;
};
using ScopePtr = std::shared_ptr<Scope>;

class Evaluator {
 public:
  explicit Evaluator(const EvalSettings& settings) : settings_(settings) {}
  ~Evaluator();

  // Renders a template body with `root` as the outermost scope.
  std::string render(const std::vector<Stmt>& body, const ScopePtr& root);

  // ---- shared with filters, tests, methods and globals ----
  Value call(const Value& callee, CallArgs& args);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  Value call_filter(const std::string& name, const Value& input, CallArgs& args);
  bool call_test(const std::string& name, const Value& input, CallArgs& args);
  Namespace* new_namespace();
  // Counts work: one step per node or iteration, plus bulk work in filters.
  void charge(int64_t steps);
  void charge_bytes(size_t bytes) { charge(static_cast<int64_t>(bytes / 256) + 1); }
  // Fails when a string produced by the template would exceed the output limit.
  void check_size(size_t bytes) const;
  const EvalSettings& settings() const { return settings_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  // Native recursion budget: evaluation and statement frames together, and the stack bytes used
  // since render() began (kMaxStackBytes), whichever runs out first.
  static constexpr int kMaxFrames = 3000;
  class FrameGuard {
   public:
    explicit FrameGuard(Evaluator* ev) : ev_(ev) {
      if (++ev_->frames_ > kMaxFrames || stack_used_since(ev_->stack_base_) > kMaxStackBytes) {
        --ev_->frames_;
        raise("template nesting too deep at run time (more than ", kMaxFrames,
              " frames or the stack budget)");
      }
    }
    ~FrameGuard() { --ev_->frames_; }

   private:
    Evaluator* ev_;
  };

  Flow exec_body(const std::vector<Stmt>& body, const ScopePtr& scope, std::string& out);
  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out);
  Flow exec_for(const Stmt& s, const ScopePtr& scope, std::string& out);
  void exec_call_block(const Stmt& s, const ScopePtr& scope, std::string& out);
  Value make_macro(const Stmt& def, const ScopePtr& scope, const std::string& name);
  Value call_macro(const Stmt& def, const std::string& name, const std::weak_ptr<Scope>& closure,
                   CallArgs& args);
  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_inner(const Expr& e, const ScopePtr& scope);
  Value eval_concat(const Expr& e, const ScopePtr& scope);
  Value eval_compare(const Expr& e, const ScopePtr& scope);
  Value eval_filter(const Expr& e, const ScopePtr& scope, const Value* block_input);
  void eval_args(const Expr& e, size_t first, const ScopePtr& scope, CallArgs* out);
  Value eval_slice(const Value& obj, const Expr& slice, const ScopePtr& scope);
  Value lookup(const std::string& name, const ScopePtr& scope);
  void assign(const Expr& target, const Value& value, const ScopePtr& scope);
  void append(std::string& out, std::string_view s);

  EvalSettings settings_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  int frames_ = 0;
  uintptr_t stack_base_ = 0;  // where render() started on this thread's stack
  std::vector<std::unique_ptr<Namespace>> namespaces_;
};

// Binds call arguments to parameter names the way Python does for builtins.
class Params {
 public:
  Params(const std::string& fn, CallArgs& args, std::vector<std::string> names, size_t required);
  bool has(size_t i) const { return values_[i].has_value(); }
  const Value& get(size_t i) const { return *values_[i]; }
  Value get_or(size_t i, Value fallback) const { return has(i) ? get(i) : std::move(fallback); }
  int64_t get_int(size_t i, int64_t fallback) const;
  bool get_bool(size_t i, bool fallback) const;  // Python truthiness
  std::string get_str(size_t i, const std::string& fallback) const;

 private:
  std::string fn_;
  std::vector<std::string> names_;
  std::vector<std::optional<Value>> values_;
};

// Operators (operators.cc).
Value binary_op(Evaluator& ev, const std::string& op, const Value& a, const Value& b);
Value unary_minus(const Value& v, bool negate);
bool contains(const Value& container, const Value& item);
Value slice_value(Evaluator& ev, const Value& obj, const std::optional<int64_t>& start,
                  const std::optional<int64_t>& stop, const std::optional<int64_t>& step);
[[noreturn]] void fail_undefined(const Value& v);

// Built-in filters and tests (filters.cc, tests.cc), methods of str/dict/list and the global
// functions (methods.cc), printf-style and str.format formatting (format.cc).
Value apply_filter(Evaluator& ev, const std::string& name, const Value& input, CallArgs& args);
bool apply_test(Evaluator& ev, const std::string& name, const Value& input, CallArgs& args);
bool has_filter(const std::string& name);
bool has_test(const std::string& name);
// The bound method `obj.name`, an unsafe-attribute undefined, or nullopt when there is none.
std::optional<Value> get_method(const Value& obj, const std::string& name);
std::optional<Value> get_global(const std::string& name);
std::string percent_format(Evaluator& ev, const std::string& format, const Value& args);
std::string str_format(Evaluator& ev, const std::string& format, CallArgs& args);

}  // namespace pagoda::jinja
