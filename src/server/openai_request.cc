// Request parsing: one function per endpoint that assembles an ApiRequest from the typed field
// readers (request_fields.h), which name the parameter on every error, and the parameters that
// shape the output (openai_output.h).
#include "server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/speculator.h"
#include "server/api_error.h"
#include "server/openai_output.h"
#include "server/reasoning_options.h"
#include "server/request_fields.h"

namespace pagoda::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

void check_object(const json& body) {
  if (!body.is_object()) {
    throw ApiError(400, "invalid_request_error", "the request body must be a JSON object");
  }
}

void check_model(const json& body, const ModelContext& model, ApiRequest& r) {
  const json* v = field(body, "model");
  if (v == nullptr) {
    r.model = model.name;
    return;
  }
  if (!v->is_string()) throw bad_param("model", "'model' must be a string");
  r.model = v->get<std::string>();
  AdapterHold adapter = model.adapter_named(r.model);
  if (adapter != nullptr) {
    r.adapter = adapter->index;
    r.adapter_digest = adapter->digest;
    r.adapter_hold = std::move(adapter);
  } else if (!model.answers_to(r.model)) {
    std::string served = "'" + model.name + "'";
    if (model.loras != nullptr) {
      for (const std::string& a : model.loras->names()) served += ", '" + a + "'";
    }
    throw ApiError(404, "invalid_request_error",
                   "The model '" + r.model + "' does not exist; this server serves " + served,
                   "model", "model_not_found");
  }
}

void parse_stop(const json& body, const RequestLimits& limits, ApiRequest& r) {
  const json* v = field(body, "stop");
  if (v == nullptr) return;
  if (v->is_string()) {
    r.stop.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const json& s : *v) {
      if (!s.is_string()) throw bad_param("stop", "'stop' must be a string or a list of strings");
      r.stop.push_back(s.get<std::string>());
    }
  } else {
    throw bad_param("stop", "'stop' must be a string or a list of strings");
  }
  if (static_cast<int32_t>(r.stop.size()) > limits.max_stop) {
    throw bad_param("stop", "'stop' has " + std::to_string(r.stop.size()) +
                                " strings; at most " + std::to_string(limits.max_stop));
  }
  for (const std::string& s : r.stop) {
    if (s.empty()) throw bad_param("stop", "'stop' strings must not be empty");
  }
}

void parse_logit_bias(const json& body, SamplingParams& s) {
  const json* v = field(body, "logit_bias");
  if (v == nullptr) return;
  if (!v->is_object()) {
    throw bad_param("logit_bias", "'logit_bias' must be an object of token id -> bias");
  }
  for (const auto& [key, value] : v->items()) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    // Ids outside the vocabulary are validate()'s to refuse (finish_sampling).
    if (used != key.size() || id < 0 || id > std::numeric_limits<TokenId>::max()) {
      throw bad_param("logit_bias", "'logit_bias' key '" + key + "' is not a token id");
    }
    if (!value.is_number() || !(std::fabs(value.get<double>()) <= kMaxLogitBias)) {
      throw bad_param("logit_bias", "'logit_bias' values must be numbers in [-100, 100]");
    }
    s.logit_bias.emplace_back(static_cast<TokenId>(id), value.get<float>());
  }
}

