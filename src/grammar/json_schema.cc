// JSON schema to GBNF (see json_schema.h): one rule per schema node, shared rules for the JSON
// primitives, $ref rules emitted once (so recursive schemas become recursive rules).
#include "grammar/json_schema.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "core/error.h"
#include "grammar/gbnf.h"
#include "grammar/regex.h"

namespace pagoda {
namespace {

using json = nlohmann::ordered_json;

// The shared primitives. `ws` lets a model put a space or a newline and indentation between
// tokens, as models trained on pretty-printed JSON do, but not whitespace without end.
constexpr const char* kPrimitives = R"(ws ::= | " " | "\n" [ \t]{0,20}
json-char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
json-string ::= "\"" json-char* "\""
json-integer ::= "-"? ("0" | [1-9] [0-9]{0,17})
json-number ::= json-integer ("." [0-9]{1,20})? ([eE] [-+]? [0-9]{1,4})?
json-boolean ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-object ::= "{" ws (json-string ws ":" ws json-value ws ("," ws json-string ws ":" ws json-value ws)*)? "}"
json-array ::= "[" ws (json-value ws ("," ws json-value ws)*)? "]"
)";

std::string digits_class(char lo, char hi) {
  if (lo == hi) return std::string("\"") + lo + "\"";
  return std::string("[") + lo + "-" + hi + "]";
}

// Non-negative integers in [a, b] written with the same number of digits, no leading zeros
// beyond what the bounds have: the classic digit-by-digit split.
std::string same_length_range(const std::string& a, const std::string& b) {
  if (a.empty()) return "";
  if (a == b) return "\"" + a + "\"";
  if (a[0] == b[0]) {
    const std::string rest = same_length_range(a.substr(1), b.substr(1));
    return "\"" + std::string(1, a[0]) + "\" " + rest;
  }
  const size_t n = a.size() - 1;
  const std::string nines(n, '9'), zeros(n, '0');
  std::vector<std::string> alts;
  auto any = [&](size_t k) { return k == 0 ? std::string() : " [0-9]{" + std::to_string(k) + "}"; };
  if (a.substr(1) == zeros && b.substr(1) == nines) {
    return digits_class(a[0], b[0]) + any(n);
  }
  alts.push_back("\"" + std::string(1, a[0]) + "\" " + same_length_range(a.substr(1), nines));
  if (a[0] + 1 <= b[0] - 1) {
    alts.push_back(digits_class(static_cast<char>(a[0] + 1), static_cast<char>(b[0] - 1)) + any(n));
  }
  alts.push_back("\"" + std::string(1, b[0]) + "\" " + same_length_range(zeros, b.substr(1)));
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

constexpr int kMaxDigits = 18;

// Non-negative integers in [lo, hi] (hi: none means unbounded), without leading zeros.
std::string uint_range(uint64_t lo, std::optional<uint64_t> hi) {
  std::vector<std::string> alts;
  const std::string slo = std::to_string(lo);
  const int max_len = hi ? static_cast<int>(std::to_string(*hi).size()) : kMaxDigits;
  for (int len = static_cast<int>(slo.size()); len <= max_len; ++len) {
    std::string smallest(static_cast<size_t>(len), '0');
    if (len > 1) smallest[0] = '1';
    const std::string largest(static_cast<size_t>(len), '9');
    const std::string a = len == static_cast<int>(slo.size()) ? slo : smallest;
    const std::string b = hi && len == max_len ? std::to_string(*hi) : largest;
    if (a.size() == b.size() && a <= b) alts.push_back(same_length_range(a, b));
  }
  if (alts.empty()) fail("an empty integer range");
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

// Whether `v` is a JSON value of schema type `t`.
bool has_type(const json& v, const std::string& t) {
  if (t == "integer")
    return v.is_number_integer() ||
           (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  return false;
}

// A URI fragment's percent escapes decoded (RFC 3986), as a $ref's JSON pointer is read.
std::string percent_decoded(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    auto hex = [&](size_t k) {
      const char c = k < s.size() ? s[k] : '\0';
      return c >= '0' && c <= '9'   ? c - '0'
             : c >= 'a' && c <= 'f' ? c - 'a' + 10
             : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                    : -1;
    };
    if (hex(i + 1) < 0 || hex(i + 2) < 0) fail("JSON schema: $ref '", s, "' has a bad % escape");
    out.push_back(static_cast<char>(hex(i + 1) * 16 + hex(i + 2)));
    i += 2;
  }
  return out;
}

class Converter {
 public:
  Converter(const json& root, std::string prefix, GrammarBudget* budget)
      : root_(root), prefix_(std::move(prefix)), budget_(budget) {}

  // The rule `name` and its helpers (no primitives).
  std::string run(const std::string& name) {
    const std::string root = visit(root_, "", "root");
    std::string out = name + " ::= " + root + "\n";
    count(out.size());
    for (const auto& r : rules_) out += r;
    return out;
  }

 private:
  static std::string where(const std::string& path) { return path.empty() ? "/" : path; }

  [[noreturn]] void unsupported(const std::string& keyword, const std::string& path,
                                const std::string& why = "") const {
    fail("JSON schema: unsupported keyword '", keyword, "' at ", where(path),
         why.empty() ? "" : ": ", why);
  }

  // Every rule is counted against the budget as it is made: a schema that makes the same
  // subschema's rules again at each level ("type": ["object", "object"]) stops at the limit.
  void count(size_t bytes) {
    if (budget_ != nullptr) budget_->add_text(bytes);
  }

  void add_rule(std::string rule) {
    count(rule.size());
    rules_.push_back(std::move(rule));
  }

  std::string new_rule(const std::string& hint, const std::string& body) {
    std::string name = prefix_ + "s" + std::to_string(rules_.size()) + "-" + hint;
    for (char& c : name) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-')) c = '-';
    }
    add_rule(name + " ::= " + body + "\n");
    return name;
  }

  std::string ref_rule(const std::string& written, const std::string& path) {
    const std::string ref = percent_decoded(written);
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    const json* target = nullptr;
    if (ref == "#") {
      target = &root_;
    } else if (ref.rfind("#/", 0) == 0) {
      target = &root_;
      size_t start = 2;
      while (start <= ref.size()) {
        const size_t end = std::min(ref.find('/', start), ref.size());
        // The key, JSON pointer escapes (~1 for '/', ~0 for '~') decoded.
        std::string key;
        for (size_t i = start; i < end; ++i) {
          if (ref[i] == '~' && i + 1 < end && (ref[i + 1] == '0' || ref[i + 1] == '1')) {
            key.push_back(ref[i + 1] == '1' ? '/' : '~');
            ++i;
          } else {
            key.push_back(ref[i]);
          }
        }
        if (!target->is_object() || !target->contains(key)) {
          fail("JSON schema: $ref '", ref, "' at ", path, " points nowhere");
        }
        target = &(*target)[key];
        start = end + 1;
      }
    } else {
      unsupported("$ref", path, "only references inside the schema (#/...) are supported");
    }
    // The name first, so a recursive reference finds it.
    const std::string name = prefix_ + "ref-" + std::to_string(refs_.size());
    refs_[ref] = name;
    const std::string body = visit(*target, ref, "ref");
    add_rule(name + " ::= " + body + "\n");
    return name;
  }

  // The GBNF expression for `s`, at most kMaxDepth schemas (and $refs) deep.
  std::string visit(const json& s, const std::string& path, const std::string& hint) {
    if (++depth_ > kMaxDepth) {
      fail("JSON schema: subschemas and $refs nest deeper than ", kMaxDepth, " at ", where(path));
    }
    if (budget_ != nullptr) budget_->tick();
    std::string expr = visit_node(s, path, hint);
    --depth_;
    return expr;
  }

  std::string visit_node(const json& s, const std::string& path, const std::string& hint) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail("JSON schema: 'false' at ", path, " accepts nothing");
      return "json-value";
    }
    if (!s.is_object()) fail("JSON schema: the schema at ", path, " is not an object");
    static const std::set<std::string> annotations = {
        "title",      "description", "default",   "examples", "$schema",     "$id",   "$comment",
        "deprecated", "readOnly",    "writeOnly", "$defs",    "definitions", "strict"};
    static const std::set<std::string> known = {"type",
                                                "properties",
                                                "required",
                                                "additionalProperties",
                                                "enum",
                                                "const",
                                                "items",
                                                "minItems",
                                                "maxItems",
                                                "anyOf",
                                                "oneOf",
                                                "allOf",
                                                "$ref",
                                                "nullable",
                                                "minLength",
                                                "maxLength",
                                                "pattern",
                                                "format",
                                                "minimum",
                                                "maximum",
                                                "exclusiveMinimum",
                                                "exclusiveMaximum"};
    for (const auto& [key, value] : s.items()) {
      if (!annotations.count(key) && !known.count(key)) unsupported(key, path);
    }
    std::string expr = node(s, path, hint);
    if (s.value("nullable", false)) expr = "(" + expr + " | json-null)";
    return expr;
  }

