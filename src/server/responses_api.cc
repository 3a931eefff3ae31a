// OpenAI's Responses API onto the chat completions path (see responses_api.h).
#include "server/responses_api.h"

#include <set>
#include <utility>

#include "server/request_fields.h"

namespace pagoda::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::string quoted(const std::string& s) { return "'" + s + "'"; }

std::string at_index(const std::string& where, size_t i) {
  return where + "[" + std::to_string(i) + "]";
}

const std::string& string_at(const json& object, const char* name, const std::string& where) {
  const json* v = field(object, name);
  if (v == nullptr || !v->is_string()) {
    throw bad_param(where + "." + name, quoted(where + "." + name) + " must be a string");
  }
  return v->get_ref<const std::string&>();
}

// A message's content: a string, or parts (input_text, output_text, refusal) as the chat path's
// text parts. Images, files and audio are refused: the server runs text models.
ordered_json message_content(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    throw bad_param(where, quoted(where) + " must be a string or a list of content parts");
  }
  ordered_json parts = ordered_json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = at_index(where, i);
    const json& part = content[i];
    const json* type = part.is_object() ? field(part, "type") : nullptr;
    if (type == nullptr || !type->is_string()) {
      throw bad_param(at, quoted(at) + " must be a content part with a 'type'");
    }
    const std::string t = type->get<std::string>();
    if (t == "input_text" || t == "output_text") {
      refuse_unknown_keys(part, {"type", "text", "annotations", "logprobs"}, at);
      parts.push_back({{"type", "text"}, {"text", string_at(part, "text", at)}});
    } else if (t == "refusal") {
      refuse_unknown_keys(part, {"type", "refusal"}, at);
      parts.push_back({{"type", "text"}, {"text", string_at(part, "refusal", at)}});
    } else {
      throw bad_param(at + ".type", "content parts of type '" + t + "' (" + at +
                                        ") are not supported by this server: it takes text only");
    }
  }
  return parts;
}

// The text of a function_call_output's output: a string, or input_text parts joined.
std::string output_text_of(const json& output, const std::string& where) {
  if (output.is_string()) return output.get<std::string>();
  const ordered_json parts = message_content(output, where);
  std::string text;
  for (const auto& p : parts) text += p["text"].get<std::string>();
  return text;
}

// A function_call item as a tool call of an assistant message: appended to the message just
// before it when that is the assistant's, else to a new one.
void function_call(const json& item, const std::string& where, ordered_json& out,
                   std::string& thinking) {
  refuse_unknown_keys(item, {"type", "id", "call_id", "name", "arguments", "status", "namespace"},
                      where);
  const std::string& arguments = string_at(item, "arguments", where);
  const json parsed = json::parse(arguments, nullptr, false);
  if (!parsed.is_object()) {
    throw bad_param(where + ".arguments",
                    quoted(where + ".arguments") + " must be a JSON object's text");
  }
  ordered_json call = {{"id", string_at(item, "call_id", where)},
                       {"type", "function"},
                       {"function", {{"name", string_at(item, "name", where)},
                                     {"arguments", arguments}}}};
  if (out.empty() || out.back()["role"] != "assistant") {
    out.push_back({{"role", "assistant"}, {"content", nullptr}});
    if (!thinking.empty()) out.back()["reasoning_content"] = std::exchange(thinking, "");
  }
  ordered_json& m = out.back();
  if (!m.contains("tool_calls")) m["tool_calls"] = ordered_json::array();
  m["tool_calls"].push_back(std::move(call));
}

// A reasoning item's text: its reasoning_text parts, else its summary's text.
std::string reasoning_text(const json& item, const std::string& where) {
  std::string text;
  for (const char* name : {"content", "summary"}) {
    const json* parts = field(item, name);
    if (parts == nullptr) continue;
    if (!parts->is_array()) throw bad_param(where + "." + name, quoted(where + "." + name) + " must be a list");
    for (size_t i = 0; i < parts->size(); ++i) {
      const std::string at = at_index(where + "." + name, i);
      if (!(*parts)[i].is_object()) throw bad_param(at, quoted(at) + " must be an object");
      refuse_unknown_keys((*parts)[i], {"type", "text"}, at);
      text += string_at((*parts)[i], "text", at);
    }
    if (!text.empty()) break;
  }
  return text;
}

