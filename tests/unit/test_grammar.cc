// The grammar engine: GBNF parsing and its errors, matching byte by byte (UTF-8 classes,
// repetition, recursion), regular expressions and JSON schemas as grammars, and token masks
// against a brute-force check of every token of real vocabularies.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "format/gguf_vocab.h"
#include "format/gguf.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/token_mask.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace pagoda {
namespace {

using json = nlohmann::ordered_json;

bool matches(const Grammar& g, std::string_view text) {
  return advance(g, initial_state(g), text).complete;
}

// Whether `text` can still be extended into a sentence (it is a prefix of one).
bool viable(const Grammar& g, std::string_view text) {
  return !advance(g, initial_state(g), text).dead();
}

TEST(Gbnf, LiteralsAlternativesAndRepetition) {
  const Grammar g = parse_gbnf(R"(
# a comment
root ::= greeting " " name ("!" | "?")?
greeting ::= "hello" | "hi"
name ::= [A-Z] [a-z]{1,4}
)");
  EXPECT_TRUE(matches(g, "hello Bob"));
  EXPECT_TRUE(matches(g, "hi Alice!"));
  EXPECT_TRUE(matches(g, "hi Ab?"));
  EXPECT_FALSE(matches(g, "hi A"));       // at least one lower-case letter
  EXPECT_FALSE(matches(g, "hi Abcdef"));  // at most four
  EXPECT_FALSE(matches(g, "hey Bob"));
  EXPECT_TRUE(viable(g, "hel"));
  EXPECT_FALSE(viable(g, "hx"));
  EXPECT_FALSE(matches(g, "hello Bob!!"));  // nothing after the end
}

TEST(Gbnf, ContinuationLinesAndNestedGroups) {
  const Grammar g = parse_gbnf(
      "root ::= item (\",\" item)*\n"
      "item ::= \"a\"\n"
      "  | \"b\" (\n"
      "      \"c\" | \"d\")\n");
  EXPECT_TRUE(matches(g, "a"));
  EXPECT_TRUE(matches(g, "a,bc,bd,a"));
  EXPECT_FALSE(matches(g, "a,"));
  EXPECT_FALSE(matches(g, "b"));
}

TEST(Gbnf, Utf8ClassesAndAnyCharacter) {
  const Grammar g = parse_gbnf(R"(root ::= [à-ÿ]+ "|" . "|" [^a-z\n])");
  EXPECT_TRUE(matches(g, "éü|x|Q"));
  EXPECT_TRUE(matches(g, "ä|🙂|€"));  // '.' and a negated class take 4- and 3-byte characters
  EXPECT_FALSE(matches(g, "e|x|Q"));       // e is not in [à-ÿ]
  EXPECT_FALSE(matches(g, "é|x|q"));
  // A character split between tokens: its first byte alone is viable, a wrong second is not.
  EXPECT_TRUE(viable(g, "\xC3"));
  EXPECT_FALSE(viable(g, "\xC3\x28"));
  EXPECT_FALSE(viable(g, "\xED\xA0\x80"));  // a surrogate is no character
}

TEST(Gbnf, RecursionAndDeepRepetitionStayShallow) {
  const Grammar g = parse_gbnf(R"(
root ::= list
list ::= "[" (list ("," list)*)? "]"
)");
  EXPECT_TRUE(matches(g, "[]"));
  EXPECT_TRUE(matches(g, "[[],[[]],[]]"));
  EXPECT_FALSE(matches(g, "[[]"));
  // 10,000 repetitions: the stack does not grow with them.
  const Grammar rep = parse_gbnf(R"(root ::= "x"*)");
  GrammarState s = initial_state(rep);
  for (int i = 0; i < 10000; ++i) s = advance(rep, s, 'x');
  EXPECT_TRUE(s.complete);
  ASSERT_EQ(s.stacks.size(), 1u);
  EXPECT_LE(s.stacks[0].size(), 2u);
}

TEST(Gbnf, ErrorsNameTheProblemAndWhere) {
  auto message = [](const char* text) {
    try {
      parse_gbnf(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("root ::= missing").find("rule 'missing' is used but never defined"),
            std::string::npos);
  EXPECT_NE(message("root ::= root \"a\" | \"b\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(message("root ::= \"abc").find("grammar 1:"), std::string::npos);
  EXPECT_NE(message("root ::= [z-a]").find("backwards"), std::string::npos);
  EXPECT_NE(message("other ::= \"a\"").find("no rule 'root'"), std::string::npos);
  EXPECT_NE(message("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
  EXPECT_NE(message("root ::= \"a\"{3,1}").find("n < m"), std::string::npos);
}

Grammar regex_grammar(const char* pattern, bool json_string = false) {
  return parse_gbnf(regex_to_gbnf(pattern, "root", {json_string}));
}

TEST(Regex, CommonPatterns) {
  const Grammar phone = regex_grammar(R"(^\d{3}-\d{4}$)");
  EXPECT_TRUE(matches(phone, "555-1234"));
  EXPECT_FALSE(matches(phone, "5551234"));
  const Grammar pets = regex_grammar("(?:cat|dog)s?");
  EXPECT_TRUE(matches(pets, "cats"));
  EXPECT_TRUE(matches(pets, "dog"));
  EXPECT_FALSE(matches(pets, "cow"));
  const Grammar name = regex_grammar(R"([A-Z][a-z]+(\s[A-Z][a-z]+)*)");
  EXPECT_TRUE(matches(name, "Ada Lovelace"));
  EXPECT_FALSE(matches(name, "ada"));
  const Grammar any = regex_grammar(".{2,3}x\\.");
  EXPECT_TRUE(matches(any, "ééx."));
  EXPECT_FALSE(matches(any, "a\nbx."));
  EXPECT_THROW(regex_grammar("(a)\\1"), Error);
  EXPECT_THROW(regex_grammar("(?=a)"), Error);
  EXPECT_THROW(regex_grammar("a**"), Error);
}

TEST(Regex, InsideAJsonStringQuotesAreEscaped) {
  // The pattern's '"' must appear as \" in the JSON text.
  const Grammar g = regex_grammar(R"(say "[a-z]+")", true);
  EXPECT_TRUE(matches(g, R"(say \"hi\")"));
  EXPECT_FALSE(matches(g, R"(say "hi")"));
}

Grammar schema_grammar(const json& schema) { return parse_gbnf(json_schema_to_gbnf(schema)); }

TEST(JsonSchema, ObjectsInOrderWithRequiredAndOptional) {
  const Grammar g = schema_grammar(json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "minLength": 1},
      "age": {"type": "integer", "minimum": 0, "maximum": 150},
      "email": {"type": "string", "format": "uuid"},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}
    },
    "required": ["name", "age"],
    "additionalProperties": false
  })"));
  EXPECT_TRUE(matches(g, R"({"name": "Al", "age": 42})"));
  EXPECT_TRUE(matches(g, R"({"name":"Al","age":0,"tags":["a","b"]})"));
  EXPECT_TRUE(matches(g, "{\n  \"name\": \"Al\",\n  \"age\": 150\n}"));
  EXPECT_TRUE(
      matches(g, R"({"name": "Al", "age": 7, "email": "123e4567-e89b-12d3-a456-426614174000"})"));
  EXPECT_FALSE(matches(g, R"({"age": 42, "name": "Al"})"));  // schema order
  EXPECT_FALSE(matches(g, R"({"name": "Al"})"));             // age is required
  EXPECT_FALSE(matches(g, R"({"name": "", "age": 1})"));     // minLength
  EXPECT_FALSE(matches(g, R"({"name": "Al", "age": 151})"));
  EXPECT_FALSE(matches(g, R"({"name": "Al", "age": -1})"));
  EXPECT_FALSE(matches(g, R"({"name": "Al", "age": 1, "tags": ["a","b","a"]})"));
  EXPECT_FALSE(matches(g, R"({"name": "Al", "age": 1, "x": 1})"));
  EXPECT_FALSE(matches(g, R"({"name": "Al", "age": 1, "email": "nope"})"));
}

TEST(JsonSchema, IntegerRanges) {
  for (auto [lo, hi] : std::vector<std::pair<int, int>>{
           {0, 9}, {3, 17}, {-20, 5}, {-150, -3}, {7, 1234}, {100, 100}}) {
    const Grammar g = schema_grammar({{"type", "integer"}, {"minimum", lo}, {"maximum", hi}});
    for (int x = lo - 30; x <= hi + 30; ++x) {
      EXPECT_EQ(matches(g, std::to_string(x)), x >= lo && x <= hi)
          << x << " in [" << lo << ", " << hi << "]";
    }
    EXPECT_FALSE(matches(g, "007"));
  }
  const Grammar positive = schema_grammar({{"type", "integer"}, {"exclusiveMinimum", 0}});
  EXPECT_TRUE(matches(positive, "1"));
  EXPECT_TRUE(matches(positive, "123456789"));
  EXPECT_FALSE(matches(positive, "0"));
  EXPECT_FALSE(matches(positive, "-4"));
}

TEST(JsonSchema, RefsAnyOfEnumsConstsAndRecursion) {
  const Grammar g = schema_grammar(json::parse(R"({
    "$defs": {
      "node": {"type": "object", "properties": {
        "value": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["value"], "additionalProperties": false}
    },
    "type": "object",
    "properties": {"kind": {"const": "tree"}, "root": {"$ref": "#/$defs/node"},
                   "mode": {"enum": ["fast", 1, null]}, "when": {"type": "string", "format": "date-time"}},
    "required": ["kind", "root", "mode"],
    "additionalProperties": false
  })"));
  EXPECT_TRUE(matches(
      g,
      R"({"kind": "tree", "root": {"value": 1, "children": [{"value": null}]}, "mode": "fast"})"));
  EXPECT_TRUE(matches(
      g,
      R"({"kind": "tree", "root": {"value": -3}, "mode": null, "when": "2024-02-29T12:30:00Z"})"));
  EXPECT_FALSE(matches(g, R"({"kind": "forest", "root": {"value": 1}, "mode": 1})"));
  EXPECT_FALSE(matches(g, R"({"kind": "tree", "root": {"value": 1}, "mode": 2})"));
  EXPECT_FALSE(matches(g, R"({"kind": "tree", "root": {"value": "x"}, "mode": 1})"));
  EXPECT_FALSE(matches(
      g, R"({"kind": "tree", "root": {"value": 1}, "mode": 1, "when": "2024-13-01T00:00:00Z"})"));
}

TEST(JsonSchema, PatternsAndAnyObject) {
  const Grammar g = schema_grammar({{"type", "string"}, {"pattern", "^[A-Z]{2}-\\d+$"}});
  EXPECT_TRUE(matches(g, "\"AB-12\""));
  EXPECT_FALSE(matches(g, "\"Ab-12\""));
  const Grammar any = parse_gbnf(json_object_gbnf());
  EXPECT_TRUE(matches(any, R"({"a": [1, {"b": null}, "c\"d", -1.5e3], "e": true})"));
  EXPECT_FALSE(matches(any, R"([1, 2])"));
  EXPECT_FALSE(matches(any, R"({"a": tru})"));
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  auto message = [](const json& schema) {
    try {
      json_schema_to_gbnf(schema);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(
      message(json::parse(
                  R"({"type":"object","properties":{"t":{"type":"array","uniqueItems":true}}})"))
          .find("unsupported keyword 'uniqueItems' at /properties/t"),
      std::string::npos);
  EXPECT_NE(message({{"type", "number"}, {"maximum", 3.5}}).find("'maximum'"), std::string::npos);
  EXPECT_NE(message({{"type", "string"}, {"format", "email"}}).find("'format'"), std::string::npos);
  EXPECT_NE(message({{"allOf", {json::object(), json::object()}}}).find("allOf"),
            std::string::npos);
  EXPECT_NE(message({{"$ref", "#/$defs/missing"}}).find("points nowhere"), std::string::npos);
  EXPECT_NE(message({{"type", "strin"}}).find("unknown type 'strin'"), std::string::npos);
  EXPECT_EQ(message(json::parse(R"({"type":"string","title":"t","description":"d"})")), "no error");
}

// Masks against the definition: token t is allowed in a state iff its bytes keep the state
// alive. Checked for every token of real vocabularies at every state along real JSON texts.
// Every `stride`-th state is checked against all tokens (a 50k vocabulary makes each costly).
void check_masks(const std::string& vocab_path, size_t stride) {
  auto file = GgufFile::open(vocab_path);
  auto tokenizer = Tokenizer::create(vocab_from_gguf(*file));
  auto trie = std::make_shared<TokenTrie>(*tokenizer);
  const json schema = json::parse(R"({"type": "object", "properties": {
      "city": {"type": "string", "maxLength": 12}, "n": {"type": "integer", "minimum": -5, "maximum": 300},
      "ok": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "string"}}},
      "required": ["city", "n"], "additionalProperties": false})");
  for (const std::string& gbnf : {json_schema_to_gbnf(schema), json_object_gbnf()}) {
    auto g = std::make_shared<const Grammar>(parse_gbnf(gbnf));
    GrammarMasks masks(g, trie);
    TokenBitmask mask(trie->vocab_size());
    const std::string text =
        R"({"city": "Zürich \"Ost\"", "n": 250, "ok": true, "tags": ["a", "b c"]})";
    GrammarState s = initial_state(*g);
    for (size_t i = 0; i <= text.size(); ++i) {
      masks.allowed(s, mask);
      int64_t allowed = 0;
      if (i % stride != 0 && i != text.size()) {
        s = advance(*g, s, static_cast<uint8_t>(text[i]));
        continue;
      }
      for (TokenId t = 0; t < trie->vocab_size(); ++t) {
        const std::string& bytes = trie->bytes(t);
        const bool expected = !bytes.empty() && !advance(*g, s, bytes).dead();
        ASSERT_EQ(mask.test(t), expected)
            << "token " << t << " '" << bytes << "' after '" << text.substr(0, i) << "'";
        allowed += expected;
      }
      if (i < text.size()) {
        EXPECT_GT(allowed, 0);
      }
      if (i == text.size()) break;
      s = advance(*g, s, static_cast<uint8_t>(text[i]));
      if (s.dead()) break;  // the any-object grammar takes the text; the schema too
    }
    EXPECT_GT(masks.num_walks(), 0u);
  }
}

TEST(TokenMask, EqualsBruteForceOnASmallVocabulary) {
  PAGODA_SHARED_OR_SKIP(shared, "models/stories260K.gguf");
  check_masks(shared, 1);
}

TEST(TokenMask, EqualsBruteForceOnAByteLevelVocabulary) {
  PAGODA_SHARED_OR_SKIP(shared, "testdata/vocab/ggml-vocab-gpt-2.gguf");
  check_masks(shared, 5);
}

}  // namespace
}  // namespace pagoda
