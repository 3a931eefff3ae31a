// jinja2's filters over sequences and mappings: sorting, grouping, selection, mapping, joining,
// first/last/min/max, with jinja2's return kinds (lists, or one-shot generators for map, select,
// reject, unique, items, batch and reverse) and its case-insensitive defaults.
#include <unordered_set>

#include "template/filter_util.h"
#include "template/text.h"

namespace pagoda::jinja {
namespace {

Value ignore_case(const Value& v) { return v.is_string() ? Value::string(to_lower(v.s())) : v; }

// jinja2's make_multi_attrgetter: "age,name" gives [item.age, item.name].
std::vector<Value> multi_key(Evaluator& ev, const Value& item,
                             const std::vector<std::vector<Value>>& parts, bool lower) {
  std::vector<Value> key;
  for (const auto& p : parts) {
    Value v = get_attribute(ev, item, p, nullptr);
    key.push_back(lower ? ignore_case(v) : v);
  }
  return key;
}

std::vector<std::vector<Value>> multi_parts(const Value& attribute) {
  std::vector<std::vector<Value>> parts;
  if (attribute.is_string()) {
    std::string comma = ",";
    for (const std::string& piece : py_split(attribute.s(), &comma, -1)) {
      parts.push_back(attribute_parts(Value::string(piece)));
    }
  } else {
    parts.push_back(attribute_parts(attribute));
  }
  return parts;
}

bool keys_less(const std::vector<Value>& x, const std::vector<Value>& y) {
  size_t n = std::min(x.size(), y.size());
  for (size_t k = 0; k < n; ++k) {
    if (!equals(x[k], y[k])) return compare(x[k], y[k], CmpOp::kLt);
  }
  return x.size() < y.size();
}

Value f_batch(Evaluator& ev, const Value& v, CallArgs& a) {
  Params p("batch", a, {"linecount", "fill_with"}, 1);
  int64_t n = p.get_int(0, 1);
  std::vector<Value> out;
  std::vector<Value> tmp;
  for (Value& item : iterate(v)) {
    ev.charge(1);
    if (static_cast<int64_t>(tmp.size()) == n) {
      out.push_back(Value::list(std::move(tmp)));
      tmp.clear();
    }
    tmp.push_back(std::move(item));
  }
  if (!tmp.empty()) {
    if (p.has(1) && !p.get(1).is_none()) {
      while (static_cast<int64_t>(tmp.size()) < n) tmp.push_back(p.get(1));
    }
    out.push_back(Value::list(std::move(tmp)));
  }
  return Value::generator(std::move(out));
}

Value f_dictsort(Evaluator& ev, const Value& v, CallArgs& a) {
  Params p("dictsort", a, {"case_sensitive", "by", "reverse"}, 0);
  bool case_sensitive = p.get_bool(0, false);
  std::string by = p.get_str(1, "key");
  bool reverse = p.get_bool(2, false);
  if (by != "key" && by != "value") raise("You can only sort by either \"key\" or \"value\"");
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_dict()) raise("AttributeError: '", type_name(v), "' object has no attribute 'items'");
  size_t pos = by == "key" ? 0 : 1;
  std::vector<Value> items;
  for (const auto& [key, value] : v.dict().items) items.push_back(Value::list({key, value}, true));
  ev.charge(static_cast<int64_t>(items.size()));
  merge_sort(items, [&](const Value& x, const Value& y) {
    Value kx = x.list().items[pos];
    Value ky = y.list().items[pos];
    if (!case_sensitive) {
      kx = ignore_case(kx);
      ky = ignore_case(ky);
    }
    return reverse ? compare(ky, kx, CmpOp::kLt) : compare(kx, ky, CmpOp::kLt);
  });
  return Value::list(std::move(items));
}

Value f_first(Evaluator&, const Value& v, CallArgs& a) {
  Params p("first", a, {}, 0);
  if (v.is_generator()) {
    Generator& g = v.gen();
    if (g.pos < g.items.size()) return g.items[g.pos++];
  } else if (v.is_list() && !v.list().items.empty()) {
    return v.list().items.front();
  } else if (v.is_dict() || v.is_string() || v.is_undefined() || v.is_list()) {
    std::vector<Value> items = iterate(v);
    if (!items.empty()) return items.front();
  } else {
    iterate(v);  // raises "not iterable"
  }
  return Value::undefined("No first item, sequence was empty.");
}

Value f_last(Evaluator&, const Value& v, CallArgs& a) {
  Params p("last", a, {}, 0);
  if (v.is_list() || v.is_dict() || v.is_string() || v.is_undefined()) {
    if (v.is_list() && !v.list().items.empty()) return v.list().items.back();
    std::vector<Value> items = v.is_list() ? std::vector<Value>{} : iterate(v);
    if (!items.empty()) return items.back();
    return Value::undefined("No last item, sequence was empty.");
  }
  raise("TypeError: '", type_name(v), "' object is not reversible");
}

Value f_groupby(Evaluator& ev, const Value& v, CallArgs& a) {
  Params p("groupby", a, {"attribute", "default", "case_sensitive"}, 1);
  std::vector<Value> parts = attribute_parts(p.get(0));
  const Value* fallback = p.has(1) && !p.get(1).is_none() ? &p.get(1) : nullptr;
  bool lower = !p.get_bool(2, false);
  std::vector<Value> items = iterate(v);
  ev.charge(static_cast<int64_t>(items.size()));
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    Value key = get_attribute(ev, item, parts, fallback);
    keyed.emplace_back(lower ? ignore_case(key) : key, std::move(item));
  }
  merge_sort(keyed,
             [](const auto& x, const auto& y) { return compare(x.first, y.first, CmpOp::kLt); });
  std::vector<Value> out;
  size_t k = 0;
  while (k < keyed.size()) {
    std::vector<Value> group;
    size_t j = k;
    while (j < keyed.size() && equals(keyed[j].first, keyed[k].first))
      group.push_back(keyed[j++].second);
    // The grouper is the first item's real (not lowercased) key.
    Value grouper = lower ? get_attribute(ev, group[0], parts, fallback) : keyed[k].first;
    out.push_back(Value::list({grouper, Value::list(std::move(group))}, true, true));
    k = j;
  }
  return Value::list(std::move(out));
}

