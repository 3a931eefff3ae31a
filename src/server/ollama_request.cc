// Ollama's /api/chat and /api/generate requests onto the OpenAI request path (see ollama_api.h).
#include "server/ollama_api.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "server/request_fields.h"

namespace pagoda::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

// Refuses any key of `object` outside `known`, naming it at `where`; a null is not given.
void only_keys(const json& object, const std::set<std::string>& known, const std::string& where,
               const std::string& route) {
  refuse_unknown_keys(object, known, where, "'s " + route);
}

// An empty string, list or object (json::empty() is false for any string).
bool is_empty(const json& v) {
  return v.is_string() ? v.get_ref<const std::string&>().empty() : v.empty();
}

// A field that must be absent, null or empty (a string, or a list when `list`): what the
// server cannot honour. `where` names it.
void refuse_unless_empty(const json& object, const char* name, bool list, const std::string& where,
                         const std::string& why) {
  const json* v = field(object, name);
  if (v == nullptr) return;
  if (list ? !v->is_array() : !v->is_string()) {
    throw bad_param(where, in_quotes(where) + (list ? " must be a list" : " must be a string"));
  }
  if (!is_empty(*v)) throw bad_param(where, in_quotes(where) + " is not supported by this server: " + why);
}

const char* kOptionsHonoured =
    "temperature, top_k, top_p, min_p, seed, num_predict, num_ctx, stop, repeat_penalty, "
    "repeat_last_n (-1 or 0), presence_penalty, frequency_penalty";

// options {...} into the OpenAI body's sampling fields.
void translate_options(const json& body, ordered_json& out) {
  const json* options = field(body, "options");
  if (options == nullptr) return;
  if (!options->is_object()) throw bad_param("options", "'options' must be an object");
  // The same meaning under the same name.
  static const std::set<std::string> same = {"temperature", "top_k", "top_p", "min_p", "seed",
                                             "stop", "presence_penalty", "frequency_penalty"};
  bool penalties_off = false;
  for (const auto& [key, value] : options->items()) {
    if (value.is_null()) continue;
    const std::string name = "options." + key;
    if (same.count(key)) {
      out[key] = value;
    } else if (key == "repeat_penalty") {
      out["repetition_penalty"] = value;
    } else if (key == "num_predict") {
      // -1: no limit, -2: fill the context; both end at the context (or the server's limit).
      if (!value.is_number_integer() || value.get<int64_t>() == 0 || value.get<int64_t>() < -2) {
        throw bad_param(name, "'options.num_predict' must be a positive integer, or -1 / -2 "
                              "for up to the context");
      }
      if (value.get<int64_t>() > 0) out["max_tokens"] = value;
    } else if (key == "num_ctx") {
      if (!value.is_number_integer() || value.get<int64_t>() < 1) {
        throw bad_param(name, "'options.num_ctx' must be a positive integer");
      }
    } else if (key == "repeat_last_n") {
      // The penalties look at the whole context (-1); 0 turns them off.
      if (!value.is_number_integer() || (value != -1 && value != 0)) {
        throw bad_param(name, "'options.repeat_last_n' must be -1 (the whole context, which is "
                              "what this server's penalties look at) or 0 (penalties off)");
      }
      penalties_off = value == 0;
    } else {
      throw bad_param(name, in_quotes(name) + " is not supported by this server (it honours " +
                                kOptionsHonoured + ")");
    }
  }
  if (penalties_off) {
    for (const char* k : {"repetition_penalty", "presence_penalty", "frequency_penalty"}) {
      out.erase(k);
    }
  }
}

// format: "json" or a JSON schema (in key order), as response_format.
void translate_format(const json& body, const ordered_json& ordered, ordered_json& out) {
  const json* f = field(body, "format");
  if (f == nullptr || (f->is_string() && is_empty(*f))) return;
  if (*f == "json") {
    out["response_format"] = {{"type", "json_object"}};
  } else if (f->is_object()) {
    out["response_format"] = {{"type", "json_schema"},
                              {"json_schema", {{"name", "format"}, {"schema", ordered["format"]}}}};
  } else {
    throw bad_param("format", "'format' must be \"json\" or a JSON schema object");
  }
}

