// Chat templates: pagoda's own sandboxed interpreter for the Jinja subset that model chat
// templates (`tokenizer.chat_template`) use, rendering byte for byte as Python jinja2 does when
// configured like Hugging Face transformers (trim_blocks, lstrip_blocks, an immutable sandbox,
// raise_exception, strftime_now and json.dumps-style tojson). No file, import or system access;
// every render is bounded in steps, output size and recursion. See docs/CHAT_TEMPLATES.md.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

namespace jinja {
struct Stmt;
}

struct TemplateLimits {
  int64_t max_steps = 1'000'000;       // evaluation steps (nodes / loop iterations)
  int64_t max_output_bytes = 1 << 22;  // rendered size (also any string built on the way)
  int max_depth = 64;                  // recursion (macro calls, block nesting)
};

// How the source is read and what the template may observe. The defaults are what Hugging Face
// transformers uses, which is what model templates are written for.
struct TemplateOptions {
  bool trim_blocks = true;             // drop the newline after a block tag
  bool lstrip_blocks = true;           // drop spaces before a block tag on its line
  bool keep_trailing_newline = false;  // jinja2 drops one trailing newline of the source
  int64_t now_unix = -1;  // clock of strftime_now() (local time); < 0: the system clock
};

class ChatTemplate {
 public:
  // Parses; throws pagoda::Error with line:column and what is wrong.
  explicit ChatTemplate(std::string source, TemplateLimits limits = {},
                        TemplateOptions options = {});

  // Renders with top-level variables: messages (JSON array of {role, content, ...}),
  // add_generation_prompt, bos_token, eos_token, plus every key of `extra` (e.g. tools). As in
  // transformers, `tools` and `documents` are none unless `extra` gives them. Throws
  // pagoda::Error on any runtime problem, including raise_exception('msg') (message included),
  // limits exceeded, unknown filters/tests/methods (named).
  std::string apply(const nlohmann::json& messages, bool add_generation_prompt,
                    const std::string& bos_token, const std::string& eos_token,
                    const nlohmann::json& extra = nlohmann::json::object()) const;
  // The same, keeping the key order of JSON objects (as Python dicts do), which matters to
  // templates that iterate over objects or print them with tojson.
  std::string apply_ordered(
      const nlohmann::ordered_json& messages, bool add_generation_prompt,
      const std::string& bos_token, const std::string& eos_token,
      const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  // Generic: render with a JSON object as the whole context (null counts as an empty one).
  std::string render(const nlohmann::json& context) const;
  std::string render_ordered(const nlohmann::ordered_json& context) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  TemplateLimits limits_;
  TemplateOptions options_;
  std::shared_ptr<const std::vector<jinja::Stmt>> body_;  // immutable, shared by copies
};

// Our own templates for common chat formats (Llama 3, ChatML/Qwen2.5, Mistral instruct, Gemma),
// for models whose file carries no template: returns the Jinja source, or empty if unknown.
// Names: "llama3", "chatml", "mistral", "gemma".
std::string_view builtin_chat_template(std::string_view name);

}  // namespace pagoda
