// Printing runtime values as Python does: str() and repr() (lists, tuples, dicts, Markup,
// namespaces) and json.dumps with its options (see value.h).
#include <cmath>

#include "template/text.h"
#include "template/value.h"

namespace pagoda::jinja {
namespace {

void check_depth(int depth) {
  if (depth > kMaxValueDepth) raise("value nested too deeply (more than ", kMaxValueDepth, ")");
}

void repr_impl(const Value& v, std::string& out, bool top, int depth);

void repr_items(const std::vector<Value>& items, std::string& out, int depth) {
  for (size_t k = 0; k < items.size(); ++k) {
    if (k > 0) out += ", ";
    repr_impl(items[k], out, false, depth + 1);
  }
}

void repr_impl(const Value& v, std::string& out, bool top, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      if (!top) out += "Undefined";
      return;
    case Value::Kind::kNone:
      out += "None";
      return;
    case Value::Kind::kBool:
      out += v.b() ? "True" : "False";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.i());
      return;
    case Value::Kind::kFloat:
      out += float_repr(v.f());
      return;
    case Value::Kind::kString:
      if (top) {
        out += v.s();
      } else if (v.is_markup()) {
        out += "Markup(" + py_repr(v.s()) + ")";
      } else {
        out += py_repr(v.s());
      }
      return;
    case Value::Kind::kList:
      out += v.is_tuple() ? "(" : "[";
      repr_items(v.list().items, out, depth);
      if (v.is_tuple() && v.list().items.size() == 1) out += ",";
      out += v.is_tuple() ? ")" : "]";
      return;
    case Value::Kind::kDict: {
      out += "{";
      bool first = true;
      for (const auto& [key, value] : v.dict().items) {
        if (!first) out += ", ";
        first = false;
        repr_impl(key, out, false, depth + 1);
        out += ": ";
        repr_impl(value, out, false, depth + 1);
      }
      out += "}";
      return;
    }
    case Value::Kind::kGenerator:
      out += "<generator object>";
      return;
    case Value::Kind::kNamespace: {
      out += "<Namespace {";
      bool first = true;
      for (const auto& [key, value] : v.ns().attrs) {
        if (!first) out += ", ";
        first = false;
        out += py_repr(key) + ": ";
        repr_impl(value, out, false, depth + 1);
      }
      out += "}>";
      return;
    }
    case Value::Kind::kFunction:
      if (v.fn().kind == FunctionKind::kMacro) {
        out += "<Macro " + py_repr(v.fn().name) + ">";
      } else {
        out += "<built-in method " + v.fn().name + ">";
      }
      return;
    case Value::Kind::kLoop: {
      const LoopState& l = v.loop();
      out += "<LoopContext " + std::to_string(l.index0 + 1) + "/" +
             std::to_string(l.items->size()) + ">";
      return;
    }
  }
}

std::string json_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString:
      return key.s();
    case Value::Kind::kNone:
      return "null";
    case Value::Kind::kBool:
      return key.b() ? "true" : "false";
    case Value::Kind::kInt:
      return std::to_string(key.i());
    case Value::Kind::kFloat: {
      double f = key.f();
      if (std::isnan(f)) return "NaN";
      if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
      return float_repr(f);
    }
    default:
      raise("TypeError: keys must be str, int, float, bool or None, not ", type_name(key));
  }
}

// The items of a dict in output order: as inserted, or sorted by key (sort_keys=True).
std::vector<const std::pair<Value, Value>*> json_order(
    const std::vector<std::pair<Value, Value>>& items, bool sort_keys) {
  std::vector<const std::pair<Value, Value>*> order;
  for (const auto& item : items) order.push_back(&item);
  if (!sort_keys) return order;
  for (const auto* item : order) {
    if (!item->first.is_string() && !item->first.is_number() && !item->first.is_none()) {
      raise("TypeError: keys must be str, int, float, bool or None, not ", type_name(item->first));
    }
  }
  // Python sorts the (key, value) pairs; mixed key types raise like Python's sorted().
  merge_sort(order,
             [](const auto* x, const auto* y) { return compare(x->first, y->first, CmpOp::kLt); });
  return order;
}

void json_impl(const Value& v, const JsonOptions& o, int level, std::string& out, int depth) {
  check_depth(depth);
  auto newline = [&](int lvl) {
    out.push_back('\n');
    for (int k = 0; k < lvl; ++k) out += o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.b() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.i());
      return;
    case Value::Kind::kFloat: {
      double f = v.f();
      if (std::isnan(f)) {
        out += "NaN";
      } else if (std::isinf(f)) {
        out += f > 0 ? "Infinity" : "-Infinity";
      } else {
        out += float_repr(f);
      }
      return;
    }
    case Value::Kind::kString:
      out += json_quote(v.s(), o.ensure_ascii);
      return;
    case Value::Kind::kList: {
      const auto& items = v.list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += "[";
      if (o.has_indent) newline(level + 1);
      for (size_t k = 0; k < items.size(); ++k) {
        if (k > 0) {
          out += o.item_separator;
          if (o.has_indent) newline(level + 1);
        }
        json_impl(items[k], o, level + 1, out, depth + 1);
      }
      if (o.has_indent) newline(level);
      out += "]";
      return;
    }
    case Value::Kind::kDict: {
      const auto& items = v.dict().items;
      if (items.empty()) {
        out += "{}";
        return;
      }
      out += "{";
      if (o.has_indent) newline(level + 1);
      bool first = true;
      for (const auto* item : json_order(items, o.sort_keys)) {
        if (!first) {
          out += o.item_separator;
          if (o.has_indent) newline(level + 1);
        }
        first = false;
        out += json_quote(json_key(item->first), o.ensure_ascii);
        out += o.key_separator;
        json_impl(item->second, o, level + 1, out, depth + 1);
      }
      if (o.has_indent) newline(level);
      out += "}";
      return;
    }
    default: {
      std::string name = v.is_undefined()                                         ? "Undefined"
                         : v.is_function() && v.fn().kind == FunctionKind::kMacro ? "Macro"
                                                                                  : type_name(v);
      raise("TypeError: Object of type ", name, " is not JSON serializable");
    }
  }
}

}  // namespace

std::string to_str(const Value& v) {
  if (v.is_string()) return v.s();
  std::string out;
  repr_impl(v, out, true, 0);
  return out;
}

std::string repr(const Value& v) {
  std::string out;
  repr_impl(v, out, false, 0);
  return out;
}

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  json_impl(v, options, 0, out, 0);
  return out;
}

}  // namespace pagoda::jinja