// think: true or false reaches the template as enable_thinking (the thinking itself comes back
// split out as message.thinking); "low", "medium" or "high" as reasoning_effort. A raw prompt
// has no template to tell.
void translate_think(const json& body, const ModelContext& model, bool raw, ordered_json& out) {
  const json* think = field(body, "think");
  if (think == nullptr) return;
  if (!think->is_boolean() && !(think->is_string() && (*think == "low" || *think == "medium" ||
                                                       *think == "high"))) {
    throw bad_param("think", "'think' must be a boolean or \"low\", \"medium\", \"high\"");
  }
  if (think->is_boolean() && !think->get<bool>()) {
    if (!raw) out["chat_template_kwargs"] = {{"enable_thinking", false}};
    return;
  }
  if (raw || model.reasoning_syntax == ReasoningSyntax::kNone) {
    throw bad_param("think", raw ? "'think' needs the chat template; a raw prompt has none"
                                 : "'think' is not supported by '" + model.name + "': its chat "
                                   "template has no thinking (<think> ... </think>)");
  }
  if (think->is_boolean()) {
    out["chat_template_kwargs"] = {{"enable_thinking", true}};
  } else {
    out["reasoning_effort"] = *think;
  }
}

// stream (Ollama streams unless told not to), keep_alive (checked here; the model set acts on
// it, and a server of one model keeps it loaded whatever it asks).
void translate_common(const json& body, ordered_json& out) {
  out["stream"] = bool_field(body, "stream", true);
  if (const json* k = field(body, "keep_alive")) ollama_keep_alive_seconds(*k);
}

// logprobs, top_logprobs: the chat path's fields, or for a raw prompt (the completions path)
// its one integer logprobs.
void translate_logprobs(const json& body, bool raw, ordered_json& out) {
  const json* logprobs = field(body, "logprobs");
  const json* top = field(body, "top_logprobs");
  if (!raw) {
    if (logprobs != nullptr) out["logprobs"] = *logprobs;
    if (top != nullptr) out["top_logprobs"] = *top;
    return;
  }
  if (logprobs != nullptr && !logprobs->is_boolean()) {
    throw bad_param("logprobs", "'logprobs' must be a boolean");
  }
  const bool on = logprobs != nullptr && logprobs->get<bool>();
  if (top != nullptr && !on) throw bad_param("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
  if (on) out["logprobs"] = top != nullptr ? *top : json(0);
}

// message.tool_calls [{function: {name, arguments: {...}}}] in the OpenAI shape.
ordered_json translate_calls(const json& calls, const ordered_json& ordered, const std::string& where) {
  if (!calls.is_array()) throw bad_param(where, in_quotes(where) + " must be a list");
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const json& c = calls[i];
    const json* fn = c.is_object() ? field(c, "function") : nullptr;
    const json* name = fn != nullptr && fn->is_object() ? field(*fn, "name") : nullptr;
    const json* args = name != nullptr ? field(*fn, "arguments") : nullptr;
    if (name == nullptr || !name->is_string() || (args != nullptr && !args->is_object())) {
      throw bad_param(at, in_quotes(at) + " must be {\"function\": {\"name\", \"arguments\": {...}}}");
    }
    only_keys(c, {"id", "type", "function"}, at, "tool calls");
    only_keys(*fn, {"name", "arguments", "index"}, at + ".function", "tool calls");
    const json* id = field(c, "id");
    const ordered_json arguments =
        args == nullptr ? ordered_json::object() : ordered[i]["function"]["arguments"];
    out.push_back({{"id", id != nullptr && id->is_string() ? id->get<std::string>()
                                                           : "call_" + std::to_string(i)},
                   {"type", "function"},
                   {"function", {{"name", name->get<std::string>()}, {"arguments", arguments.dump()}}}});
  }
  return out;
}

