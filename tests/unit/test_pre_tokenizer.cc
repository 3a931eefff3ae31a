// Pre-tokenizer splits, checked by hand against the regexes' meaning.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/pre_tokenizer.h"

namespace pagoda {
namespace {

using Pieces = std::vector<std::string>;

Pieces split_with(const std::vector<std::string>& patterns, std::string_view text) {
  PreTokenizer pt(patterns);
  std::vector<std::string_view> views;
  pt.split(text, views);
  return Pieces(views.begin(), views.end());
}

Pieces split(const std::string& name, std::string_view text) {
  return split_with(pre_tokenizer_spec(name).patterns, text);
}

TEST(PreTokenizerTest, Gpt2) {
  EXPECT_EQ(split("gpt-2", "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(split("gpt-2", "I'm  fine!!\n\n"), (Pieces{"I", "'m", " ", " fine", "!!", "\n\n"}));
  EXPECT_EQ(split("gpt-2", "I'M 2024"), (Pieces{"I", "'", "M", " 2024"}));  // lower case only
  EXPECT_EQ(split("gpt-2", "   Hello"), (Pieces{"  ", " Hello"}));
  EXPECT_EQ(split("default", "a  b"), split("gpt-2", "a  b"));
  EXPECT_EQ(split("gpt-2", ""), Pieces{});
}

TEST(PreTokenizerTest, Llama3) {
  EXPECT_EQ(split("llama-bpe", "Hello WORLD'S 12345"),
            (Pieces{"Hello", " WORLD", "'S", " ", "123", "45"}));
  EXPECT_EQ(split("llama3", "a\n\n  b"), (Pieces{"a", "\n\n", " ", " b"}));
  EXPECT_EQ(split("llama3", "x = (y);\n"), (Pieces{"x", " =", " (", "y", ");\n"}));
  EXPECT_EQ(split("llama3", "$abc"), (Pieces{"$abc"}));  // one non-letter may lead a word
}

TEST(PreTokenizerTest, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(split("qwen2", "ab 12345"), (Pieces{"ab", " ", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(split("qwen2", "It's"), (Pieces{"It", "'s"}));
}

TEST(PreTokenizerTest, LaterRegexesSplitEachPiece) {
  // Single digits first, then GPT-2's regex inside each piece and gap.
  EXPECT_EQ(split("starcoder", "abc123 x"), (Pieces{"abc", "1", "2", "3", " x"}));
  // Punctuation runs, GPT-2's regex, then digit runs cut into threes.
  EXPECT_EQ(split("falcon", "a+b=1234567"), (Pieces{"a", "+", "b", "=", "123", "456", "7"}));
  EXPECT_EQ(split("deepseek-coder", "\n\nab 12"), (Pieces{"\n", "\n", "ab", " ", "1", "2"}));
  EXPECT_EQ(split("deepseek-llm", "Hi 中文, 42"), (Pieces{"Hi", " ", "中文", ",", " ", "42"}));
}

TEST(PreTokenizerTest, NextLineIsWhitespace) {
  // The reference tokenizers count U+0085 as \s; PCRE2 alone would not.
  EXPECT_EQ(split("gpt-2", "a\u0085\u0085b"), (Pieces{"a", "\u0085", "\u0085", "b"}));
  EXPECT_EQ(split("gpt-2", "a\u00A0b"), (Pieces{"a", "\u00A0", "b"}));
}

TEST(PreTokenizerTest, InvalidUtf8EndsUpInGaps) {
  EXPECT_EQ(split("gpt-2", "ab\xFFxy"), (Pieces{"ab", "\xFF", "xy"}));
  EXPECT_EQ(split("llama-bpe", "\xC3 x"), (Pieces{"\xC3", " x"}));
}

TEST(PreTokenizerTest, EmptyMatchesCut) {
  EXPECT_EQ(split_with({"(?=b)"}, "abab"), (Pieces{"a", "ba", "b"}));
}

TEST(PreTokenizerTest, EveryNamedSpecCompilesAndCoversTheText) {
  const std::string text =
      "Hello, WORLD! It's 2024\r\n\tcafé ΩK 中文 한국어 🦙 x²\u0085 ___ <a href=\"#\">   end "
      " ";
  for (const std::string& name : pre_tokenizer_names()) {
    Pieces pieces = split(name, text);
    std::string joined;
    for (const auto& p : pieces) {
      EXPECT_FALSE(p.empty()) << name;
      joined += p;
    }
    EXPECT_EQ(joined, text) << name;
  }
}

TEST(PreTokenizerTest, UnknownNameIsAnError) {
  try {
    pre_tokenizer_spec("not-a-pre-tokenizer");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not-a-pre-tokenizer"), std::string::npos) << e.what();
  }
  EXPECT_THROW(PreTokenizer({"(unclosed"}), Error);
}

}  // namespace
}  // namespace pagoda
