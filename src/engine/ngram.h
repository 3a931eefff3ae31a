// Prompt lookup, the proposer that needs no second model: when the last few tokens of a
// sequence appeared before in it (in the prompt it was given, or in what it wrote), guess that
// what followed them then follows them again. Output that copies from the input (rewriting,
// fixing or summarizing a given text) is guessed well; anything else costs one scan.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/block_hash.h"

namespace pagoda {

struct NgramConfig {
  int32_t min_n = 2;  // shortest suffix that may match
  int32_t max_n = 4;  // longest suffix tried first
  // Only the last max_lookback tokens are searched, so a long prompt costs a bounded scan.
  int32_t max_lookback = 8192;
};

// Up to `k` tokens that followed the most recent earlier occurrence of the longest suffix of
// `tokens` (max_n down to min_n tokens long) that occurs earlier; empty when none does.
std::vector<TokenId> propose_ngram(const TokenSequence& tokens, int32_t k,
                                   const NgramConfig& config = {});

}  // namespace pagoda
