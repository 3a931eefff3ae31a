// Reasoning settings of a chat request (see reasoning_options.h).
#include "server/reasoning_options.h"

#include "server/api_error.h"
#include "server/request_fields.h"

namespace pagoda::server {

ReasoningSyntax reasoning_syntax_for_template(const std::string& t) {
  if (t.find("<|channel|>") != std::string::npos) return ReasoningSyntax::kHarmony;
  if (t.find("<think>") != std::string::npos || t.find("</think>") != std::string::npos) {
    return ReasoningSyntax::kThinkTags;
  }
  return ReasoningSyntax::kNone;
}

void parse_reasoning(const nlohmann::json& body, const ModelContext& model,
                     const std::string& prompt_text, ApiRequest& r) {
  const ReasoningSyntax syntax = model.reasoning_syntax;
  const bool inside = prompt_opens_thinking(syntax, prompt_text);
  r.reasoning = model.split_reasoning ? syntax : ReasoningSyntax::kNone;
  r.thinking_in_prompt = inside;
  int64_t budget = model.reasoning_budget;
  if (field(body, "reasoning_budget") != nullptr) {
    budget = int_field(body, "reasoning_budget", -1, 0, int64_t{1} << 30);
    if (syntax == ReasoningSyntax::kNone) {
      throw bad_param("reasoning_budget",
                      "'reasoning_budget' is not supported by this model: its chat template has "
                      "no thinking (<think> ... </think>)");
    }
  }
  if (budget < 0 || syntax == ReasoningSyntax::kNone) return;
  r.thinking.max_tokens = static_cast<int32_t>(budget);
  r.thinking.syntax = syntax;
  r.thinking.starts_inside = inside;
  r.thinking.tokenizer = model.tokenizer;
  std::string end(thinking_end_text(syntax));
  // A forced tool call (tool_choice required or named) follows the analysis: the end leaves the
  // next header to the call's grammar, which would refuse the final message's.
  if (syntax == ReasoningSyntax::kHarmony && r.grammar_param == "tools") {
    end = "<|end|><|start|>assistant";
  }
  r.thinking.end_tokens =
      model.tokenizer->encode(end, {.add_special = false, .parse_special = true});
}

}  // namespace pagoda::server
