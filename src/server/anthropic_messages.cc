// Anthropic's Messages API onto the chat completions path (see anthropic_messages.h).
#include "server/anthropic_messages.h"

#include <set>

#include "server/request_fields.h"

namespace pagoda::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// Refuses any key of `object` outside `known`, naming it at `where`; a null is not given.
void only_keys(const json& object, const std::set<std::string>& known, const std::string& where,
               const std::string& why = "") {
  refuse_unknown_keys(object, known, where, why.empty() ? "" : " (" + why + ")");
}

// A text block: {"type": "text", "text", cache_control?, citations?}; its text.
std::string text_block(const json& block, const std::string& where) {
  only_keys(block, {"type", "text", "cache_control", "citations"}, where);
  const json* t = field(block, "text");
  if (t == nullptr || !t->is_string()) throw bad_param(where, quoted(where + ".text") + " must be a string");
  if (const json* c = field(block, "citations"); c != nullptr && !(c->is_array() && c->empty())) {
    throw bad_param(where + ".citations", "citations are not supported by this server");
  }
  return t->get<std::string>();
}

std::string block_type(const json& block, const std::string& where) {
  const json* type = block.is_object() ? field(block, "type") : nullptr;
  if (type == nullptr || !type->is_string()) {
    throw bad_param(where, quoted(where) + " must be a content block with a 'type'");
  }
  return type->get<std::string>();
}

[[noreturn]] void refuse_block(const std::string& type, const std::string& where,
                               const std::string& allowed) {
  throw bad_param(where + ".type", "content blocks of type '" + type + "' (" + where +
                                       ") are not supported by this server; " + allowed);
}

// A string, or a list of text blocks: the text, the blocks joined by blank lines.
std::string text_of(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw bad_param(where, quoted(where) + " must be a string or a list of text blocks");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const std::string type = block_type(content[i], at);
    if (type != "text") refuse_block(type, at, "only text blocks are taken here");
    if (i > 0) text += "\n\n";
    text += text_block(content[i], at);
  }
  return text;
}

// One user message: its text, and its tool_result blocks as tool messages, in block order.
void user_message(const json& content, const std::string& where, ordered_json& out) {
  std::string text;
  bool has_text = false;
  auto flush = [&] {
    if (has_text) out.push_back({{"role", "user"}, {"content", text}});
    text.clear();
    has_text = false;
  };
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const std::string type = block_type(content[i], at);
    if (type == "text") {
      if (has_text) text += "\n\n";
      text += text_block(content[i], at);
      has_text = true;
    } else if (type == "tool_result") {
      flush();
      const json& b = content[i];
      only_keys(b, {"type", "tool_use_id", "content", "is_error", "cache_control"}, at);
      const json* id = field(b, "tool_use_id");
      if (id == nullptr || !id->is_string()) throw bad_param(at, quoted(at + ".tool_use_id") + " must be a string");
      const json* c = field(b, "content");
      std::string result = c == nullptr ? "" : text_of(*c, at + ".content");
      if (bool_field(b, "is_error", false)) result = "Error: " + result;
      out.push_back({{"role", "tool"}, {"tool_call_id", id->get<std::string>()},
                     {"content", result}});
    } else {
      refuse_block(type, at, "a user message takes text and tool_result blocks");
    }
  }
  if (has_text || content.empty()) {
    has_text = true;
    flush();
  }
}

// One assistant message: its text as content, its tool_use blocks as tool_calls, its thinking
// blocks as reasoning_content (which templates such as Qwen3's read).
void assistant_message(const json& content, const ordered_json& ocontent,
                       const std::string& where, ordered_json& out) {
  std::string text, thinking;
  ordered_json calls = ordered_json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const std::string type = block_type(content[i], at);
    if (type == "text") {
      if (!text.empty()) text += "\n\n";
      text += text_block(content[i], at);
    } else if (type == "thinking") {
      only_keys(content[i], {"type", "thinking", "signature", "cache_control"}, at);
      const json* t = field(content[i], "thinking");
      if (t == nullptr || !t->is_string()) throw bad_param(at, quoted(at + ".thinking") + " must be a string");
      if (!thinking.empty()) thinking += "\n\n";
      thinking += t->get<std::string>();
    } else if (type == "tool_use") {
      only_keys(content[i], {"type", "id", "name", "input", "cache_control"}, at);
      const json* id = field(content[i], "id");
      const json* name = field(content[i], "name");
      const json* input = field(content[i], "input");
      if (id == nullptr || !id->is_string() || name == nullptr || !name->is_string() ||
          input == nullptr || !input->is_object()) {
        throw bad_param(at, quoted(at) + " must be {\"type\": \"tool_use\", \"id\", \"name\", "
                                         "\"input\": {...}}");
      }
      calls.push_back({{"id", id->get<std::string>()},
                       {"type", "function"},
                       {"function", {{"name", name->get<std::string>()},
                                     {"arguments", ocontent[i]["input"].dump()}}}});
    } else {
      refuse_block(type, at, "an assistant message takes text, thinking and tool_use blocks");
    }
  }
  ordered_json m = {{"role", "assistant"}, {"content", text}};
  if (!thinking.empty()) m["reasoning_content"] = thinking;
  if (!calls.empty()) {
    if (text.empty()) m["content"] = nullptr;
    m["tool_calls"] = std::move(calls);
  }
  out.push_back(std::move(m));
}