// The parameters both endpoints share.
void parse_common(const json& body, const ModelContext& model, const RequestLimits& limits,
                  ApiRequest& r) {
  check_model(body, model, r);
  SamplingParams& s = r.sampling;
  s.temperature = static_cast<float>(number_field(body, "temperature", 1.0, 0.0, 2.0));
  const double top_p = number_field(body, "top_p", 1.0, 0.0, 1.0);
  if (top_p <= 0.0) throw bad_param("top_p", "'top_p' must be in (0, 1]");
  // A positive value below float's range still means "the most likely token".
  s.top_p = std::max(static_cast<float>(top_p), std::numeric_limits<float>::min());
  s.top_k = static_cast<int>(int_field(body, "top_k", 0, -1, 1 << 30));
  if (s.top_k < 0) s.top_k = 0;  // vLLM's -1 means off
  s.min_p = static_cast<float>(number_field(body, "min_p", 0.0, 0.0, 1.0));
  s.presence_penalty = static_cast<float>(number_field(body, "presence_penalty", 0.0, -2.0, 2.0));
  s.frequency_penalty =
      static_cast<float>(number_field(body, "frequency_penalty", 0.0, -2.0, 2.0));
  s.repetition_penalty =
      static_cast<float>(number_field(body, "repetition_penalty", 1.0, 1e-3, 100.0));
  if (const json* seed = field(body, "seed")) {
    if (!seed->is_number_integer()) throw bad_param("seed", "'seed' must be an integer");
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                        : static_cast<uint64_t>(seed->get<int64_t>());
    s.has_seed = true;
  }
  parse_logit_bias(body, s);
  r.n = static_cast<int32_t>(int_field(body, "n", 1, 1, limits.max_n));
  parse_stop(body, limits, r);
  r.stream = bool_field(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) throw bad_param("stream_options", "'stream_options' must be an object");
    if (!r.stream) {
      throw bad_param("stream_options", "'stream_options' is only allowed when 'stream' is true");
    }
    r.include_usage = bool_field(*so, "include_usage", false);
  }
  r.ignore_eos = bool_field(body, "ignore_eos", false);
  r.num_speculative_tokens = static_cast<int32_t>(
      int_field(body, "num_speculative_tokens", -1, 0, kMaxSpeculativeTokens));
  if (bool_field(body, "use_beam_search", false)) {
    r.beam.width = static_cast<int32_t>(int_field(body, "best_of", r.n, 1, kMaxNumSamples));
    if (r.beam.width < r.n) {
      throw bad_param("best_of", "'best_of' (the beam width) must be at least 'n'");
    }
    r.beam.length_penalty = static_cast<float>(number_field(body, "length_penalty", 1.0, -10.0, 10.0));
    if (const json* es = field(body, "early_stopping")) {
      if (es->is_boolean()) {
        r.beam.early_stopping = es->get<bool>() ? EarlyStopping::kTrue : EarlyStopping::kHeuristic;
      } else if (es->is_string() && *es == "never") {
        r.beam.early_stopping = EarlyStopping::kNever;
      } else {
        throw bad_param("early_stopping", "'early_stopping' must be true, false or \"never\"");
      }
    }
    if (field(body, "logprobs") != nullptr && !(field(body, "logprobs")->is_boolean() &&
                                                !field(body, "logprobs")->get<bool>())) {
      throw bad_param("logprobs", "'logprobs' is not supported with beam search");
    }
  } else {
    for (const char* name : {"best_of", "length_penalty", "early_stopping"}) {
      if (field(body, name) != nullptr) {
        throw bad_param(name, std::string("'") + name + "' needs 'use_beam_search': true");
      }
    }
  }
  const int64_t min_tokens = int_field(body, "min_tokens", 0, 0, limits.max_tokens);
  if (min_tokens > 0 && !r.ignore_eos) {
    throw bad_param("min_tokens", "'min_tokens' is only supported together with 'ignore_eos'");
  }
}

