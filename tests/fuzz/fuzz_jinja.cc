// libFuzzer target: any bytes as a chat template either parse and render (within small step
// and output limits) or throw pagoda::Error; never a crash, a hang, unbounded memory or UB.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "template/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::json messages = nlohmann::json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi {{ there }} \u00e9"},
    {"role": "assistant", "content": "Hello.", "tool_calls": [{"type": "function",
      "function": {"name": "f", "arguments": {"x": 1}}}]},
    {"role": "tool", "content": "42"},
    {"role": "user", "content": ["not", "a", "string"]}])");
  static const nlohmann::json extra = nlohmann::json::parse(
      R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]})");
  pagoda::TemplateLimits limits;
  limits.max_steps = 20'000;
  limits.max_output_bytes = 1 << 16;
  limits.max_depth = 32;
  try {
    pagoda::ChatTemplate t(std::string(reinterpret_cast<const char*>(data), size), limits);
    (void)t.apply(messages, true, "<s>", "</s>", extra);
  } catch (const pagoda::Error&) {
    // Refusing a template with an Error is the expected outcome.
  }
  return 0;
}
