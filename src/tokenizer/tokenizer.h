// Text <-> token ids. One base class does what every kind shares (special-token splitting,
// BOS/EOS, decoding); each kind (SPM, byte-level BPE, WordPiece) encodes plain text.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/vocab.h"

namespace pagoda {

// A byte range [begin, end) of a text.
using TextRange = std::pair<size_t, size_t>;

struct EncodeOptions {
  bool add_special = false;    // add BOS / EOS where the vocabulary says to
  bool parse_special = false;  // recognise control tokens written in the text ("<|im_start|>")
  // Sorted, disjoint ranges where control tokens are not recognised even with parse_special:
  // what a client wrote inside a rendered chat, so it cannot forge a turn of the conversation.
  std::span<const TextRange> plain_ranges = {};
};

class Tokenizer {
 public:
  // Picks the implementation from vocab.kind; throws Error for an unsupported pre-tokenizer.
  static std::unique_ptr<Tokenizer> create(Vocab vocab);
  virtual ~Tokenizer() = default;

  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Where control tokens' texts occur in `text` (leftmost, longest first), as encode with
  // parse_special would find them.
  std::vector<TextRange> control_token_ranges(std::string_view text) const;

  // The bytes a token stands for in output text (may be part of a UTF-8 character). Control
  // tokens and non-text markers (is_hidden) give their text only when `render_special`,
  // otherwise nothing.
  std::string token_to_bytes(TokenId id, bool render_special = false) const;
  // True for tokens that are not text: control, unknown and unused tokens, and the user-defined
  // tokens that stand for something else (Gemma 3's image markers). Not hidden although control:
  // the markers of gpt-oss's harmony messages (<|start|>, <|channel|>, <|constrain|>,
  // <|message|>, <|end|>, in a vocabulary with <|channel|> and <|call|>), which the chat parser
  // reads in the output text (engine/reasoning.h); prompts still read them only as control
  // tokens, not from plain text.
  bool is_hidden(TokenId id) const;
  // Whole-sequence decode; the space an SPM tokenizer prefixed is removed again.
  std::string decode(const std::vector<TokenId>& ids, bool render_special = false) const;
  // The token's text as stored in the vocabulary (for --pieces).
  const std::string& piece(TokenId id) const { return vocab_.tokens.at(static_cast<size_t>(id)); }

  const Vocab& vocab() const { return vocab_; }
  // True when decode drops the leading space of the first token (SPM with a space prefix).
  virtual bool strips_leading_space() const { return false; }

 protected:
  explicit Tokenizer(Vocab vocab);
  // Encodes text that holds no special token. `after_special` is true for the first fragment of
  // the input and for a fragment that follows a special token.
  virtual void encode_text(std::string_view text, bool after_special,
                           std::vector<TokenId>& out) const = 0;
  // Bytes of a non-control token.
  virtual std::string piece_bytes(TokenId id) const = 0;

  Vocab vocab_;

 private:
  struct Fragment {
    std::string_view text;
    TokenId token = kNoToken;  // set when the fragment is a special token
  };
  std::vector<Fragment> split_special(std::string_view text, bool parse_special,
                                      std::span<const TextRange> plain_ranges = {}) const;

  // Special tokens by first byte, longest first, so splitting is one pass over the text.
  std::vector<std::vector<TokenId>> special_by_first_byte_;
  std::vector<TokenId> hidden_markers_;  // sorted: user-defined tokens that are not text
  std::vector<TokenId> shown_controls_;  // sorted: control tokens that are output text
};

// Streams decoded text: bytes of a UTF-8 character split across tokens are held back until the
// character is complete; bytes that can never form one become U+FFFD.
//
// Generated text continues a prompt: its text is decode(prompt + output) minus decode(prompt),
// as the peer servers give it. So an output decoder first takes the prompt (continue_after):
// an SPM tokenizer then keeps the space of the output's first word ("The little dog" continues
// " was", not "was"), which it drops only at the start of a whole text.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool render_special = false)
      : tokenizer_(tokenizer), render_special_(render_special) {}
  // Takes the tokens before the output without returning their text. Bytes of a character the
  // prompt leaves unfinished belong to the prompt's text and are dropped.
  void continue_after(std::span<const TokenId> prompt);
  // Returns the text that became complete with this token (possibly empty).
  std::string feed(TokenId id);
  // Returns whatever is still held (an incomplete character becomes U+FFFD).
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool render_special_;
  bool first_ = true;
  std::string pending_;
};

// Factories for each kind (one file each).
std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab vocab);
std::unique_ptr<Tokenizer> make_bpe_tokenizer(Vocab vocab);
std::unique_ptr<Tokenizer> make_wordpiece_tokenizer(Vocab vocab);

// Length of the UTF-8 sequence starting with byte `c` (1 for invalid lead bytes).
size_t utf8_len(unsigned char c);

}  // namespace pagoda
