// Which tokens a grammar allows next: a mask over the vocabulary for a GrammarState.
//
// The vocabulary is a trie of the tokens' byte strings (TokenTrie), walked depth first with the
// parse state, so tokens that share a prefix share its work and a prefix the grammar refuses
// prunes every token under it (the approach of XGrammar and llguidance). Two caches make the
// walk rare:
//   - by stack top: the walk is done once per distinct top of a stack (its last
//     kSuffixFrames positions), with that top alone: tokens it accepts or refuses without
//     finishing those frames are decided for every stack with that top ("context-independent");
//     the others ("context-dependent", e.g. the tokens that hold a closing quote inside a JSON
//     string) are kept as the bytes they have left when the frames finish, grouped by those
//     bytes, and checked against the rest of the stack each time: one short check per distinct
//     remainder, not per token;
//   - by state: the last masks computed, keyed by the whole state; generation inside a string
//     or a number keeps returning to the same state.
// Tokens that hold part of a UTF-8 character are bytes like any others.
//
// Memory is bounded: the walks' results are kept least recently used first out within
// GrammarLimits::max_mask_bytes, the state masks to kMaxStateMasks. A walk that passes the
// grammar's stack limit (see matcher.h) allows nothing from its stack: the mask is then a subset
// of what the grammar allows, never more.
//
// Thread-safe: the caches take a lock; a GrammarMasks is shared by every request using the
// same grammar.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

// The vocabulary's byte strings as a trie in depth-first order: node 0 is the root; the
// children of a node follow it; subtree_end is the node after its subtree.
class TokenTrie {
 public:
  // Every token that is not a control token and decodes to at least one byte.
  explicit TokenTrie(const Tokenizer& tokenizer);

  struct Node {
    uint8_t byte = 0;
    uint16_t depth = 0;
    uint32_t subtree_end = 0;
    uint32_t first_token = 0;  // into tokens_
    uint32_t num_tokens = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const TokenId* tokens_at(const Node& n) const { return tokens_.data() + n.first_token; }
  const std::string& bytes(TokenId id) const { return bytes_[static_cast<size_t>(id)]; }
  int32_t vocab_size() const { return static_cast<int32_t>(bytes_.size()); }
  int32_t max_depth() const { return max_depth_; }

 private:
  std::vector<Node> nodes_;
  std::vector<TokenId> tokens_;
  std::vector<std::string> bytes_;  // [vocab]: empty for tokens not in the trie
  int32_t max_depth_ = 0;
};

class TokenBitmask {
 public:
  explicit TokenBitmask(int32_t size = 0) : words_((static_cast<size_t>(size) + 63) / 64, 0) {}
  void set(int32_t i) { words_[static_cast<size_t>(i) >> 6] |= uint64_t{1} << (i & 63); }
  bool test(int32_t i) const { return (words_[static_cast<size_t>(i) >> 6] >> (i & 63)) & 1; }
  void clear() { std::fill(words_.begin(), words_.end(), 0); }
  void merge(const TokenBitmask& other) {
    for (size_t w = 0; w < words_.size(); ++w) words_[w] |= other.words_[w];
  }
  int64_t count() const;
  size_t num_words() const { return words_.size(); }
  uint64_t word(size_t w) const { return words_[w]; }

 private:
  std::vector<uint64_t> words_;
};

class GrammarMasks {
 public:
  // Frames of a stack's top that key the context-independent cache.
  static constexpr size_t kSuffixFrames = 3;
  // Whole-state masks kept (each a bit per vocabulary entry).
  static constexpr size_t kMaxStateMasks = 128;

  GrammarMasks(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie,
               size_t max_cache_bytes = GrammarLimits{}.max_mask_bytes);

  // The tokens allowed after `state` into `out` (sized to the vocabulary). Control tokens are
  // never in it: the caller allows end-of-generation when state.complete. With a `budget` (a
  // compile computing the first mask), its clock is checked and a stack past the grammar's
  // limit throws GrammarLimitError instead of being left out.
  void allowed(const GrammarState& state, TokenBitmask& out, GrammarBudget* budget = nullptr);

  const Grammar& grammar() const { return *grammar_; }
  const TokenTrie& trie() const { return *trie_; }
  // Trie walks kept (distinct stack tops), for tests and stats.
  size_t num_walks() const;
  // Bytes held: the grammar and both caches.
  size_t memory_bytes() const;

 private:
  // The tokens that finish the top's frames, by the bytes they still hold then.
  struct Remainder {
    std::string bytes;
    std::vector<TokenId> tokens;
  };
  struct Entry {
    TokenBitmask accepted;  // decided by the top alone
    std::vector<Remainder> remainders;
  };
  struct Cached {
    std::shared_ptr<const Entry> entry;
    size_t bytes = 0;
    std::list<const GrammarStack*>::iterator place;  // in recent_
  };

  std::shared_ptr<const Entry> entry(const GrammarStack& top, GrammarBudget* budget);
  std::shared_ptr<Entry> walk(const GrammarStack& top, GrammarBudget* budget) const;
  void compute(const GrammarState& state, TokenBitmask& out, GrammarBudget* budget);
  void add_stack(const GrammarStack& stack, TokenBitmask& out, GrammarBudget* budget);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  const size_t max_cache_bytes_;
  mutable std::mutex mutex_;
  std::map<GrammarStack, Cached> tops_;
  std::list<const GrammarStack*> recent_;  // the keys of tops_, most recently used first
  size_t tops_bytes_ = 0;
  std::map<std::vector<GrammarStack>, std::pair<TokenBitmask, uint64_t>> states_;  // + last use
  size_t states_bytes_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace pagoda