// `input` as chat messages appended to `out`.
void translate_input(const json& input, ordered_json& out) {
  std::string thinking;  // a reasoning item's, for the assistant turn after it
  if (input.is_string()) {
    out.push_back({{"role", "user"}, {"content", input.get<std::string>()}});
    return;
  }
  if (!input.is_array() || input.empty()) {
    throw bad_param("input", "'input' must be a string or a non-empty list of items");
  }
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string where = at_index("input", i);
    const json& item = input[i];
    if (!item.is_object()) throw bad_param(where, quoted(where) + " must be an object");
    const json* type = field(item, "type");
    if (type != nullptr && !type->is_string()) {
      throw bad_param(where + ".type", quoted(where + ".type") + " must be a string");
    }
    const std::string t = type == nullptr ? "message" : type->get<std::string>();
    if (t == "message") {
      refuse_unknown_keys(item, {"type", "id", "role", "content", "status", "phase"}, where);
      const json* role = field(item, "role");
      static const std::set<std::string> roles = {"user", "system", "developer", "assistant"};
      if (role == nullptr || !role->is_string() || roles.count(role->get<std::string>()) == 0) {
        throw bad_param(where + ".role", quoted(where + ".role") +
                                             " must be user, system, developer or assistant");
      }
      const json* content = field(item, "content");
      if (content == nullptr) throw bad_param(where + ".content", quoted(where + ".content") + " is required");
      out.push_back({{"role", role->get<std::string>()},
                     {"content", message_content(*content, where + ".content")}});
      if (*role == "assistant" && !thinking.empty()) {
        out.back()["reasoning_content"] = std::exchange(thinking, "");
      }
    } else if (t == "function_call") {
      function_call(item, where, out, thinking);
    } else if (t == "function_call_output") {
      refuse_unknown_keys(item, {"type", "id", "call_id", "output", "status"}, where);
      const json* output = field(item, "output");
      if (output == nullptr) throw bad_param(where + ".output", quoted(where + ".output") + " is required");
      out.push_back({{"role", "tool"},
                     {"tool_call_id", string_at(item, "call_id", where)},
                     {"content", output_text_of(*output, where + ".output")}});
    } else if (t == "reasoning") {
      // A previous turn's thinking: the reasoning_content of the assistant turn after it, which
      // templates that show thinking (Qwen3's, for the turns after the last user message) read.
      refuse_unknown_keys(item, {"type", "id", "summary", "content", "encrypted_content", "status"},
                          where);
      thinking = reasoning_text(item, where);
    } else {
      throw bad_param(where + ".type", "input items of type '" + t + "' (" + where +
                                           ") are not supported by this server; it takes "
                                           "message, function_call, function_call_output and "
                                           "reasoning items");
    }
  }
}

