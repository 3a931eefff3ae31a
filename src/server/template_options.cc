#include "server/template_options.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "server/api_error.h"
#include "server/request_fields.h"

namespace pagoda::server {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

bool identifier_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

// Variables the renderer sets itself: a kwarg may not replace them.
constexpr std::array<std::string_view, 6> kReserved = {
    "messages", "add_generation_prompt", "bos_token", "eos_token", "tools", "documents"};

constexpr std::array<std::string_view, 5> kEfforts = {"none", "minimal", "low", "medium", "high"};

void add_kwargs(const json& body, const ordered_json& ordered, ordered_json& extra) {
  const json* kw = field(body, "chat_template_kwargs");
  if (kw == nullptr) return;
  if (!kw->is_object()) {
    throw bad_param("chat_template_kwargs", "'chat_template_kwargs' must be an object");
  }
  for (const auto& [key, value] : ordered["chat_template_kwargs"].items()) {
    const bool valid = !key.empty() && !std::isdigit(static_cast<unsigned char>(key[0])) &&
                       std::all_of(key.begin(), key.end(), identifier_char);
    if (!valid) {
      throw bad_param("chat_template_kwargs", "'chat_template_kwargs' key '" + key +
                                                  "' is not a template variable name");
    }
    if (std::find(kReserved.begin(), kReserved.end(), key) != kReserved.end()) {
      throw bad_param("chat_template_kwargs", "'chat_template_kwargs." + key +
                                                  "' is set by the server and cannot be replaced");
    }
    extra[key] = value;
  }
}

void add_reasoning_effort(const json& body, const TemplateTraits& traits, ordered_json& extra) {
  const json* e = field(body, "reasoning_effort");
  if (e == nullptr) return;
  const bool known = e->is_string() && std::find(kEfforts.begin(), kEfforts.end(),
                                                 e->get_ref<const std::string&>()) != kEfforts.end();
  if (!known) {
    throw bad_param("reasoning_effort",
                    "'reasoning_effort' must be one of none, minimal, low, medium, high");
  }
  if (!traits.reads_reasoning_effort) {
    throw bad_param("reasoning_effort",
                    "'reasoning_effort' is not supported by this model: its chat template does "
                    "not read it");
  }
  extra["reasoning_effort"] = *e;
}

// An assistant message's reasoning_content, as the thinking such a template reads.
void rename_reasoning(ordered_json& m) {
  if (!m.is_object() || !m.contains("reasoning_content") || m.contains("thinking")) return;
  if (!m["reasoning_content"].is_string()) return;
  std::string thinking = m["reasoning_content"].get<std::string>();
  const bool calls = m.contains("tool_calls") && m["tool_calls"].is_array() &&
                     !m["tool_calls"].empty();
  if (calls && m.contains("content") && m["content"].is_string() &&
      !m["content"].get_ref<const std::string&>().empty()) {
    thinking += "\n\n" + m["content"].get<std::string>();
    m["content"] = "";
  }
  m["thinking"] = std::move(thinking);
}

}  // namespace

bool mentions_word(std::string_view source, std::string_view word) {
  for (size_t at = source.find(word); at != std::string_view::npos;
       at = source.find(word, at + 1)) {
    const bool starts = at == 0 || !identifier_char(source[at - 1]);
    const size_t end = at + word.size();
    const bool ends = end == source.size() || !identifier_char(source[end]);
    if (starts && ends) return true;
  }
  return false;
}

TemplateTraits template_traits(const std::string& source) {
  return {.knows_developer = mentions_word(source, "developer"),
          .reads_reasoning_effort = mentions_word(source, "reasoning_effort"),
          .reads_thinking = source.find("message.thinking") != std::string::npos &&
                            !mentions_word(source, "reasoning_content"),
          .reads_tool_description = source.find("tool.description") != std::string::npos};
}

void apply_template_fields(const json& body, const ordered_json& ordered,
                           const TemplateTraits& traits, ordered_json& messages,
                           ordered_json& extra) {
  add_kwargs(body, ordered, extra);
  add_reasoning_effort(body, traits, extra);
  if (traits.reads_thinking) {
    for (ordered_json& m : messages) rename_reasoning(m);
  }
  if (traits.knows_developer) return;
  for (ordered_json& m : messages) {
    if (m.is_object() && m.contains("role") && m["role"] == "developer") m["role"] = "system";
  }
}

}  // namespace pagoda::server
