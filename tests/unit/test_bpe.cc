// Byte-level BPE: GPT-2's byte mapping, merge order, fallbacks, and decoding back to the bytes.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <thread>

#include "core/error.h"
#include "format/gguf_vocab.h"
#include "format/gguf.h"
#include "test_util.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

TEST(ByteUnicodeTest, EveryByteMapsToItsOwnPrintableCharacter) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    uint32_t cp = byte_to_code_point(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second) << "byte " << b;
    EXPECT_EQ(code_point_to_byte(cp), b);
    EXPECT_GT(cp, 0x20u) << "byte " << b << " maps to a control or space character";
  }
  EXPECT_EQ(code_point_to_byte('A' + 0x1000), -1);
}

TEST(ByteUnicodeTest, KnownCharacters) {
  EXPECT_EQ(byte_to_utf8(' '), "Ġ");   // U+0120
  EXPECT_EQ(byte_to_utf8('\n'), "Ċ");  // U+010A
  EXPECT_EQ(byte_to_utf8('\t'), "ĉ");  // U+0109
  EXPECT_EQ(byte_to_utf8(0x00), "Ā");  // U+0100: the first unprintable byte
  EXPECT_EQ(byte_to_utf8(0x7F), "ġ");  // U+0121: next after space
  EXPECT_EQ(byte_to_utf8(0xAD), "Ń");  // U+0143: the soft hyphen, last of the moved bytes
  EXPECT_EQ(byte_to_utf8('A'), "A");
  EXPECT_EQ(byte_to_utf8(0xE9), "é");       // printable Latin-1 stands for itself
  EXPECT_EQ(byte_level_encode("é"), "Ã©");  // UTF-8 C3 A9
}

TEST(ByteUnicodeTest, AllBytesRoundTrip) {
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes += static_cast<char>(b);
  std::string mapped = byte_level_encode(bytes);
  EXPECT_EQ(byte_level_decode(mapped), bytes);
  for (int b = 0; b < 256; ++b) {
    std::string one(1, static_cast<char>(b));
    EXPECT_EQ(byte_level_decode(byte_level_encode(one)), one) << "byte " << b;
  }
}

TEST(ByteUnicodeTest, DecodeKeepsUnmappedText) {
  EXPECT_EQ(byte_level_decode("中"), "中");  // outside the mapping: as written
  EXPECT_EQ(byte_level_decode("ĠaĠ中"), " a 中");
  EXPECT_EQ(byte_level_decode("a\xFFz"), "a\xFFz");  // invalid UTF-8 passes through
  EXPECT_EQ(byte_level_decode("\xC4"), "\xC4");      // truncated character
}

// The bytes of the ids, without decode()'s replacement of invalid UTF-8 by U+FFFD.
std::string joined_bytes(const Tokenizer& tok, const std::vector<TokenId>& ids) {
  std::string out;
  for (TokenId id : ids) out += tok.token_to_bytes(id);
  return out;
}

// A small vocabulary: the 256 byte characters (id = byte), then `extra` tokens from 256 on.
Vocab make_vocab(const std::vector<std::string>& extra,
                 const std::vector<std::pair<std::string, std::string>>& merges,
                 const std::string& pre = "gpt-2") {
  Vocab v;
  v.kind = TokenizerKind::kBpe;
  v.model = "gpt2";
  v.pre = pre;
  v.add_space_prefix = false;
  for (int b = 0; b < 256; ++b) v.tokens.emplace_back(byte_to_utf8(static_cast<uint8_t>(b)));
  for (const auto& t : extra) v.tokens.push_back(t);
  v.merges = merges;
  v.build_index("test vocab");
  return v;
}

// Ids 256.. are "he", "Ġt", "Ġthe", "ll", "hell", "hello".
Vocab hello_vocab() {
  return make_vocab(
      {"he", "Ġt", "Ġthe", "ll", "hell", "hello"},
      {{"h", "e"}, {"Ġ", "t"}, {"Ġt", "he"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}});
}

TEST(BpeTokenizerTest, MergesLowestRankFirst) {
  auto tok = Tokenizer::create(hello_vocab());
  EXPECT_EQ(tok->encode("hello the"), (std::vector<TokenId>{261, 258}));
  EXPECT_EQ(tok->encode("help"), (std::vector<TokenId>{256, 'l', 'p'}));
  EXPECT_EQ(tok->encode("the"), (std::vector<TokenId>{'t', 256}));  // no "Ġ": no "Ġthe"
  EXPECT_EQ(tok->decode(tok->encode("hello the")), "hello the");
}

