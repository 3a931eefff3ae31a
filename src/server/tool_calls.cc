// Function calling (see tool_calls.h).
#include "server/tool_calls.h"

#include <optional>
#include <random>
#include <utility>

#include "core/error.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"

namespace pagoda::server {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kHarmonyCall = "to=functions.";
constexpr std::string_view kHarmonyMessage = "<|message|>";
constexpr std::string_view kHarmonyChannel = "<|channel|>";
// Between the function's name and <|message|>: a content type, a channel (" <|constrain|>json",
// "<|channel|>commentary json").
constexpr size_t kHarmonyMaxHeaderTail = 64;

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::string new_call_id() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* hex = "0123456789abcdef";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += hex[rng() % 16];
  return id;
}

bool known(const std::vector<ToolSpec>& tools, const std::string& name) {
  for (const ToolSpec& t : tools) {
    if (t.name == name) return true;
  }
  return false;
}

// {"name": ..., "arguments" | "parameters": {...}} naming a known tool, as a call.
std::optional<ToolCall> call_from(const ojson& j, const std::vector<ToolSpec>& tools) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  const std::string name = j["name"].get<std::string>();
  if (!known(tools, name)) return std::nullopt;
  ojson args = ojson::object();
  for (const char* key : {"arguments", "parameters"}) {
    if (!j.contains(key)) continue;
    args = j[key];
    // Some models write the arguments as a JSON string.
    if (args.is_string()) {
      try {
        args = ojson::parse(args.get<std::string>());
      } catch (const ojson::exception&) {
        return std::nullopt;
      }
    }
  }
  if (!args.is_object()) return std::nullopt;
  return ToolCall{new_call_id(), name, args.dump()};
}

// Calls from a JSON value: one call object or a list of them; nullopt if it is neither.
std::optional<std::vector<ToolCall>> calls_from(std::string_view text,
                                                const std::vector<ToolSpec>& tools) {
  ojson j;
  try {
    j = ojson::parse(text);
  } catch (const ojson::exception&) {
    return std::nullopt;
  }
  std::vector<ToolCall> calls;
  if (j.is_array()) {
    for (const ojson& item : j) {
      auto c = call_from(item, tools);
      if (!c) return std::nullopt;
      calls.push_back(std::move(*c));
    }
    if (calls.empty()) return std::nullopt;
    return calls;
  }
  auto c = call_from(j, tools);
  if (!c) return std::nullopt;
  calls.push_back(std::move(*c));
  return calls;
}

// A ```json fence around the whole text is taken off.
std::string_view unfence(std::string_view text) {
  std::string_view t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
  if (t.substr(0, 3) == "```" && t.size() >= 6 && t.substr(t.size() - 3) == "```") {
    t.remove_suffix(3);
    t.remove_prefix(t.find('\n') == std::string_view::npos ? 3 : t.find('\n') + 1);
  }
  return t;
}

ParsedToolCalls parse_hermes(std::string_view text, const std::vector<ToolSpec>& tools) {
  ParsedToolCalls out;
  std::string content;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kHermesOpen, pos);
    if (open == std::string_view::npos) {
      content += text.substr(pos);
      break;
    }
    content += text.substr(pos, open - pos);
    const size_t body = open + kHermesOpen.size();
    const size_t close = text.find(kHermesClose, body);
    const size_t end = close == std::string_view::npos ? text.size() : close;
    auto calls = calls_from(trim(text.substr(body, end - body)), tools);
    if (calls) {
      for (ToolCall& c : *calls) out.calls.push_back(std::move(c));
    } else {
      content += text.substr(
          open, (close == std::string_view::npos ? end : close + kHermesClose.size()) - open);
    }
    pos = close == std::string_view::npos ? text.size() : close + kHermesClose.size();
  }
  out.content = out.calls.empty() ? std::string(text) : trim(content);
  return out;
}

ParsedToolCalls parse_marker_list(std::string_view text, std::string_view marker,
                                  const std::vector<ToolSpec>& tools) {
  ParsedToolCalls out;
  const size_t at = text.find(marker);
  if (at == std::string_view::npos) {
    out.content = std::string(text);
    return out;
  }
  if (auto calls = calls_from(trim(text.substr(at + marker.size())), tools)) {
    out.calls = std::move(*calls);
    out.content = trim(text.substr(0, at));
  } else {
    out.content = std::string(text);
  }
  return out;
}

// The whole text (after an optional marker) as calls, Llama 3.1 also allowing several objects
// separated by ';'.
ParsedToolCalls parse_whole(std::string_view text, ToolFormat format,
                            const std::vector<ToolSpec>& tools) {
  ParsedToolCalls out;
  std::string_view t = unfence(text);
  if (format == ToolFormat::kLlama3 && t.substr(0, kPythonTag.size()) == kPythonTag) {
    t.remove_prefix(kPythonTag.size());
  }
  if (auto calls = calls_from(t, tools)) {
    out.calls = std::move(*calls);
    return out;
  }
  if (format == ToolFormat::kLlama3 && t.find(';') != std::string_view::npos) {
    std::vector<ToolCall> calls;
    size_t pos = 0;
    while (pos <= t.size()) {
      const size_t semi = std::min(t.find(';', pos), t.size());
      auto c = calls_from(trim(t.substr(pos, semi - pos)), tools);
      if (!c) {
        calls.clear();
        break;
      }
      for (ToolCall& x : *c) calls.push_back(std::move(x));
      pos = semi + 1;
    }
    if (!calls.empty()) {
      out.calls = std::move(calls);
      return out;
    }
  }
  out.content = std::string(text);
  return out;
}

