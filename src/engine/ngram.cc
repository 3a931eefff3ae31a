#include "engine/ngram.h"

#include <algorithm>

namespace pagoda {

std::vector<TokenId> propose_ngram(const TokenSequence& tokens, int32_t k,
                                   const NgramConfig& config) {
  const int32_t size = tokens.size();
  const int32_t begin = std::max(0, size - config.max_lookback);
  for (int32_t n = std::min(config.max_n, size - 1); n >= config.min_n && n >= 1; --n) {
    // The suffix is tokens [size - n, size); look for it ending before the last position, the
    // most recent occurrence first, so the guess follows the latest context.
    for (int32_t start = size - n - 1; start >= begin; --start) {
      int32_t i = 0;
      while (i < n && tokens[start + i] == tokens[size - n + i]) ++i;
      if (i < n) continue;
      std::vector<TokenId> out;
      for (int32_t j = start + n; j < size && static_cast<int32_t>(out.size()) < k; ++j) {
        out.push_back(tokens[j]);
      }
      return out;
    }
  }
  return {};
}

}  // namespace pagoda
