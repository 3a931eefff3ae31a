// OpenAI's Responses API (POST /v1/responses; GET and DELETE /v1/responses/{id}) as a front door
// onto the chat completions path: `input` (a string or items: messages, function calls and their
// outputs), `instructions`, function `tools`, `text.format` and the sampling fields are checked
// with the Responses API's names, translated into a chat completions body and parsed by
// parse_chat_request (same template, tools, grammar, sampling and limits); the answer is written
// as a Response object or as its event stream. A stored response (store, the default) keeps the
// conversation it ended, which previous_response_id continues. Fields the server cannot honour
// (built-in tools, images, background runs, ...) are refused, never dropped.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/generation.h"
#include "server/openai_request.h"
#include "server/response_store.h"
#include "server/responses.h"
#include "server/tool_calls.h"

namespace pagoda::server {

// What a Responses request carries beside its ApiRequest (ApiRequest::responses).
struct ResponsesInput {
  // The chat messages before this response's output: a previous response's conversation, then
  // this request's input. `instructions` are not among them (they are not carried over to a
  // response that continues this one, as the API defines).
  nlohmann::ordered_json conversation = nlohmann::ordered_json::array();
  // The request's fields a Response object repeats (instructions, metadata, tools, tool_choice,
  // temperature, ...), in the Response's key order.
  nlohmann::ordered_json echo = nlohmann::ordered_json::object();
  bool store = true;
};

// True for /v1/responses and the paths below it.
bool is_responses_path(const std::string& path);

// The chat completions body a Responses request means, and `out` filled; throws ApiError
// naming the Responses field. `store` resolves previous_response_id.
nlohmann::ordered_json responses_to_chat(const nlohmann::json& body,
                                         const nlohmann::ordered_json& ordered,
                                         ResponseStore& store, ResponsesInput& out);

// A Responses request parsed onto the chat path (endpoint kResponses, `responses` set).
ApiRequest parse_responses_request(const std::string& raw_body, const ModelContext& model,
                                   const RequestLimits& limits, ResponseStore& store);

// Writes one generation as a Response: the whole object, or its event stream (response.created,
// response.in_progress, a reasoning item's reasoning_text events when the thinking is split out,
// output_item.added / content_part.added / output_text.delta / ... .done
// per item, function_call_arguments.delta / .done per call, then response.completed or
// response.incomplete). Every event carries its sequence_number.
class ResponsesWriter {
 public:
  ResponsesWriter(ResponseHead head, const ApiRequest& request, const Tokenizer& tokenizer);

  std::string start();
  // The events for one delta of the (only) choice; at its end, the function calls too.
  std::string delta(const ChoiceDelta& d);
  // response.completed, or response.incomplete when the output was cut by max_output_tokens.
  std::string finish(const Generation& g);
  // The whole Response of a finished generation (not streamed).
  nlohmann::ordered_json response(const Generation& g);
  // The Response that finish() or response() built last.
  const nlohmann::ordered_json& final_response() const { return final_; }
  // The conversation this response ends, for the store: the input's and the output's messages.
  nlohmann::ordered_json conversation() const;
  // An "error" event, for a stream whose status line has gone out.
  std::string error_event(const ApiError& e);

 private:
  std::string event(const std::string& type, nlohmann::ordered_json data);
  nlohmann::ordered_json object(const std::string& status, const Generation* g) const;
  std::string open_message();
  std::string close_message(const std::string& status);
  std::string call_events(const ToolCall& c);
  std::string open_reasoning();
  std::string close_reasoning(const std::string& status);
  // The output_text logprobs entries of `lp` (none unless the request asked for them).
  nlohmann::ordered_json token_logprobs(const std::vector<TokenLogprob>& lp) const;

  ResponseHead head_;
  const ApiRequest& request_;
  const Tokenizer& tokenizer_;
  std::vector<ToolCallStream> tool_stream_;  // one when the request has tools
  int64_t sequence_ = 0;
  nlohmann::ordered_json output_ = nlohmann::ordered_json::array();  // finished items
  std::string text_;          // the open message's text so far
  nlohmann::ordered_json logprobs_ = nlohmann::ordered_json::array();  // and its logprobs
  // Of tokens not yet sent with answer text (the thinking's, before the answer begins).
  nlohmann::ordered_json pending_logprobs_ = nlohmann::ordered_json::array();
  std::string reasoning_;  // the thinking so far, when split out
  bool reasoning_open_ = false;
  bool message_open_ = false;
  std::vector<ToolCall> calls_;  // every call of the output
  nlohmann::ordered_json final_;
};

}  // namespace pagoda::server