// Where a harmony call's arguments end (the text's size when nothing ends them), and the length
// of the marker there.
std::pair<size_t, size_t> harmony_args_end(std::string_view text, size_t from) {
  size_t end = text.size(), len = 0;
  for (std::string_view m : {"<|call|>", "<|end|>", "<|return|>", "<|start|>"}) {
    const size_t at = text.find(m, from);
    if (at < end) {
      end = at;
      len = m == "<|start|>" ? 0 : m.size();
    }
  }
  return {end, len};
}

// One call of text[at...] (at: where "to=functions." starts), and where it ends.
std::optional<ToolCall> harmony_call(std::string_view text, size_t at,
                                     const std::vector<ToolSpec>& tools, size_t& next) {
  const size_t name_at = at + kHarmonyCall.size();
  size_t name_end = name_at;
  while (name_end < text.size() && text[name_end] != ' ' && text[name_end] != '<') ++name_end;
  const size_t message = text.find(kHarmonyMessage, name_end);
  if (message == std::string_view::npos || message - name_end > kHarmonyMaxHeaderTail) {
    next = name_end;
    return std::nullopt;
  }
  const size_t args = message + kHarmonyMessage.size();
  const auto [end, len] = harmony_args_end(text, args);
  next = end + len;
  const std::string name(text.substr(name_at, name_end - name_at));
  if (!known(tools, name)) return std::nullopt;
  ojson j;
  try {
    j = ojson::parse(text.substr(args, end - args));
  } catch (const ojson::exception&) {
    return std::nullopt;
  }
  if (!j.is_object()) return std::nullopt;
  return ToolCall{new_call_id(), name, j.dump()};
}

// Every "to=functions.NAME ...<|message|>ARGS" in the text; a call that does not parse stays
// content as written.
ParsedToolCalls parse_harmony(std::string_view text, const std::vector<ToolSpec>& tools) {
  ParsedToolCalls out;
  std::string content;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t at = text.find(kHarmonyCall, pos);
    if (at == std::string_view::npos) {
      content += text.substr(pos);
      break;
    }
    content += text.substr(pos, at - pos);
    size_t next = at;
    if (auto call = harmony_call(text, at, tools, next)) {
      out.calls.push_back(std::move(*call));
    } else {
      content += text.substr(at, next - at);
    }
    pos = next;
  }
  out.content = out.calls.empty() ? std::string(text) : trim(content);
  return out;
}

}  // namespace

ToolFormat tool_format_for_template(const std::string& t) {
  if (t.find(kHarmonyChannel) != std::string::npos) return ToolFormat::kHarmony;
  if (t.find(kHermesOpen) != std::string::npos) return ToolFormat::kHermes;
  if (t.find(kMistralMarker) != std::string::npos) return ToolFormat::kMistral;
  if (t.find(kPythonTag) != std::string::npos || t.find("ipython") != std::string::npos) {
    return ToolFormat::kLlama3;
  }
  return ToolFormat::kJson;
}

bool template_renders_tools(const std::string& t) { return t.find("tools") != std::string::npos; }

ParsedToolCalls parse_tool_calls(std::string_view text, ToolFormat format,
                                 const std::vector<ToolSpec>& tools) {
  switch (format) {
    case ToolFormat::kHermes: {
      ParsedToolCalls p = parse_hermes(text, tools);
      return p.calls.empty() ? parse_whole(text, ToolFormat::kJson, tools) : p;
    }
    case ToolFormat::kMistral:
      return parse_marker_list(text, kMistralMarker, tools);
    case ToolFormat::kHarmony:
      return parse_harmony(text, tools);
    case ToolFormat::kLlama3:
    case ToolFormat::kJson:
      return parse_whole(text, format, tools);
  }
  return {std::string(text), {}};
}