  std::string node(const json& s, const std::string& path, const std::string& hint) {
    if (s.contains("$ref")) {
      if (s.size() > 1) {
        for (const auto& [key, v] : s.items()) {
          if (key != "$ref" && key != "description" && key != "title" && key != "$defs" &&
              key != "definitions") {
            unsupported(key, path, "beside $ref");
          }
        }
      }
      return ref_rule(s["$ref"].get<std::string>(), path);
    }
    if (s.contains("const") || s.contains("enum")) return values(s, path);
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& list = s[key];
      if (!list.is_array() || list.empty())
        fail("JSON schema: '", key, "' at ", path, " must be a non-empty list");
      std::string out = "(";
      for (size_t i = 0; i < list.size(); ++i) {
        out += (i ? " | " : "") + visit(list[i], path + "/" + key + "/" + std::to_string(i), hint);
      }
      return out + ")";
    }
    if (s.contains("allOf")) {
      const json& list = s["allOf"];
      if (!list.is_array() || list.size() != 1)
        unsupported("allOf", path, "only allOf of one schema");
      return visit(list[0], path + "/allOf/0", hint);
    }
    if (!s.contains("type")) {
      if (s.contains("properties")) return object(s, path, hint);
      if (s.contains("items")) return array(s, path, hint);
      return "json-value";
    }
    const json& type = s["type"];
    if (type.is_array()) {
      if (type.empty())
        fail("JSON schema: 'type' at ", where(path),
             " is an empty list: no value has none of the types");
      std::string out = "(";
      for (size_t i = 0; i < type.size(); ++i)
        out += (i ? " | " : "") + typed(s, type[i], path, hint);
      return out + ")";
    }
    return typed(s, type, path, hint);
  }

  // const or enum: the values listed, those of the schema's 'type' when it has one.
  std::string values(const json& s, const std::string& path) {
    const json list = s.contains("const") ? json::array({s["const"]}) : s["enum"];
    if (!list.is_array() || list.empty())
      fail("JSON schema: 'enum' at ", where(path), " must be a non-empty list");
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      for (const json& one : t.is_array() ? t : json::array({t})) {
        if (!one.is_string())
          fail("JSON schema: 'type' at ", where(path), " must be a string or a list");
        types.push_back(one.get<std::string>());
      }
    }
    std::string out;
    for (const json& v : list) {
      bool ok = types.empty() && !s.contains("type");
      for (const std::string& t : types) ok = ok || has_type(v, t);
      if (!ok) continue;
      const std::string literal = gbnf_literal(v.dump());
      count(literal.size());
      out += (out.empty() ? "(" : " | ") + literal;
    }
    if (out.empty()) {
      fail("JSON schema: no value of '", s.contains("const") ? "const" : "enum", "' at ",
           where(path), " has the schema's 'type': nothing matches");
    }
    return out + ")";
  }

  std::string typed(const json& s, const json& type, const std::string& path,
                    const std::string& hint) {
    if (!type.is_string()) fail("JSON schema: 'type' at ", path, " must be a string or a list");
    const std::string t = type.get<std::string>();
    if (t == "object") return object(s, path, hint);
    if (t == "array") return array(s, path, hint);
    if (t == "string") return string(s, path, hint);
    if (t == "integer") return integer(s, path, hint);
    if (t == "number") return number(s, path);
    if (t == "boolean") return "json-boolean";
    if (t == "null") return "json-null";
    fail("JSON schema: unknown type '", t, "' at ", path);
  }

  std::string object(const json& s, const std::string& path, const std::string& hint) {
    std::vector<std::pair<std::string, std::string>> props;  // key literal, value expression
    std::set<std::string> required;
    if (s.contains("required")) {
      for (const json& r : s["required"]) required.insert(r.get<std::string>());
    }
    std::vector<bool> is_required;
    if (s.contains("properties")) {
      if (!s["properties"].is_object())
        fail("JSON schema: 'properties' at ", path, " must be an object");
      for (const auto& [key, sub] : s["properties"].items()) {
        props.emplace_back(gbnf_literal(json(key).dump()),
                           visit(sub, path + "/properties/" + key, key));
        is_required.push_back(required.count(key) > 0);
      }
    }
    for (const std::string& r : required) {
      if (!s.contains("properties") || !s["properties"].contains(r)) {
        fail("JSON schema: required property '", r, "' at ", path, " is not in 'properties'");
      }
    }
    // Extra members: after the listed ones, any key not among them cannot be told apart by a
    // grammar cheaply, so any string key is allowed.
    std::string extra;
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) {
        extra =
            new_rule(hint + "-extra", "json-string ws \":\" ws " +
                                          visit(a, path + "/additionalProperties", hint) + " ws");
      }
    } else if (!s.contains("properties")) {
      extra = new_rule(hint + "-extra", "json-string ws \":\" ws json-value ws");
    }
    // Members in order; rest(i, first) generates members i.. when `first` none came yet.
    const size_t n = props.size();
    std::map<std::pair<size_t, bool>, std::string> names;
    std::function<std::string(size_t, bool)> rest = [&](size_t i, bool first) -> std::string {
      if (auto it = names.find({i, first}); it != names.end()) return it->second;
      std::string body;
      const std::string comma = first ? "" : "\",\" ws ";
      if (i == n) {
        body = extra.empty() ? "\"\"" : "(" + comma + extra + "(\",\" ws " + extra + ")*)?";
      } else {
        const std::string member = comma + props[i].first + " ws \":\" ws " + props[i].second +
                                   " ws " + rest(i + 1, false);
        body = is_required[i] ? member : "(" + member + " | " + rest(i + 1, first) + ")";
      }
      return names[{i, first}] = new_rule(hint + "-members", body);
    };
    return "\"{\" ws " + rest(0, true) + " \"}\"";
  }

  std::string array(const json& s, const std::string& path, const std::string& hint) {
    if (s.contains("items") && s["items"].is_boolean() && !s["items"].get<bool>()) {
      // No item is valid: only the empty array.
      if (s.value("minItems", int64_t{0}) > 0)
        fail("JSON schema: 'items': false with minItems above 0 at ", where(path),
             " matches nothing");
      return "\"[\" ws \"]\"";
    }
    const std::string item =
        s.contains("items") ? visit(s["items"], path + "/items", hint + "-item") : "json-value";
    const int64_t min = s.value("minItems", int64_t{0});
    const int64_t max = s.contains("maxItems") ? s["maxItems"].get<int64_t>() : -1;
    if (min < 0 || (max >= 0 && max < min) || min > 10000 || max > 10000) {
      fail("JSON schema: minItems / maxItems at ", path, " out of range");
    }
    const std::string element = new_rule(hint + "-element", item + " ws");
    if (max == 0) return "\"[\" ws \"]\"";
    // element ("," element){min-1, max-1}, optional as a whole when min == 0.
    std::string more = "(\",\" ws " + element + ")";
    const int64_t lo = std::max<int64_t>(0, min - 1);
    more += max < 0 ? "{" + std::to_string(lo) + ",}"
                    : "{" + std::to_string(lo) + "," + std::to_string(max - 1) + "}";
    std::string body = element + " " + more;
    if (min == 0) body = "(" + body + ")?";
    return "\"[\" ws " + body + " \"]\"";
  }

  std::string string(const json& s, const std::string& path, const std::string& hint) {
    if (s.contains("format")) {
      const std::string f = s["format"].get<std::string>();
      const std::string date =
          "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" "
          "[01])";
      const std::string time =
          "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,9})? "
          "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])";
      std::string body;
      if (f == "date")
        body = date;
      else if (f == "time")
        body = time;
      else if (f == "date-time")
        body = date + " \"T\" " + time;
      else if (f == "uuid")
        body =
            "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
            "[0-9a-fA-F]{12}";
      else
        unsupported("format", path, "'" + f + "' (supported: date, time, date-time, uuid)");
      return "\"\\\"\" " + body + " \"\\\"\"";
    }
    if (s.contains("pattern")) {
      if (s.contains("minLength") || s.contains("maxLength")) {
        unsupported("pattern", path, "together with minLength / maxLength");
      }
      RegexOptions o;
      o.json_string = true;
      const std::string name = prefix_ + "s" + std::to_string(rules_.size()) + "-pattern";
      add_rule(regex_to_gbnf(s["pattern"].get<std::string>(), name, o));
      return "\"\\\"\" " + name + " \"\\\"\"";
    }
    const int64_t min = s.value("minLength", int64_t{0});
    const int64_t max = s.contains("maxLength") ? s["maxLength"].get<int64_t>() : -1;
    if (min < 0 || (max >= 0 && max < min) || min > 100000 || max > 100000) {
      fail("JSON schema: minLength / maxLength at ", path, " out of range");
    }
    if (min == 0 && max < 0) return "json-string";
    const std::string count = max < 0 ? "{" + std::to_string(min) + ",}"
                                      : "{" + std::to_string(min) + "," + std::to_string(max) + "}";
    return "\"\\\"\" json-char" + count + " \"\\\"\"";
  }

  std::string integer(const json& s, const std::string& path, const std::string& hint) {
    std::optional<int64_t> lo, hi;
    auto bound = [&](const char* key, int64_t adjust, std::optional<int64_t>& out, bool is_lo) {
      if (!s.contains(key)) return;
      const json& v = s[key];
      if (!v.is_number()) fail("JSON schema: '", key, "' at ", path, " must be a number");
      const double d = v.get<double>();
      if (std::fabs(d) > 1e17) unsupported(key, path, "a bound beyond 17 digits");
      int64_t x = static_cast<int64_t>(is_lo ? std::ceil(d) : std::floor(d));
      if (d == std::floor(d)) x += adjust;
      out = out ? (is_lo ? std::max(*out, x) : std::min(*out, x)) : x;
    };
    bound("minimum", 0, lo, true);
    bound("exclusiveMinimum", 1, lo, true);
    bound("maximum", 0, hi, false);
    bound("exclusiveMaximum", -1, hi, false);
    if (!lo && !hi) return "json-integer";
    if (lo && hi && *lo > *hi) fail("JSON schema: the integer range at ", path, " is empty");
    std::vector<std::string> alts;
    // Negative part: -k for k in [max(1, -hi), -lo].
    if (!lo || *lo < 0) {
      const uint64_t k_lo = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 1;
      std::optional<uint64_t> k_hi;
      if (lo) k_hi = static_cast<uint64_t>(-*lo);
      alts.push_back("\"-\" " + uint_range(k_lo, k_hi));
    }
    if (!hi || *hi >= 0) {
      const uint64_t n_lo = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
      std::optional<uint64_t> n_hi;
      if (hi) n_hi = static_cast<uint64_t>(*hi);
      alts.push_back(uint_range(n_lo, n_hi));
    }
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
    return new_rule(hint + "-int", body);
  }

  std::string number(const json& s, const std::string& path) {
    for (const char* key : {"maximum", "exclusiveMaximum", "exclusiveMinimum"}) {
      if (s.contains(key)) unsupported(key, path, "a grammar bounds numbers only by 'minimum: 0'");
    }
    if (s.contains("minimum")) {
      if (!s["minimum"].is_number() || s["minimum"].get<double>() != 0.0) {
        unsupported("minimum", path, "a grammar bounds numbers only by 'minimum: 0'");
      }
      return "(\"0\" | [1-9] [0-9]{0,17}) (\".\" [0-9]{1,20})? ([eE] [-+]? [0-9]{1,4})?";
    }
    return "json-number";
  }

  // Subschemas inside subschemas, $refs followed included (visit recurses on them).
  static constexpr int kMaxDepth = 128;

  const json& root_;
  const std::string prefix_;
  GrammarBudget* const budget_;
  std::vector<std::string> rules_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;
};

}  // namespace

std::string json_schema_to_gbnf(const json& schema, GrammarBudget* budget) {
  return Converter(schema, "", budget).run("root") + kPrimitives;
}

std::string json_schema_rules(const json& schema, const std::string& name, GrammarBudget* budget) {
  return Converter(schema, name + "-", budget).run(name);
}

std::string json_primitives_gbnf() { return kPrimitives; }

std::string json_object_gbnf() { return std::string("root ::= json-object\n") + kPrimitives; }

}  // namespace pagoda
