// libFuzzer target: structured-output grammars from any bytes, compiled the way the server
// compiles them, under a small GrammarBudget. The first byte picks the source kind: the rest is
// a JSON schema, a regex or GBNF text as it is (libFuzzer mutates the text), or the choices of
// a generator that writes one, favouring nesting, alternation and repetition (anyOf and $ref,
// type lists, large enums and counts, groups inside groups). Then the grammar's first mask and
// a walk of bytes through it. Every input either compiles or throws pagoda::Error (a
// GrammarLimitError past the budget): never a crash, a hang, unbounded memory or UB.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "grammar/gbnf.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/tokenizer.h"

namespace {

using json = nlohmann::ordered_json;
using namespace pagoda;

// The fuzzer's bytes as a stream of choices (zeros once they run out).
class Choices {
 public:
  Choices(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t next() { return pos_ < size_ ? data_[pos_++] : 0; }
  int below(int n) { return next() % n; }
  // Counts lean small, with a few large ones: repetition bounds the budget must stop.
  int count() {
    const uint8_t b = next();
    return b < 200 ? b % 8 : b < 250 ? b * 40 : 65535;
  }

 private:
  const uint8_t* data_;
  size_t size_, pos_ = 0;
};

std::string gen_gbnf_expr(Choices& c, int depth) {
  switch (depth > 6 ? c.below(3) : c.below(7)) {
    case 0:
      return "\"" + std::string(1 + c.below(3), static_cast<char>('a' + c.below(3))) + "\"";
    case 1:
      return c.below(2) ? "[a-c]" : ".";
    case 2:
      return "r" + std::to_string(c.below(4));
    case 3:  // alternation
      return "(" + gen_gbnf_expr(c, depth + 1) + " | " + gen_gbnf_expr(c, depth + 1) + ")";
    case 4:  // sequence
      return gen_gbnf_expr(c, depth + 1) + " " + gen_gbnf_expr(c, depth + 1);
    case 5: {  // repetition
      const char* ops[] = {"*", "+", "?"};
      const int op = c.below(4);
      if (op < 3) return "(" + gen_gbnf_expr(c, depth + 1) + ")" + ops[op];
      const int m = c.count(), n = m + c.count();
      return "(" + gen_gbnf_expr(c, depth + 1) + "){" + std::to_string(m) + "," +
             std::to_string(n) + "}";
    }
    default:
      return "(\"\" | " + gen_gbnf_expr(c, depth + 1) + ")";  // nullable
  }
}

std::string gen_gbnf(Choices& c) {
  std::string out = "root ::= " + gen_gbnf_expr(c, 0) + "\n";
  for (int r = 0; r < 4; ++r) out += "r" + std::to_string(r) + " ::= " + gen_gbnf_expr(c, 1) + "\n";
  return out;
}

std::string gen_regex(Choices& c, int depth) {
  switch (depth > 6 ? c.below(2) : c.below(5)) {
    case 0:
      return std::string(1, static_cast<char>('a' + c.below(3)));
    case 1:
      return c.below(2) ? "[^x]" : ".";
    case 2:
      return "(" + gen_regex(c, depth + 1) + "|" + gen_regex(c, depth + 1) + ")";
    case 3:
      return gen_regex(c, depth + 1) + gen_regex(c, depth + 1);
    default: {
      const int m = c.count();
      return "(" + gen_regex(c, depth + 1) + "){" + std::to_string(m) + "," +
             std::to_string(m + c.count()) + "}";
    }
  }
}

json gen_schema(Choices& c, int depth, int num_defs) {
  const int kind = depth > 5 ? 5 + c.below(4) : c.below(9);
  switch (kind) {
    case 0: {  // anyOf over $refs, the doubling shape
      json list = json::array();
      for (int i = 0, n = 1 + c.below(3); i < n; ++i)
        list.push_back({{"$ref", "#/$defs/d" + std::to_string(c.below(num_defs))}});
      return {{"anyOf", list}};
    }
    case 1: {
      json props = json::object();
      json required = json::array();
      // At most 2,040 members: nlohmann's ordered_map finds keys by a linear search, so the
      // generator itself would be quadratic past that.
      for (int i = 0, n = c.below(2) ? c.below(6) : std::min(c.count(), 2040); i < n; ++i) {
        props["p" + std::to_string(i)] = gen_schema(c, depth + 1, num_defs);
        if (c.below(2)) required.push_back("p" + std::to_string(i));
      }
      return {{"type", "object"}, {"properties", props}, {"required", required}};
    }
    case 2: {
      json s = {{"type", c.below(2) ? json("array") : json({"array", "array", "null"})},
                {"items", gen_schema(c, depth + 1, num_defs)}};
      if (c.below(2)) s["maxItems"] = c.count();
      return s;
    }
    case 3:
      return {{"oneOf", {gen_schema(c, depth + 1, num_defs), gen_schema(c, depth + 1, num_defs)}}};
    case 4:
      return {{"$ref", "#/$defs/d" + std::to_string(c.below(num_defs))}};
    case 5:
      return {{"type", "string"}, {"maxLength", c.count()}};
    case 6: {
      json values = json::array();
      for (int i = 0, n = 1 + c.count(); i < n; ++i) values.push_back("v" + std::to_string(i));
      return {{"enum", values}};
    }
    case 7:
      return {{"type", "integer"}, {"minimum", -c.count()}, {"maximum", c.count() * 1000}};
    default:
      return {{"type", "string"}, {"pattern", gen_regex(c, depth)}};
  }
}

json gen_schema_root(Choices& c) {
  const int num_defs = 1 + c.below(8);
  json defs = json::object();
  for (int i = 0; i < num_defs; ++i) defs["d" + std::to_string(i)] = gen_schema(c, 1, num_defs);
  json root = gen_schema(c, 0, num_defs);
  if (root.is_object()) root["$defs"] = defs;
  return root;
}

// A byte-level vocabulary: every byte, and a few longer tokens a grammar's JSON would use.
const Tokenizer& tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = [] {
    Vocab v;
    v.kind = TokenizerKind::kBpe;
    v.model = "gpt2";
    v.pre = "gpt-2";
    v.add_space_prefix = false;
    for (int b = 0; b < 256; ++b) v.tokens.emplace_back(byte_to_utf8(static_cast<uint8_t>(b)));
    for (const char* t : {"aa", "ab", "abc", "\"a", "{\"", "\":", "true", "null", "12", "-1", "v1"})
      v.tokens.emplace_back(t);
    v.types.assign(v.tokens.size(), TokenType::kNormal);
    v.build_index("fuzz vocab");
    return Tokenizer::create(std::move(v));
  }();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static GrammarCache cache(tokenizer(), size_t{8} << 20, 4);
  GrammarLimits limits;
  limits.max_states = 20'000;
  limits.max_ms = 500;
  limits.max_mask_bytes = size_t{2} << 20;
  GrammarBudget budget(limits);
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  Choices choices(data + 1, size - 1);
  try {
    std::string gbnf;
    switch (data[0] % 6) {
      case 0:
        gbnf = json_schema_to_gbnf(json::parse(text), &budget);
        break;
      case 1:
        gbnf = regex_to_gbnf(text, "root");
        break;
      case 2:
        gbnf = text;
        break;
      case 3:
        gbnf = json_schema_to_gbnf(gen_schema_root(choices), &budget);
        break;
      case 4:
        gbnf = regex_to_gbnf(gen_regex(choices, 0), "root");
        break;
      default:
        gbnf = gen_gbnf(choices);
    }
    auto masks = cache.get(gbnf, budget);
    // A walk: the input's bytes again, as far as the grammar allows them.
    const Grammar& g = masks->grammar();
    GrammarState s = initial_state(g);
    TokenBitmask mask(masks->trie().vocab_size());
    for (size_t i = 1; i < size && i < 64 && !s.dead(); ++i) {
      masks->allowed(s, mask);
      s = advance(g, s, data[i]);
    }
  } catch (const Error&) {
    // Refusing a grammar (bad, or past the budget) with an Error is the expected outcome.
  } catch (const nlohmann::json::exception&) {
    // Not JSON, or a schema value of the wrong JSON type.
  }
  return 0;
}