// max_tokens / max_completion_tokens against the context: an error, never a silent cut.
void resolve_max_tokens(const json& body, const ModelContext& model, const RequestLimits& limits,
                        int32_t default_tokens, ApiRequest& r) {
  const char* name = field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  int64_t longest = 0;
  for (const auto& p : r.prompts) longest = std::max<int64_t>(longest, p.size());
  const int64_t room = model.max_model_len - longest;
  const int64_t fallback = default_tokens > 0
                               ? default_tokens
                               : std::clamp<int64_t>(room, 1, limits.max_tokens);
  const int64_t max_tokens = int_field(body, name, fallback, 1, limits.max_tokens);
  if (longest + max_tokens > model.max_model_len) {
    throw ApiError(400, "invalid_request_error",
                   "This model's maximum context length is " + std::to_string(model.max_model_len) +
                       " tokens. However, you requested " + std::to_string(longest + max_tokens) +
                       " tokens (" + std::to_string(longest) + " in the prompt, " +
                       std::to_string(max_tokens) + " for the completion). Please reduce the " +
                       "prompt or the completion length.",
                   longest >= model.max_model_len ? "prompt" : name, "context_length_exceeded");
  }
  r.max_tokens = static_cast<int32_t>(max_tokens);
}

std::vector<TokenId> token_list(const json& v, const ModelContext& model) {
  std::vector<TokenId> ids;
  for (const json& t : v) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= model.vocab_size) {
      throw bad_param("prompt", "token ids in 'prompt' must be integers in [0, " +
                                    std::to_string(model.vocab_size) + ")");
    }
    ids.push_back(static_cast<TokenId>(t.get<int64_t>()));
  }
  return ids;
}

void add_text_prompt(const std::string& text, const ModelContext& model, ApiRequest& r) {
  r.prompts.push_back(
      model.tokenizer->encode(text, {.add_special = true, .parse_special = true}));
  r.prompt_texts.push_back(text);
}

void add_token_prompt(const json& v, const ModelContext& model, ApiRequest& r) {
  r.prompts.push_back(token_list(v, model));
  r.prompt_texts.push_back(model.tokenizer->decode(r.prompts.back()));
}

// "prompt": a string, a list of token ids, a list of strings, or a list of token-id lists.
void parse_prompts(const json& body, const ModelContext& model, const RequestLimits& limits,
                   ApiRequest& r) {
  const json* v = field(body, "prompt");
  if (v == nullptr) throw bad_param("prompt", "'prompt' is required");
  const char* shape =
      "'prompt' must be a string, a list of token ids, a list of strings or a list of token lists";
  if (v->is_string()) {
    add_text_prompt(v->get<std::string>(), model, r);
  } else if (v->is_array() && !v->empty() && (*v)[0].is_number()) {
    add_token_prompt(*v, model, r);
  } else if (v->is_array() && !v->empty()) {
    if (static_cast<int32_t>(v->size()) > limits.max_prompts) {
      throw bad_param("prompt", "'prompt' has " + std::to_string(v->size()) +
                                    " prompts; at most " + std::to_string(limits.max_prompts));
    }
    for (const json& item : *v) {
      if (item.is_string()) {
        add_text_prompt(item.get<std::string>(), model, r);
      } else if (item.is_array()) {
        add_token_prompt(item, model, r);
      } else {
        throw bad_param("prompt", shape);
      }
    }
  } else {
    throw bad_param("prompt", shape);
  }
  for (const auto& p : r.prompts) {
    if (p.empty()) throw bad_param("prompt", "'prompt' must not be empty");
  }
}

void parse_completion_logprobs(const json& body, ApiRequest& r) {
  const json* v = field(body, "logprobs");
  if (v == nullptr) return;
  if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > kMaxNumLogprobs) {
    throw bad_param("logprobs", "'logprobs' must be an integer in [0, " +
                                    std::to_string(kMaxNumLogprobs) + "]");
  }
  r.logprobs = true;
  r.top_logprobs = static_cast<int>(v->get<int64_t>());
}