ordered_json translate_messages(const json& body, const ordered_json& ordered) {
  const json* messages = field(body, "messages");
  if (messages == nullptr || !messages->is_array() || messages->empty()) {
    throw bad_param("messages", "'messages' must be a non-empty list of messages");
  }
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad_param(where, in_quotes(where) + " must be an object");
    only_keys(m, {"role", "content", "images", "tool_calls", "tool_name", "tool_call_id", "thinking"},
              where, "/api/chat");
    const json* role = field(m, "role");
    if (role == nullptr || !role->is_string()) {
      throw bad_param(where + ".role", in_quotes(where + ".role") + " must be a string");
    }
    const json* content = field(m, "content");
    if (content != nullptr && !content->is_string()) {
      throw bad_param(where + ".content", in_quotes(where + ".content") + " must be a string");
    }
    refuse_unless_empty(m, "images", true, where + ".images", "this model takes text only");
    const json* thinking = field(m, "thinking");
    if (thinking != nullptr && !thinking->is_string()) {
      throw bad_param(where + ".thinking", in_quotes(where + ".thinking") + " must be a string");
    }
    ordered_json copy = {{"role", *role}, {"content", content ? *content : json("")}};
    // Templates such as Qwen3's read an earlier answer's thinking as reasoning_content.
    if (thinking != nullptr && !thinking->get_ref<const std::string&>().empty()) {
      copy["reasoning_content"] = *thinking;
    }
    if (const json* calls = field(m, "tool_calls")) {
      copy["tool_calls"] = translate_calls(*calls, ordered["messages"][i]["tool_calls"],
                                           where + ".tool_calls");
    }
    for (const char* key : {"tool_name", "tool_call_id"}) {
      const json* v = field(m, key);
      if (v == nullptr) continue;
      if (!v->is_string()) throw bad_param(where + "." + key, in_quotes(where + "." + key) + " must be a string");
      copy[std::string(key) == "tool_name" ? "name" : "tool_call_id"] = *v;
    }
    out.push_back(std::move(copy));
  }
  return out;
}

void check_string(const json& body, const char* name) {
  if (const json* v = field(body, name); v != nullptr && !v->is_string()) {
    throw bad_param(name, in_quotes(name) + " must be a string");
  }
}

ordered_json translate_generate(const json& body, bool* raw) {
  check_string(body, "prompt");
  check_string(body, "system");
  refuse_unless_empty(body, "suffix", false, "suffix", "fill-in-the-middle is not available");
  refuse_unless_empty(body, "template", false, "template",
                      "the prompt is rendered with the model's own chat template (or give "
                      "raw: true)");
  refuse_unless_empty(body, "context", true, "context", "send the conversation to /api/chat instead");
  refuse_unless_empty(body, "images", true, "images", "this model takes text only");
  *raw = bool_field(body, "raw", false);
  const json* prompt = field(body, "prompt");
  const std::string text = prompt ? prompt->get<std::string>() : "";
  ordered_json out = ordered_json::object();
  if (*raw) {
    if (field(body, "system") != nullptr) {
      throw bad_param("system", "'system' cannot be honoured with raw: true (no template is "
                                "applied); write it into the prompt");
    }
    out["prompt"] = text;
    return out;
  }
  out["messages"] = ordered_json::array();
  if (const json* system = field(body, "system")) {
    out["messages"].push_back({{"role", "system"}, {"content", *system}});
  }
  out["messages"].push_back({{"role", "user"}, {"content", text}});
  return out;
}

// An OpenAI parameter named in an error, in the words of Ollama's request.
ApiError in_ollama_terms(const ApiError& e, bool generate) {
  static const std::map<std::string, std::string> names = {
      {"temperature", "options.temperature"}, {"top_k", "options.top_k"},
      {"top_p", "options.top_p"},             {"min_p", "options.min_p"},
      {"seed", "options.seed"},               {"stop", "options.stop"},
      {"max_tokens", "options.num_predict"},  {"repetition_penalty", "options.repeat_penalty"},
      {"presence_penalty", "options.presence_penalty"},
      {"frequency_penalty", "options.frequency_penalty"},
      {"response_format", "format"}};
  std::string param = e.param(), message = e.what(), to;
  if (const auto it = names.find(param); it != names.end()) {
    to = it->second;
  } else if (generate && param == "messages") {
    to = "prompt";
  }
  if (!to.empty()) {
    bool named = false;
    for (size_t at = 0; (at = message.find(in_quotes(param), at)) != std::string::npos;) {
      message.replace(at, param.size() + 2, in_quotes(to));
      at += to.size() + 2;
      named = true;
    }
    if (!named) message += " (" + in_quotes(to) + ")";
    param = to;
  }
  return ApiError(e.status(), e.type(), message, param, e.code());
}