std::string tool_call_gbnf(ToolFormat format, const std::vector<ToolSpec>& tools,
                           const std::string& only, bool parallel, GrammarBudget* budget) {
  std::string rules;
  std::vector<std::string> calls;
  const char* args_key = format == ToolFormat::kLlama3 ? "parameters" : "arguments";
  for (size_t i = 0; i < tools.size(); ++i) {
    const ToolSpec& t = tools[i];
    if (!only.empty() && t.name != only) continue;
    const std::string args = "tool" + std::to_string(i) + "-args";
    if (t.parameters.is_null()) {
      rules += args + " ::= json-object\n";
    } else {
      rules += json_schema_rules(t.parameters, args, budget);
    }
    if (format == ToolFormat::kHarmony) {
      calls.push_back(gbnf_literal("<|channel|>commentary to=functions." + t.name +
                                   " <|constrain|>json<|message|>") + " " + args);
      continue;
    }
    calls.push_back("\"{\" ws " + gbnf_literal("\"name\"") + " ws \":\" ws " +
                    gbnf_literal("\"" + t.name + "\"") + " ws \",\" ws " +
                    gbnf_literal(std::string("\"") + args_key + "\"") + " ws \":\" ws " + args +
                    " ws \"}\"");
  }
  if (calls.empty()) fail("no tool named '", only, "'");
  std::string call = "call ::= ";
  for (size_t i = 0; i < calls.size(); ++i) call += (i ? " | " : "") + calls[i];
  std::string root;
  switch (format) {
    case ToolFormat::kHermes:
      root = "block ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\nroot ::= block" +
             std::string(parallel ? " (\"\\n\" block)*" : "");
      break;
    case ToolFormat::kMistral:
      root = "root ::= \"[TOOL_CALLS] [\" call" + std::string(parallel ? " (\", \" call)*" : "") +
             " \"]\"";
      break;
    case ToolFormat::kLlama3:
      root = "root ::= call" + std::string(parallel ? " (\"; \" call)*" : "");
      break;
    case ToolFormat::kJson:
      root = parallel ? "root ::= call | \"[\" call (\", \" call)* \"]\"" : "root ::= call";
      break;    case ToolFormat::kHarmony:
      // The prompt ends with "<|start|>assistant": an analysis message may come first, then
      // the call (one: <|call|> ends the generation).
      root = "root ::= analysis? call\n"
             "analysis ::= \"<|channel|>analysis<|message|>\" ([^<] | \"<\" [^|])* "
             "\"<|end|><|start|>assistant\"";
      break;
  }
  return root + "\n" + call + "\n" + rules + json_primitives_gbnf();
}

std::string tools_system_prompt(const std::vector<ToolSpec>& tools) {
  std::string out =
      "You can call functions. To call one, answer with only a JSON object "
      "{\"name\": <function name>, \"arguments\": <arguments object>}, or a list of such "
      "objects to call several. The functions:\n";
  for (const ToolSpec& t : tools) {
    ojson f = {{"name", t.name}};
    if (!t.description.empty()) f["description"] = t.description;
    if (!t.parameters.is_null()) f["parameters"] = t.parameters;
    out += f.dump() + "\n";
  }
  return out;
}

std::string ToolCallStream::feed(std::string_view text) {
  all_ += text;
  if (holding_) return "";
  // Where a call may start: a marker, or (formats whose calls are the whole text) a first
  // character that opens JSON.
  std::string_view rest(all_);
  rest.remove_prefix(sent_);
  size_t start = std::string_view::npos;
  std::string_view marker;
  if (format_ == ToolFormat::kHermes) marker = kHermesOpen;
  if (format_ == ToolFormat::kMistral) marker = kMistralMarker;
  if (format_ == ToolFormat::kLlama3) marker = kPythonTag;
  if (format_ == ToolFormat::kHarmony) marker = kHarmonyCall;
  if (!marker.empty()) start = rest.find(marker);
  if (sent_ == 0 && format_ != ToolFormat::kHarmony) {
    // JSON (or a fence) at the very start, after spaces, may be a bare call in any format.
    size_t first = 0;
    while (first < rest.size() && std::isspace(static_cast<unsigned char>(rest[first]))) ++first;
    if (first == rest.size()) return "";  // only spaces so far: wait
    if (rest[first] == '{' || rest[first] == '[' || rest[first] == '`') {
      start = std::min(start, first);
    }
  }
  if (start != std::string_view::npos) {
    holding_ = true;
    std::string out(rest.substr(0, start));
    sent_ += start;
    return out;
  }
  // Hold back a tail that may be the beginning of the marker.
  size_t keep = 0;
  if (!marker.empty()) {
    for (size_t n = std::min(marker.size() - 1, rest.size()); n > 0; --n) {
      if (marker.substr(0, n) == rest.substr(rest.size() - n)) {
        keep = n;
        break;
      }
    }
  }
  std::string out(rest.substr(0, rest.size() - keep));
  sent_ += out.size();
  return out;
}

ParsedToolCalls ToolCallStream::finish() {
  std::string_view rest(all_);
  rest.remove_prefix(sent_);
  ParsedToolCalls p = parse_tool_calls(rest, format_, *tools_);
  if (p.calls.empty()) p.content = std::string(rest);
  sent_ = all_.size();
  return p;
}

ParsedToolCalls split_tool_calls(const std::string& text, ToolFormat format,
                                 const std::vector<ToolSpec>& tools) {
  if (tools.empty()) return {text, {}};
  ParsedToolCalls p = parse_tool_calls(text, format, tools);
  if (p.calls.empty()) p.content = text;
  return p;
}

ParsedToolCalls ToolCallStream::step(std::string_view text, bool last) {
  ParsedToolCalls out{feed(text), {}};
  if (last) {
    ParsedToolCalls rest = finish();
    out.content += rest.content;
    out.calls = std::move(rest.calls);
  }
  return out;
}

}  // namespace pagoda::server
