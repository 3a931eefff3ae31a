// The JSON objects of the OpenAI API: whole completions and chat completions, their streamed
// chunks, usage, and log-probabilities in each endpoint's shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/generation.h"

namespace pagoda::server {

// Identity of one response: every chunk of a stream shares it.
struct ResponseHead {
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
};

// {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details: {cached_tokens}}.
nlohmann::ordered_json usage_json(int64_t prompt_tokens, int64_t completion_tokens,
                                  int64_t cached_tokens = 0);

// Completions: logprobs {tokens, token_logprobs, top_logprobs, text_offset}; `offset` is where
// the choice's text (as sent) started for the first entry.
nlohmann::ordered_json completion_logprobs(const Tokenizer& tokenizer,
                                           const std::vector<TokenLogprob>& lp, size_t offset);
// Echo with logprobs: `prompt`'s tokens first, the first with a null log-probability (nothing
// comes before it; `scores` are the others'), then the output's `lp` from `offset`, as OpenAI's
// legacy completions gave them.
nlohmann::ordered_json echoed_logprobs(const Tokenizer& tokenizer,
                                       const std::vector<TokenId>& prompt,
                                       const std::vector<TokenLogprob>& scores,
                                       const std::vector<TokenLogprob>& lp, size_t offset);
// Chat: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
nlohmann::ordered_json chat_logprobs(const Tokenizer& tokenizer,
                                     const std::vector<TokenLogprob>& lp);

nlohmann::ordered_json completion_response(const ResponseHead& head, const Tokenizer& tokenizer,
                                           const ApiRequest& request, const Generation& g);
nlohmann::ordered_json chat_response(const ResponseHead& head, const Tokenizer& tokenizer,
                                     const ApiRequest& request, const Generation& g);

// One streamed chunk for one choice delta (role: chat's first chunk of a choice).
nlohmann::ordered_json completion_chunk(const ResponseHead& head, const Tokenizer& tokenizer,
                                        const ApiRequest& request, const ChoiceDelta& d,
                                        size_t offset);
nlohmann::ordered_json chat_chunk(const ResponseHead& head, const Tokenizer& tokenizer,
                                  const ApiRequest& request, const ChoiceDelta& d, bool with_role);
// message.tool_calls of a chat completion.
nlohmann::ordered_json tool_calls_json(const std::vector<ToolCall>& calls);
// The chunks that stream choice `index`'s calls: per call, its id, type and name, then its
// arguments.
std::vector<nlohmann::ordered_json> tool_call_chunks(const ResponseHead& head,
                                                     const ApiRequest& request, int32_t index,
                                                     const std::vector<ToolCall>& calls);

// The last chunk of a stream with include_usage: no choices, the usage.
nlohmann::ordered_json usage_chunk(const ResponseHead& head, const ApiRequest& request,
                                   const Generation& g);

// JSON text that is always valid UTF-8 (token bytes may be part of a character: replaced).
std::string dump(const nlohmann::json& j);
std::string dump(const nlohmann::ordered_json& j);

}  // namespace pagoda::server