// options.num_ctx, 0 when not given; refused past the server's context.
int64_t num_ctx_option(const json& body, const ModelContext& model) {
  const json* options = field(body, "options");
  const json* v = options != nullptr && options->is_object() ? field(*options, "num_ctx") : nullptr;
  if (v == nullptr) return 0;
  const int64_t n = v->get<int64_t>();
  if (n > model.max_model_len) {
    throw bad_param("options.num_ctx", "'options.num_ctx' is " + std::to_string(n) +
                                           "; this server's context is " +
                                           std::to_string(model.max_model_len) +
                                           " tokens (pagoda serve --max-model-len)");
  }
  return n;
}

// The output's length within num_ctx (or the server's context): num_predict must fit after the
// prompt; without one, the output may fill what is left.
void fit_context(ApiRequest& r, int64_t num_ctx, bool num_predict_given, const ModelContext& model,
                 const RequestLimits& limits) {
  const int64_t prompt = static_cast<int64_t>(r.prompts.at(0).size());
  const int64_t context = num_ctx > 0 ? num_ctx : model.max_model_len;
  if (num_ctx > 0 && prompt >= num_ctx) {
    throw bad_param("options.num_ctx", "the prompt has " + std::to_string(prompt) +
                                           " tokens, which leaves no room in 'options.num_ctx' (" +
                                           std::to_string(num_ctx) + ")");
  }
  if (num_predict_given) {
    if (prompt + r.max_tokens > context) {
      throw bad_param("options.num_predict",
                      "the prompt (" + std::to_string(prompt) + " tokens) and 'options.num_predict' (" +
                          std::to_string(r.max_tokens) + ") do not fit in the context of " +
                          std::to_string(context) + " tokens");
    }
    return;
  }
  r.max_tokens = static_cast<int32_t>(std::clamp<int64_t>(context - prompt, 1, limits.max_tokens));
}

}  // namespace

double ollama_keep_alive_seconds(const json& v) {
  auto bad = [] {
    return bad_param("keep_alive",
                     "'keep_alive' must be a number of seconds or a duration such as \"5m\", "
                     "\"1h30m\", \"90s\" or \"-1\" (negative: keep loaded)");
  };
  if (v.is_number()) return v.get<double>();
  if (!v.is_string() || v.get<std::string>().empty()) throw bad();
  const std::string text = v.get<std::string>();
  char* end = nullptr;
  const double plain = std::strtod(text.c_str(), &end);  // "300", "-1": seconds
  if (end == text.c_str() + text.size() && std::isfinite(plain)) return plain;
  // A Go duration: a sign, then numbers each with its unit.
  static const std::map<std::string, double> scale = {
      {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"m", 60}, {"h", 3600}};
  size_t i = 0;
  double sign = 1, total = 0;
  if (text[0] == '-' || text[0] == '+') sign = text[i++] == '-' ? -1 : 1;
  if (i == text.size()) throw bad();
  while (i < text.size()) {
    const size_t start = i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
    const size_t unit_start = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    const auto unit = scale.find(text.substr(unit_start, i - unit_start));
    if (unit_start == start || unit == scale.end()) throw bad();
    const std::string number = text.substr(start, unit_start - start);
    const double n = std::strtod(number.c_str(), &end);
    if (end != number.c_str() + number.size()) throw bad();
    total += n * unit->second;
  }
  return sign * total;
}

bool is_ollama_path(const std::string& path) { return path.rfind("/api/", 0) == 0; }

json ollama_error_json(const ApiError& e) { return {{"error", e.what()}}; }

std::string ollama_model_name(const json& body, const ModelContext& model, bool adapters) {
  const json* v = body.is_object() ? field(body, "model") : nullptr;
  if (v == nullptr) throw bad_param("model", "'model' is required");
  if (!v->is_string()) throw bad_param("model", "'model' must be a string");
  const std::string name = v->get<std::string>();
  const std::string tag = ":latest";
  const bool tagged = name.size() > tag.size() && name.compare(name.size() - tag.size(), tag.size(), tag) == 0;
  const std::string untagged = tagged ? name.substr(0, name.size() - tag.size()) : name;
  if (model.answers_to(name) || model.answers_to(untagged)) return name;
  if (adapters && model.adapter_named(untagged) != nullptr) return untagged;
  throw ApiError(404, "not_found_error", "model '" + name + "' not found", "model", "model_not_found");
}

