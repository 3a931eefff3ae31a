// A gpt-oss (o200k_harmony) vocabulary: <|return|> and <|call|> end the generation and <|end|>
// does not (it ends the analysis message before the answer); the message markers are output
// text, so the chat parser sees them, while a prompt's plain text never becomes them.
#include <gtest/gtest.h>

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

Vocab harmony_vocab(bool with_call) {
  Vocab v;
  v.kind = TokenizerKind::kSpm;
  v.model = "llama";
  std::vector<std::string> texts = {"<unk>", "<|return|>", "<|end|>", "<|start|>", "<|channel|>",
                                    "<|message|>", "<|constrain|>", "<|endoftext|>", "\u2581hi"};
  if (with_call) texts.push_back("<|call|>");
  for (const std::string& t : texts) {
    v.tokens.push_back(t);
    v.scores.push_back(0);
    v.types.push_back(t == "\u2581hi" ? TokenType::kNormal
                      : t == "<unk>"  ? TokenType::kUnknown
                                      : TokenType::kControl);
  }
  v.unk = 0;
  v.eos = 1;
  v.eot = 2;  // a converter may name <|end|> the end of turn
  v.build_index("test");
  return v;
}

bool ends(const Vocab& v, const char* text) {
  return std::find(v.eog.begin(), v.eog.end(), v.find(text)) != v.eog.end();
}

TEST(HarmonyVocab, ReturnAndCallEndTheGenerationEndDoesNot) {
  const Vocab v = harmony_vocab(true);
  EXPECT_TRUE(ends(v, "<|return|>"));
  EXPECT_TRUE(ends(v, "<|call|>"));
  EXPECT_TRUE(ends(v, "<|endoftext|>"));
  EXPECT_FALSE(ends(v, "<|end|>"));
  // Without <|call|> it is not harmony: <|end|> ends a turn as in Phi-3.
  EXPECT_TRUE(ends(harmony_vocab(false), "<|end|>"));
}

TEST(HarmonyVocab, MessageMarkersAreOutputTextOthersStayHidden) {
  auto tok = Tokenizer::create(harmony_vocab(true));
  const Vocab& v = tok->vocab();
  const std::vector<TokenId> ids = {v.find("<|channel|>"), v.find("\u2581hi"), v.find("<|message|>"),
                                    v.find("<|end|>"),     v.find("<|start|>"), v.find("<|constrain|>"),
                                    v.find("<|call|>"),    v.find("<|return|>")};
  EXPECT_EQ(tok->decode(ids), "<|channel|> hi<|message|><|end|><|start|><|constrain|>");
  EXPECT_TRUE(tok->is_hidden(v.find("<|call|>")));
  EXPECT_FALSE(tok->is_hidden(v.find("<|channel|>")));
  // Plain text that spells a marker is text; parse_special reads the marker.
  EXPECT_EQ(tok->encode("<|channel|>", {.add_special = false, .parse_special = true}),
            std::vector<TokenId>{v.find("<|channel|>")});
  const std::vector<TokenId> plain =
      tok->encode("<|channel|>", {.add_special = false, .parse_special = false});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), v.find("<|channel|>")), 0);
  // Outside a harmony vocabulary a control token stays hidden.
  auto other = Tokenizer::create(harmony_vocab(false));
  EXPECT_TRUE(other->is_hidden(other->vocab().find("<|channel|>")));
}

}  // namespace
}  // namespace pagoda
