// OpenAI function calling on the server: the format a model writes its calls in (from its chat
// template), parsing generated text into message.tool_calls, the grammar that forces a call
// (tool_choice "required" or a named function), a system prompt describing the tools to a
// template that does not, and the streaming side (text held back from where a call may start,
// then delta.tool_calls: the name first, then the arguments).
//
// Formats:
//   kHermes   <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>  (Qwen2.5, Hermes)
//   kLlama3   [<|python_tag|>]{"name": ..., "parameters": {...}} [; ...]      (Llama 3.1+)
//   kMistral  [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]           (Mistral)
//   kJson     {"name": ..., "arguments": {...}} or a list of them (any other model; SmolLM2)
//   kHarmony  to=functions.NAME ... <|message|>{...}<|call|>                (gpt-oss)
// kHarmony reads the form the harmony reasoning parser (engine/reasoning.h) turns a message to
// functions.NAME into, and the raw harmony message too (--reasoning-format none): from
// "to=functions.NAME" to <|message|>, the arguments up to <|call|>, <|end|>, <|return|>,
// <|start|> or the end of the text.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {
class GrammarBudget;
}

namespace pagoda::server {

enum class ToolFormat { kHermes, kLlama3, kMistral, kJson, kHarmony };

ToolFormat tool_format_for_template(const std::string& chat_template);
// Whether the template renders a 'tools' variable at all (else pagoda describes the tools).
bool template_renders_tools(const std::string& chat_template);

struct ToolSpec {
  std::string name;
  std::string description;
  nlohmann::ordered_json parameters;  // a JSON schema; null when the function takes none
};

struct ToolCall {
  std::string id;  // "call_" + 24 hex digits
  std::string name;
  std::string arguments;  // JSON text
};

struct ParsedToolCalls {
  std::string content;  // the text outside the calls, trimmed
  std::vector<ToolCall> calls;
};

// The calls `text` holds in `format` that name one of `tools` (arguments re-serialized
// compactly); text that looks like a call but does not parse stays content.
ParsedToolCalls parse_tool_calls(std::string_view text, ToolFormat format,
                                 const std::vector<ToolSpec>& tools);
// A whole answer: parse_tool_calls's calls and content, or all of `text` as content when there
// are no tools or no call parses.
ParsedToolCalls split_tool_calls(const std::string& text, ToolFormat format,
                                 const std::vector<ToolSpec>& tools);

// GBNF making the whole output one call (several, when `parallel`) in `format` of `tools` (of
// `only` when not empty), its arguments following the function's schema. Throws Error on a
// schema the grammar cannot express; the schemas' text counts against `budget` (nullptr: none).
std::string tool_call_gbnf(ToolFormat format, const std::vector<ToolSpec>& tools,
                           const std::string& only, bool parallel, GrammarBudget* budget = nullptr);

// The system text telling a model whose template knows nothing of tools what it may call and
// how (the kJson format).
std::string tools_system_prompt(const std::vector<ToolSpec>& tools);

// One choice's text as it streams: content passes until text that may begin a call; from there
// everything is held to the end, then parsed as parse_tool_calls parses the whole text, so a
// stream gives the same calls as the whole response.
class ToolCallStream {
 public:
  ToolCallStream(ToolFormat format, const std::vector<ToolSpec>* tools)
      : format_(format), tools_(tools) {}
  // Content that can be sent now.
  std::string feed(std::string_view text);
  // At the end: the rest of the content, and the calls.
  ParsedToolCalls finish();
  // feed(text), and at the end (`last`) finish() too: the content to send now and the calls.
  ParsedToolCalls step(std::string_view text, bool last);

 private:
  ToolFormat format_;
  const std::vector<ToolSpec>* tools_;
  std::string all_;       // every byte fed
  size_t sent_ = 0;       // bytes of all_ sent as content
  bool holding_ = false;  // a call may have begun at sent_
};

}  // namespace pagoda::server
