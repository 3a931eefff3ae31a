// Byte-level BPE (tokenizer.ggml.model "gpt2": GPT-2, Llama 3, Qwen2, DeepSeek, Falcon, ...).
// The text is cut by the pre-tokenizer, each piece's bytes become GPT-2's printable characters,
// and merges are applied by rank, lowest first, as the Hugging Face BPE model does.
#include <algorithm>
#include <array>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

namespace {

// Symbols are vocabulary ids, or ids past the vocabulary for strings that a merge makes (or a
// byte stands for) but the vocabulary lacks; those are written out byte by byte at the end.
using SymbolId = int32_t;

// (left, right) -> (rank, merged) in one flat open-addressing table: merge lookups are the inner
// loop of BPE, and a node-based map costs a cache miss per lookup.
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    SymbolId merged = 0;
  };

  void reserve(size_t num_merges) {
    size_t capacity = 16;
    while (capacity < num_merges * 2) capacity *= 2;
    slots_.assign(capacity, Entry{});
    mask_ = capacity - 1;
  }

  // Keeps the first (lowest-rank) entry when a pair is listed twice.
  void insert(SymbolId left, SymbolId right, int32_t rank, SymbolId merged) {
    uint64_t key = make_key(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return;
      if (slots_[i].key == kEmpty) {
        slots_[i] = {key, rank, merged};
        return;
      }
    }
  }

  const Entry* find(SymbolId left, SymbolId right) const {
    uint64_t key = make_key(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i];
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are never negative, so never a key
  static uint64_t make_key(SymbolId left, SymbolId right) {
    return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
  }
  size_t slot_of(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask_;
  }

  std::vector<Entry> slots_;
  size_t mask_ = 0;
};

// Words recur (most text is a few thousand distinct words), so their ids are kept. Sharded so
// that threads encoding at once rarely wait on each other; a full shard is simply emptied.
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 64;  // longer pieces are rare and not worth keeping

  bool find(std::string_view word, size_t hash, std::vector<TokenId>& out) const {
    Shard& s = shards_[hash % kNumShards];
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.map.find(word);
    if (it == s.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }

  void insert(std::string_view word, size_t hash, const TokenId* ids, size_t num_ids) const {
    Shard& s = shards_[hash % kNumShards];
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.map.size() >= kMaxEntriesPerShard) s.map.clear();
    s.map.emplace(std::string(word), std::vector<TokenId>(ids, ids + num_ids));
  }

 private:
  static constexpr size_t kNumShards = 16;
  static constexpr size_t kMaxEntriesPerShard = 4096;  // 64K words in all: a few MB

  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<TokenId>, Hash, std::equal_to<>> map;
  };
  mutable std::array<Shard, kNumShards> shards_;
};

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(Vocab vocab);

 protected:
  void encode_text(std::string_view text, bool after_special,
                   std::vector<TokenId>& out) const override;
  std::string piece_bytes(TokenId id) const override {
    return byte_level_decode(vocab_.tokens[static_cast<size_t>(id)]);
  }

 private:
  struct Symbol {
    SymbolId id;    // -1 once merged into its left neighbour
    int32_t prev;   // index of the previous live symbol, -1 at the start
    int32_t next;   // index of the next live symbol, -1 at the end
    int32_t start;  // byte offset in the word
  };
  struct Candidate {
    int32_t rank;
    int32_t left;  // index of the left symbol
    SymbolId left_id, right_id, merged;
    // Lowest rank first; among equal ranks the leftmost pair, as the reference does.
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };

  SymbolId symbol_of(const std::string& text);
  void encode_word(std::string_view word, std::vector<TokenId>& out) const;
  void merge_word(std::string_view word, std::vector<TokenId>& out) const;
  // Writes `bytes` as single-byte tokens (unknown token, or nothing, for a byte not in the vocab).
  void emit_bytes(std::string_view bytes, std::vector<TokenId>& out) const;

  PreTokenizer pre_tokenizer_;
  bool ignore_merges_;
  MergeTable merges_;
  std::array<SymbolId, 256> byte_symbol_{};
  std::unordered_map<std::string, SymbolId> extra_index_;  // symbols the vocabulary lacks
  WordCache cache_;
};

