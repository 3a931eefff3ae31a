// The OpenAPI 3.0 description of pagoda serve's routes, served at /openapi.json. The limits a
// server runs with (max_tokens, n, stop strings, prompts per request) are filled in, so the
// description tells clients and test generators exactly what this server accepts.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace pagoda::server {

std::string openapi_json(const RequestLimits& limits, const ModelContext& model);

// The Responses API's routes and schemas, added to `spec` (openapi_responses.cc).
void add_responses_openapi(nlohmann::json& spec, const RequestLimits& limits,
                           const ModelContext& model);

// POST /v1/kv/save and /v1/kv/restore, added to `spec` (openapi_kv.cc).
void add_kv_save_openapi(nlohmann::json& spec);
// POST /v1/load_lora_adapter and /v1/unload_lora_adapter, added to `spec` (lora_routes.cc).
void add_lora_openapi(nlohmann::json& spec);

}  // namespace pagoda::server