// Function tools as the chat path's; other tool types (built-in tools) are refused.
ordered_json translate_tools(const json& tools, const ordered_json& otools) {
  if (!tools.is_array()) throw bad_param("tools", "'tools' must be a list");
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = at_index("tools", i);
    const json& t = tools[i];
    if (!t.is_object()) throw bad_param(where, quoted(where) + " must be an object");
    const json* type = field(t, "type");
    if (type == nullptr || *type != "function") {
      throw bad_param(where + ".type",
                      "tools of type " + (type ? type->dump() : std::string("(none)")) +
                          " are not supported by this server; it takes function tools");
    }
    refuse_unknown_keys(t, {"type", "name", "description", "parameters", "strict"}, where);
    ordered_json fn = {{"name", string_at(t, "name", where)}};
    if (field(t, "description") != nullptr) fn["description"] = string_at(t, "description", where);
    if (const json* p = field(t, "parameters")) {
      if (!p->is_object()) throw bad_param(where + ".parameters", quoted(where + ".parameters") + " must be a JSON schema object");
      fn["parameters"] = otools[i]["parameters"];
    }
    if (const json* s = field(t, "strict")) {
      if (!s->is_boolean()) throw bad_param(where + ".strict", quoted(where + ".strict") + " must be a boolean");
      fn["strict"] = *s;
    }
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

// tool_choice: "none" | "auto" | "required" | {"type": "function", "name"}.
ordered_json translate_tool_choice(const json& choice) {
  const char* shape = "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                      "{\"type\": \"function\", \"name\"}";
  if (choice.is_string()) {
    if (choice == "none" || choice == "auto" || choice == "required") return choice;
    throw bad_param("tool_choice", shape);
  }
  const json* type = choice.is_object() ? field(choice, "type") : nullptr;
  if (type == nullptr || *type != "function") throw bad_param("tool_choice", shape);
  refuse_unknown_keys(choice, {"type", "name"}, "tool_choice");
  return {{"type", "function"}, {"function", {{"name", string_at(choice, "name", "tool_choice")}}}};
}

// text: {format: {type: text | json_object | json_schema (name, schema, strict, description)},
// verbosity}: the chat path's response_format.
void translate_text(const json& text, const ordered_json& otext, ordered_json& chat,
                    ResponsesInput& out) {
  if (!text.is_object()) throw bad_param("text", "'text' must be an object");
  refuse_unknown_keys(text, {"format", "verbosity"}, "text");
  if (const json* v = field(text, "verbosity"); v != nullptr && *v != "medium") {
    throw bad_param("text.verbosity", "'text.verbosity' other than \"medium\" is not supported "
                                      "by this server (no chat template reads it)");
  }
  const json* format = field(text, "format");
  if (format == nullptr) return;
  const json* type = format->is_object() ? field(*format, "type") : nullptr;
  if (type == nullptr || !type->is_string()) {
    throw bad_param("text.format", "'text.format' must be an object with a 'type'");
  }
  out.echo["text"] = {{"format", otext["format"]}};
  if (*type == "text") {
    refuse_unknown_keys(*format, {"type"}, "text.format");
  } else if (*type == "json_object") {
    refuse_unknown_keys(*format, {"type"}, "text.format");
    chat["response_format"] = {{"type", "json_object"}};
  } else if (*type == "json_schema") {
    refuse_unknown_keys(*format, {"type", "name", "schema", "strict", "description"}, "text.format");
    const json* schema = field(*format, "schema");
    if (schema == nullptr || !schema->is_object()) {
      throw bad_param("text.format.schema", "'text.format.schema' must be a JSON schema object");
    }
    ordered_json js = {{"name", format->value("name", std::string("response"))},
                       {"schema", otext["format"]["schema"]}};
    if (const json* s = field(*format, "strict")) js["strict"] = *s;
    chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
  } else {
    throw bad_param("text.format.type", "'text.format.type' must be text, json_object or "
                                        "json_schema, got " + type->dump());
  }
}

// reasoning: {effort, summary}: the effort reaches the template as reasoning_effort.
void translate_reasoning(const json& reasoning, ordered_json& chat, ResponsesInput& out) {
  if (!reasoning.is_object()) throw bad_param("reasoning", "'reasoning' must be an object");
  refuse_unknown_keys(reasoning, {"effort", "summary", "generate_summary"}, "reasoning");
  for (const char* name : {"summary", "generate_summary"}) {
    if (field(reasoning, name) != nullptr) {
      throw bad_param(std::string("reasoning.") + name,
                      std::string("'reasoning.") + name + "' is not supported by this server "
                      "(it does not summarise a model's reasoning)");
    }
  }
  if (const json* effort = field(reasoning, "effort")) {
    chat["reasoning_effort"] = *effort;
    out.echo["reasoning"]["effort"] = *effort;
  }
}

void check_metadata(const json& metadata) {
  const char* shape = "'metadata' must be an object of at most 16 string values (keys up to 64 "
                      "characters, values up to 512)";
  if (!metadata.is_object() || metadata.size() > 16) throw bad_param("metadata", shape);
  for (const auto& [k, v] : metadata.items()) {
    if (k.size() > 64 || !v.is_string() || v.get_ref<const std::string&>().size() > 512) {
      throw bad_param("metadata", shape);
    }
  }
}

// Fields accepted as given because the server has nothing to change for them, checked for type
// and value; and the ones whose other values it cannot honour.
void check_settings(const json& body) {
  for (const char* name : {"user", "safety_identifier", "prompt_cache_key"}) {
    if (const json* v = field(body, name); v != nullptr && !v->is_string()) {
      throw bad_param(name, std::string("'") + name + "' must be a string");
    }
  }
  if (bool_field(body, "background", false)) {
    throw bad_param("background", "background responses are not supported by this server");
  }
  if (const json* t = field(body, "truncation"); t != nullptr && *t != "disabled") {
    throw bad_param("truncation", "'truncation' must be \"disabled\": the server does not drop "
                                  "input to fit the context (a prompt too long is refused)");
  }
  if (const json* t = field(body, "service_tier"); t != nullptr && *t != "auto" && *t != "default") {
    throw bad_param("service_tier", "'service_tier' must be \"auto\" or \"default\"");
  }
  if (const json* r = field(body, "prompt_cache_retention"); r != nullptr && *r != "in_memory") {
    throw bad_param("prompt_cache_retention", "'prompt_cache_retention' must be \"in_memory\": "
                                              "the prefix cache lives in the server's memory");
  }
  if (const json* inc = field(body, "include")) {
    if (!inc->is_array()) throw bad_param("include", "'include' must be a list");
    for (const json& entry : *inc) {
      if (entry != "message.output_text.logprobs") {
        throw bad_param("include", "'include' " + entry.dump() + " is not supported by this "
                                   "server (it takes \"message.output_text.logprobs\")");
      }
    }
  }
  if (const json* n = field(body, "top_logprobs");
      n != nullptr && !(n->is_number_integer() && n->get<int64_t>() >= 0 && n->get<int64_t>() <= 20)) {
    throw bad_param("top_logprobs", "'top_logprobs' must be an integer from 0 to 20");
  }
  if (const json* n = field(body, "max_tool_calls");
      n != nullptr && !(n->is_number_integer() && n->get<int64_t>() >= 1)) {
    throw bad_param("max_tool_calls", "'max_tool_calls' must be a positive integer");
  }
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) throw bad_param("stream_options", "'stream_options' must be an object");
    refuse_unknown_keys(*so, {"include_obfuscation"}, "stream_options");
  }
}