BpeTokenizer::BpeTokenizer(Vocab vocab)
    : Tokenizer(std::move(vocab)),
      pre_tokenizer_(pre_tokenizer_spec(vocab_.pre).patterns),
      ignore_merges_(pre_tokenizer_spec(vocab_.pre).ignore_merges) {
  for (int b = 0; b < 256; ++b) {
    byte_symbol_[b] = symbol_of(std::string(byte_to_utf8(static_cast<uint8_t>(b))));
  }
  merges_.reserve(vocab_.merges.size());
  for (size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
    const auto& [left, right] = vocab_.merges[rank];
    merges_.insert(symbol_of(left), symbol_of(right), static_cast<int32_t>(rank),
                   symbol_of(left + right));
  }
}

SymbolId BpeTokenizer::symbol_of(const std::string& text) {
  TokenId id = vocab_.find(text);
  if (id != kNoToken) return id;
  auto [it, added] =
      extra_index_.emplace(text, static_cast<SymbolId>(vocab_.size() + extra_index_.size()));
  return it->second;
}

void BpeTokenizer::encode_text(std::string_view text, bool, std::vector<TokenId>& out) const {
  std::vector<std::string_view> words;
  pre_tokenizer_.split(text, words);
  for (std::string_view word : words) encode_word(word, out);
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  if (word.size() == 1) {
    emit_bytes(word, out);
    return;
  }
  if (word.size() > WordCache::kMaxWordBytes) {
    merge_word(word, out);
    return;
  }
  size_t hash = std::hash<std::string_view>{}(word);
  if (cache_.find(word, hash, out)) return;
  size_t first = out.size();
  merge_word(word, out);
  cache_.insert(word, hash, out.data() + first, out.size() - first);
}

void BpeTokenizer::merge_word(std::string_view word, std::vector<TokenId>& out) const {
  if (ignore_merges_) {
    TokenId whole = vocab_.find(byte_level_encode(word));
    if (whole != kNoToken) {
      out.push_back(whole);
      return;
    }
  }
  // Scratch reused across words; encode stays const and thread-safe.
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.clear();
  heap.clear();
  auto n = static_cast<int32_t>(word.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols.push_back(
        {byte_symbol_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1, i});
  }
  auto push_pair = [&](int32_t left) {
    if (left < 0) return;
    int32_t right = symbols[left].next;
    if (right < 0) return;
    const MergeTable::Entry* e = merges_.find(symbols[left].id, symbols[right].id);
    if (e == nullptr) return;
    heap.push_back({e->rank, left, symbols[left].id, symbols[right].id, e->merged});
    std::push_heap(heap.begin(), heap.end());
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = symbols[c.left];
    // Stale when either side has merged since: symbol ids name their whole string, so a
    // changed neighbour always shows up as a changed id.
    if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) continue;
    Symbol& right = symbols[left.next];
    left.id = c.merged;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.id = -1;
    push_pair(left.prev);
    push_pair(c.left);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (static_cast<size_t>(s.id) < vocab_.size()) {
      out.push_back(s.id);
    } else {
      int32_t end = s.next >= 0 ? symbols[s.next].start : n;
      emit_bytes(word.substr(s.start, end - s.start), out);
    }
  }
}

void BpeTokenizer::emit_bytes(std::string_view bytes, std::vector<TokenId>& out) const {
  for (char c : bytes) {
    SymbolId id = byte_symbol_[static_cast<uint8_t>(c)];
    if (static_cast<size_t>(id) < vocab_.size()) {
      out.push_back(id);
    } else if (vocab_.valid(vocab_.unk)) {
      out.push_back(vocab_.unk);
    }
  }
}

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(Vocab vocab) {
  return std::make_unique<BpeTokenizer>(std::move(vocab));
}

}  // namespace pagoda