ordered_json translate_messages(const json& body, const ordered_json& ordered) {
  ordered_json out = ordered_json::array();
  if (const json* system = field(body, "system")) {
    out.push_back({{"role", "system"}, {"content", text_of(*system, "system")}});
  }
  const json* messages = field(body, "messages");
  if (messages == nullptr || !messages->is_array() || messages->empty()) {
    throw bad_param("messages", "'messages' must be a non-empty list of messages");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad_param(where, quoted(where) + " must be an object");
    only_keys(m, {"role", "content"}, where);
    const json* role = field(m, "role");
    if (role == nullptr || !(*role == "user" || *role == "assistant")) {
      throw bad_param(where + ".role", quoted(where + ".role") + " must be \"user\" or \"assistant\"");
    }
    const json* content = field(m, "content");
    const std::string at = where + ".content";
    if (content == nullptr) throw bad_param(at, quoted(at) + " is required");
    if (content->is_string()) {
      out.push_back({{"role", role->get<std::string>()}, {"content", content->get<std::string>()}});
      continue;
    }
    if (!content->is_array()) throw bad_param(at, quoted(at) + " must be a string or a list of content blocks");
    const ordered_json& ocontent = ordered["messages"][i]["content"];
    if (*role == "user") {
      user_message(*content, at, out);
    } else {
      assistant_message(*content, ocontent, at, out);
    }
  }
  return out;
}

ordered_json translate_tools(const json& body, const ordered_json& ordered) {
  const json* tools = field(body, "tools");
  if (!tools->is_array()) throw bad_param("tools", "'tools' must be a list");
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& t = (*tools)[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) throw bad_param(where, quoted(where) + " must be an object");
    if (const json* type = field(t, "type"); type != nullptr && *type != "custom") {
      throw bad_param(where + ".type", "tools of type " + type->dump() +
                                           " (server tools) are not supported by this server");
    }
    only_keys(t, {"type", "name", "description", "input_schema", "cache_control"}, where);
    const json* name = field(t, "name");
    const json* schema = field(t, "input_schema");
    if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
      throw bad_param(where + ".name", quoted(where + ".name") + " must be a non-empty string");
    }
    if (schema == nullptr || !schema->is_object()) {
      throw bad_param(where + ".input_schema", quoted(where + ".input_schema") + " must be a JSON schema object");
    }
    ordered_json fn = {{"name", name->get<std::string>()}};
    if (const json* d = field(t, "description")) {
      if (!d->is_string()) throw bad_param(where + ".description", quoted(where + ".description") + " must be a string");
      fn["description"] = d->get<std::string>();
    }
    fn["parameters"] = ordered["tools"][i]["input_schema"];
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

// tool_choice {"type": auto | any | tool (with name) | none, disable_parallel_tool_use}.
void translate_tool_choice(const json& body, ordered_json& chat) {
  const json* choice = field(body, "tool_choice");
  if (choice == nullptr) return;
  const json* type = choice->is_object() ? field(*choice, "type") : nullptr;
  const char* shape = "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or "
                      "{\"type\": \"tool\", \"name\"}";
  if (type == nullptr || !type->is_string()) throw bad_param("tool_choice", shape);
  only_keys(*choice, {"type", "name", "disable_parallel_tool_use"}, "tool_choice");
  const std::string t = type->get<std::string>();
  if (t == "auto") {
    chat["tool_choice"] = "auto";
  } else if (t == "any") {
    chat["tool_choice"] = "required";
  } else if (t == "none") {
    chat["tool_choice"] = "none";
  } else if (t == "tool") {
    const json* name = field(*choice, "name");
    if (name == nullptr || !name->is_string()) throw bad_param("tool_choice.name", shape);
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", name->get<std::string>()}}}};
  } else {
    throw bad_param("tool_choice.type", shape);
  }
  if (bool_field(*choice, "disable_parallel_tool_use", false)) chat["parallel_tool_calls"] = false;
}

