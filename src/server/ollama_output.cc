// Ollama's answers: the chunks and the done chunk of /api/chat and /api/generate, and the
// routes that describe the served model (see ollama_api.h).
#include "server/ollama_api.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>

#include "server/model_set.h"
#include "server/request_fields.h"
#include "server/utc_time.h"

namespace pagoda::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// The version of Ollama's API whose shapes these routes follow; clients compare it before
// using a feature (tools, format as a schema).
constexpr const char* kOllamaApiVersion = "0.12.0";

int64_t nanoseconds(double seconds) {
  return seconds > 0 ? static_cast<int64_t>(std::llround(seconds * 1e9)) : 0;
}

// [{"function": {"index", "name", "arguments": {...}}, "id"}], as Ollama writes calls.
ordered_json ollama_tool_calls(const std::vector<ToolCall>& calls) {
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    ordered_json arguments = ordered_json::parse(calls[i].arguments, nullptr, false);
    if (!arguments.is_object()) arguments = ordered_json::object();
    out.push_back({{"id", calls[i].id},
                   {"function", {{"index", i}, {"name", calls[i].name}, {"arguments", arguments}}}});
  }
  return out;
}

// The name as Ollama lists it: with a tag.
std::string tagged(const std::string& name) {
  return name.find(':') == std::string::npos ? name + ":latest" : name;
}

// "135M", "1.5B": Ollama's parameter_size.
std::string parameter_size(uint64_t n) {
  char buf[32];
  if (n >= 1000000000ull) {
    std::snprintf(buf, sizeof buf, "%.1fB", static_cast<double>(n) / 1e9);
  } else {
    std::snprintf(buf, sizeof buf, "%.0fM", static_cast<double>(n) / 1e6);
  }
  return buf;
}

ordered_json details(const ModelDescription& d) {
  return {{"parent_model", ""},
          {"format", d.format},
          {"family", d.architecture},
          {"families", ordered_json::array({d.architecture})},
          {"parameter_size", parameter_size(d.num_parameters)},
          {"quantization_level", d.quantization}};
}

// The model, then each LoRA adapter it serves (its details' parent_model the model's name), so
// an Ollama app can pick either.
ordered_json tags(const ModelContext& model) {
  const ModelDescription& d = model.description;
  auto entry = [&](const std::string& name, const std::string& parent) {
    ordered_json info = details(d);
    info["parent_model"] = parent;
    return ordered_json{{"name", name},       {"model", name},  {"modified_at", d.modified_at},
                        {"size", d.size_bytes}, {"digest", ""}, {"details", info}};
  };
  ordered_json models = ordered_json::array({entry(tagged(model.name), "")});
  if (model.loras != nullptr) {
    for (const std::string& a : model.loras->names()) {
      models.push_back(entry(tagged(a), tagged(model.name)));
    }
  }
  return {{"models", models}};
}

// The one loaded model, loaded for the server's life (keep_alive does not unload it).
ordered_json ps(const ModelContext& model) {
  const std::string name = tagged(model.name);
  const ModelDescription& d = model.description;
  return {{"models", ordered_json::array({{{"name", name},
                                           {"model", name},
                                           {"size", d.size_bytes},
                                           {"digest", ""},
                                           {"details", details(d)},
                                           {"expires_at", "9999-12-31T23:59:59Z"},
                                           {"size_vram", d.size_vram},
                                           {"context_length", model.max_model_len}}})}};
}

ordered_json show(const std::string& body_text, const ModelContext& model,
                  const RequestLimits& limits) {
  const json body = parse_json_body(body_text, limits.max_json_depth);
  if (!body.is_object()) throw bad_param("", "the request body must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (key != "model" && key != "name" && key != "verbose" && !value.is_null()) {
      throw bad_param(key, "'" + key + "' is not supported by this server's /api/show");
    }
  }
  if (const json* v = field(body, "verbose"); v != nullptr && !v->is_boolean()) {
    throw bad_param("verbose", "'verbose' must be a boolean");
  }
  // "name" is the field's old name.
  json named = body;
  if (field(body, "model") == nullptr && field(body, "name") != nullptr) named["model"] = body["name"];
  ollama_model_name(named, model);
  const ModelDescription& d = model.description;
  ordered_json capabilities = ordered_json::array({"completion"});
  if (model.render_chat) capabilities.push_back("tools");
  if (model.render_chat && model.reasoning_syntax != ReasoningSyntax::kNone) {
    capabilities.push_back("thinking");
  }
  ordered_json info = {{"general.architecture", d.architecture},
                       {"general.parameter_count", d.num_parameters}};
  info[d.architecture + ".context_length"] = d.trained_context;
  return {{"license", ""},
          {"modelfile", ""},
          {"parameters", ""},
          {"template", d.chat_template},
          {"details", details(d)},
          {"model_info", std::move(info)},
          {"capabilities", std::move(capabilities)},
          {"modified_at", d.modified_at}};
}

}  // namespace

OllamaWriter::OllamaWriter(const ApiRequest& request, const Tokenizer& tokenizer)
    : request_(request), tokenizer_(tokenizer) {
  if (!request_.tools.empty()) tool_stream_.emplace_back(request_.tool_format, &request_.tools);
}

