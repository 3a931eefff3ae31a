// The request parameters that shape a chat's or a completion's output: response_format,
// grammar or regex (a grammar the output must match), and tools / tool_choice (function
// calling). Parts of parse_completion_request and parse_chat_request (openai_request.h).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace pagoda::server {

// response_format (json_object, json_schema), grammar (GBNF) or regex: at most one, kept in
// r.grammar_source for the server to compile. `raw_body`: the body text, read again in key
// order for a JSON schema's properties.
void parse_structured_output(const nlohmann::json& body, const ModelContext& model,
                             const std::string& raw_body, ApiRequest& r);

// tools, tool_choice, parallel_tool_calls: r.tools, what the template gets (`extra`'s "tools",
// or a system message in `messages` describing them), and for tool_choice "required" or a
// named function, the grammar that makes the output a call. `ordered`: the body in key order.
void parse_tools(const nlohmann::json& body, const nlohmann::ordered_json& ordered,
                 const ModelContext& model, ApiRequest& r, nlohmann::ordered_json& extra,
                 nlohmann::ordered_json& messages);

}  // namespace pagoda::server
