#include "grammar/grammar_cache.h"

#include "grammar/gbnf.h"

namespace pagoda {

std::shared_ptr<GrammarMasks> GrammarCache::get(const std::string& gbnf) {
  {
    std::lock_guard lock(mutex_);
    auto it = grammars_.find(gbnf);
    if (it != grammars_.end()) {
      it->second.second = ++clock_;
      return it->second.first;
    }
  }
  // Outside the lock: parsing a large grammar or building the trie takes a while.
  auto grammar = std::make_shared<const Grammar>(parse_gbnf(gbnf));
  std::shared_ptr<const TokenTrie> trie;
  {
    std::lock_guard lock(mutex_);
    trie = trie_;
  }
  if (!trie) trie = std::make_shared<const TokenTrie>(tokenizer_);
  auto masks = std::make_shared<GrammarMasks>(std::move(grammar), trie);
  std::lock_guard lock(mutex_);
  if (!trie_) trie_ = trie;
  if (grammars_.size() >= max_grammars_) {
    auto oldest = grammars_.begin();
    for (auto it = grammars_.begin(); it != grammars_.end(); ++it) {
      if (it->second.second < oldest->second.second) oldest = it;
    }
    grammars_.erase(oldest);
  }
  auto [it, added] = grammars_.emplace(gbnf, std::make_pair(masks, ++clock_));
  return it->second.first;
}

}  // namespace pagoda