Value f_items(Evaluator&, const Value& v, CallArgs& a) {
  Params p("items", a, {}, 0);
  if (v.is_undefined()) return Value::generator({});
  if (!v.is_dict()) raise("TypeError: Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [key, value] : v.dict().items) out.push_back(Value::list({key, value}, true));
  return Value::generator(std::move(out));
}

Value f_join(Evaluator& ev, const Value& v, CallArgs& a) {
  Params p("join", a, {"d", "attribute"}, 0);
  std::string sep = p.get_str(0, "");
  std::vector<Value> items = iterate(v);
  std::vector<Value> parts_attr = p.has(1) ? attribute_parts(p.get(1)) : std::vector<Value>{};
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) {
    ev.charge(1);
    Value item = p.has(1) && !p.get(1).is_none() ? get_attribute(ev, items[k], parts_attr, nullptr)
                                                 : items[k];
    std::string s = to_str(item);
    ev.check_size(out.size() + sep.size() + s.size());
    if (k > 0) out += sep;
    out += s;
  }
  ev.charge_bytes(out.size());
  return Value::string(std::move(out));
}

Value f_length(Evaluator&, const Value& v, CallArgs& a) {
  Params p("length", a, {}, 0);
  return Value::integer(length(v));
}

Value f_list(Evaluator& ev, const Value& v, CallArgs& a) {
  Params p("list", a, {}, 0);
  std::vector<Value> items = iterate(v);
  ev.charge(static_cast<int64_t>(items.size() / 8));
  return Value::list(std::move(items));
}

const Value* take_kwarg(CallArgs& a, const std::string& name, Value* storage) {
  for (auto it = a.kwargs.begin(); it != a.kwargs.end(); ++it) {
    if (it->first == name) {
      *storage = std::move(it->second);
      a.kwargs.erase(it);
      return storage;
    }
  }
  return nullptr;
}

