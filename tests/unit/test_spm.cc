// SentencePiece-style BPE: merge order by score or by merge rank, byte fallback, special tokens,
// decoding; then the real vocabularies under ../shared.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "conformance/vocab_cases.h"
#include "core/mapped_file.h"
#include "format/gguf_vocab.h"
#include "format/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

struct VocabBuilder {
  Vocab v;
  VocabBuilder& add(const std::string& text, float score = 0, TokenType type = TokenType::kNormal) {
    v.tokens.push_back(text);
    v.scores.push_back(score);
    v.types.push_back(type);
    return *this;
  }
  VocabBuilder& add_bytes() {
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      add(buf, 0, TokenType::kByte);
    }
    return *this;
  }
  std::unique_ptr<Tokenizer> build() {
    v.kind = TokenizerKind::kSpm;
    v.model = "llama";
    v.build_index("test");
    return Tokenizer::create(v);
  }
};

// <unk> <s> </s>, all byte tokens, and pieces that spell "▁hello" fully but "▁world" only in parts.
VocabBuilder hello_vocab() {
  VocabBuilder b;
  b.add("<unk>", 0, TokenType::kUnknown).add("<s>", 0, TokenType::kControl);
  b.add("</s>", 0, TokenType::kControl).add_bytes();
  for (const char* c : {"\u2581", "h", "e", "l", "o", "w", "r", "d"}) b.add(c, -100);
  b.add("he", -1).add("ll", -2).add("hell", -3).add("hello", -4).add("\u2581hello", -5);
  b.add("\u2581w", -6).add("or", -7).add("ld", -8);
  b.v.unk = 0;
  b.v.bos = 1;
  b.v.eos = 2;
  return b;
}

std::vector<std::string> pieces(const Tokenizer& tok, const std::vector<TokenId>& ids) {
  std::vector<std::string> out;
  for (TokenId id : ids) out.push_back(tok.piece(id));
  return out;
}

using Pieces = std::vector<std::string>;

TEST(Spm, MergesBestScoringPairsAndPrefixesASpace) {
  auto tok = hello_vocab().build();
  EXPECT_EQ(pieces(*tok, tok->encode("hello world")),
            (Pieces{"\u2581hello", "\u2581w", "or", "ld"}));
  EXPECT_TRUE(tok->encode("").empty());
  EXPECT_EQ(tok->decode(tok->encode("hello world")), "hello world");
  EXPECT_EQ(tok->decode(tok->encode(" hello  world")), " hello  world");
}

TEST(Spm, NoSpacePrefixWhenTheVocabularySaysSo) {
  auto b = hello_vocab();
  b.v.add_space_prefix = false;
  auto tok = b.build();
  EXPECT_EQ(pieces(*tok, tok->encode("hello")), (Pieces{"hello"}));
  EXPECT_FALSE(tok->strips_leading_space());
  EXPECT_EQ(tok->decode(tok->encode(" hello")), " hello");
}

VocabBuilder abc_vocab(float ab_score, float bc_score) {
  VocabBuilder b;
  b.add("<unk>", 0, TokenType::kUnknown).add("a").add("b").add("c");
  b.add("ab", ab_score).add("bc", bc_score).add("ca", 0);
  b.v.unk = 0;
  b.v.add_space_prefix = false;
  return b;
}

TEST(Spm, HigherScoreWinsAndTiesGoLeftmost) {
  auto better_bc = abc_vocab(-1, -0.5f).build();
  EXPECT_EQ(pieces(*better_bc, better_bc->encode("abc")), (Pieces{"a", "bc"}));
  auto tie = abc_vocab(-1, -1).build();
  EXPECT_EQ(pieces(*tie, tie->encode("abc")), (Pieces{"ab", "c"}));
}

TEST(Spm, MergeRankDecidesWhenTheVocabularyHasMerges) {
  // Scores favour "bc"; the merge list must override them, and "ca" (a token, but no merge)
  // must never form.
  auto b = abc_vocab(-1, -0.5f);
  b.v.merges = {{"a", "b"}, {"b", "c"}};
  auto ab_first = b.build();
  EXPECT_EQ(pieces(*ab_first, ab_first->encode("abc")), (Pieces{"ab", "c"}));
  EXPECT_EQ(pieces(*ab_first, ab_first->encode("ca")), (Pieces{"c", "a"}));

  auto b2 = abc_vocab(-0.5f, -1);
  b2.v.merges = {{"b", "c"}, {"a", "b"}};
  auto bc_first = b2.build();
  EXPECT_EQ(pieces(*bc_first, bc_first->encode("abc")), (Pieces{"a", "bc"}));
}

