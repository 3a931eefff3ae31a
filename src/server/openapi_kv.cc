// The OpenAPI description of POST /v1/kv/save and /v1/kv/restore (kv_save_route.cc).
#include "server/openapi.h"

namespace pagoda::server {
namespace {

constexpr const char* kKvSpec = R"json({
  "paths": {
    "/v1/kv/save": {"post": {"operationId": "saveKvPrefix",
      "description": "Saves the KV blocks of a prompt's full blocks (computing the prompt when they are not cached) to a named file under serve --kv-save-dir.",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object",
        "required": ["name"], "additionalProperties": false,
        "oneOf": [{"required": ["prompt"]}, {"required": ["messages"]}],
        "properties": {"name": {"$ref": "#/components/schemas/KvSaveName"},
                       "model": {"type": "string"},
                       "prompt": {"oneOf": [{"type": "string"}, {"$ref": "#/components/schemas/TokenIds"}]},
                       "messages": {"$ref": "#/components/schemas/Messages"},
                       "tools": {"type": "array", "items": {"type": "object"}},
                       "chat_template_kwargs": {"type": "object"}}}}}},
      "responses": {
        "200": {"description": "saved", "content": {"application/json": {"schema": {"type": "object",
          "required": ["object", "name", "num_prompt_tokens", "num_tokens", "num_computed_tokens", "bytes"],
          "properties": {"object": {"type": "string", "enum": ["kv.save"]}, "name": {"type": "string"},
                         "num_prompt_tokens": {"type": "integer"}, "num_tokens": {"type": "integer"},
                         "num_computed_tokens": {"type": "integer"}, "bytes": {"type": "integer"}}}}}},
        "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
        "404": {"$ref": "#/components/responses/Error"}, "413": {"$ref": "#/components/responses/Error"},
        "500": {"$ref": "#/components/responses/Error"}, "503": {"$ref": "#/components/responses/Error"}}}},
    "/v1/kv/restore": {"post": {"operationId": "restoreKvPrefix",
      "description": "Puts the blocks of a saved prefix back into the prefix cache.",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object",
        "required": ["name"], "additionalProperties": false,
        "properties": {"name": {"$ref": "#/components/schemas/KvSaveName"}, "model": {"type": "string"}}}}}},
      "responses": {
        "200": {"description": "restored", "content": {"application/json": {"schema": {"type": "object",
          "required": ["object", "name", "num_tokens", "num_restored_tokens", "bytes"],
          "properties": {"object": {"type": "string", "enum": ["kv.restore"]}, "name": {"type": "string"},
                         "num_tokens": {"type": "integer"}, "num_restored_tokens": {"type": "integer"},
                         "bytes": {"type": "integer"}}}}}},
        "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
        "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"},
        "413": {"$ref": "#/components/responses/Error"}, "503": {"$ref": "#/components/responses/Error"}}}}
  },
  "schemas": {
    "KvSaveName": {"type": "string", "pattern": "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$"}
  }
})json";

}  // namespace

void add_kv_save_openapi(nlohmann::json& spec) {
  static const nlohmann::json kv = nlohmann::json::parse(kKvSpec);
  spec["paths"].update(kv["paths"]);
  spec["components"]["schemas"].update(kv["schemas"]);
}

}  // namespace pagoda::server