void translate_stop(const json& body, const RequestLimits& limits, ordered_json& chat) {
  const json* v = field(body, "stop_sequences");
  if (v == nullptr) return;
  const char* shape = "'stop_sequences' must be a list of non-empty strings";
  if (!v->is_array()) throw bad_param("stop_sequences", shape);
  if (static_cast<int32_t>(v->size()) > limits.max_stop) {
    throw bad_param("stop_sequences", "'stop_sequences' has " + std::to_string(v->size()) +
                                          " strings; at most " + std::to_string(limits.max_stop));
  }
  for (const json& s : *v) {
    if (!s.is_string() || s.get<std::string>().empty()) throw bad_param("stop_sequences", shape);
  }
  if (!v->empty()) chat["stop"] = *v;
}

// thinking {"type": "enabled", "budget_tokens"} or {"type": "disabled"}: the template's
// enable_thinking, and the thinking budget.
void translate_thinking(const json& body, ordered_json& chat) {
  const json* thinking = field(body, "thinking");
  if (thinking == nullptr) return;
  const char* shape = "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N} or "
                      "{\"type\": \"disabled\"}";
  const json* type = thinking->is_object() ? field(*thinking, "type") : nullptr;
  if (type == nullptr || !type->is_string()) throw bad_param("thinking", shape);
  if (*type == "disabled") {
    only_keys(*thinking, {"type"}, "thinking");
    chat["chat_template_kwargs"] = {{"enable_thinking", false}};
  } else if (*type == "enabled") {
    only_keys(*thinking, {"type", "budget_tokens"}, "thinking");
    // Anthropic requires budget_tokens (>= 1024); here any count >= 0 is taken, and without
    // one the server's --reasoning-budget holds.
    const json* budget = field(*thinking, "budget_tokens");
    if (budget != nullptr && (!budget->is_number_integer() || budget->get<int64_t>() < 0)) {
      throw bad_param("thinking.budget_tokens",
                      "'thinking.budget_tokens' must be an integer >= 0");
    }
    chat["chat_template_kwargs"] = {{"enable_thinking", true}};
    chat["reasoning_budget"] = budget != nullptr ? ordered_json(*budget) : ordered_json(nullptr);
  } else {
    throw bad_param("thinking.type", shape);
  }
}

void check_extras(const json& body) {
  if (const json* metadata = field(body, "metadata")) {
    if (!metadata->is_object()) throw bad_param("metadata", "'metadata' must be an object");
    only_keys(*metadata, {"user_id"}, "metadata");
    if (const json* u = field(*metadata, "user_id"); u != nullptr && !u->is_string()) {
      throw bad_param("metadata.user_id", "'metadata.user_id' must be a string");
    }
  }
  if (const json* cache = field(body, "cache_control"); cache != nullptr && !cache->is_object()) {
    throw bad_param("cache_control", "'cache_control' must be an object");
  }
  if (const json* tier = field(body, "service_tier")) {
    if (!(*tier == "auto" || *tier == "standard_only")) {
      throw bad_param("service_tier", "'service_tier' must be \"auto\" or \"standard_only\"");
    }
  }
}

std::string sse_event(const char* type, const ordered_json& data) {
  return std::string("event: ") + type + "\ndata: " + dump(data) + "\n\n";
}

// "call_<hex>" (the chat path's ids) as Anthropic's "toolu_<hex>".
std::string tool_use_id(const std::string& call_id) {
  return call_id.rfind("call_", 0) == 0 ? "toolu_" + call_id.substr(5) : call_id;
}

ordered_json tool_input(const std::string& arguments) {
  ordered_json input = ordered_json::parse(arguments, nullptr, false);
  return input.is_object() ? input : ordered_json::object();
}

ordered_json usage_of(const Generation& g) {
  return {{"input_tokens", g.num_prompt_tokens()},
          {"output_tokens", g.num_completion_tokens()},
          {"cache_read_input_tokens", g.num_cached_tokens()}};
}

}  // namespace

bool is_messages_path(const std::string& path) {
  return path == "/v1/messages" || path.rfind("/v1/messages/", 0) == 0;
}