Value f_map(Evaluator& ev, const Value& v, CallArgs& a) {
  if (!truthy(v)) return Value::generator({});
  std::vector<Value> items = iterate(v);
  std::vector<Value> out;
  Value attribute_storage;
  bool has_attribute = false;
  for (const auto& kw : a.kwargs) has_attribute = has_attribute || kw.first == "attribute";
  if (a.args.empty() && has_attribute) {
    Value attribute = *take_kwarg(a, "attribute", &attribute_storage);
    Value fallback_storage;
    const Value* fallback = take_kwarg(a, "default", &fallback_storage);
    if (fallback != nullptr && fallback->is_none()) fallback = nullptr;
    if (!a.kwargs.empty()) raise("Unexpected keyword argument '", a.kwargs[0].first, "'");
    std::vector<Value> parts = attribute_parts(attribute);
    for (const Value& item : items) {
      ev.charge(1);
      out.push_back(get_attribute(ev, item, parts, fallback));
    }
    return Value::generator(std::move(out));
  }
  if (a.args.empty()) raise("map requires a filter argument");
  std::string name = to_str(a.args[0]);
  for (const Value& item : items) {
    ev.charge(1);
    CallArgs sub;
    sub.args.assign(a.args.begin() + 1, a.args.end());
    sub.kwargs = a.kwargs;
    out.push_back(ev.call_filter(name, item, sub));
  }
  return Value::generator(std::move(out));
}

Value min_max(Evaluator& ev, const Value& v, CallArgs& a, bool is_max) {
  Params p(is_max ? "max" : "min", a, {"case_sensitive", "attribute"}, 0);
  bool lower = !p.get_bool(0, false);
  std::vector<Value> parts = p.has(1) ? attribute_parts(p.get(1)) : std::vector<Value>{};
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& item) {
    Value k = get_attribute(ev, item, parts, nullptr);
    return lower ? ignore_case(k) : k;
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t k = 1; k < items.size(); ++k) {
    ev.charge(1);
    Value kk = key(items[k]);
    if (compare(kk, best_key, is_max ? CmpOp::kGt : CmpOp::kLt)) {
      best = k;
      best_key = kk;
    }
  }
  return items[best];
}

Value f_max(Evaluator& ev, const Value& v, CallArgs& a) { return min_max(ev, v, a, true); }

Value f_min(Evaluator& ev, const Value& v, CallArgs& a) { return min_max(ev, v, a, false); }

Value select_or_reject(Evaluator& ev, const Value& v, CallArgs& a, bool keep, bool lookup_attr) {
  if (!truthy(v)) return Value::generator({});
  std::vector<Value> items = iterate(v);
  size_t off = 0;
  std::vector<Value> parts;
  if (lookup_attr) {
    if (a.args.empty()) raise("Missing parameter for attribute name");
    parts = attribute_parts(a.args[0]);
    off = 1;
  }
  bool has_test = a.args.size() > off;
  std::string test = has_test ? to_str(a.args[off]) : "";
  std::vector<Value> out;
  for (Value& item : items) {
    ev.charge(1);
    Value subject = lookup_attr ? get_attribute(ev, item, parts, nullptr) : item;
    bool result;
    if (has_test) {
      CallArgs sub;
      sub.args.assign(a.args.begin() + static_cast<std::ptrdiff_t>(off + 1), a.args.end());
      sub.kwargs = a.kwargs;
      result = ev.call_test(test, subject, sub);
    } else {
      result = truthy(subject);
    }
    if (result == keep) out.push_back(std::move(item));
  }
  return Value::generator(std::move(out));
}

Value f_select(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_or_reject(ev, v, a, true, false);
}

Value f_reject(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_or_reject(ev, v, a, false, false);
}

Value f_selectattr(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_or_reject(ev, v, a, true, true);
}

Value f_rejectattr(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_or_reject(ev, v, a, false, true);
}