void parse_chat_logprobs(const json& body, ApiRequest& r) {
  r.logprobs = bool_field(body, "logprobs", false);
  r.top_logprobs = static_cast<int>(int_field(body, "top_logprobs", 0, 0, kMaxNumLogprobs));
  if (r.top_logprobs > 0 && !r.logprobs) {
    throw bad_param("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
  }
}

void finish_sampling(const ModelContext& model, ApiRequest& r) {
  r.sampling.logprobs = r.logprobs;
  r.sampling.num_logprobs = r.top_logprobs;
  try {
    validate(r.sampling, model.vocab_size);
  } catch (const SamplingParamError& e) {
    throw bad_param(e.param(), e.what());
  }
}

// Checks each message and gives the template a copy (in key order) whose content is plain
// text. `ordered` is the same body parsed keeping key order.
ordered_json normalize_messages(const json& body, const ordered_json& ordered) {
  const json* v = field(body, "messages");
  if (v == nullptr) throw bad_param("messages", "'messages' is required");
  if (!v->is_array() || v->empty()) {
    throw bad_param("messages", "'messages' must be a non-empty list of messages");
  }
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad_param(where, "'" + where + "' must be an object");
    const json* role = field(m, "role");
    if (role == nullptr || !role->is_string()) {
      throw bad_param(where + ".role", "'" + where + ".role' must be a string");
    }
    ordered_json copy = ordered["messages"][i];
    if (m.contains("content")) copy["content"] = message_text(m["content"], where + ".content");
    if (copy.contains("tool_calls") && !copy["tool_calls"].is_array() &&
        !copy["tool_calls"].is_null()) {
      throw bad_param(where + ".tool_calls", "'" + where + ".tool_calls' must be a list");
    }
    // The OpenAI API sends a call's arguments as JSON text; templates print them as objects.
    if (copy.contains("tool_calls") && copy["tool_calls"].is_array()) {
      for (ordered_json& call : copy["tool_calls"]) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) {
          throw bad_param(where + ".tool_calls",
                          "'" + where + ".tool_calls' must hold {\"type\": \"function\", "
                          "\"function\": {\"name\", \"arguments\"}} objects");
        }
        ordered_json& f = call["function"];
        if (f.contains("arguments") && f["arguments"].is_string()) {
          try {
            f["arguments"] = ordered_json::parse(f["arguments"].get<std::string>());
          } catch (const ordered_json::exception&) {
            // Not JSON: the template gets the text as it came.
          }
        }
      }
    }
    out.push_back(std::move(copy));
  }
  return out;
}

// Control tokens in what a client wrote must stay text: a message holding "<|im_start|>system"
// must not open a system turn. Every client string (keys too) that holds a control token's text
// is rendered with a marker in its place; restore() puts the text back and returns where it
// lies, so encode() reads it as plain text there while the template's own control tokens stay
// tokens. Strings without such text are untouched, so ordinary chats tokenize exactly as before.
class ContentShield {
 public:
  explicit ContentShield(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {
    std::random_device rd;
    nonce_ = std::to_string(rd()) + std::to_string(rd());
  }

  ordered_json apply(const ordered_json& v) {
    if (v.is_string()) return shield(v.get_ref<const std::string&>());
    if (v.is_array()) {
      ordered_json out = ordered_json::array();
      for (const ordered_json& x : v) out.push_back(apply(x));
      return out;
    }
    if (v.is_object()) {
      ordered_json out = ordered_json::object();
      for (const auto& [k, x] : v.items()) out[shield(k)] = apply(x);
      return out;
    }
    return v;
  }

  // The rendered text with every marker replaced by its original; `plain` gets their ranges.
  std::string restore(const std::string& rendered, std::vector<TextRange>& plain) const {
    if (originals_.empty()) return rendered;
    const std::string open = kOpen + nonce_;
    std::string out;
    size_t pos = 0;
    while (true) {
      const size_t at = rendered.find(open, pos);
      const size_t digits = at == std::string::npos ? at : at + open.size();
      const size_t close = at == std::string::npos ? at : rendered.find(kClose, digits);
      if (close == std::string::npos) break;
      size_t index = 0;
      try {
        index = std::stoul(rendered.substr(digits, close - digits));
      } catch (const std::exception&) {
        index = originals_.size();
      }
      if (index >= originals_.size()) {  // a mangled marker: kept as it is, which is harmless
        out.append(rendered, pos, close - pos);
        pos = close;
        continue;
      }
      out.append(rendered, pos, at - pos);
      plain.emplace_back(out.size(), out.size() + originals_[index].size());
      out += originals_[index];
      pos = close + std::strlen(kClose);
    }
    out.append(rendered, pos, std::string::npos);
    return out;
  }

 private:
  // U+E000 and U+E001 (private use) around a per-request nonce: a client cannot forge a marker.
  static constexpr const char* kOpen = "\xEE\x80\x80";
  static constexpr const char* kClose = "\xEE\x80\x81";

  std::string shield(const std::string& s) {
    const std::vector<TextRange> ranges = tokenizer_.control_token_ranges(s);
    if (ranges.empty()) return s;
    std::string out;
    size_t pos = 0;
    for (const auto& [begin, end] : ranges) {
      out.append(s, pos, begin - pos);
      out += kOpen + nonce_ + std::to_string(originals_.size()) + kClose;
      originals_.push_back(s.substr(begin, end - begin));
      pos = end;
    }
    out.append(s, pos, std::string::npos);
    return out;
  }

  const Tokenizer& tokenizer_;
  std::string nonce_;
  std::vector<std::string> originals_;
};

}  // namespace

