// The requests a benchmark runs: token-id prompts with an output length each, from fixed or
// uniform lengths (synthetic prompts of random vocabulary ids) or from a ShareGPT-style file.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/vocab.h"

namespace pagoda {
class Tokenizer;
}

namespace pagoda::bench {

struct BenchRequest {
  std::vector<TokenId> prompt;
  int32_t output_len = 0;  // tokens to generate (end-of-generation ids are ignored)
};

// A length: "256" (fixed) or "128:512" (uniform over the closed range).
struct LengthRange {
  int32_t min = 0;
  int32_t max = 0;
  bool fixed() const { return min == max; }
  std::string to_string() const;
};
// Throws Error naming `option` for anything else, or a range outside [1, 1 << 20].
LengthRange parse_length_range(const std::string& text, const std::string& option);

// Ids a synthetic prompt draws from: the vocabulary's normal and byte tokens (no control,
// unused or user-defined ones), or every id below vocab_size when the file has no vocabulary.
std::vector<TokenId> prompt_token_pool(const Vocab* vocab, int32_t vocab_size);

// `len` ids drawn uniformly from `pool`.
std::vector<TokenId> random_prompt(const std::vector<TokenId>& pool, int32_t len,
                                   std::mt19937_64& rng);

// `count` requests, lengths drawn from the ranges, prompts from `pool`; the same seed gives the
// same requests.
std::vector<BenchRequest> synthetic_requests(int32_t count, const LengthRange& prompt_len,
                                             const LengthRange& output_len,
                                             const std::vector<TokenId>& pool, uint64_t seed);

// vLLM's pruning of dataset requests: prompt and output of at least 4 tokens, a prompt of at
// most 1024, prompt + output at most max_total_len (2048 there).
struct DatasetLimits {
  int32_t min_len = 4;
  int32_t max_prompt_len = 1024;
  int32_t max_total_len = 2048;
};

struct DatasetRequests {
  std::vector<BenchRequest> requests;
  int64_t num_read = 0;     // entries read (reading stops once `count` are taken)
  int64_t num_skipped = 0;  // read but pruned (too short, too long, not human then gpt)
};

// A ShareGPT-style JSON file: a list of {"conversations": [{"from": "human", "value": ..},
// {"from": "gpt", "value": ..}, ...]}. The prompt is the first turn tokenized (with BOS when the
// vocabulary adds one), the output length the token count of the second; entries whose first two
// turns are not human then gpt are skipped. Takes the first `count` valid entries in file order
// (fewer when the file has fewer). `output_len` > 0 replaces every reply's length (and is what
// the limits check). Throws Error naming the path and entry for a malformed file.
DatasetRequests sharegpt_requests(const std::string& path, const Tokenizer& tokenizer,
                                  int32_t count, const DatasetLimits& limits,
                                  int32_t output_len = 0);

}  // namespace pagoda::bench