TEST(BpeTokenizerTest, RankNotPositionDecides) {
  // "abc" can become ab+c or a+bc; whichever merge ranks lower wins.
  auto ab_first = Tokenizer::create(make_vocab({"ab", "bc"}, {{"a", "b"}, {"b", "c"}}));
  EXPECT_EQ(ab_first->encode("abc"), (std::vector<TokenId>{256, 'c'}));
  auto bc_first = Tokenizer::create(make_vocab({"ab", "bc"}, {{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(bc_first->encode("abc"), (std::vector<TokenId>{'a', 257}));
}

TEST(BpeTokenizerTest, EqualRanksMergeLeftmostFirst) {
  auto tok = Tokenizer::create(make_vocab({"aa"}, {{"a", "a"}}));
  EXPECT_EQ(tok->encode("aaa"), (std::vector<TokenId>{256, 'a'}));
  EXPECT_EQ(tok->encode("aaaa"), (std::vector<TokenId>{256, 256}));
}

TEST(BpeTokenizerTest, MergeResultMissingFromVocabFallsBackToBytes) {
  // "xy" is made by a merge but is no token; "xyz" is. A lone "xy" comes out as its bytes.
  auto tok = Tokenizer::create(make_vocab({"xyz"}, {{"x", "y"}, {"xy", "z"}}));
  EXPECT_EQ(tok->encode("xy"), (std::vector<TokenId>{'x', 'y'}));
  EXPECT_EQ(tok->encode("xyz"), (std::vector<TokenId>{256}));
}

TEST(BpeTokenizerTest, IgnoreMergesTakesWholeTokens) {
  // No merge builds "abc"; Llama 3's tokenizer still takes it whole, GPT-2's does not.
  auto llama = Tokenizer::create(make_vocab({"abc"}, {}, "llama-bpe"));
  EXPECT_EQ(llama->encode("abc"), (std::vector<TokenId>{256}));
  auto gpt2 = Tokenizer::create(make_vocab({"abc"}, {}, "gpt-2"));
  EXPECT_EQ(gpt2->encode("abc"), (std::vector<TokenId>{'a', 'b', 'c'}));
}

TEST(BpeTokenizerTest, UnknownPreTokenizerIsAnError) {
  try {
    Tokenizer::create(make_vocab({}, {}, "no-such-pre"));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-pre"), std::string::npos) << e.what();
  }
}

TEST(BpeTokenizerTest, ArbitraryBytesRoundTrip) {
  auto tok = Tokenizer::create(make_vocab({"Ġt", "he"}, {{"Ġ", "t"}, {"h", "e"}}));
  std::mt19937 rng(5);
  for (int round = 0; round < 200; ++round) {
    std::string text;
    size_t n = rng() % 40;
    for (size_t i = 0; i < n; ++i) text += static_cast<char>(rng() % 256);
    auto ids = tok->encode(text);
    size_t num_merged = 0;  // each merged token stands for two bytes, every other token for one
    for (TokenId id : ids) num_merged += id >= 256;
    EXPECT_EQ(ids.size(), text.size() - num_merged);
    EXPECT_EQ(joined_bytes(*tok, ids), text);
  }
}

TEST(BpeTokenizerTest, UserDefinedTokensDecodeAsWritten) {
  Vocab v = make_vocab({"<tag>"}, {});
  v.types[256] = TokenType::kUserDefined;
  v.build_index("test vocab");
  auto tok = Tokenizer::create(std::move(v));
  auto ids = tok->encode("a<tag> b");
  EXPECT_EQ(ids, (std::vector<TokenId>{'a', 256, ' ', 'b'}));
  EXPECT_EQ(tok->decode(ids), "a<tag> b");
}

TEST(BpeTokenizerTest, ConcurrentEncodesAgree) {
  auto tok = Tokenizer::create(hello_vocab());
  std::string text;
  std::mt19937 rng(9);
  const char* words[] = {"hello", "the", "hell", "help", "tether", "lethe", "hellos", "o"};
  for (int i = 0; i < 4000; ++i) {
    text += std::string(" ") + words[rng() % 8] + std::to_string(rng() % 50);
  }
  std::vector<std::vector<TokenId>> results(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) results[t] = tok->encode(text);
    });
  }
  for (auto& th : threads) th.join();
  auto single = Tokenizer::create(hello_vocab());
  auto expected = single->encode(text);
  for (const auto& r : results) EXPECT_EQ(r, expected);
  EXPECT_EQ(tok->decode(expected), text);
}

// On a real vocabulary: text that is not UTF-8 still encodes, and its tokens give back the bytes.
TEST(BpeTokenizerTest, Gpt2VocabInvalidUtf8RoundTrips) {
  PAGODA_SHARED_OR_SKIP(path, "testdata/vocab/ggml-vocab-gpt-2.gguf");
  auto file = GgufFile::open(path);
  auto tok = Tokenizer::create(vocab_from_gguf(*file));
  for (std::string text :
       {std::string("caf\xC3"), std::string("\xFF\xFE hello \x80 world"), std::string("a\0b", 3),
        std::string("\xF0\x9F\xA6 llama \xED\xA0\x80")}) {
    EXPECT_EQ(joined_bytes(*tok, tok->encode(text)), text);
  }
  EXPECT_EQ(tok->encode("Hello world"), (std::vector<TokenId>{15496, 995}));
}

}  // namespace
}  // namespace pagoda
