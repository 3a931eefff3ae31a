// What one request asks of the sampler, and the one place its ranges are checked: validate().
// The server, the commands, Engine::check_request and Sampler's constructor each call it where a
// request enters them; none keeps a copy of the rules.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "tokenizer/vocab.h"

namespace pagoda {

constexpr int kMaxNumLogprobs = 20;      // OpenAI's top_logprobs limit
constexpr float kMaxLogitBias = 100.0f;  // OpenAI's logit_bias range is [-100, 100]

// Per-request sampling settings, each with the range validate() holds it to.
struct SamplingParams {
  float temperature = 1.0f;         // >= 0; 0 = greedy
  int top_k = 0;                    // >= 0; 0 (or >= vocabulary size) = off
  float top_p = 1.0f;               // (0, 1]; 1 = off
  float min_p = 0.0f;               // [0, 1]; 0 = off
  float repetition_penalty = 1.0f;  // > 0; 1 = off
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  // Added to the logits; each value in [-100, 100], or -inf to ban a token outright; each id in
  // the vocabulary. Repeated ids add up.
  std::vector<std::pair<TokenId, float>> logit_bias;
  uint64_t seed = 0;
  bool has_seed = false;  // false: the seed is drawn from std::random_device
  // OpenAI "logprobs": fill SampleResult::logprob. A separate flag because computing it costs a
  // pass of exp() over the whole vocabulary, which greedy decoding otherwise avoids.
  bool logprobs = false;
  int num_logprobs = 0;  // [0, 20] alternatives in SampleResult::top_logprobs; > 0 implies logprobs
};

// A field of SamplingParams out of its range. The message names the field; param() is its name
// as SamplingParams spells it (the server answers 400 naming it).
class SamplingParamError : public Error {
 public:
  SamplingParamError(std::string param, const std::string& message)
      : Error(message), param_(std::move(param)) {}
  const std::string& param() const { return param_; }

 private:
  std::string param_;
};

// Throws SamplingParamError for the first field outside its range, a logit_bias id outside
// [0, vocab_size) among them. vocab_size 0: the vocabulary is not known yet (pagoda run checks
// its options before it loads the model), so logit_bias ids are only held to be non-negative.
void validate(const SamplingParams& params, int32_t vocab_size);

}  // namespace pagoda
