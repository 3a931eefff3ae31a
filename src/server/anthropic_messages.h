// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) as a front door onto
// the chat completions path: a request is checked with Anthropic's field names, translated into
// a chat completions body and parsed by parse_chat_request (same template, tools, grammar,
// sampling and limits); the answer is written as a Message object or as Anthropic's event
// stream. Fields the server cannot honour (image blocks, server tools) are refused,
// never dropped.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/generation.h"
#include "server/openai_request.h"
#include "server/responses.h"
#include "server/tool_calls.h"

namespace pagoda::server {

// True for /v1/messages and the paths below it: their errors take Anthropic's shape.
bool is_messages_path(const std::string& path);

// {"type": "error", "error": {"type", "message"}}, the type following the status
// (invalid_request_error, authentication_error, not_found_error, overloaded_error, ...).
nlohmann::json anthropic_error_json(const ApiError& e);

// The chat completions body a Messages request means; throws ApiError naming the Messages
// field. `count_only`: a count_tokens body (no max_tokens, stream, sampling).
nlohmann::ordered_json messages_to_chat(const nlohmann::json& body,
                                        const nlohmann::ordered_json& ordered,
                                        const RequestLimits& limits, bool count_only);

// A Messages request parsed onto the chat path (endpoint kMessages).
ApiRequest parse_messages_request(const std::string& raw_body, const ModelContext& model,
                                  const RequestLimits& limits, bool count_only = false);

// Writes one generation as Anthropic's answer: the whole Message, or the stream of events
// (message_start, content_block_start / _delta / _stop, message_delta, message_stop).
class MessagesWriter {
 public:
  MessagesWriter(ResponseHead head, const ApiRequest& request);

  // message_start and a ping.
  std::string start(int64_t input_tokens);
  // The events for one delta of the (only) choice; at its end, the tool_use blocks too.
  std::string delta(const ChoiceDelta& d);
  // message_delta (stop_reason, usage) and message_stop.
  std::string finish(const Generation& g);
  // The whole Message of a finished generation.
  nlohmann::ordered_json response(const Generation& g) const;
  // An error event, for a stream whose status line has gone out.
  static std::string error_event(const ApiError& e);

 private:
  std::string open_thinking_block();
  std::string close_thinking_block();
  std::string open_text_block();
  std::string close_block();
  std::string stop_reason(const Generation& g, bool has_calls) const;

  ResponseHead head_;
  const ApiRequest& request_;
  std::vector<ToolCallStream> tool_stream_;  // one when the request has tools
  int block_ = 0;           // index of the next content block
  bool text_open_ = false;  // a text block is open at block_
  bool thinking_open_ = false;  // a thinking block is open at block_
  bool has_calls_ = false;
};

}  // namespace pagoda::server
