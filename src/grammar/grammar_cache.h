// Compiled grammars by their GBNF text, for one vocabulary: requests with the same constraint
// share one GrammarMasks, and with it every mask it has cached. The vocabulary's trie is built
// with the cache. Thread-safe.
//
// Bounded by bytes: what each kept grammar holds (its positions and its mask caches, which grow
// as it is used) is summed on every get(), and the least recently used grammars leave until the
// sum is within max_bytes (and the count within max_grammars). Requests still running keep
// their grammar alive after it left.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "grammar/grammar_budget.h"
#include "grammar/token_mask.h"

namespace pagoda {

class GrammarCache {
 public:
  // `tokenizer` must outlive the cache.
  explicit GrammarCache(const Tokenizer& tokenizer, size_t max_bytes = size_t{256} << 20,
                        size_t max_grammars = 64);

  // Parses and compiles `gbnf`, and computes the token mask of its first state, all under
  // `budget`, or returns the grammar compiled before. Throws Error on a bad grammar,
  // GrammarLimitError past a limit, GrammarCancelled.
  std::shared_ptr<GrammarMasks> get(const std::string& gbnf, GrammarBudget& budget);
  // With the default GrammarLimits.
  std::shared_ptr<GrammarMasks> get(const std::string& gbnf);

  // Bytes the kept grammars hold now, and how many there are.
  size_t memory_bytes();
  size_t size();

 private:
  struct Kept {
    std::shared_ptr<GrammarMasks> masks;
    uint64_t last_use = 0;
  };
  void evict();  // under mutex_

  const size_t max_bytes_, max_grammars_;
  const std::shared_ptr<const TokenTrie> trie_;
  std::mutex mutex_;
  std::map<std::string, Kept> grammars_;
  uint64_t clock_ = 0;
};

}  // namespace pagoda