std::vector<TokenId> render_chat_prompt(const ModelContext& model, const ordered_json& messages,
                                        const ordered_json& extra, std::string* text) {
  std::string rendered;
  std::vector<TextRange> plain;
  if (model.allow_special_in_content) {
    rendered = model.render_chat(messages, true, extra);
  } else {
    ContentShield shield(*model.tokenizer);
    const ordered_json shielded_messages = shield.apply(messages);
    const ordered_json shielded_extra = shield.apply(extra);
    rendered = shield.restore(model.render_chat(shielded_messages, true, shielded_extra), plain);
  }
  std::vector<TokenId> ids = model.tokenizer->encode(
      rendered, {.add_special = false, .parse_special = true, .plain_ranges = plain});
  if (text != nullptr) *text = std::move(rendered);
  return ids;
}

bool ModelContext::answers_to(std::string_view id) const {
  return id == name || std::find(aliases.begin(), aliases.end(), id) != aliases.end();
}

AdapterHold ModelContext::adapter_named(std::string_view id) const {
  return loras != nullptr ? loras->find(id) : nullptr;
}

ModelContext named_model(const std::string& path, const std::string& general_name,
                         const std::string& model_name_option) {
  ModelContext m;
  const std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  // A Hugging Face folder given as "dir/" has an empty file name: name it by the folder.
  const std::filesystem::path file = p.has_filename() ? p : p.parent_path();
  const std::string file_name = file.filename().string(), stem = file.stem().string();
  // The stem, not general.name: a file's general.name is often its origin's ("... AWQ" on a
  // Q4_K_M file), while the stem is the name the user gave the file and typed to serve it.
  m.name = !model_name_option.empty() ? model_name_option : stem.empty() ? file_name : stem;
  for (const std::string& alias : {file_name, stem, general_name}) {
    if (!alias.empty() && alias != m.name &&
        std::find(m.aliases.begin(), m.aliases.end(), alias) == m.aliases.end()) {
      m.aliases.push_back(alias);
    }
  }
  return m;
}

std::string message_text(const json& content, const std::string& param) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    throw bad_param(param, "'" + param + "' must be a string or a list of content parts");
  }
  std::string text;
  for (const json& part : content) {
    const json* type = part.is_object() ? field(part, "type") : nullptr;
    const json* t = part.is_object() ? field(part, "text") : nullptr;
    if (type == nullptr || *type != "text" || t == nullptr || !t->is_string()) {
      throw bad_param(param, "'" + param + "' parts must be {\"type\": \"text\", \"text\": ...}; "
                                           "this model takes text only");
    }
    text += t->get<std::string>();
  }
  return text;
}

