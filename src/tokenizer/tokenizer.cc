#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {
namespace {

// User-defined tokens are text to the model (Gemma 3's "<h1>", runs of spaces), except these:
// Gemma 3 files type its image markers user-defined too, but they stand for an image, and a
// model that emits one has not written those characters.
constexpr std::string_view kNonTextMarkers[] = {"<start_of_image>", "<end_of_image>",
                                                "<image_soft_token>", "[multimodal]"};

// gpt-oss's message structure: rendered in output text so its channels can be parsed.
constexpr std::string_view kHarmonyMarkers[] = {"<|start|>", "<|channel|>", "<|constrain|>",
                                                "<|message|>", "<|end|>"};

}  // namespace

size_t utf8_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

std::unique_ptr<Tokenizer> Tokenizer::create(Vocab vocab) {
  switch (vocab.kind) {
    case TokenizerKind::kSpm: return make_spm_tokenizer(std::move(vocab));
    case TokenizerKind::kBpe: return make_bpe_tokenizer(std::move(vocab));
    case TokenizerKind::kWordPiece: return make_wordpiece_tokenizer(std::move(vocab));
  }
  fail("unknown tokenizer kind");
}

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)), special_by_first_byte_(256) {
  for (size_t id = 0; id < vocab_.size(); ++id) {
    auto tid = static_cast<TokenId>(id);
    if (vocab_.is_special(tid) && !vocab_.tokens[id].empty()) {
      special_by_first_byte_[static_cast<unsigned char>(vocab_.tokens[id][0])].push_back(tid);
    }
  }
  for (std::string_view marker : kNonTextMarkers) {
    const TokenId id = vocab_.find(std::string(marker));
    if (id != kNoToken && vocab_.type(id) == TokenType::kUserDefined) hidden_markers_.push_back(id);
  }
  std::sort(hidden_markers_.begin(), hidden_markers_.end());
  if (vocab_.find("<|channel|>") != kNoToken && vocab_.find("<|call|>") != kNoToken) {
    for (std::string_view marker : kHarmonyMarkers) {
      const TokenId id = vocab_.find(std::string(marker));
      if (id != kNoToken && vocab_.type(id) == TokenType::kControl) shown_controls_.push_back(id);
    }
    std::sort(shown_controls_.begin(), shown_controls_.end());
  }
  for (auto& list : special_by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&](TokenId a, TokenId b) {
      return vocab_.tokens[a].size() > vocab_.tokens[b].size();
    });
  }
}

std::vector<Tokenizer::Fragment> Tokenizer::split_special(
    std::string_view text, bool parse_special, std::span<const TextRange> plain_ranges) const {
  std::vector<Fragment> out;
  size_t start = 0;  // start of the pending plain-text run
  size_t next_plain = 0;  // the first plain range that does not end before pos
  for (size_t pos = 0; pos < text.size();) {
    while (next_plain < plain_ranges.size() && plain_ranges[next_plain].second <= pos) ++next_plain;
    TokenId hit = kNoToken;
    for (TokenId id : special_by_first_byte_[static_cast<unsigned char>(text[pos])]) {
      // User-defined tokens are always matched (they are ordinary text to the model); control
      // tokens only when the caller asks, so user text cannot forge them, and never where the
      // text is marked plain.
      const bool control = vocab_.type(id) != TokenType::kUserDefined;
      if (control && !parse_special) continue;
      const std::string& s = vocab_.tokens[static_cast<size_t>(id)];
      if (control && next_plain < plain_ranges.size() &&
          plain_ranges[next_plain].first < pos + s.size()) {
        continue;  // the match would overlap text marked plain
      }
      if (text.compare(pos, s.size(), s) == 0) {
        hit = id;
        break;
      }
    }
    if (hit == kNoToken) {
      ++pos;
      continue;
    }
    if (pos > start) out.push_back({text.substr(start, pos - start), kNoToken});
    out.push_back({{}, hit});
    pos += vocab_.tokens[static_cast<size_t>(hit)].size();
    start = pos;
  }
  if (start < text.size()) out.push_back({text.substr(start), kNoToken});
  return out;
}