TEST(Spm, MissingCharacterFallsBackToBytes) {
  auto tok = hello_vocab().build();
  std::vector<TokenId> ids = tok->encode("h\u00e9");  // é = C3 A9, not in the vocabulary
  EXPECT_EQ(pieces(*tok, ids), (Pieces{"\u2581", "h", "<0xC3>", "<0xA9>"}));
  EXPECT_EQ(tok->token_to_bytes(ids[2]), "\xC3");
  EXPECT_EQ(tok->decode(ids), "h\u00e9");
  EXPECT_EQ(tok->decode({tok->vocab().find("<0x41>")}), "A");
}

TEST(Spm, MissingCharacterWithoutByteTokensIsUnknown) {
  auto tok = abc_vocab(-1, -1).build();
  EXPECT_EQ(pieces(*tok, tok->encode("a\u00e9\u00e9")), (Pieces{"a", "<unk>", "<unk>"}));
  // HF BPE (a vocabulary with merges) fuses a run of unknown characters into one.
  auto b = abc_vocab(-1, -1);
  b.v.merges = {{"a", "b"}};
  auto hf = b.build();
  EXPECT_EQ(pieces(*hf, hf->encode("a\u00e9\u00e9b\u00e9")), (Pieces{"a", "<unk>", "b", "<unk>"}));
}

TEST(Spm, SpecialTokensAreTextUnlessParsingIsAsked) {
  auto tok = hello_vocab().build();
  TokenId bos = tok->vocab().bos;
  std::vector<TokenId> plain = tok->encode("<s>hello");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), bos), 0);
  EXPECT_EQ(tok->decode(plain), "<s>hello");
  std::vector<TokenId> parsed = tok->encode("<s>hello", EncodeOptions{.parse_special = true});
  // The text after a special token gets the space prefix again.
  EXPECT_EQ(pieces(*tok, parsed), (Pieces{"<s>", "\u2581hello"}));
}

TEST(Spm, AddSpecialAddsBos) {
  auto b = hello_vocab();
  b.v.add_bos = true;
  auto tok = b.build();
  std::vector<TokenId> ids = tok->encode("hello", EncodeOptions{.add_special = true});
  EXPECT_EQ(pieces(*tok, ids), (Pieces{"<s>", "\u2581hello"}));
  EXPECT_EQ(tok->decode(ids), "hello");
  EXPECT_EQ(pieces(*tok, tok->encode("hello")), (Pieces{"\u2581hello"}));
}

std::unique_ptr<Tokenizer> open_gguf_tokenizer(const std::string& path) {
  auto file = GgufFile::open(path);
  return Tokenizer::create(vocab_from_gguf(*file));
}

// An SPM vocabulary without test pairs: it must load, and byte fallback makes text round-trip.
TEST(SpmShared, BaichuanLoadsAndRoundTrips) {
  PAGODA_SHARED_OR_SKIP(path, "testdata/vocab/ggml-vocab-baichuan.gguf");
  auto tok = open_gguf_tokenizer(path);
  for (const char* text : {"Hello world", " leading space", "\u4e2d\u6587\u5206\u8bcd\u6d4b\u8bd5",
                           "tabs\tand\nlines \U0001F999 emoji", "\u00c4pfel"}) {
    std::vector<TokenId> ids = tok->encode(text);
    EXPECT_FALSE(ids.empty()) << text;
    EXPECT_EQ(tok->decode(ids), text);
  }
}

// Merging word by word is a shortcut; a token with "▁" after another character turns it off.
// Both ways must give the same ids.
TEST(SpmShared, WordByWordEqualsWholeText) {
  PAGODA_SHARED_OR_SKIP(vocab_path, "testdata/vocab/ggml-vocab-llama-spm.gguf");
  PAGODA_SHARED_OR_SKIP(text_path, "testdata/text/war-and-peace.txt");
  Vocab v = vocab_from_gguf(*GgufFile::open(vocab_path));
  auto by_word = Tokenizer::create(v);
  v.tokens.push_back("\x01\u2581\x01");  // never formed from this text
  v.scores.push_back(-1e9f);
  v.types.push_back(TokenType::kNormal);
  v.build_index("test");
  auto whole = Tokenizer::create(v);
  std::string text = read_file(text_path).substr(0, 200000);
  EXPECT_EQ(by_word->encode(text), whole->encode(text));
  for (const char* tricky : {"  a  b   ", "\xE2 x \xE2\x96 \xF0\x9F y", "a\n\n  \tb", " "}) {
    EXPECT_EQ(by_word->encode(tricky), whole->encode(tricky)) << tricky;
  }
}