int32_t json_nesting_depth(std::string_view text, int32_t limit) {
  int32_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return limit + 1;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

json parse_json_body(const std::string& text, int32_t max_depth) {
  // nlohmann's parser is iterative, but copying or printing a value recurses: a body nested
  // 100,000 deep would exhaust a thread's stack. Such a body is refused before it is built.
  if (json_nesting_depth(text, max_depth) > max_depth) {
    throw ApiError(400, "invalid_request_error",
                   "the request body nests arrays and objects deeper than " +
                       std::to_string(max_depth) + " levels");
  }
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw ApiError(400, "invalid_request_error",
                   std::string("the request body is not valid JSON: ") + e.what());
  }
}

ApiRequest parse_completion_request(const json& body, const ModelContext& model,
                                    const RequestLimits& limits, const std::string& raw_body) {
  check_object(body);
  ApiRequest r;
  r.endpoint = Endpoint::kCompletions;
  parse_common(body, model, limits, r);
  parse_structured_output(body, model, raw_body, r);
  parse_prompts(body, model, limits, r);
  r.echo = bool_field(body, "echo", false);
  parse_completion_logprobs(body, r);
  if (field(body, "reasoning_budget") != nullptr) {
    throw bad_param("reasoning_budget", "'reasoning_budget' is for chat completions; a completion "
                                        "has no chat template to find the thinking by");
  }
  if (r.echo && r.logprobs && r.beam.width > 0) {
    throw bad_param("echo", "'echo' with 'logprobs' is not supported with beam search");
  }
  // max_tokens 0 with echo: the prompt alone, scored (lm-evaluation-harness's log-likelihoods).
  const json* mt = field(body, "max_tokens");
  const bool prompt_only = r.echo && mt != nullptr && mt->is_number_integer() && *mt == 0;
  if (!prompt_only) {
    resolve_max_tokens(body, model, limits, 16, r);  // OpenAI's default for completions
  } else {
    json one = body;
    one["max_tokens"] = 1;  // checks the prompt against the context
    resolve_max_tokens(one, model, limits, 16, r);
    r.max_tokens = 0;
  }
  finish_sampling(model, r);
  return r;
}

ApiRequest parse_chat_request(const json& body, const ModelContext& model,
                              const RequestLimits& limits, const std::string& raw_body) {
  check_object(body);
  ApiRequest r;
  r.endpoint = Endpoint::kChat;
  parse_common(body, model, limits, r);
  parse_structured_output(body, model, raw_body, r);
  parse_chat_logprobs(body, r);
  // The body again, in key order (it parsed once already, so it parses again).
  const ordered_json ordered = raw_body.empty() ? ordered_json::parse(body.dump())
                                                : ordered_json::parse(raw_body);
  const ordered_json messages = normalize_messages(body, ordered);
  if (!model.render_chat) {
    throw ApiError(400, "invalid_request_error",
                   "model '" + model.name + "' has no chat template; use /v1/completions or "
                   "start the server with --chat-template", "messages");
  }
  ordered_json extra = ordered_json::object();
  ordered_json messages_in = messages;
  parse_tools(body, ordered, model, r, extra, messages_in);
  apply_template_fields(body, ordered, model.template_traits, messages_in, extra);
  std::string text;
  try {
    r.prompts.push_back(render_chat_prompt(model, messages_in, extra, &text));
  } catch (const Error& e) {
    throw ApiError(400, "invalid_request_error",
                   std::string("the chat template failed on these messages: ") + e.what(),
                   "messages");
  }
  r.prompt_texts.push_back(text);
  if (r.prompts.back().empty()) throw bad_param("messages", "the rendered chat is empty");
  parse_reasoning(body, model, text, r);
  resolve_max_tokens(body, model, limits, 0, r);  // chat: up to the context by default
  finish_sampling(model, r);
  return r;
}

}  // namespace pagoda::server