bool is_ollama_load_request(const json& body, bool generate) {
  if (!body.is_object()) return false;
  const json* v = field(body, generate ? "prompt" : "messages");
  if (v != nullptr && !((v->is_string() || v->is_array()) && is_empty(*v))) return false;
  // A generate with a system prompt, or a raw one, still asks for output.
  return !generate || (field(body, "system") == nullptr && !bool_field(body, "raw", false));
}

std::string check_ollama_load_request(const json& body, const ModelContext& model,
                                      const RequestLimits& limits, bool generate) {
  const std::string name = ollama_model_name(body, model, true);
  // The rest of the body is checked as a generation request's would be.
  json probe = body;
  if (generate) {
    probe["prompt"] = "x";
  } else {
    probe["messages"] = json::array({{{"role", "user"}, {"content", "x"}}});
  }
  parse_ollama_request(probe.dump(), model, limits, generate);
  return name;
}

ordered_json ollama_to_openai(const json& body, const ordered_json& ordered,
                              const ModelContext& model, bool generate, bool* raw) {
  if (!body.is_object()) throw bad_param("", "the request body must be a JSON object");
  static const std::set<std::string> chat_fields = {
      "model", "messages", "tools", "format", "options", "stream", "keep_alive", "think",
      "logprobs", "top_logprobs"};
  static const std::set<std::string> generate_fields = {
      "model", "prompt", "suffix", "system", "template", "context", "raw", "images", "format",
      "options", "stream", "keep_alive", "think", "logprobs", "top_logprobs"};
  only_keys(body, generate ? generate_fields : chat_fields, "",
            generate ? "/api/generate" : "/api/chat");
  *raw = false;
  ordered_json out = ordered_json::object();
  if (generate) {
    out = translate_generate(body, raw);
  } else {
    out["messages"] = translate_messages(body, ordered);
    // An empty list is what the Python client sends for no tools.
    const json* tools = field(body, "tools");
    if (tools != nullptr && !(tools->is_array() && tools->empty())) out["tools"] = ordered["tools"];
  }
  const std::string name = ollama_model_name(body, model, true);
  out["model"] = model.adapter_named(name) != nullptr ? name : model.name;
  translate_common(body, out);
  translate_think(body, model, *raw, out);
  translate_logprobs(body, *raw, out);
  translate_options(body, out);
  translate_format(body, ordered, out);
  return out;
}

ApiRequest parse_ollama_request(const std::string& raw_body, const ModelContext& model,
                                const RequestLimits& limits, bool generate) {
  const json body = parse_json_body(raw_body, limits.max_json_depth);
  if (!body.is_object()) throw bad_param("", "the request body must be a JSON object");
  const std::string name = ollama_model_name(body, model, true);
  const ordered_json ordered = ordered_json::parse(raw_body);
  bool raw = false;
  ordered_json openai = ollama_to_openai(body, ordered, model, generate, &raw);
  const int64_t num_ctx = num_ctx_option(body, model);
  const bool num_predict_given = openai.contains("max_tokens");
  // A raw prompt goes through the completions path, whose default length is 16: at least one
  // token must fit there, and fit_context sets the real length.
  if (raw && !num_predict_given) openai["max_tokens"] = 1;
  const std::string text = dump(openai);
  ApiRequest r;
  try {
    r = raw ? parse_completion_request(json::parse(text), model, limits, text)
            : parse_chat_request(json::parse(text), model, limits, text);
  } catch (const ApiError& e) {
    throw in_ollama_terms(e, generate);
  }
  r.endpoint = generate ? Endpoint::kOllamaGenerate : Endpoint::kOllamaChat;
  r.model = name;
  fit_context(r, num_ctx, num_predict_given, model, limits);
  return r;
}

}  // namespace pagoda::server
