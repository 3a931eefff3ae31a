// StreamDecoder: text comes out only in whole UTF-8 characters, whatever the token boundaries.
#include <gtest/gtest.h>

#include <cstdio>

#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

// An SPM vocabulary of byte tokens, "▁" and two words.
std::unique_ptr<Tokenizer> byte_tokenizer() {
  Vocab v;
  v.kind = TokenizerKind::kSpm;
  v.model = "llama";
  auto add = [&](const std::string& text, TokenType type) {
    v.tokens.push_back(text);
    v.scores.push_back(0);
    v.types.push_back(type);
  };
  add("<unk>", TokenType::kUnknown);
  add("<s>", TokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, TokenType::kByte);
  }
  add("\u2581", TokenType::kNormal);  // so a space is never spelled as the bytes of "▁"
  add("\u2581hello", TokenType::kNormal);
  add("\u2581world", TokenType::kNormal);
  v.unk = 0;
  v.bos = 1;
  v.build_index("test");
  return Tokenizer::create(std::move(v));
}

TokenId byte_id(const Tokenizer& tok, const char* text) {
  TokenId id = tok.vocab().find(text);
  EXPECT_NE(id, kNoToken) << text;
  return id;
}

TEST(StreamDecoder, HoldsBackASplitCharacterUntilItIsComplete) {
  auto tok = byte_tokenizer();
  StreamDecoder d(*tok);
  EXPECT_EQ(d.feed(byte_id(*tok, "<0xC3>")), "");
  EXPECT_EQ(d.feed(byte_id(*tok, "<0xA9>")), "\u00e9");
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamDecoder, FourByteCharacterOverFourTokens) {
  auto tok = byte_tokenizer();
  StreamDecoder d(*tok);
  for (const char* b : {"<0xF0>", "<0x9F>", "<0xA6>"}) {
    EXPECT_EQ(d.feed(byte_id(*tok, b)), "");
  }
  EXPECT_EQ(d.feed(byte_id(*tok, "<0x99>")), "\U0001F999");
}

TEST(StreamDecoder, DropsOnlyTheFirstPrefixedSpace) {
  auto tok = byte_tokenizer();
  StreamDecoder d(*tok);
  EXPECT_EQ(d.feed(tok->vocab().bos), "");  // unrendered BOS does not count as first text
  EXPECT_EQ(d.feed(tok->vocab().find("\u2581hello")), "hello");
  EXPECT_EQ(d.feed(tok->vocab().find("\u2581world")), " world");
}

// Generated text is decode(prompt + output) minus decode(prompt): after a prompt with text, the
// output's first word keeps its space (stories260K: "The little dog" -> " was", not "was").
TEST(StreamDecoder, OutputAfterAPromptKeepsItsLeadingSpace) {
  auto tok = byte_tokenizer();
  const TokenId hello = tok->vocab().find("\u2581hello"), world = tok->vocab().find("\u2581world");
  const std::vector<TokenId> prompt = {tok->vocab().bos, hello};
  StreamDecoder d(*tok);
  d.continue_after(prompt);
  EXPECT_EQ(d.feed(world), " world");
  std::vector<TokenId> all = prompt;
  all.push_back(world);
  EXPECT_EQ(tok->decode(all).substr(tok->decode(prompt).size()), " world");
}

TEST(StreamDecoder, OutputAfterAPromptOfOnlyBosIsAWholeText) {
  auto tok = byte_tokenizer();
  const std::vector<TokenId> prompt = {tok->vocab().bos};
  StreamDecoder d(*tok);
  d.continue_after(prompt);
  EXPECT_EQ(d.feed(tok->vocab().find("\u2581hello")), "hello");
}

TEST(StreamDecoder, ACharacterThePromptLeftUnfinishedIsNotOutput) {
  auto tok = byte_tokenizer();
  const std::vector<TokenId> prompt = {tok->vocab().find("\u2581hello"), byte_id(*tok, "<0xC3>")};
  StreamDecoder d(*tok);
  d.continue_after(prompt);
  EXPECT_EQ(d.feed(byte_id(*tok, "<0xA9>")), "\uFFFD");
  EXPECT_EQ(d.feed(byte_id(*tok, "<0x41>")), "A");
}

// Gemma 3 types its image markers user-defined, like its "<h1>" tokens; only the markers are
// hidden from output text (unless specials are rendered).
TEST(StreamDecoder, NonTextMarkersAreHiddenUnlessSpecialsAreRendered) {
  Vocab v;
  v.kind = TokenizerKind::kSpm;
  v.model = "llama";
  for (const char* t : {"<unk>", "<s>", "<start_of_image>", "<h1>", "\u2581hi"}) {
    v.tokens.push_back(t);
    v.scores.push_back(0);
  }
  v.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kUserDefined,
             TokenType::kUserDefined, TokenType::kNormal};
  v.unk = 0;
  v.bos = 1;
  v.build_index("test");
  auto tok = Tokenizer::create(std::move(v));
  EXPECT_TRUE(tok->is_hidden(2));
  EXPECT_FALSE(tok->is_hidden(3));
  EXPECT_EQ(tok->decode({4, 2, 3}), "hi<h1>");
  EXPECT_EQ(tok->decode({1, 4, 2, 3}, /*render_special=*/true), "<s> hi<start_of_image><h1>");
}

TEST(StreamDecoder, IncompleteCharacterBecomesReplacementOnFlush) {
  auto tok = byte_tokenizer();
  StreamDecoder d(*tok);
  EXPECT_EQ(d.feed(byte_id(*tok, "<0xE2>")), "");
  EXPECT_EQ(d.feed(byte_id(*tok, "<0x96>")), "");
  EXPECT_EQ(d.flush(), "\uFFFD\uFFFD");
}

TEST(StreamDecoder, StrayContinuationByteIsReplacedAtOnce) {
  auto tok = byte_tokenizer();
  StreamDecoder d(*tok);
  EXPECT_EQ(d.feed(byte_id(*tok, "<0xA9>")), "\uFFFD");
  EXPECT_EQ(d.feed(byte_id(*tok, "<0x41>")), "A");
}

TEST(StreamDecoder, MatchesWholeDecode) {
  auto tok = byte_tokenizer();
  std::string text = "hello w\u00f6rld \u4e2d\U0001F999 hello";
  std::vector<TokenId> ids = tok->encode(text);
  StreamDecoder d(*tok);
  std::string streamed;
  for (TokenId id : ids) streamed += d.feed(id);
  streamed += d.flush();
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(tok->decode(ids), text);
}

}  // namespace
}  // namespace pagoda