json anthropic_error_json(const ApiError& e) {
  const int s = e.status();
  const char* type = s == 401   ? "authentication_error"
                     : s == 403 ? "permission_error"
                     : s == 404 ? "not_found_error"
                     : s == 413 ? "request_too_large"
                     : s == 429 ? "rate_limit_error"
                     : s == 503 ? "overloaded_error"
                     : s >= 500 ? "api_error"
                                : "invalid_request_error";
  return {{"type", "error"}, {"error", {{"type", type}, {"message", e.what()}}}};
}

ordered_json messages_to_chat(const json& body, const ordered_json& ordered,
                              const RequestLimits& limits, bool count_only) {
  if (!body.is_object()) throw bad_param("", "the request body must be a JSON object");
  // cache_control (here and on blocks): the prefix cache keeps every prompt's blocks anyway.
  static const std::set<std::string> count_fields = {"model",       "messages", "system", "tools",
                                                     "tool_choice", "thinking", "cache_control"};
  static const std::set<std::string> message_fields = {
      "model",    "messages", "system",      "max_tokens", "temperature",   "top_p",
      "top_k",    "stop_sequences", "stream", "metadata",  "tools",         "tool_choice",
      "thinking", "service_tier",   "cache_control"};
  only_keys(body, count_only ? count_fields : message_fields, "");
  check_extras(body);
  ordered_json chat = ordered_json::object();
  if (const json* model = field(body, "model")) chat["model"] = *model;
  chat["messages"] = translate_messages(body, ordered);
  if (field(body, "tools") != nullptr) chat["tools"] = translate_tools(body, ordered);
  translate_tool_choice(body, chat);
  translate_thinking(body, chat);
  if (count_only) {
    chat["max_tokens"] = 1;
    return chat;
  }
  const json* max_tokens = field(body, "max_tokens");
  if (max_tokens == nullptr) throw bad_param("max_tokens", "'max_tokens' is required");
  chat["max_tokens"] = *max_tokens;
  if (const json* t = field(body, "temperature")) {
    if (!t->is_number() || t->get<double>() < 0.0 || t->get<double>() > 1.0) {
      throw bad_param("temperature", "'temperature' must be a number in [0, 1]");
    }
    chat["temperature"] = *t;
  }
  for (const char* name : {"top_p", "top_k", "stream"}) {
    if (const json* v = field(body, name)) chat[name] = *v;
  }
  translate_stop(body, limits, chat);
  return chat;
}

ApiRequest parse_messages_request(const std::string& raw_body, const ModelContext& model,
                                  const RequestLimits& limits, bool count_only) {
  const json body = parse_json_body(raw_body, limits.max_json_depth);
  const ordered_json ordered = ordered_json::parse(raw_body);
  const ordered_json translated = messages_to_chat(body, ordered, limits, count_only);
  if (translated.contains("reasoning_budget") && model.reasoning_syntax == ReasoningSyntax::kNone) {
    // thinking enabled on a model that does not think.
    throw bad_param("thinking", "'thinking' enabled is not supported by this model: its chat "
                                "template has no thinking (<think> ... </think>)");
  }
  if (count_only) {
    // Counting renders the prompt; the budget has nothing to cap.
    ordered_json c = translated;
    c.erase("reasoning_budget");
    const std::string text = dump(c);
    ApiRequest r = parse_chat_request(json::parse(text), model, limits, text);
    r.endpoint = Endpoint::kMessages;
    return r;
  }
  const std::string chat = dump(translated);
  ApiRequest r = parse_chat_request(json::parse(chat), model, limits, chat);
  r.endpoint = Endpoint::kMessages;
  return r;
}

MessagesWriter::MessagesWriter(ResponseHead head, const ApiRequest& request)
    : head_(std::move(head)), request_(request) {
  if (!request_.tools.empty()) tool_stream_.emplace_back(request_.tool_format, &request_.tools);
}

std::string MessagesWriter::start(int64_t input_tokens) {
  const ordered_json message = {{"id", head_.id},
                                {"type", "message"},
                                {"role", "assistant"},
                                {"model", head_.model},
                                {"content", ordered_json::array()},
                                {"stop_reason", nullptr},
                                {"stop_sequence", nullptr},
                                {"usage", {{"input_tokens", input_tokens}, {"output_tokens", 0}}}};
  return sse_event("message_start", {{"type", "message_start"}, {"message", message}}) +
         sse_event("ping", {{"type", "ping"}});
}

std::string MessagesWriter::open_thinking_block() {
  if (thinking_open_) return "";
  thinking_open_ = true;
  return sse_event("content_block_start",
                   {{"type", "content_block_start"},
                    {"index", block_},
                    {"content_block", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}}});
}

