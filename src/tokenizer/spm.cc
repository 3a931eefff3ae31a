// SentencePiece-style BPE (tokenizer.ggml.model = "llama"): spaces become "▁", the text is split
// into UTF-8 characters, and the best adjacent pair that forms a vocabulary token is merged until
// none is left. "Best" is the highest token score for SentencePiece vocabularies, or the lowest
// merge rank when the vocabulary came with a merge list (a Hugging Face BPE with byte_fallback).
// Characters the vocabulary lacks become <0xXX> byte tokens, or the unknown token.
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

// A run of the normalized text. Merging grows the left symbol and empties the right one, so a
// symbol's length only ever grows or drops to 0.
struct Symbol {
  uint32_t start = 0;
  uint32_t len = 0;  // 0 once merged into its left neighbour
  int32_t prev = -1;
  int32_t next = -1;
  TokenId id = kNoToken;  // the vocabulary token this text is, kNoToken when none
};

struct Candidate {
  double priority = 0;  // higher merges first
  int32_t left = 0;     // index of the left symbol; the right one is its `next`
  uint32_t len = 0;     // combined length when queued: a mismatch later means the pair is stale
  TokenId id = kNoToken;
};

// Best priority on top; equal priorities go leftmost first, as SentencePiece and HF do.
struct CandidateOrder {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.priority != b.priority) return a.priority < b.priority;
    return a.left > b.left;
  }
};

