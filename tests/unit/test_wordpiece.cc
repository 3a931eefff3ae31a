// WordPiece with BERT's uncased normalization, on a tiny vocabulary stored the way llama.cpp's
// converter stores it: word-initial pieces carry "▁", continuations have no "##".
#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

std::unique_ptr<Tokenizer> tiny_bert(bool add_special = true) {
  Vocab v;
  v.kind = TokenizerKind::kWordPiece;
  v.model = "bert";
  v.add_space_prefix = false;
  auto add = [&](const std::string& text, TokenType type = TokenType::kNormal) {
    v.tokens.push_back(text);
    v.types.push_back(type);
  };
  add("[PAD]", TokenType::kControl);
  add("[UNK]", TokenType::kControl);
  add("[CLS]", TokenType::kControl);
  add("[SEP]", TokenType::kControl);
  for (const char* piece :
       {"\u2581hello", "\u2581world", "\u2581un", "aff", "able", "\u2581,", "\u2581!", "\u2581$",
        "\u2581\u4e2d", "\u2581\u6587", "\u2581cafe", "\u2581a", "a"}) {
    add(piece);
  }
  v.unk = 1;
  v.cls = v.bos = 2;
  v.sep = v.eos = 3;
  v.add_bos = v.add_eos = add_special;
  v.build_index("test");
  return Tokenizer::create(std::move(v));
}

std::vector<std::string> pieces(const Tokenizer& tok, const std::vector<TokenId>& ids) {
  std::vector<std::string> out;
  for (TokenId id : ids) out.push_back(tok.piece(id));
  return out;
}

using Pieces = std::vector<std::string>;

TEST(WordPiece, LowercasesAndSplitsOffPunctuation) {
  auto tok = tiny_bert();
  EXPECT_EQ(pieces(*tok, tok->encode("Hello,WORLD!")),
            (Pieces{"\u2581hello", "\u2581,", "\u2581world", "\u2581!"}));
  EXPECT_EQ(pieces(*tok, tok->encode("$hello")), (Pieces{"\u2581$", "\u2581hello"}));
}

TEST(WordPiece, GreedyLongestMatchWithContinuations) {
  auto tok = tiny_bert();
  EXPECT_EQ(pieces(*tok, tok->encode("unaffable")), (Pieces{"\u2581un", "aff", "able"}));
  EXPECT_EQ(pieces(*tok, tok->encode("aaa")), (Pieces{"\u2581a", "a", "a"}));
}

TEST(WordPiece, WordThatCannotBeMatchedIsOneUnknown) {
  auto tok = tiny_bert();
  // "unaffablex" matches up to the x, then fails: the whole word is [UNK], not a partial match.
  EXPECT_EQ(pieces(*tok, tok->encode("hello unaffablex world")),
            (Pieces{"\u2581hello", "[UNK]", "\u2581world"}));
  EXPECT_EQ(pieces(*tok, tok->encode(std::string(101, 'a'))), (Pieces{"[UNK]"}));
}

TEST(WordPiece, StripsAccentsAndDropsControlCharacters) {
  auto tok = tiny_bert();
  EXPECT_EQ(pieces(*tok, tok->encode("Caf\u00e9")), (Pieces{"\u2581cafe"}));
  EXPECT_EQ(pieces(*tok, tok->encode("CAFE\u0301")), (Pieces{"\u2581cafe"}));  // combining acute
  EXPECT_EQ(pieces(*tok, tok->encode("hel\x01lo\u200b")), (Pieces{"\u2581hello"}));
}

TEST(WordPiece, IsolatesCjkIdeographs) {
  auto tok = tiny_bert();
  EXPECT_EQ(pieces(*tok, tok->encode("\u4e2d\u6587")), (Pieces{"\u2581\u4e2d", "\u2581\u6587"}));
}

TEST(WordPiece, WhitespaceOnlyGivesNothing) {
  auto tok = tiny_bert();
  EXPECT_TRUE(tok->encode(" \t\n \u3000").empty());
  EXPECT_TRUE(tok->encode("").empty());
}

TEST(WordPiece, AddSpecialWrapsInClsAndSep) {
  auto tok = tiny_bert();
  EXPECT_EQ(pieces(*tok, tok->encode("hello", EncodeOptions{.add_special = true})),
            (Pieces{"[CLS]", "\u2581hello", "[SEP]"}));
  EXPECT_EQ(pieces(*tok, tok->encode("[SEP]hello", EncodeOptions{.parse_special = true})),
            (Pieces{"[SEP]", "\u2581hello"}));
}

TEST(WordPiece, DecodeSpacesWordsButNotContinuations) {
  auto tok = tiny_bert();
  EXPECT_EQ(tok->decode(tok->encode("Hello unaffable world!", EncodeOptions{.add_special = true})),
            "hello unaffable world !");
}

}  // namespace
}  // namespace pagoda
