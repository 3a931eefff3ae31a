#include "grammar/token_mask.h"

#include <algorithm>
#include <bit>
#include <numeric>

#include "core/error.h"

namespace pagoda {

int64_t TokenBitmask::count() const {
  int64_t n = 0;
  for (uint64_t w : words_) n += std::popcount(w);
  return n;
}

TokenTrie::TokenTrie(const Tokenizer& tokenizer) {
  const Vocab& vocab = tokenizer.vocab();
  const auto size = static_cast<TokenId>(vocab.size());
  bytes_.resize(static_cast<size_t>(size));
  std::vector<TokenId> order;
  for (TokenId id = 0; id < size; ++id) {
    if (vocab.type(id) == TokenType::kControl || vocab.type(id) == TokenType::kUnused) continue;
    bytes_[static_cast<size_t>(id)] = tokenizer.token_to_bytes(id);
    if (!bytes_[static_cast<size_t>(id)].empty()) order.push_back(id);
  }
  // Sorted by bytes, the tokens are the trie's leaves and inner nodes in depth-first order.
  std::sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)];
  });
  nodes_.push_back({});              // the root
  std::vector<uint32_t> path = {0};  // node index at each depth of the current path
  std::string current;
  for (TokenId id : order) {
    const std::string& b = bytes_[static_cast<size_t>(id)];
    size_t common = 0;
    while (common < current.size() && common < b.size() && current[common] == b[common]) ++common;
    // Close the nodes below the common prefix.
    while (path.size() > common + 1) {
      nodes_[path.back()].subtree_end = static_cast<uint32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < b.size(); ++d) {
      Node n;
      n.byte = static_cast<uint8_t>(b[d]);
      n.depth = static_cast<uint16_t>(std::min<size_t>(d + 1, UINT16_MAX));
      n.first_token = static_cast<uint32_t>(tokens_.size());
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back(n);
    }
    Node& leaf = nodes_[path.back()];
    if (leaf.num_tokens == 0) leaf.first_token = static_cast<uint32_t>(tokens_.size());
    tokens_.push_back(id);
    ++leaf.num_tokens;
    current = b;
    max_depth_ = std::max<int32_t>(max_depth_, static_cast<int32_t>(b.size()));
  }
  while (!path.empty()) {
    nodes_[path.back()].subtree_end = static_cast<uint32_t>(nodes_.size());
    path.pop_back();
  }
}

GrammarMasks::GrammarMasks(std::shared_ptr<const Grammar> grammar,
                           std::shared_ptr<const TokenTrie> trie, size_t max_cache_bytes)
    : grammar_(std::move(grammar)), trie_(std::move(trie)), max_cache_bytes_(max_cache_bytes) {}

size_t GrammarMasks::num_walks() const {
  std::lock_guard lock(mutex_);
  return tops_.size();
}

size_t GrammarMasks::memory_bytes() const {
  std::lock_guard lock(mutex_);
  return sizeof(*this) + grammar_->memory_bytes() + tops_bytes_ + states_bytes_;
}

namespace {

size_t stack_bytes(const GrammarStack& s) { return sizeof(s) + s.size() * sizeof(uint32_t); }

size_t state_bytes(const std::vector<GrammarStack>& stacks, const TokenBitmask& mask) {
  size_t n = 64 + mask.num_words() * sizeof(uint64_t);
  for (const GrammarStack& s : stacks) n += stack_bytes(s);
  return n;
}

}  // namespace

std::shared_ptr<const GrammarMasks::Entry> GrammarMasks::entry(const GrammarStack& top,
                                                               GrammarBudget* budget) {
  {
    std::lock_guard lock(mutex_);
    auto it = tops_.find(top);
    if (it != tops_.end()) {
      recent_.splice(recent_.begin(), recent_, it->second.place);
      return it->second.entry;
    }
  }
  std::shared_ptr<const Entry> e = walk(top, budget);  // outside the lock: it may take a while
  size_t bytes = 64 + 2 * stack_bytes(top) + e->accepted.num_words() * sizeof(uint64_t);
  for (const Remainder& r : e->remainders) {
    bytes += sizeof(r) + r.bytes.capacity() + r.tokens.capacity() * sizeof(TokenId);
  }
  std::lock_guard lock(mutex_);
  auto [it, added] = tops_.try_emplace(top);
  if (!added) return it->second.entry;  // another thread walked it meanwhile
  recent_.push_front(&it->first);
  it->second = {e, bytes, recent_.begin()};
  tops_bytes_ += bytes;
  // The least recently used walks leave; the one just made stays alive through `e`.
  while (tops_bytes_ + states_bytes_ > max_cache_bytes_ && !recent_.empty()) {
    auto old = tops_.find(*recent_.back());
    recent_.pop_back();
    tops_bytes_ -= old->second.bytes;
    tops_.erase(old);
  }
  return e;
}

