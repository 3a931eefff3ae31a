// Compiled grammars by their GBNF text, for one vocabulary: requests with the same constraint
// share one GrammarMasks, and with it every mask it has cached. The vocabulary's trie is built
// on first use. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "grammar/token_mask.h"

namespace pagoda {

class GrammarCache {
 public:
  // `tokenizer` must outlive the cache.
  explicit GrammarCache(const Tokenizer& tokenizer, size_t max_grammars = 64)
      : tokenizer_(tokenizer), max_grammars_(max_grammars) {}

  // Parses and compiles `gbnf` (throws Error on a bad grammar), or returns the one compiled
  // before. The least recently used grammar leaves when more than max_grammars are kept.
  std::shared_ptr<GrammarMasks> get(const std::string& gbnf);

 private:
  const Tokenizer& tokenizer_;
  const size_t max_grammars_;
  std::mutex mutex_;
  std::shared_ptr<const TokenTrie> trie_;
  std::map<std::string, std::pair<std::shared_ptr<GrammarMasks>, uint64_t>> grammars_;
  uint64_t clock_ = 0;
};

}  // namespace pagoda