// The Response object's echo of the request, with the API's defaults.
void echo_request(const json& body, const ordered_json& ordered, ResponsesInput& out) {
  auto given = [&](const char* name, ordered_json fallback) {
    const json* v = field(body, name);
    out.echo[name] = v == nullptr ? std::move(fallback) : ordered[name];
  };
  given("instructions", nullptr);
  given("max_output_tokens", nullptr);
  given("max_tool_calls", nullptr);
  given("metadata", ordered_json::object());
  given("parallel_tool_calls", true);
  given("previous_response_id", nullptr);
  out.echo["reasoning"] = {{"effort", nullptr}, {"summary", nullptr}};
  out.echo["service_tier"] = "default";
  out.echo["store"] = out.store;
  given("temperature", 1.0);
  out.echo["text"] = {{"format", {{"type", "text"}}}};
  given("tool_choice", "auto");
  given("tools", ordered_json::array());
  given("top_logprobs", 0);
  given("top_p", 1.0);
  out.echo["truncation"] = "disabled";
  given("user", nullptr);
}

// The conversation previous_response_id continues.
void continue_from(const json& body, ResponseStore& store, ResponsesInput& out) {
  const json* prev = field(body, "previous_response_id");
  if (prev == nullptr) return;
  if (!prev->is_string()) {
    throw bad_param("previous_response_id", "'previous_response_id' must be a string");
  }
  const std::string id = prev->get<std::string>();
  std::optional<StoredResponse> r = store.get(id);
  if (!r) {
    throw ApiError(400, "invalid_request_error",
                   "Previous response with id '" + id + "' not found (it was not stored, was "
                   "deleted, or left the store, which keeps the " + std::to_string(store.max_count()) +
                   " most recently used)", "previous_response_id", "previous_response_not_found");
  }
  out.conversation = std::move(r->conversation);
}

