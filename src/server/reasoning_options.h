// Reasoning on the server: which thinking syntax a chat template uses (as tool_calls.h finds
// the tool-call format), and a chat request's reasoning settings: whether its output's thinking
// is split out (serve --reasoning-format auto), whether the rendered prompt already opened the
// thinking, and its thinking budget (the extension field `reasoning_budget`, or serve
// --reasoning-budget), which the engine enforces (engine/thinking_budget.h).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/reasoning.h"
#include "server/openai_request.h"

namespace pagoda::server {

// kHarmony when the template writes gpt-oss's <|channel|> messages; kThinkTags when it writes
// or strips <think> ... </think>; kNone otherwise.
ReasoningSyntax reasoning_syntax_for_template(const std::string& chat_template);

// Sets r.reasoning and r.thinking for a chat whose rendered prompt is `prompt_text` (after the
// tools are parsed: a harmony budget with a forced call ends the analysis only); reads
// `reasoning_budget` (an integer >= 0, or null for the server's). Throws ApiError (400) for a
// budget the model cannot take (its template has no thinking syntax).
void parse_reasoning(const nlohmann::json& body, const ModelContext& model,
                     const std::string& prompt_text, ApiRequest& r);

}  // namespace pagoda::server
