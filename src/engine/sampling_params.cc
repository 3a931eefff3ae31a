#include "engine/sampling_params.h"

#include <limits>
#include <utility>

namespace pagoda {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

template <typename... Args>
[[noreturn]] void fail_param(const char* param, Args&&... args) {
  throw SamplingParamError(param,
                           str_cat("sampling parameter ", param, std::forward<Args>(args)...));
}

void check_range(const char* param, float value, float lo, float hi, const char* range) {
  if (!(value >= lo && value <= hi)) {  // written so that NaN fails too
    fail_param(param, " must be in ", range, " (got ", value, ")");
  }
}

void check_logit_bias(const SamplingParams& params, int32_t vocab_size) {
  for (const auto& [id, bias] : params.logit_bias) {
    if (vocab_size > 0 && (id < 0 || id >= vocab_size)) {
      fail_param("logit_bias", " names token ", id, ", outside the vocabulary [0, ", vocab_size,
                 ")");
    }
    if (id < 0) fail_param("logit_bias", " names a negative token id ", id);
    if (!(bias == -kInf || (bias >= -kMaxLogitBias && bias <= kMaxLogitBias))) {
      fail_param("logit_bias", " for token ", id, " must be in [-", kMaxLogitBias, ", ",
                 kMaxLogitBias, "] or -inf (got ", bias, ")");
    }
  }
}

}  // namespace

void validate(const SamplingParams& params, int32_t vocab_size) {
  if (!(params.temperature >= 0.0f && params.temperature < kInf)) {
    fail_param("temperature", " must be >= 0 and finite (got ", params.temperature, ")");
  }
  if (params.top_k < 0) fail_param("top_k", " must be >= 0, 0 = off (got ", params.top_k, ")");
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    fail_param("top_p", " must be in (0, 1] (got ", params.top_p, ")");
  }
  check_range("min_p", params.min_p, 0.0f, 1.0f, "[0, 1]");
  if (!(params.repetition_penalty > 0.0f && params.repetition_penalty < kInf)) {
    fail_param("repetition_penalty", " must be > 0 and finite (got ", params.repetition_penalty,
               ")");
  }
  check_range("presence_penalty", params.presence_penalty, -2.0f, 2.0f, "[-2, 2]");
  check_range("frequency_penalty", params.frequency_penalty, -2.0f, 2.0f, "[-2, 2]");
  if (params.num_logprobs < 0 || params.num_logprobs > kMaxNumLogprobs) {
    fail_param("num_logprobs", " must be in [0, ", kMaxNumLogprobs, "] (got ", params.num_logprobs,
               ")");
  }
  check_logit_bias(params, vocab_size);
}

}  // namespace pagoda