// An error of the chat path names the chat field; the client sent the Responses one.
ApiError renamed(const ApiError& e) {
  static const std::pair<const char*, const char*> names[] = {
      {"max_tokens", "max_output_tokens"}, {"max_completion_tokens", "max_output_tokens"},
      {"response_format", "text.format"},  {"reasoning_effort", "reasoning.effort"},
      {"messages", "input"}};
  std::string param = e.param(), message = e.what();
  for (const auto& [chat, responses] : names) {
    if (param.rfind(chat, 0) == 0) param = responses;
    for (size_t at; (at = message.find(std::string("'") + chat + "'")) != std::string::npos;) {
      message.replace(at + 1, std::string(chat).size(), responses);
    }
  }
  return ApiError(e.status(), e.type(), message, param, e.code());
}

}  // namespace

bool is_responses_path(const std::string& path) {
  return path == "/v1/responses" || path.rfind("/v1/responses/", 0) == 0;
}

ordered_json responses_to_chat(const json& body, const ordered_json& ordered,
                               ResponseStore& store, ResponsesInput& out) {
  if (!body.is_object()) throw bad_param("", "the request body must be a JSON object");
  static const std::set<std::string> known = {
      "model",          "input",        "instructions",  "tools",
      "tool_choice",    "parallel_tool_calls",           "text",
      "max_output_tokens", "temperature", "top_p",        "stream",
      "store",          "previous_response_id",          "metadata",
      "user",           "safety_identifier",             "prompt_cache_key",
      "prompt_cache_retention",         "service_tier",  "truncation",
      "include",        "reasoning",    "top_logprobs",  "background",
      "stream_options", "max_tool_calls"};
  refuse_unknown_keys(body, known, "");
  check_settings(body);
  out.store = bool_field(body, "store", store.enabled());
  if (out.store && !store.enabled()) {
    throw bad_param("store", "this server stores no responses (--responses-max 0); give "
                             "\"store\": false");
  }
  if (const json* m = field(body, "metadata")) check_metadata(*m);
  echo_request(body, ordered, out);
  continue_from(body, store, out);
  const json* input = field(body, "input");
  if (input == nullptr) throw bad_param("input", "'input' is required");
  translate_input(*input, out.conversation);

  ordered_json chat = ordered_json::object();
  if (const json* model = field(body, "model")) chat["model"] = *model;
  ordered_json messages = ordered_json::array();
  if (const json* instructions = field(body, "instructions")) {
    if (!instructions->is_string()) throw bad_param("instructions", "'instructions' must be a string");
    messages.push_back({{"role", "system"}, {"content", instructions->get<std::string>()}});
  }
  for (const auto& m : out.conversation) messages.push_back(m);
  chat["messages"] = std::move(messages);
  if (const json* tools = field(body, "tools")) chat["tools"] = translate_tools(*tools, ordered["tools"]);
  if (const json* choice = field(body, "tool_choice")) chat["tool_choice"] = translate_tool_choice(*choice);
  if (const json* text = field(body, "text")) translate_text(*text, ordered["text"], chat, out);
  if (const json* reasoning = field(body, "reasoning")) translate_reasoning(*reasoning, chat, out);
  for (const char* name : {"parallel_tool_calls", "temperature", "top_p", "stream"}) {
    if (const json* v = field(body, name)) chat[name] = *v;
  }
  if (const json* v = field(body, "max_output_tokens")) chat["max_tokens"] = *v;
  // Log-probabilities of the output text: asked for by include or by top_logprobs.
  const json* inc = field(body, "include");
  const int64_t top = int_field(body, "top_logprobs", 0, 0, 20);
  if ((inc != nullptr && !inc->empty()) || top > 0) {
    chat["logprobs"] = true;
    chat["top_logprobs"] = top;
  }
  return chat;
}

ApiRequest parse_responses_request(const std::string& raw_body, const ModelContext& model,
                                   const RequestLimits& limits, ResponseStore& store) {
  const json body = parse_json_body(raw_body, limits.max_json_depth);
  const ordered_json ordered = ordered_json::parse(raw_body);
  auto input = std::make_shared<ResponsesInput>();
  const std::string chat = dump(responses_to_chat(body, ordered, store, *input));
  ApiRequest r;
  try {
    r = parse_chat_request(json::parse(chat), model, limits, chat);
  } catch (const ApiError& e) {
    throw renamed(e);
  }
  r.endpoint = Endpoint::kResponses;
  r.responses = std::move(input);
  return r;
}

}  // namespace pagoda::server