Value f_reverse(Evaluator& ev, const Value& v, CallArgs& a) {
  Params p("reverse", a, {}, 0);
  if (v.is_string()) {
    std::u32string cps = decode_utf8(v.s());
    std::reverse(cps.begin(), cps.end());
    return Value::string(encode_utf8(cps));
  }
  if (v.is_list() || v.is_dict() || v.is_undefined()) {
    std::vector<Value> items = iterate(v);
    ev.charge(static_cast<int64_t>(items.size() / 8));
    std::reverse(items.begin(), items.end());
    return Value::generator(std::move(items));
  }
  if (v.is_generator()) {
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  raise("argument must be iterable");
}

Value f_sort(Evaluator& ev, const Value& v, CallArgs& a) {
  Params p("sort", a, {"reverse", "case_sensitive", "attribute"}, 0);
  bool reverse = p.get_bool(0, false);
  bool lower = !p.get_bool(1, false);
  auto parts = multi_parts(p.has(2) ? p.get(2) : Value::none());
  std::vector<Value> items = iterate(v);
  ev.charge(static_cast<int64_t>(items.size()));
  std::vector<std::pair<std::vector<Value>, Value>> keyed;
  for (Value& item : items) keyed.emplace_back(multi_key(ev, item, parts, lower), std::move(item));
  merge_sort(keyed, [&](const auto& x, const auto& y) {
    return reverse ? keys_less(y.first, x.first) : keys_less(x.first, y.first);
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value f_sum(Evaluator& ev, const Value& v, CallArgs& a) {
  Params p("sum", a, {"attribute", "start"}, 0);
  Value acc = p.get_or(1, Value::integer(0));
  if (acc.is_string()) raise("TypeError: sum() can't sum strings [use ''.join(seq) instead]");
  std::vector<Value> parts =
      p.has(0) && !p.get(0).is_none() ? attribute_parts(p.get(0)) : std::vector<Value>{};
  for (const Value& item : iterate(v)) {
    ev.charge(1);
    acc = binary_op(ev, "+", acc, get_attribute(ev, item, parts, nullptr));
  }
  return acc;
}

Value f_unique(Evaluator& ev, const Value& v, CallArgs& a) {
  Params p("unique", a, {"case_sensitive", "attribute"}, 0);
  bool lower = !p.get_bool(0, false);
  std::vector<Value> parts = p.has(1) ? attribute_parts(p.get(1)) : std::vector<Value>{};
  std::unordered_set<std::string> seen;
  std::vector<Value> out;
  for (Value& item : iterate(v)) {
    ev.charge(1);
    Value key = get_attribute(ev, item, parts, nullptr);
    if (lower) key = ignore_case(key);
    if (seen.insert(hash_key(key)).second) out.push_back(std::move(item));
  }
  return Value::generator(std::move(out));
}

}  // namespace

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
std::vector<Value> attribute_parts(const Value& attribute) {
  std::vector<Value> parts;
  if (attribute.is_none() || attribute.is_undefined()) return parts;
  if (!attribute.is_string()) return {attribute};
  std::string sep = ".";
  for (const std::string& piece : py_split(attribute.s(), &sep, -1)) {
    bool digits = !piece.empty();
    for (char c : piece) digits = digits && c >= '0' && c <= '9';
    int64_t n = 0;
    if (digits && parse_py_int(piece, 10, &n)) {
      parts.push_back(Value::integer(n));
    } else {
      parts.push_back(Value::string(piece));
    }
  }
  return parts;
}

Value get_attribute(Evaluator& ev, Value item, const std::vector<Value>& parts,
                    const Value* fallback) {
  for (const Value& part : parts) {
    item = ev.getitem(item, part);
    if (fallback != nullptr && item.is_undefined()) item = *fallback;
  }
  return item;
}

void add_sequence_filters(FilterTable* table) {
  table->emplace("batch", f_batch);
  table->emplace("count", f_length);
  table->emplace("dictsort", f_dictsort);
  table->emplace("first", f_first);
  table->emplace("groupby", f_groupby);
  table->emplace("items", f_items);
  table->emplace("join", f_join);
  table->emplace("last", f_last);
  table->emplace("length", f_length);
  table->emplace("list", f_list);
  table->emplace("map", f_map);
  table->emplace("max", f_max);
  table->emplace("min", f_min);
  table->emplace("reject", f_reject);
  table->emplace("rejectattr", f_rejectattr);
  table->emplace("reverse", f_reverse);
  table->emplace("select", f_select);
  table->emplace("selectattr", f_selectattr);
  table->emplace("sort", f_sort);
  table->emplace("sum", f_sum);
  table->emplace("unique", f_unique);
}

}  // namespace pagoda::jinja
