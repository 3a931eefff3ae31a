// A generation written as a Response object or as the Responses API's event stream (see
// responses_api.h).
#include "server/responses_api.h"

#include <utility>

namespace pagoda::server {
namespace {

using nlohmann::ordered_json;

ordered_json text_part(const std::string& text, ordered_json logprobs) {
  return {{"type", "output_text"},
          {"text", text},
          {"annotations", ordered_json::array()},
          {"logprobs", std::move(logprobs)}};
}

ordered_json reasoning_part(const std::string& text) {
  return {{"type", "reasoning_text"}, {"text", text}};
}

ordered_json reasoning_item(const std::string& id, const std::string& text, const std::string& status) {
  return {{"id", id},
          {"type", "reasoning"},
          {"summary", ordered_json::array()},
          {"content", ordered_json::array({reasoning_part(text)})},
          {"status", status}};
}

// reasoning_tokens: the thinking's text tokenized again (the engine counts output tokens, not
// which part they went to).
ordered_json usage_of(const Generation& g, const Tokenizer& tokenizer) {
  const std::string& reasoning = g.choices().at(0).reasoning;
  const int64_t reasoning_tokens =
      reasoning.empty() ? 0 : static_cast<int64_t>(tokenizer.encode(reasoning).size());
  return {{"input_tokens", g.num_prompt_tokens()},
          {"input_tokens_details", {{"cached_tokens", g.num_cached_tokens()}}},
          {"output_tokens", g.num_completion_tokens()},
          {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
          {"total_tokens", g.num_prompt_tokens() + g.num_completion_tokens()}};
}

bool cut_short(const std::string& finish_reason) { return finish_reason == "length"; }

// Item ids share the response's random part: "resp_<hex>" -> "msg_<hex>_<index>".
std::string item_id(const std::string& prefix, const std::string& response_id, size_t index) {
  const size_t cut = response_id.find('_');
  return prefix + response_id.substr(cut == std::string::npos ? 0 : cut + 1) + "_" +
         std::to_string(index);
}

}  // namespace

ResponsesWriter::ResponsesWriter(ResponseHead head, const ApiRequest& request,
                                 const Tokenizer& tokenizer)
    : head_(std::move(head)), request_(request), tokenizer_(tokenizer) {
  if (!request_.tools.empty()) tool_stream_.emplace_back(request_.tool_format, &request_.tools);
}

std::string ResponsesWriter::event(const std::string& type, ordered_json data) {
  ordered_json e = {{"type", type}};
  for (auto& [k, v] : data.items()) e[k] = std::move(v);
  e["sequence_number"] = sequence_++;
  return "event: " + type + "\ndata: " + dump(e) + "\n\n";
}

ordered_json ResponsesWriter::object(const std::string& status, const Generation* g) const {
  ordered_json o = {{"id", head_.id},
                    {"object", "response"},
                    {"created_at", head_.created},
                    {"status", status},
                    {"error", nullptr},
                    {"incomplete_details", status == "incomplete"
                                               ? ordered_json{{"reason", "max_output_tokens"}}
                                               : ordered_json(nullptr)}};
  for (const auto& [k, v] : request_.responses->echo.items()) o[k] = v;
  o["model"] = head_.model;
  o["output"] = g == nullptr ? ordered_json::array() : output_;
  o["usage"] = g == nullptr ? ordered_json(nullptr) : usage_of(*g, tokenizer_);
  return o;
}

ordered_json ResponsesWriter::token_logprobs(const std::vector<TokenLogprob>& lp) const {
  if (!request_.logprobs || lp.empty()) return ordered_json::array();
  // The chat route's entries have the Responses API's shape: {token, logprob, bytes, top_logprobs}.
  return chat_logprobs(tokenizer_, lp)["content"];
}

std::string ResponsesWriter::start() {
  const ordered_json o = object("in_progress", nullptr);
  // One statement per event: the operands of + are evaluated in no set order.
  std::string out = event("response.created", {{"response", o}});
  out += event("response.in_progress", {{"response", o}});
  return out;
}

std::string ResponsesWriter::open_message() {
  if (message_open_) return "";
  message_open_ = true;
  const size_t index = output_.size();
  const std::string id = item_id("msg_", head_.id, index);
  const ordered_json item = {{"id", id},
                             {"type", "message"},
                             {"status", "in_progress"},
                             {"content", ordered_json::array()},
                             {"role", "assistant"}};
  std::string out = event("response.output_item.added", {{"output_index", index}, {"item", item}});
  out += event("response.content_part.added", {{"item_id", id},
                                              {"output_index", index},
                                              {"content_index", 0},
                                              {"part", text_part("", ordered_json::array())}});
  return out;
}

std::string ResponsesWriter::close_message(const std::string& status) {
  message_open_ = false;
  const size_t index = output_.size();
  const std::string id = item_id("msg_", head_.id, index);
  const ordered_json part = text_part(text_, logprobs_);
  ordered_json item = {{"id", id},
                       {"type", "message"},
                       {"status", status},
                       {"content", ordered_json::array({part})},
                       {"role", "assistant"}};
  std::string out = event("response.output_text.done", {{"item_id", id},
                                                       {"output_index", index},
                                                       {"content_index", 0},
                                                       {"text", text_},
                                                       {"logprobs", logprobs_}});
  out += event("response.content_part.done",
               {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", part}});
  out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
  output_.push_back(std::move(item));
  return out;
}

std::string ResponsesWriter::call_events(const ToolCall& c) {
  const size_t index = output_.size();
  const std::string id = item_id("fc_", head_.id, index);
  ordered_json item = {{"id", id},         {"type", "function_call"}, {"status", "in_progress"},
                       {"arguments", ""},  {"call_id", c.id},         {"name", c.name}};
  std::string out = event("response.output_item.added", {{"output_index", index}, {"item", item}});
  out += event("response.function_call_arguments.delta",
               {{"item_id", id}, {"output_index", index}, {"delta", c.arguments}});
  out += event("response.function_call_arguments.done", {{"item_id", id},
                                                         {"output_index", index},
                                                         {"name", c.name},
                                                         {"arguments", c.arguments}});
  item["status"] = "completed";
  item["arguments"] = c.arguments;
  out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
  output_.push_back(std::move(item));
  calls_.push_back(c);
  return out;
}

std::string ResponsesWriter::open_reasoning() {
  if (reasoning_open_) return "";
  reasoning_open_ = true;
  const size_t index = output_.size();
  const std::string id = item_id("rs_", head_.id, index);
  const ordered_json item = {{"id", id},
                             {"type", "reasoning"},
                             {"summary", ordered_json::array()},
                             {"content", ordered_json::array()},
                             {"status", "in_progress"}};
  std::string out = event("response.output_item.added", {{"output_index", index}, {"item", item}});
  out += event("response.content_part.added", {{"item_id", id},
                                              {"output_index", index},
                                              {"content_index", 0},
                                              {"part", reasoning_part("")}});
  return out;
}

std::string ResponsesWriter::close_reasoning(const std::string& status) {
  if (!reasoning_open_) return "";
  reasoning_open_ = false;
  const size_t index = output_.size();
  const std::string id = item_id("rs_", head_.id, index);
  const ordered_json part = reasoning_part(reasoning_);
  std::string out = event("response.reasoning_text.done",
                          {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", reasoning_}});
  out += event("response.content_part.done",
               {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", part}});
  ordered_json item = reasoning_item(id, reasoning_, status);
  out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
  output_.push_back(std::move(item));
  return out;
}

std::string ResponsesWriter::delta(const ChoiceDelta& d) {
  const bool last = !d.finish_reason.empty();
  ParsedToolCalls step = tool_stream_.empty() ? ParsedToolCalls{d.text, {}}
                                              : tool_stream_[0].step(d.text, last);
  std::string text = std::move(step.content);
  std::vector<ToolCall> calls = std::move(step.calls);
  std::string out;
  if (!d.reasoning.empty()) {
    out += open_reasoning();
    reasoning_ += d.reasoning;
    out += event("response.reasoning_text.delta", {{"item_id", item_id("rs_", head_.id, output_.size())},
                                                   {"output_index", output_.size()},
                                                   {"content_index", 0},
                                                   {"delta", d.reasoning}});
  }
  // Log-probabilities cover every token, the thinking's too: those of tokens before the answer
  // go out with its first text.
  for (auto& lp : token_logprobs(d.logprobs)) pending_logprobs_.push_back(std::move(lp));
  if (!text.empty() || (message_open_ && !pending_logprobs_.empty())) {
    out += close_reasoning("completed");
    out += open_message();
    text_ += text;
    for (const auto& lp : pending_logprobs_) logprobs_.push_back(lp);
    out += event("response.output_text.delta",
                 {{"item_id", item_id("msg_", head_.id, output_.size())},
                  {"output_index", output_.size()},
                  {"content_index", 0},
                  {"delta", text},
                  {"logprobs", std::exchange(pending_logprobs_, ordered_json::array())}});
  }
  if (!last) return out;
  const std::string status = cut_short(d.finish_reason) ? "incomplete" : "completed";
  out += close_reasoning(status);
  // An answer of nothing at all is still a message, with empty text.
  if (calls.empty()) out += open_message();
  for (const auto& lp : pending_logprobs_) logprobs_.push_back(lp);
  pending_logprobs_ = ordered_json::array();
  if (message_open_) out += close_message(status);
  for (const ToolCall& c : calls) out += call_events(c);
  return out;
}

std::string ResponsesWriter::finish(const Generation& g) {
  const bool cut = cut_short(g.choices().at(0).finish_reason);
  final_ = object(cut ? "incomplete" : "completed", &g);
  return event(cut ? "response.incomplete" : "response.completed", {{"response", final_}});
}

ordered_json ResponsesWriter::response(const Generation& g) {
  const Choice& c = g.choices().at(0);
  const ParsedToolCalls p = split_tool_calls(c.content(), request_.tool_format, request_.tools);
  const bool cut = cut_short(c.finish_reason);
  if (!c.reasoning.empty()) {
    output_.push_back(reasoning_item(item_id("rs_", head_.id, output_.size()), c.reasoning,
                                     cut && p.content.empty() && p.calls.empty() ? "incomplete"
                                                                                 : "completed"));
  }
  if (!p.content.empty() || p.calls.empty()) {
    text_ = p.content;
    logprobs_ = token_logprobs(c.logprobs);
    (void)close_message(cut ? "incomplete" : "completed");
  }
  for (const ToolCall& call : p.calls) (void)call_events(call);
  sequence_ = 0;  // no stream: the events above were only the way to build the items
  final_ = object(cut ? "incomplete" : "completed", &g);
  return final_;
}

ordered_json ResponsesWriter::conversation() const {
  ordered_json messages = request_.responses->conversation;
  std::string text;
  for (const auto& item : output_) {
    if (item["type"] == "message") text += item["content"][0]["text"].get<std::string>();
  }
  ordered_json m = {{"role", "assistant"}, {"content", text}};
  for (const auto& item : output_) {
    if (item["type"] == "reasoning") m["reasoning_content"] = item["content"][0]["text"];
  }
  if (!calls_.empty()) {
    if (text.empty()) m["content"] = nullptr;
    m["tool_calls"] = ordered_json::array();
    for (const ToolCall& c : calls_) {
      m["tool_calls"].push_back({{"id", c.id},
                                 {"type", "function"},
                                 {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
  }
  messages.push_back(std::move(m));
  return messages;
}

std::string ResponsesWriter::error_event(const ApiError& e) {
  auto null_if_empty = [](const std::string& s) {
    return s.empty() ? ordered_json(nullptr) : ordered_json(s);
  };
  return event("error", {{"code", null_if_empty(e.code().empty() ? e.type() : e.code())},
                         {"message", e.what()},
                         {"param", null_if_empty(e.param())}});
}

}  // namespace pagoda::server
