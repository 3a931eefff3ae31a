// The Responses API's part of the OpenAPI description (see openapi.h).
#include "server/openapi.h"

namespace pagoda::server {
namespace {

constexpr const char* kResponsesSpec = R"json({
  "paths": {
    "/v1/responses": {"post": {
      "operationId": "createResponse",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ResponsesRequest"}}}},
      "responses": {
        "200": {"description": "a Response (OpenAI's Responses API), or a stream of events when stream is true",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Response"}},
                            "text/event-stream": {"schema": {"type": "object", "properties": {"data": {"type": "string"}}}}},
                "links": {"GetResponse": {"operationId": "getResponse", "parameters": {"response_id": "$response.body#/id"}},
                          "DeleteResponse": {"operationId": "deleteResponse", "parameters": {"response_id": "$response.body#/id"}}}},
        "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
        "404": {"$ref": "#/components/responses/Error"}, "413": {"$ref": "#/components/responses/Error"},
        "503": {"$ref": "#/components/responses/Error"}}}},
    "/v1/responses/{response_id}": {
      "parameters": [{"name": "response_id", "in": "path", "required": true, "schema": {"type": "string", "minLength": 1, "pattern": "^[^/]+$"}}],
      "get": {"operationId": "getResponse", "responses": {
        "200": {"description": "a stored Response", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Response"}}}},
        "401": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}}},
      "delete": {"operationId": "deleteResponse", "responses": {
        "200": {"description": "the stored Response was deleted", "content": {"application/json": {"schema": {
          "type": "object", "required": ["id", "object", "deleted"],
          "properties": {"id": {"type": "string"}, "object": {"type": "string", "enum": ["response"]}, "deleted": {"type": "boolean"}}}}}},
        "401": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}}}}
  },
  "schemas": {
    "ResponsesRequest": {"type": "object", "required": ["input"], "properties": {
      "model": {"type": "string", "nullable": true},
      "input": {"oneOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": {"type": "object"}}]},
      "instructions": {"type": "string", "nullable": true},
      "max_output_tokens": {"type": "integer", "minimum": 1, "maximum": 8192, "nullable": true},
      "temperature": {"type": "number", "minimum": 0, "maximum": 2, "nullable": true},
      "top_p": {"type": "number", "exclusiveMinimum": true, "minimum": 0, "maximum": 1, "nullable": true},
      "stream": {"type": "boolean", "nullable": true},
      "store": {"type": "boolean", "nullable": true},
      "previous_response_id": {"type": "string", "nullable": true},
      "metadata": {"type": "object", "nullable": true, "maxProperties": 16, "additionalProperties": {"type": "string", "maxLength": 512}},
      "tools": {"type": "array", "nullable": true, "items": {"type": "object"}},
      "tool_choice": {"nullable": true, "oneOf": [{"type": "string", "enum": ["none", "auto", "required"]}, {"type": "object"}]},
      "parallel_tool_calls": {"type": "boolean", "nullable": true},
      "text": {"type": "object", "nullable": true},
      "reasoning": {"type": "object", "nullable": true},
      "background": {"type": "boolean", "nullable": true},
      "truncation": {"type": "string", "nullable": true, "enum": ["disabled", "auto", null]},
      "include": {"type": "array", "nullable": true, "items": {"type": "string"}},
      "user": {"type": "string", "nullable": true}}},
    "ResponseItem": {"type": "object", "required": ["type"], "properties": {
      "type": {"type": "string", "enum": ["message", "function_call"]}, "id": {"type": "string"},
      "status": {"type": "string", "enum": ["in_progress", "completed", "incomplete"]},
      "role": {"type": "string", "enum": ["assistant"]},
      "content": {"type": "array", "items": {"type": "object", "required": ["type", "text"],
        "properties": {"type": {"type": "string", "enum": ["output_text"]}, "text": {"type": "string"}}}},
      "call_id": {"type": "string"}, "name": {"type": "string"}, "arguments": {"type": "string"}}},
    "Response": {"type": "object", "required": ["id", "object", "created_at", "status", "model", "output"],
      "properties": {"id": {"type": "string"}, "object": {"type": "string", "enum": ["response"]},
                     "created_at": {"type": "integer"},
                     "status": {"type": "string", "enum": ["completed", "incomplete", "in_progress"]},
                     "model": {"type": "string"},
                     "output": {"type": "array", "items": {"$ref": "#/components/schemas/ResponseItem"}},
                     "usage": {"type": "object", "nullable": true, "required": ["input_tokens", "output_tokens", "total_tokens"],
                               "properties": {"input_tokens": {"type": "integer"}, "output_tokens": {"type": "integer"},
                                              "total_tokens": {"type": "integer"}}}}}
  }
})json";

}  // namespace

void add_responses_openapi(nlohmann::json& spec, const RequestLimits& limits,
                           const ModelContext& model) {
  using nlohmann::json;
  static const json part = json::parse(kResponsesSpec);
  spec["paths"].update(part["paths"]);
  json& s = spec["components"]["schemas"];
  s.update(part["schemas"]);
  json& request = s["ResponsesRequest"]["properties"];
  request["max_output_tokens"]["maximum"] = limits.max_tokens;
  request["model"]["enum"] = json::array({model.name, nullptr});
}

}  // namespace pagoda::server