std::vector<TextRange> Tokenizer::control_token_ranges(std::string_view text) const {
  std::vector<TextRange> out;
  size_t pos = 0;
  for (const Fragment& f : split_special(text, /*parse_special=*/true)) {
    if (f.token == kNoToken) {
      pos += f.text.size();
      continue;
    }
    const size_t size = vocab_.tokens[static_cast<size_t>(f.token)].size();
    if (vocab_.type(f.token) != TokenType::kUserDefined) out.emplace_back(pos, pos + size);
    pos += size;
  }
  return out;
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<TokenId> out;
  if (options.add_special && vocab_.add_bos && vocab_.valid(vocab_.bos)) out.push_back(vocab_.bos);
  bool after_special = true;
  for (const Fragment& f : split_special(text, options.parse_special, options.plain_ranges)) {
    if (f.token != kNoToken) {
      out.push_back(f.token);
      after_special = true;
    } else {
      encode_text(f.text, after_special, out);
      after_special = false;
    }
  }
  if (options.add_special && vocab_.add_eos && vocab_.valid(vocab_.eos)) out.push_back(vocab_.eos);
  return out;
}

bool Tokenizer::is_hidden(TokenId id) const {
  const TokenType t = vocab_.type(id);
  if (t == TokenType::kControl) {
    return !std::binary_search(shown_controls_.begin(), shown_controls_.end(), id);
  }
  if (t == TokenType::kUnknown || t == TokenType::kUnused) return true;
  return t == TokenType::kUserDefined &&
         std::binary_search(hidden_markers_.begin(), hidden_markers_.end(), id);
}

std::string Tokenizer::token_to_bytes(TokenId id, bool render_special) const {
  if (!vocab_.valid(id)) fail("token id ", id, " is out of range (vocabulary has ", vocab_.size(), ")");
  if (is_hidden(id)) return render_special ? vocab_.tokens[static_cast<size_t>(id)] : std::string();
  const TokenType t = vocab_.type(id);
  if (t == TokenType::kUserDefined || t == TokenType::kControl) {
    return vocab_.tokens[static_cast<size_t>(id)];  // a control token here is a shown one
  }
  return piece_bytes(id);
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids, bool render_special) const {
  StreamDecoder decoder(*this, render_special);
  std::string out;
  for (TokenId id : ids) out += decoder.feed(id);
  out += decoder.flush();
  return out;
}

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Moves the complete characters at the front of `pending` to the result; a byte that can never
// start or continue a valid character becomes U+FFFD; an incomplete character at the end stays.
std::string take_complete_utf8(std::string& pending) {
  std::string out;
  size_t pos = 0;
  while (pos < pending.size()) {
    auto c = static_cast<unsigned char>(pending[pos]);
    size_t n = utf8_len(c);
    if (c < 0x80 || n > 1) {
      size_t have = 1;
      while (have < n && pos + have < pending.size() &&
             (static_cast<unsigned char>(pending[pos + have]) & 0xC0) == 0x80) {
        ++have;
      }
      if (have == n) {
        out.append(pending, pos, n);
        pos += n;
        continue;
      }
      if (pos + have == pending.size()) break;  // incomplete: wait for more bytes
    }
    out += kReplacement;
    ++pos;
  }
  pending.erase(0, pos);
  return out;
}

}  // namespace

void StreamDecoder::continue_after(std::span<const TokenId> prompt) {
  for (TokenId id : prompt) feed(id);
  pending_.clear();
}

std::string StreamDecoder::feed(TokenId id) {
  std::string bytes = tokenizer_.token_to_bytes(id, render_special_);
  if (first_ && !bytes.empty()) {
    if (tokenizer_.strips_leading_space() && bytes[0] == ' ') bytes.erase(0, 1);
    first_ = false;
  }
  pending_ += bytes;
  return take_complete_utf8(pending_);
}

std::string StreamDecoder::flush() {
  std::string out;
  for (size_t i = 0; i < pending_.size(); ++i) out += kReplacement;
  pending_.clear();
  return out;
}

}  // namespace pagoda