// After llama.cpp's test-tokenizer-1-spm: every token's text, and every code point, survives
// encode then decode.
TEST(SpmShared, LlamaEveryTokenAndCodePointRoundTrips) {
  PAGODA_SHARED_OR_SKIP(path, "testdata/vocab/ggml-vocab-llama-spm.gguf");
  auto tok = open_gguf_tokenizer(path);
  int failures = 0;
  for (size_t i = 0; i < tok->vocab().size() && failures < 10; ++i) {
    std::string text = tok->decode({static_cast<TokenId>(i)}, /*render_special=*/true);
    std::string again = tok->decode(tok->encode(text, EncodeOptions{.parse_special = true}), true);
    if (again != text) {
      ++failures;
      ADD_FAILURE() << "token " << i << " '" << text << "' came back as '" << again << "'";
    }
  }
  for (char32_t cp = 0; cp < 0x110000 && failures < 10; ++cp) {
    if ((cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0x40000 && cp < 0xE0000) || cp == 0x2581) continue;
    std::string text;
    if (cp < 0x80) {
      text = {static_cast<char>(cp)};
    } else if (cp < 0x800) {
      text = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    } else if (cp < 0x10000) {
      text = {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
              static_cast<char>(0x80 | (cp & 0x3F))};
    } else {
      text = {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
              static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
    }
    std::string again = tok->decode(tok->encode(text));
    if (again != text) {
      ++failures;
      ADD_FAILURE() << "code point U+" << std::hex << static_cast<uint32_t>(cp) << " came back as '"
                    << again << "'";
    }
  }
}

// The HF BPE branch (merge ranks, byte_fallback without byte tokens) on a real tokenizer.json,
// read here directly; the ids in tokenizer.out agree with two independent HF-style encoders.
TEST(SpmShared, TinyStoriesTokenizerJsonMatchesReference) {
  PAGODA_SHARED_OR_SKIP(dir, "models/tinystories-656k");
  auto json = nlohmann::json::parse(read_file(dir + "/tokenizer.json"));
  const auto& model = json.at("model");
  ASSERT_EQ(model.at("type"), "BPE");
  Vocab v;
  v.kind = TokenizerKind::kSpm;
  v.model = "llama";
  v.tokens.resize(model.at("vocab").size());
  for (const auto& [text, id] : model.at("vocab").items()) v.tokens.at(id.get<size_t>()) = text;
  v.types.assign(v.tokens.size(), TokenType::kNormal);
  for (const auto& added : json.at("added_tokens")) {
    if (added.at("special").get<bool>()) {
      v.types.at(added.at("id").get<size_t>()) = TokenType::kControl;
    }
  }
  for (const auto& m : model.at("merges")) {
    // Newer files store a merge as a pair, older ones as "left right".
    std::string s = m.is_string() ? m.get<std::string>()
                                  : m[0].get<std::string>() + " " + m[1].get<std::string>();
    size_t sp = s.find(' ');
    v.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
  }
  v.build_index("tokenizer.json");
  v.unk = v.find(model.at("unk_token").get<std::string>());
  v.add_space_prefix = true;  // the normalizer prepends "▁"
  auto tok = Tokenizer::create(v);

  auto cases = test::read_vocab_cases(dir + "/tests/tokenizer.inp", dir + "/tests/tokenizer.out");
  ASSERT_FALSE(cases.empty());
  int failures = 0;
  for (const auto& c : cases) {
    std::vector<TokenId> got = tok->encode(c.text);
    if (got != c.expected) {
      ++failures;
      ADD_FAILURE() << "input \"" << c.text << "\"";
    }
  }
  EXPECT_EQ(failures, 0) << failures << " of " << cases.size() << " cases differ";
  // REFERENCE.md's prompt, less its BOS.
  EXPECT_EQ(tok->encode("Once upon a time"), (std::vector<TokenId>{80, 147, 201, 282, 57}));
}

}  // namespace
}  // namespace pagoda
