#include "grammar/grammar_cache.h"

#include "grammar/gbnf.h"

namespace pagoda {

GrammarCache::GrammarCache(const Tokenizer& tokenizer, size_t max_bytes, size_t max_grammars)
    : max_bytes_(max_bytes),
      max_grammars_(max_grammars),
      trie_(std::make_shared<const TokenTrie>(tokenizer)) {}

std::shared_ptr<GrammarMasks> GrammarCache::get(const std::string& gbnf) {
  GrammarBudget budget;
  return get(gbnf, budget);
}

std::shared_ptr<GrammarMasks> GrammarCache::get(const std::string& gbnf, GrammarBudget& budget) {
  {
    std::lock_guard lock(mutex_);
    auto it = grammars_.find(gbnf);
    if (it != grammars_.end()) {
      it->second.last_use = ++clock_;
      auto masks = it->second.masks;
      evict();
      return masks;
    }
  }
  // Outside the lock: compiling takes a while.
  auto grammar = std::make_shared<const Grammar>(parse_gbnf(gbnf, "root", &budget));
  check_expansions(*grammar, &budget);
  auto masks = std::make_shared<GrammarMasks>(grammar, trie_, budget.limits().max_mask_bytes);
  TokenBitmask first(trie_->vocab_size());
  masks->allowed(initial_state(*grammar, &budget), first, &budget);
  budget.check_now();
  std::lock_guard lock(mutex_);
  auto [it, added] = grammars_.try_emplace(gbnf, Kept{masks, ++clock_});
  if (!added) return it->second.masks;  // compiled by another request meanwhile
  evict();
  return masks;
}

// The kept grammars' masks grow while they are used: the sum is taken again each time.
void GrammarCache::evict() {
  auto total = [&] {
    size_t n = 0;
    for (const auto& [text, kept] : grammars_) n += text.size() + kept.masks->memory_bytes();
    return n;
  };
  while (!grammars_.empty() && (grammars_.size() > max_grammars_ || total() > max_bytes_)) {
    auto oldest = grammars_.begin();
    for (auto it = grammars_.begin(); it != grammars_.end(); ++it) {
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    }
    grammars_.erase(oldest);
  }
}

size_t GrammarCache::memory_bytes() {
  std::lock_guard lock(mutex_);
  size_t total = 0;
  for (const auto& [text, kept] : grammars_) total += text.size() + kept.masks->memory_bytes();
  return total;
}

size_t GrammarCache::size() {
  std::lock_guard lock(mutex_);
  return grammars_.size();
}

}  // namespace pagoda