// The signature (pagoda signs nothing: always empty), then the block's end.
std::string MessagesWriter::close_thinking_block() {
  if (!thinking_open_) return "";
  thinking_open_ = false;
  std::string out = sse_event("content_block_delta",
                              {{"type", "content_block_delta"},
                               {"index", block_},
                               {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
  return out + close_block();
}

std::string MessagesWriter::open_text_block() {
  if (text_open_) return "";
  text_open_ = true;
  return sse_event("content_block_start", {{"type", "content_block_start"},
                                           {"index", block_},
                                           {"content_block", {{"type", "text"}, {"text", ""}}}});
}

std::string MessagesWriter::close_block() {
  return sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", block_++}});
}

std::string MessagesWriter::delta(const ChoiceDelta& d) {
  ParsedToolCalls step = tool_stream_.empty() ? ParsedToolCalls{d.text, {}}
                                              : tool_stream_[0].step(d.text, !d.finish_reason.empty());
  std::string text = std::move(step.content);
  std::vector<ToolCall> calls = std::move(step.calls);
  std::string out;
  if (!d.reasoning.empty()) {
    out += open_thinking_block();
    out += sse_event("content_block_delta",
                     {{"type", "content_block_delta"},
                      {"index", block_},
                      {"delta", {{"type", "thinking_delta"}, {"thinking", d.reasoning}}}});
  }
  if (!text.empty()) {
    out += close_thinking_block();
    out += open_text_block();
    out += sse_event("content_block_delta",
                     {{"type", "content_block_delta"},
                      {"index", block_},
                      {"delta", {{"type", "text_delta"}, {"text", text}}}});
  }
  if (d.finish_reason.empty()) return out;
  out += close_thinking_block();
  if (text_open_) out += close_block();
  text_open_ = false;
  for (const ToolCall& c : calls) {
    has_calls_ = true;
    out += sse_event("content_block_start",
                     {{"type", "content_block_start"},
                      {"index", block_},
                      {"content_block", {{"type", "tool_use"},
                                         {"id", tool_use_id(c.id)},
                                         {"name", c.name},
                                         {"input", ordered_json::object()}}}});
    out += sse_event("content_block_delta",
                     {{"type", "content_block_delta"},
                      {"index", block_},
                      {"delta", {{"type", "input_json_delta"}, {"partial_json", c.arguments}}}});
    out += close_block();
  }
  return out;
}

std::string MessagesWriter::stop_reason(const Generation& g, bool has_calls) const {
  const Choice& c = g.choices().at(0);
  if (c.finish_reason == "length") return "max_tokens";
  if (has_calls) return "tool_use";
  if (!c.text.matched_stop().empty()) return "stop_sequence";
  return "end_turn";
}

std::string MessagesWriter::finish(const Generation& g) {
  const std::string& matched = g.choices().at(0).text.matched_stop();
  const std::string reason = stop_reason(g, has_calls_);
  const ordered_json delta = {
      {"stop_reason", reason},
      {"stop_sequence", reason == "stop_sequence" ? ordered_json(matched) : ordered_json(nullptr)}};
  return sse_event("message_delta", {{"type", "message_delta"},
                                     {"delta", delta},
                                     {"usage", {{"output_tokens", g.num_completion_tokens()}}}}) +
         sse_event("message_stop", {{"type", "message_stop"}});
}

ordered_json MessagesWriter::response(const Generation& g) const {
  const Choice& c = g.choices().at(0);
  const ParsedToolCalls p = split_tool_calls(c.content(), request_.tool_format, request_.tools);
  ordered_json content = ordered_json::array();
  if (!c.reasoning.empty()) {
    content.push_back({{"type", "thinking"}, {"thinking", c.reasoning}, {"signature", ""}});
  }
  if (!p.content.empty()) content.push_back({{"type", "text"}, {"text", p.content}});
  for (const ToolCall& call : p.calls) {
    content.push_back({{"type", "tool_use"},
                       {"id", tool_use_id(call.id)},
                       {"name", call.name},
                       {"input", tool_input(call.arguments)}});
  }
  const std::string reason = stop_reason(g, !p.calls.empty());
  return {{"id", head_.id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", head_.model},
          {"content", std::move(content)},
          {"stop_reason", reason},
          {"stop_sequence", reason == "stop_sequence" ? ordered_json(c.text.matched_stop())
                                                      : ordered_json(nullptr)},
          {"usage", usage_of(g)}};
}

std::string MessagesWriter::error_event(const ApiError& e) {
  return sse_event("error", anthropic_error_json(e));
}

}  // namespace pagoda::server
