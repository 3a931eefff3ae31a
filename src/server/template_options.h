// Request fields that reach the chat template rather than the sampler: `chat_template_kwargs`
// (extra template variables, e.g. Qwen3's enable_thinking), `reasoning_effort` (gpt-oss's
// templates read it), and the `developer` role, which becomes `system` for templates that do not
// know it (Qwen2.5's would otherwise drop it and print its default system prompt).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace pagoda::server {

// What a chat template reads, found once from its source when the model is loaded.
struct TemplateTraits {
  bool knows_developer = false;        // names the role "developer"
  bool reads_reasoning_effort = false;  // reads the variable reasoning_effort
  // Reads an assistant message's earlier thinking as message.thinking, not reasoning_content
  // (gpt-oss's): the server's reasoning_content is given to it under that name.
  bool reads_thinking = false;
  bool reads_tool_description = false;  // reads tool.description (gpt-oss's, unguarded)
};

TemplateTraits template_traits(const std::string& source);

// True when `source` holds `word` as a whole identifier or quoted name (not inside a longer one).
bool mentions_word(std::string_view source, std::string_view word);

// Checks the three fields of a chat request body and applies them: kwargs and reasoning_effort
// are added to `extra` (the template's variables beside messages), developer messages are
// renamed for templates that lack the role, and reasoning_content becomes thinking for templates
// that read that (an assistant message with tool calls and both gets them joined in thinking:
// gpt-oss's template renders such a message's content as its analysis and refuses both). Throws ApiError (400) naming the field.
void apply_template_fields(const nlohmann::json& body, const nlohmann::ordered_json& ordered,
                           const TemplateTraits& traits, nlohmann::ordered_json& messages,
                           nlohmann::ordered_json& extra);

}  // namespace pagoda::server
