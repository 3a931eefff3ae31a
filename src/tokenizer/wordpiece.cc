// WordPiece (tokenizer.ggml.model = "bert"), following Hugging Face's uncased BERT tokenizer:
// clean and lower-case the text, strip accents, split on whitespace and around punctuation and
// CJK ideographs, then cut each word greedily into the longest vocabulary pieces.
//
// llama.cpp's converter renames the pieces: a word-initial piece "x" is stored as "▁x" and a
// continuation "##x" as plain "x" (bracketed names such as "[UNK]" stay as they are).
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

constexpr std::string_view kWordStart = "\xE2\x96\x81";  // U+2581

// HF's BERT limit: a longer word is [UNK] without trying to split it.
constexpr size_t kMaxCharsPerWord = 100;

bool is_whitespace(UChar32 c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || u_isUWhiteSpace(c);
}

// Any "other" category (Cc, Cf, Cs, Co, Cn) except the three control characters that are
// really whitespace; BERT drops these characters.
bool is_control(UChar32 c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  switch (u_charType(c)) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
      return true;
    default:
      return false;
  }
}

// BERT counts all ASCII symbols ("$", "+", "^", ...) as punctuation, not only category P*.
bool is_punctuation(UChar32 c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
      (c >= 123 && c <= 126)) {
    return true;
  }
  return u_ispunct(c);
}

// The CJK Unified Ideograph blocks BERT isolates (not Japanese kana or Hangul).
bool is_cjk_ideograph(UChar32 c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

void append_utf8(UChar32 c, std::string& out) {
  char buf[U8_MAX_LENGTH];
  int32_t n = 0;
  U8_APPEND_UNSAFE(buf, n, c);
  out.append(buf, static_cast<size_t>(n));
}

// Per-character full lower-casing like HF (Rust's char::to_lowercase): no context rules such as
// final sigma. U+0130 is the only character whose full lower case is two code points.
void append_lower(UChar32 c, std::string& out) {
  if (c == 0x130) {
    out += "i\xCC\x87";
    return;
  }
  append_utf8(u_tolower(c), out);
}

class WordPieceTokenizer : public Tokenizer {
 public:
  explicit WordPieceTokenizer(Vocab vocab) : Tokenizer(std::move(vocab)) {
    for (const std::string& t : vocab_.tokens) max_token_len_ = std::max(max_token_len_, t.size());
    unk_ = vocab_.unk != kNoToken ? vocab_.unk : vocab_.find("[UNK]");
  }
  // Every word-initial piece decodes with a space before it; the first one's is dropped.
  bool strips_leading_space() const override { return true; }

 protected:
  void encode_text(std::string_view text, bool after_special,
                   std::vector<TokenId>& out) const override;
  std::string piece_bytes(TokenId id) const override;

 private:
  std::vector<std::string> split_words(std::string_view text) const;
  void encode_word(const std::string& word, std::vector<TokenId>& out) const;

  size_t max_token_len_ = 0;
  TokenId unk_ = kNoToken;
};

// BERT's normalizer (clean, space out CJK, strip accents, lower-case) and pre-tokenizer (split on
// whitespace, isolate punctuation) in one pass.
std::vector<std::string> WordPieceTokenizer::split_words(std::string_view text) const {
  icu::UnicodeString cleaned;
  {
    // Invalid UTF-8 becomes U+FFFD here and is dropped below, as BERT drops U+FFFD.
    icu::UnicodeString in = icu::UnicodeString::fromUTF8(
        icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
    for (int32_t i = 0; i < in.length(); i = in.moveIndex32(i, 1)) {
      UChar32 c = in.char32At(i);
      if (c == 0 || c == 0xFFFD || is_control(c)) continue;
      if (is_whitespace(c)) {
        cleaned.append(static_cast<UChar>(' '));
      } else if (is_cjk_ideograph(c)) {
        cleaned.append(static_cast<UChar>(' ')).append(c).append(static_cast<UChar>(' '));
      } else {
        cleaned.append(c);
      }
    }
  }
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
  if (U_FAILURE(status)) fail("wordpiece tokenizer: ICU has no NFD data: ", u_errorName(status));
  icu::UnicodeString decomposed = nfd->normalize(cleaned, status);
  if (U_FAILURE(status))
    fail("wordpiece tokenizer: NFD normalization failed: ", u_errorName(status));

  std::vector<std::string> words(1);
  auto end_word = [&] {
    if (!words.back().empty()) words.emplace_back();
  };
  for (int32_t i = 0; i < decomposed.length(); i = decomposed.moveIndex32(i, 1)) {
    UChar32 c = decomposed.char32At(i);
    if (u_charType(c) == U_NON_SPACING_MARK) continue;  // accents, split off by NFD
    if (is_whitespace(c)) {
      end_word();
    } else if (is_punctuation(c)) {
      end_word();
      append_lower(c, words.back());
      words.emplace_back();
    } else {
      append_lower(c, words.back());
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

// Greedy longest match first; a word with any part that matches nothing is one [UNK].
void WordPieceTokenizer::encode_word(const std::string& word, std::vector<TokenId>& out) const {
  std::vector<size_t> bounds;  // byte offsets of character starts, plus the end
  for (size_t pos = 0; pos < word.size(); pos += utf8_len(static_cast<unsigned char>(word[pos]))) {
    bounds.push_back(pos);
  }
  bounds.push_back(word.size());
  size_t num_chars = bounds.size() - 1;
  auto unknown = [&] {
    if (unk_ == kNoToken) fail("wordpiece tokenizer: the vocabulary has no unknown token");
    out.push_back(unk_);
  };
  if (num_chars > kMaxCharsPerWord) return unknown();

  size_t first = out.size();
  std::string key;
  for (size_t start = 0; start < num_chars;) {
    TokenId hit = kNoToken;
    size_t end = num_chars;
    for (; end > start; --end) {
      size_t len = bounds[end] - bounds[start];
      if (len > max_token_len_) continue;
      key.clear();
      if (start == 0) key += kWordStart;
      key.append(word, bounds[start], len);
      hit = vocab_.find(key);
      if (hit != kNoToken) break;
    }
    if (hit == kNoToken) {
      out.resize(first);
      return unknown();
    }
    out.push_back(hit);
    start = end;
  }
}

void WordPieceTokenizer::encode_text(std::string_view text, bool, std::vector<TokenId>& out) const {
  for (const std::string& word : split_words(text)) encode_word(word, out);
}

std::string WordPieceTokenizer::piece_bytes(TokenId id) const {
  const std::string& piece = vocab_.tokens[static_cast<size_t>(id)];
  if (piece.compare(0, kWordStart.size(), kWordStart) != 0) return piece;
  std::string out = " ";
  out.append(piece, kWordStart.size());
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> make_wordpiece_tokenizer(Vocab vocab) {
  return std::make_unique<WordPieceTokenizer>(std::move(vocab));
}

}  // namespace pagoda