// The byte a "<0xXX>" token stands for, or -1 when the text is not of that form.
int parse_byte_token(const std::string& s) {
  if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(s[3]), lo = hex(s[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

uint64_t pair_key(TokenId left, TokenId right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Token text -> id, open addressing over one packed buffer. Lookups are most of the encode time
// and mostly miss; this keeps them allocation-free and within a few cache lines, where
// std::unordered_map<std::string> chases a node per probe.
class TokenIndex {
 public:
  explicit TokenIndex(const std::vector<std::string>& tokens) {
    size_t capacity = 16;
    while (capacity < tokens.size() * 2) capacity *= 2;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    offsets_.reserve(tokens.size() + 1);
    for (const std::string& t : tokens) {
      offsets_.push_back(text_.size());
      text_ += t;
    }
    offsets_.push_back(text_.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      auto id = static_cast<TokenId>(i);
      if (find(tokens[i]) != kNoToken) continue;  // first occurrence wins, as in Vocab
      uint32_t h = hash(tokens[i]);
      size_t at = h & mask_;
      while (slots_[at].id != kNoToken) at = (at + 1) & mask_;
      slots_[at] = Slot{h, id};
    }
  }

  TokenId find(std::string_view s) const {
    uint32_t h = hash(s);
    for (size_t at = h & mask_;; at = (at + 1) & mask_) {
      const Slot& slot = slots_[at];
      if (slot.id == kNoToken) return kNoToken;
      if (slot.hash == h && text(slot.id) == s) return slot.id;
    }
  }

 private:
  struct Slot {
    uint32_t hash = 0;
    TokenId id = kNoToken;
  };
  static uint32_t hash(std::string_view s) {  // FNV-1a: tokens are short
    uint32_t h = 2166136261u;
    for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
    return h;
  }
  std::string_view text(TokenId id) const {
    auto i = static_cast<size_t>(id);
    return std::string_view(text_).substr(offsets_[i], offsets_[i + 1] - offsets_[i]);
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  std::string text_;             // every token's text, back to back
  std::vector<size_t> offsets_;  // [num_tokens + 1] where each token's text starts in text_
};

class SpmTokenizer : public Tokenizer {
 public:
  explicit SpmTokenizer(Vocab vocab);
  bool strips_leading_space() const override { return vocab_.add_space_prefix; }

 protected:
  void encode_text(std::string_view text, bool after_special,
                   std::vector<TokenId>& out) const override;
  std::string piece_bytes(TokenId id) const override;

 private:
  struct Merge {
    int32_t rank;
    TokenId id;
  };
  // Buffers reused across the words of one encode, so the hot loop does not allocate.
  struct Scratch {
    std::vector<Symbol> symbols;
    std::vector<Candidate> heap;
    bool prev_unk = false;  // the last id emitted was a fused <unk>
  };

  // The merge of symbol `left` with its right neighbour, or nullopt when that pair never merges.
  // This is the one place the two vocabulary flavours differ.
  std::optional<Candidate> candidate(std::string_view text, int32_t left, Scratch& s) const;
  // Merges `s.symbols` (a run of `text`) as far as it goes and appends the resulting ids.
  void merge_and_emit(std::string_view text, Scratch& s, std::vector<TokenId>& out) const;
  // Appends the ids for a final symbol: its token, else its bytes, else the unknown token.
  void emit(std::string_view bytes, TokenId id, Scratch& s, std::vector<TokenId>& out) const;

  TokenIndex index_;
  bool use_ranks_ = false;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank and merged token
  size_t max_token_len_ = 0;                    // longer text is never a token: skip the lookup
  // True when no token has "▁" right after another character. Then no merge can cross the
  // point before a word's "▁", and words are merged one at a time: the same result, but small
  // heaps instead of one heap over the whole text.
  bool split_at_words_ = true;
  // Gemma 4 (tokenizer model "gemma4", as llama.cpp reads it): runs of newlines and runs of other
  // characters are merged apart, and a run of newlines that is a token is that token.
  bool split_at_newlines_ = false;
  std::array<TokenId, 128> ascii_token_;  // the token of each ASCII character: saves a lookup
  std::array<TokenId, 256> byte_token_;
  std::vector<int16_t> token_byte_;  // [num_tokens] byte of a <0xXX> token, -1 for others
};

SpmTokenizer::SpmTokenizer(Vocab vocab) : Tokenizer(std::move(vocab)), index_(vocab_.tokens) {
  byte_token_.fill(kNoToken);
  token_byte_.assign(vocab_.size(), -1);
  for (size_t i = 0; i < vocab_.size(); ++i) {
    const std::string& s = vocab_.tokens[i];
    max_token_len_ = std::max(max_token_len_, s.size());
    for (size_t at = s.find(kSpaceMark, 1); at != std::string::npos;
         at = s.find(kSpaceMark, at + 1)) {
      if (at < kSpaceMark.size() ||
          s.compare(at - kSpaceMark.size(), kSpaceMark.size(), kSpaceMark) != 0) {
        split_at_words_ = false;
      }
    }
    int b = parse_byte_token(s);
    if (b < 0) continue;
    token_byte_[i] = static_cast<int16_t>(b);
    if (byte_token_[b] == kNoToken) byte_token_[b] = static_cast<TokenId>(i);
  }
  for (size_t c = 0; c < ascii_token_.size(); ++c) {
    ascii_token_[c] = index_.find(std::string(1, static_cast<char>(c)));
  }
  split_at_newlines_ = vocab_.model == "gemma4";
  use_ranks_ = !vocab_.merges.empty();
  if (use_ranks_) {
    if (vocab_.merges.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      fail("spm tokenizer: too many merges (", vocab_.merges.size(), ")");
    }
    merges_.reserve(vocab_.merges.size());
    for (size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
      const auto& [a, b] = vocab_.merges[rank];
      TokenId left = vocab_.find(a), right = vocab_.find(b), merged = vocab_.find(a + b);
      // HF refuses such a file; a merge that cannot apply is simply never chosen here.
      if (left == kNoToken || right == kNoToken || merged == kNoToken) continue;
      merges_.try_emplace(pair_key(left, right), Merge{static_cast<int32_t>(rank), merged});
    }
  }
}

std::optional<Candidate> SpmTokenizer::candidate(std::string_view text, int32_t left,
                                                 Scratch& s) const {
  if (left < 0) return std::nullopt;
  const Symbol& l = s.symbols[static_cast<size_t>(left)];
  if (l.next < 0) return std::nullopt;
  const Symbol& r = s.symbols[static_cast<size_t>(l.next)];
  uint32_t len = l.len + r.len;
  if (use_ranks_) {
    if (l.id == kNoToken || r.id == kNoToken) return std::nullopt;
    auto it = merges_.find(pair_key(l.id, r.id));
    if (it == merges_.end()) return std::nullopt;
    return Candidate{-static_cast<double>(it->second.rank), left, len, it->second.id};
  }
  if (len > max_token_len_) return std::nullopt;
  // The two symbols are adjacent in the text, so their concatenation is a slice of it.
  TokenId id = index_.find(text.substr(l.start, len));
  if (id == kNoToken) return std::nullopt;
  double score = vocab_.scores.empty() ? 0.0 : vocab_.scores[static_cast<size_t>(id)];
  return Candidate{score, left, len, id};
}

void SpmTokenizer::emit(std::string_view bytes, TokenId id, Scratch& s,
                        std::vector<TokenId>& out) const {
  if (id != kNoToken) {
    out.push_back(id);
    s.prev_unk = false;
    return;
  }
  bool all_bytes = true;
  for (char c : bytes)
    all_bytes = all_bytes && byte_token_[static_cast<unsigned char>(c)] != kNoToken;
  if (all_bytes) {
    for (char c : bytes) out.push_back(byte_token_[static_cast<unsigned char>(c)]);
    s.prev_unk = false;
    return;
  }
  if (vocab_.unk == kNoToken) {
    fail("spm tokenizer: the vocabulary has neither byte tokens nor an unknown token for '", bytes,
         "'");
  }
  // HF BPE fuses runs of unknown characters into one <unk> (fuse_unk, set by every Llama-style
  // tokenizer.json); SentencePiece vocabularies always carry byte tokens, so this rarely differs.
  if (!(use_ranks_ && s.prev_unk)) out.push_back(vocab_.unk);
  s.prev_unk = true;
}

void SpmTokenizer::merge_and_emit(std::string_view text, Scratch& s,
                                  std::vector<TokenId>& out) const {
  if (s.symbols.empty()) return;
  CandidateOrder order;
  s.heap.clear();
  auto push = [&](int32_t left) {
    if (auto c = candidate(text, left, s)) {
      s.heap.push_back(*c);
      std::push_heap(s.heap.begin(), s.heap.end(), order);
    }
  };
  for (size_t i = 0; i + 1 < s.symbols.size(); ++i) push(static_cast<int32_t>(i));

  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), order);
    Candidate c = s.heap.back();
    s.heap.pop_back();
    Symbol& l = s.symbols[static_cast<size_t>(c.left)];
    if (l.len == 0 || l.next < 0) continue;
    Symbol& r = s.symbols[static_cast<size_t>(l.next)];
    if (r.len == 0 || l.len + r.len != c.len) continue;  // one side changed since it was queued
    l.len += r.len;
    l.id = c.id;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) s.symbols[static_cast<size_t>(r.next)].prev = c.left;
    push(l.prev);
    push(c.left);
  }

  for (int32_t i = 0; i >= 0; i = s.symbols[static_cast<size_t>(i)].next) {
    const Symbol& sym = s.symbols[static_cast<size_t>(i)];
    emit(text.substr(sym.start, sym.len), sym.id, s, out);
  }
}

void SpmTokenizer::encode_text(std::string_view raw, bool after_special,
                               std::vector<TokenId>& out) const {
  if (raw.empty()) return;
  std::string text;
  text.reserve(raw.size() + raw.size() / 4 + kSpaceMark.size());
  if (vocab_.add_space_prefix && after_special) text += kSpaceMark;
  for (char c : raw) {
    if (c == ' ') {
      text += kSpaceMark;
    } else {
      text += c;
    }
  }
  if (text.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    fail("spm tokenizer: text of ", text.size(), " bytes is too long to encode at once");
  }

  Scratch s;
  bool prev_space = false;
  bool prev_newline = false;
  // Characters are cut by their lead byte alone, as SentencePiece does, so that invalid UTF-8
  // splits the same way whether or not the text is cut into words.
  for (size_t pos = 0; pos < text.size();) {
    size_t n = std::min(utf8_len(static_cast<unsigned char>(text[pos])), text.size() - pos);
    bool space = text.compare(pos, n, kSpaceMark) == 0;
    const bool newline = text[pos] == '\n';
    const bool run_starts = split_at_newlines_ && (pos == 0 || newline != prev_newline);
    if (((split_at_words_ && space && !prev_space) || run_starts) && !s.symbols.empty()) {
      merge_and_emit(text, s, out);
      s.symbols.clear();
    }
    prev_space = space;
    prev_newline = newline;
    if (run_starts && newline) {
      const size_t end = std::min(text.find_first_not_of('\n', pos), text.size());
      if (TokenId id = index_.find(std::string_view(text).substr(pos, end - pos)); id != kNoToken) {
        out.push_back(id);
        s.prev_unk = false;
        pos = end;
        continue;
      }
    }
    Symbol sym;
    sym.start = static_cast<uint32_t>(pos);
    sym.len = static_cast<uint32_t>(n);
    sym.prev = static_cast<int32_t>(s.symbols.size()) - 1;
    if (!s.symbols.empty()) s.symbols.back().next = static_cast<int32_t>(s.symbols.size());
    auto lead = static_cast<unsigned char>(text[pos]);
    if (lead < ascii_token_.size()) {
      sym.id = ascii_token_[lead];
    } else {
      sym.id = index_.find(std::string_view(text).substr(pos, n));
    }
    s.symbols.push_back(sym);
    pos += n;
  }
  merge_and_emit(text, s, out);
}

std::string SpmTokenizer::piece_bytes(TokenId id) const {
  int16_t b = token_byte_[static_cast<size_t>(id)];
  if (b >= 0) return std::string(1, static_cast<char>(b));
  const std::string& piece = vocab_.tokens[static_cast<size_t>(id)];
  std::string out;
  out.reserve(piece.size());
  for (size_t pos = 0; pos < piece.size();) {
    if (piece.compare(pos, kSpaceMark.size(), kSpaceMark) == 0) {
      out += ' ';
      pos += kSpaceMark.size();
    } else {
      out += piece[pos++];
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab vocab) {
  return std::make_unique<SpmTokenizer>(std::move(vocab));
}

}  // namespace pagoda