// The trie walk with `top` alone as the stack (see token_mask.h). A path that empties the stack
// has finished the top's frames: what the token holds past that point is its remainder.
std::shared_ptr<GrammarMasks::Entry> GrammarMasks::walk(const GrammarStack& top,
                                                        GrammarBudget* budget) const {
  const Grammar& g = *grammar_;
  const std::vector<TokenTrie::Node>& nodes = trie_->nodes();
  auto e = std::make_shared<Entry>();
  e->accepted = TokenBitmask(trie_->vocab_size());
  struct Level {
    std::vector<GrammarStack> stacks;
    std::vector<uint16_t> finished_at;  // depths at which some path finished the frames
  };
  std::vector<Level> levels(static_cast<size_t>(trie_->max_depth()) + 1);
  levels[0].stacks = {top};
  std::map<std::string, std::vector<TokenId>> remainders;
  for (uint32_t i = 1; i < nodes.size();) {
    const TokenTrie::Node& node = nodes[i];
    const Level& parent = levels[node.depth - 1];
    Level& level = levels[node.depth];
    level.stacks.clear();
    level.finished_at = parent.finished_at;
    bool finished = false;
    ExpandBudget steps(g, budget);  // each node's stacks are one parse state
    for (const GrammarStack& s : parent.stacks) {
      if (!g.at(s.back()).bytes.test(node.byte)) continue;
      GrammarStack moved = s;
      ++moved.back();
      expand_stack(g, std::move(moved), level.stacks, &finished, steps);
    }
    if (finished) level.finished_at.push_back(node.depth);
    if (level.stacks.size() > 1) sort_unique(level.stacks);
    if (level.stacks.empty() && level.finished_at.empty()) {
      i = node.subtree_end;  // no token under here can match
      continue;
    }
    const TokenId* tokens = trie_->tokens_at(node);
    for (uint32_t t = 0; t < node.num_tokens; ++t) {
      if (!level.stacks.empty()) {
        e->accepted.set(tokens[t]);
        continue;
      }
      const std::string& bytes = trie_->bytes(tokens[t]);
      for (uint16_t depth : level.finished_at) remainders[bytes.substr(depth)].push_back(tokens[t]);
    }
    ++i;
  }
  for (auto& [bytes, tokens] : remainders) e->remainders.push_back({bytes, std::move(tokens)});
  return e;
}

// The work of the mask being computed on this thread: the remainders checked times the
// stacks below their tops (see compute()).
namespace {
thread_local size_t mask_work = 0;
}  // namespace

// The tokens `stack` allows, into `out`.
void GrammarMasks::add_stack(const GrammarStack& stack, TokenBitmask& out, GrammarBudget* budget) {
  ++mask_work;
  const Grammar& g = *grammar_;
  const size_t cut = stack.size() > kSuffixFrames ? stack.size() - kSuffixFrames : 0;
  const GrammarStack top(stack.begin() + static_cast<ptrdiff_t>(cut), stack.end());
  const std::shared_ptr<const Entry> e = entry(top, budget);
  out.merge(e->accepted);
  if (e->remainders.empty()) return;
  // What follows the top's frames: the rest of the stack, expanded.
  GrammarState below;
  if (cut == 0) {
    below.complete = true;  // the root itself ends with them
  } else {
    ExpandBudget steps(g, budget);
    expand_stack(g, GrammarStack(stack.begin(), stack.begin() + static_cast<ptrdiff_t>(cut)),
                 below.stacks, &below.complete, steps);
    sort_unique(below.stacks);
  }
  for (const Remainder& r : e->remainders) {
    if (budget != nullptr) budget->tick();
    if (advance(g, below, r.bytes).dead()) continue;
    for (TokenId t : r.tokens) out.set(t);
  }
  mask_work += e->remainders.size() * std::max<size_t>(1, below.stacks.size());
}

void GrammarMasks::compute(const GrammarState& state, TokenBitmask& out, GrammarBudget* budget) {
  out.clear();
  // One mask does at most the work of one parse state: past that (thousands of stacks, each
  // checking its remainders), the stacks left allow nothing, as past the stack limit.
  mask_work = 0;
  for (const GrammarStack& stack : state.stacks) {
    if (mask_work > grammar_->max_stacks()) {
      if (budget != nullptr) {
        throw GrammarLimitError(str_cat("grammar: a token mask needs more than ",
                                        grammar_->max_stacks(), " steps (--max-grammar-states)"));
      }
      break;
    }
    try {
      add_stack(stack, out, budget);
    } catch (const GrammarLimitError&) {
      // Generating: this stack's tokens stay out (see token_mask.h). Compiling: the limit.
      if (budget != nullptr) throw;
    }
  }
}

void GrammarMasks::allowed(const GrammarState& state, TokenBitmask& out, GrammarBudget* budget) {
  {
    std::lock_guard lock(mutex_);
    auto it = states_.find(state.stacks);
    if (it != states_.end()) {
      it->second.second = ++clock_;
      out = it->second.first;
      return;
    }
  }
  compute(state, out, budget);
  const size_t bytes = state_bytes(state.stacks, out);
  // The state masks take at most half the cache; a state larger than that is not kept.
  if (bytes > max_cache_bytes_ / 2) return;
  std::lock_guard lock(mutex_);
  while (!states_.empty() &&
         (states_.size() >= kMaxStateMasks || states_bytes_ + bytes > max_cache_bytes_ / 2)) {
    auto oldest = states_.begin();
    for (auto it = states_.begin(); it != states_.end(); ++it) {
      if (it->second.second < oldest->second.second) oldest = it;
    }
    states_bytes_ -= state_bytes(oldest->first, oldest->second.first);
    states_.erase(oldest);
  }
  if (states_.emplace(state.stacks, std::make_pair(out, ++clock_)).second) states_bytes_ += bytes;
}

}  // namespace pagoda