bool OllamaWriter::chat() const { return request_.endpoint == Endpoint::kOllamaChat; }

ordered_json OllamaWriter::chunk(const std::string& text, const std::string& thinking) const {
  ordered_json out = {{"model", request_.model}, {"created_at", utc_time_now(6)}};
  if (chat()) {
    out["message"] = {{"role", "assistant"}, {"content", text}};
    if (!thinking.empty()) out["message"]["thinking"] = thinking;
  } else {
    out["response"] = text;
    if (!thinking.empty()) out["thinking"] = thinking;
  }
  out["done"] = false;
  return out;
}

std::string OllamaWriter::delta(const ChoiceDelta& d) {
  ParsedToolCalls step = tool_stream_.empty() ? ParsedToolCalls{d.text, {}}
                                              : tool_stream_[0].step(d.text, !d.finish_reason.empty());
  std::string text = std::move(step.content);
  std::vector<ToolCall> calls = std::move(step.calls);
  std::string out;
  if (!text.empty() || !d.reasoning.empty() || (request_.logprobs && !d.logprobs.empty())) {
    ordered_json c = chunk(text, d.reasoning);
    if (request_.logprobs) c["logprobs"] = chat_logprobs(tokenizer_, d.logprobs)["content"];
    out += dump(c) + "\n";
  }
  if (!calls.empty()) {
    ordered_json c = chunk("");
    c["message"]["tool_calls"] = ollama_tool_calls(calls);
    out += dump(c) + "\n";
  }
  return out;
}

void OllamaWriter::add_stats(ordered_json& out, const Generation& g) const {
  // Ollama's reasons are stop, length, load and unload; a tool call ends with stop.
  out["done"] = true;
  out["done_reason"] = g.choices().at(0).finish_reason == "length" ? "length" : "stop";
  // Nanoseconds. The model was loaded at the server's start; the prompt's part runs from the
  // request's arrival to the first token, the output's from there to the last.
  const double first = std::max(g.ttft_s(), 0.0), last = std::max(g.e2e_s(), first);
  out["total_duration"] = nanoseconds(last);
  out["load_duration"] = 0;
  out["prompt_eval_count"] = g.num_prompt_tokens();
  out["prompt_eval_duration"] = nanoseconds(first);
  out["eval_count"] = g.num_completion_tokens();
  out["eval_duration"] = nanoseconds(last - first);
}

std::string OllamaWriter::finish(const Generation& g) {
  ordered_json out = chunk("");
  add_stats(out, g);
  return dump(out) + "\n";
}

ordered_json OllamaWriter::response(const Generation& g) const {
  const Choice& c = g.choices().at(0);
  const ParsedToolCalls p = split_tool_calls(c.content(), request_.tool_format, request_.tools);
  ordered_json out = chunk(p.content, c.reasoning);
  if (!p.calls.empty()) out["message"]["tool_calls"] = ollama_tool_calls(p.calls);
  if (request_.logprobs) out["logprobs"] = chat_logprobs(tokenizer_, c.logprobs)["content"];
  add_stats(out, g);
  return out;
}

std::string OllamaWriter::error_line(const ApiError& e) { return dump(ollama_error_json(e)) + "\n"; }

ordered_json ollama_tags(const ModelSet& models) {
  ordered_json list = ordered_json::array();
  for (const ModelStatus& st : models.status()) {
    const ModelDescription& d = st.model ? st.model->context.description : st.spec->description;
    const std::string name = tagged(st.spec->id);
    list.push_back({{"name", name},
                    {"model", name},
                    {"modified_at", d.modified_at},
                    {"size", d.size_bytes},
                    {"digest", ""},
                    {"details", details(d)}});
  }
  return {{"models", list}};
}

ordered_json ollama_ps(const ModelSet& models) {
  ordered_json list = ordered_json::array();
  for (const ModelStatus& st : models.status()) {
    if (!st.model) continue;
    const ModelContext& c = st.model->context;
    const std::string name = tagged(st.spec->id);
    list.push_back({{"name", name},
                    {"model", name},
                    {"size", c.description.size_bytes},
                    {"digest", ""},
                    {"details", details(c.description)},
                    {"expires_at", st.expires_at ? utc_time(*st.expires_at) : "9999-12-31T23:59:59Z"},
                    {"size_vram", c.description.size_vram},
                    {"context_length", c.max_model_len}});
  }
  return {{"models", list}};
}

bool ollama_info_route(const std::string& path, const std::string& body,
                       const ModelContext& model, const RequestLimits& limits, ordered_json& out) {
  static const std::set<std::string> management = {"/api/pull", "/api/push", "/api/create",
                                                   "/api/delete", "/api/copy"};
  if (path == "/api/version") {
    out = {{"version", kOllamaApiVersion}};
  } else if (path == "/api/tags") {
    out = tags(model);
  } else if (path == "/api/ps") {
    out = ps(model);
  } else if (path == "/api/show") {
    out = show(body, model, limits);
  } else if (management.count(path) || path.rfind("/api/blobs/", 0) == 0) {
    throw ApiError(501, "not_implemented",
                   path + " is not available: this server serves the one model it was started "
                          "with (pagoda serve -m FILE)");
  } else {
    return false;
  }
  return true;
}

}  // namespace pagoda::server
