// The OpenAPI description (see openapi.h): one JSON document, limits patched in.
#include "server/openapi.h"

#include <nlohmann/json.hpp>

#include "server/embeddings.h"

namespace pagoda::server {
namespace {

// Responses that are not 200 all share the OpenAI error shape.
constexpr const char* kSpec = R"json({
  "openapi": "3.0.3",
  "info": {"title": "pagoda serve", "version": "1",
           "description": "OpenAI-compatible completions and chat completions, Anthropic's Messages API, OpenAI's Responses API, Ollama's API, tokenization, metrics. See docs/SERVER.md."},
  "paths": {
    "/v1/completions": {"post": {
      "operationId": "createCompletion",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CompletionRequest"}}}},
      "responses": {
        "200": {"description": "a completion, or a stream of chunks when stream is true",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Completion"}},
                            "text/event-stream": {"schema": {"type": "object", "properties": {"data": {"type": "string"}}}}}},
        "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
        "404": {"$ref": "#/components/responses/Error"}, "413": {"$ref": "#/components/responses/Error"},
        "503": {"$ref": "#/components/responses/Error"}}}},
    "/v1/chat/completions": {"post": {
      "operationId": "createChatCompletion",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatRequest"}}}},
      "responses": {
        "200": {"description": "a chat completion, or a stream of chunks when stream is true",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatCompletion"}},
                            "text/event-stream": {"schema": {"type": "object", "properties": {"data": {"type": "string"}}}}}},
        "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
        "404": {"$ref": "#/components/responses/Error"}, "413": {"$ref": "#/components/responses/Error"},
        "503": {"$ref": "#/components/responses/Error"}}}},
    "/v1/messages": {"post": {
      "operationId": "createMessage",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/MessagesRequest"}}}},
      "responses": {
        "200": {"description": "a Message (Anthropic's Messages API), or a stream of events when stream is true",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Message"}},
                            "text/event-stream": {"schema": {"type": "object", "properties": {"data": {"type": "string"}}}}}},
        "400": {"$ref": "#/components/responses/AnthropicError"}, "401": {"$ref": "#/components/responses/AnthropicError"},
        "404": {"$ref": "#/components/responses/AnthropicError"}, "413": {"$ref": "#/components/responses/Error"},
        "503": {"$ref": "#/components/responses/AnthropicError"}}}},
    "/v1/messages/count_tokens": {"post": {
      "operationId": "countMessageTokens",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CountTokensRequest"}}}},
      "responses": {
        "200": {"description": "the prompt's tokens", "content": {"application/json": {"schema": {"type": "object",
          "required": ["input_tokens"], "properties": {"input_tokens": {"type": "integer"}}}}}},
        "400": {"$ref": "#/components/responses/AnthropicError"}, "401": {"$ref": "#/components/responses/AnthropicError"},
        "404": {"$ref": "#/components/responses/AnthropicError"}, "413": {"$ref": "#/components/responses/Error"}}}},
    "/v1/models": {"get": {"operationId": "listModels", "responses": {
        "200": {"description": "the served model",
                "content": {"application/json": {"schema": {"type": "object", "required": ["object", "data"],
                  "properties": {"object": {"type": "string", "enum": ["list"]},
                                 "data": {"type": "array", "items": {"$ref": "#/components/schemas/Model"}}}}}}},
        "401": {"$ref": "#/components/responses/Error"}}}},
    "/v1/models/{model}": {"get": {"operationId": "getModel",
        "parameters": [{"name": "model", "in": "path", "required": true, "schema": {"type": "string", "minLength": 1}}],
        "responses": {
          "200": {"description": "the model", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Model"}}}},
          "401": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}}}},
    "/tokenize": {"post": {"operationId": "tokenize",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object",
          "anyOf": [{"required": ["prompt"]}, {"required": ["messages"]}],
          "properties": {"prompt": {"type": "string"}, "add_special_tokens": {"type": "boolean"},
                         "messages": {"$ref": "#/components/schemas/Messages"}}}}}},
        "responses": {
          "200": {"description": "token ids", "content": {"application/json": {"schema": {"type": "object",
            "required": ["tokens", "count", "max_model_len"],
            "properties": {"tokens": {"type": "array", "items": {"type": "integer"}}, "count": {"type": "integer"},
                           "max_model_len": {"type": "integer"}}}}}},
          "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
          "404": {"$ref": "#/components/responses/Error"}, "413": {"$ref": "#/components/responses/Error"}}}},
    "/detokenize": {"post": {"operationId": "detokenize",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["tokens"],
          "properties": {"tokens": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 0}}}}}}},
        "responses": {
          "200": {"description": "text", "content": {"application/json": {"schema": {"type": "object", "required": ["prompt"],
            "properties": {"prompt": {"type": "string"}}}}}},
          "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
          "413": {"$ref": "#/components/responses/Error"}}}},
    "/health": {"get": {"operationId": "health", "responses": {
        "200": {"description": "serving", "content": {"application/json": {"schema": {"type": "object", "required": ["status"],
          "properties": {"status": {"type": "string", "enum": ["ok"]}}}}}},
        "503": {"$ref": "#/components/responses/Error"}}}},
    "/stats": {"get": {"operationId": "stats", "responses": {
        "200": {"description": "the engine figures the web page shows", "content": {"application/json": {"schema": {"type": "object",
          "required": ["running", "waiting", "kv_blocks_total", "kv_blocks_used", "kv_utilization", "in_flight"],
          "properties": {"running": {"type": "integer"}, "waiting": {"type": "integer"},
                         "kv_blocks_total": {"type": "integer"}, "kv_blocks_used": {"type": "integer"},
                         "kv_utilization": {"type": "number"}, "in_flight": {"type": "integer"}}}}}}}}},
    "/metrics": {"get": {"operationId": "metrics", "responses": {
        "200": {"description": "Prometheus text format 0.0.4", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
    "/openapi.json": {"get": {"operationId": "openapi", "responses": {
        "200": {"description": "this document", "content": {"application/json": {"schema": {"type": "object"}}}}}}},
    "/": {"get": {"operationId": "webPage", "responses": {
        "200": {"description": "the chat page", "content": {"text/html": {"schema": {"type": "string"}}}}}}}
  },
  "components": {
    "responses": {
      "Error": {"description": "an error in the OpenAI shape",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "AnthropicError": {"description": "an error in Anthropic's shape",
                "content": {"application/json": {"schema": {"type": "object", "required": ["type", "error"],
                  "properties": {"type": {"type": "string", "enum": ["error"]},
                                 "error": {"type": "object", "required": ["type", "message"],
                                           "properties": {"type": {"type": "string"}, "message": {"type": "string"}}}}}}}}
    },
    "schemas": {
      "TextBlocks": {"type": "array", "items": {"type": "object", "required": ["type", "text"],
        "properties": {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}}}},
      "AnthropicMessages": {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["role", "content"],
        "properties": {"role": {"type": "string", "enum": ["user", "assistant"]},
                       "content": {"oneOf": [{"type": "string"}, {"$ref": "#/components/schemas/TextBlocks"}]}}}},
      "CountTokensRequest": {"type": "object", "required": ["messages"], "properties": {
        "model": {"type": "string", "nullable": true},
        "messages": {"$ref": "#/components/schemas/AnthropicMessages"},
        "system": {"nullable": true, "oneOf": [{"type": "string"}, {"$ref": "#/components/schemas/TextBlocks"}]},
        "tools": {"type": "array", "nullable": true, "items": {"type": "object"}},
        "tool_choice": {"type": "object", "nullable": true}}},
      "MessagesRequest": {"allOf": [{"$ref": "#/components/schemas/CountTokensRequest"}, {"type": "object", "required": ["max_tokens"],
        "properties": {
          "max_tokens": {"type": "integer", "minimum": 1, "maximum": 8192},
          "temperature": {"type": "number", "minimum": 0, "maximum": 1, "nullable": true},
          "top_p": {"type": "number", "exclusiveMinimum": true, "minimum": 0, "maximum": 1, "nullable": true},
          "top_k": {"type": "integer", "minimum": -1, "nullable": true},
          "stop_sequences": {"type": "array", "nullable": true, "maxItems": 16, "items": {"type": "string", "minLength": 1}},
          "stream": {"type": "boolean", "nullable": true},
          "metadata": {"type": "object", "nullable": true, "properties": {"user_id": {"type": "string", "nullable": true}}},
          "service_tier": {"type": "string", "nullable": true, "enum": ["auto", "standard_only"]},
          "thinking": {"type": "object", "nullable": true, "required": ["type"], "additionalProperties": false,
                       "properties": {"type": {"type": "string", "enum": ["disabled"]}}}}}]},
      "Message": {"type": "object", "required": ["id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"],
        "properties": {"id": {"type": "string"}, "type": {"type": "string", "enum": ["message"]},
                       "role": {"type": "string", "enum": ["assistant"]}, "model": {"type": "string"},
                       "content": {"type": "array", "items": {"type": "object", "required": ["type"]}},
                       "stop_reason": {"type": "string", "enum": ["end_turn", "max_tokens", "stop_sequence", "tool_use"]},
                       "stop_sequence": {"type": "string", "nullable": true},
                       "usage": {"type": "object", "required": ["input_tokens", "output_tokens"],
                                 "properties": {"input_tokens": {"type": "integer"}, "output_tokens": {"type": "integer"}}}}},
      "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "object",
        "required": ["message", "type", "param", "code"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "param": {"type": "string", "nullable": true}, "code": {"type": "string", "nullable": true}}}}},
      "Model": {"type": "object", "required": ["id", "object", "owned_by"],
                "properties": {"id": {"type": "string"}, "object": {"type": "string", "enum": ["model"]},
                               "created": {"type": "integer"}, "owned_by": {"type": "string"},
                               "max_model_len": {"type": "integer"},
                               "parent": {"type": "string", "description": "A LoRA adapter's base model"},
                               "root": {"type": "string", "description": "A LoRA adapter's file"}}},
      "Stop": {"oneOf": [{"type": "string", "minLength": 1},
                         {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 16}], "nullable": true},
      "Sampling": {"type": "object",
        "anyOf": [{"not": {"required": ["stream_options"]}},
                  {"required": ["stream"], "properties": {"stream": {"type": "boolean", "enum": [true]}}},
                  {"properties": {"stream_options": {"type": "object", "nullable": true, "enum": [null]}}}],
        "properties": {
        "model": {"type": "string"},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 8192, "nullable": true},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2, "nullable": true},
        "top_p": {"type": "number", "exclusiveMinimum": true, "minimum": 0, "maximum": 1, "nullable": true},
        "top_k": {"type": "integer", "minimum": -1, "nullable": true},
        "min_p": {"type": "number", "minimum": 0, "maximum": 1, "nullable": true},
        "seed": {"type": "integer", "nullable": true},
        "n": {"type": "integer", "minimum": 1, "maximum": 16, "nullable": true},
        "stop": {"$ref": "#/components/schemas/Stop"},
        "stream": {"type": "boolean", "nullable": true},
        "stream_options": {"type": "object", "nullable": true, "properties": {"include_usage": {"type": "boolean", "nullable": true}}},
        "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2, "nullable": true},
        "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2, "nullable": true},
        "repetition_penalty": {"type": "number", "minimum": 0.001, "maximum": 100, "nullable": true},
        "logit_bias": {"type": "object", "nullable": true, "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}},
        "ignore_eos": {"type": "boolean", "nullable": true},
        "num_speculative_tokens": {"type": "integer", "minimum": 0, "maximum": 8, "nullable": true},
        "min_tokens": {"type": "integer", "minimum": 0, "nullable": true}}},
      "CompletionRequest": {"allOf": [{"$ref": "#/components/schemas/Sampling"}, {"type": "object", "required": ["prompt"],
        "properties": {
          "prompt": {"oneOf": [{"type": "string", "minLength": 1},
                               {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
                               {"type": "array", "minItems": 1, "maxItems": 64, "items": {"type": "string", "minLength": 1}},
                               {"type": "array", "minItems": 1, "maxItems": 64,
                                "items": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}}}]},
          "echo": {"type": "boolean", "nullable": true},
          "logprobs": {"type": "integer", "minimum": 0, "maximum": 20, "nullable": true}}}]},
      "Messages": {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["role", "content"],
        "properties": {"role": {"type": "string"},
                       "content": {"nullable": true, "oneOf": [{"type": "string"},
                         {"type": "array", "items": {"type": "object", "required": ["type", "text"],
                           "properties": {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}}}}]}}}},
      "ChatRequest": {"allOf": [{"$ref": "#/components/schemas/Sampling"}, {"type": "object", "required": ["messages"],
        "properties": {
          "messages": {"$ref": "#/components/schemas/Messages"},
          "max_completion_tokens": {"type": "integer", "minimum": 1, "maximum": 8192, "nullable": true},
          "logprobs": {"type": "boolean", "nullable": true},
          "top_logprobs": {"type": "integer", "minimum": 0, "maximum": 20, "nullable": true},
          "tools": {"type": "array", "nullable": true, "items": {"type": "object"}},
          "chat_template_kwargs": {"type": "object", "nullable": true},
          "reasoning_effort": {"type": "string", "nullable": true, "enum": ["none", "minimal", "low", "medium", "high", null]}}}]},
      "ReasoningBudget": {"type": "integer", "minimum": 0, "maximum": 1073741824, "nullable": true,
                          "description": "pagoda extension: thinking tokens at most, then the closing tag is forced (models whose template thinks)"},
      "Usage": {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
                "properties": {"prompt_tokens": {"type": "integer"}, "completion_tokens": {"type": "integer"},
                               "total_tokens": {"type": "integer"}}},
      "FinishReason": {"type": "string", "enum": ["stop", "length", "abort"], "nullable": true},
      "Completion": {"type": "object", "required": ["id", "object", "created", "model", "choices", "usage"],
        "properties": {"id": {"type": "string"}, "object": {"type": "string", "enum": ["text_completion"]},
                       "created": {"type": "integer"}, "model": {"type": "string"},
                       "choices": {"type": "array", "items": {"type": "object", "required": ["index", "text", "finish_reason"],
                         "properties": {"index": {"type": "integer"}, "text": {"type": "string"},
                                        "logprobs": {"type": "object", "nullable": true},
                                        "finish_reason": {"$ref": "#/components/schemas/FinishReason"}}}},
                       "usage": {"$ref": "#/components/schemas/Usage"}}},
      "ChatCompletion": {"type": "object", "required": ["id", "object", "created", "model", "choices", "usage"],
        "properties": {"id": {"type": "string"}, "object": {"type": "string", "enum": ["chat.completion"]},
                       "created": {"type": "integer"}, "model": {"type": "string"},
                       "choices": {"type": "array", "items": {"type": "object", "required": ["index", "message", "finish_reason"],
                         "properties": {"index": {"type": "integer"},
                                        "message": {"type": "object", "required": ["role", "content"],
                                          "properties": {"role": {"type": "string", "enum": ["assistant"]},
                                                         "content": {"type": "string", "nullable": true},
                                                         "reasoning_content": {"type": "string"}}},
                                        "logprobs": {"type": "object", "nullable": true},
                                        "finish_reason": {"$ref": "#/components/schemas/FinishReason"}}}},
                       "usage": {"$ref": "#/components/schemas/Usage"}}}
    }
  }
})json";

// The embedding routes (server/embeddings.h), merged into kSpec's paths and schemas. On a
// model that does not embed they answer 400 naming how to turn embeddings on.
constexpr const char* kEmbeddingSpec = R"json({
  "paths": {
    "/v1/embeddings": {"post": {
      "operationId": "createEmbedding",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EmbeddingRequest"}}}},
      "responses": {
        "200": {"description": "one embedding per input", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EmbeddingList"}}}},
        "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
        "404": {"$ref": "#/components/responses/Error"}, "413": {"$ref": "#/components/responses/Error"}}}},
    "/api/embed": {"post": {
      "operationId": "ollamaEmbed",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OllamaEmbedRequest"}}}},
      "responses": {
        "200": {"description": "one embedding per input", "content": {"application/json": {"schema": {"type": "object",
          "required": ["model", "embeddings", "total_duration", "load_duration", "prompt_eval_count"],
          "properties": {"model": {"type": "string"},
                         "embeddings": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
                         "total_duration": {"type": "integer"}, "load_duration": {"type": "integer"},
                         "prompt_eval_count": {"type": "integer"}}}}}},
        "400": {"$ref": "#/components/responses/OllamaError"}, "401": {"$ref": "#/components/responses/OllamaError"},
        "404": {"$ref": "#/components/responses/OllamaError"}, "413": {"$ref": "#/components/responses/Error"}}}},
    "/api/embeddings": {"post": {
      "operationId": "ollamaEmbeddings",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["model", "prompt"],
        "properties": {"model": {"$ref": "#/components/schemas/OllamaModel"}, "prompt": {"type": "string", "minLength": 1},
                       "options": {"$ref": "#/components/schemas/OllamaEmbedOptions"},
                       "keep_alive": {"nullable": true, "oneOf": [{"type": "string"}, {"type": "number"}]}}}}}},
      "responses": {
        "200": {"description": "Ollama's older embedding answer", "content": {"application/json": {"schema": {"type": "object",
          "required": ["embedding"], "properties": {"embedding": {"type": "array", "items": {"type": "number"}}}}}}},
        "400": {"$ref": "#/components/responses/OllamaError"}, "401": {"$ref": "#/components/responses/OllamaError"},
        "404": {"$ref": "#/components/responses/OllamaError"}, "413": {"$ref": "#/components/responses/Error"}}}}
  },
  "schemas": {
    "TokenIds": {"type": "array", "minItems": 1, "maxItems": 512, "items": {"type": "integer", "minimum": 0}},
    "EmbeddingRequest": {"type": "object", "required": ["input"], "properties": {
      "input": {"oneOf": [{"type": "string", "minLength": 1},
                          {"type": "array", "minItems": 1, "maxItems": 2048, "items": {"type": "string", "minLength": 1}},
                          {"$ref": "#/components/schemas/TokenIds"},
                          {"type": "array", "minItems": 1, "maxItems": 2048, "items": {"$ref": "#/components/schemas/TokenIds"}}]},
      "model": {"type": "string", "nullable": true},
      "encoding_format": {"type": "string", "nullable": true, "enum": ["float", "base64", null]},
      "dimensions": {"nullable": true, "enum": [null]},
      "user": {"type": "string", "nullable": true}}},
    "EmbeddingList": {"type": "object", "required": ["object", "data", "model", "usage"], "properties": {
      "object": {"type": "string", "enum": ["list"]}, "model": {"type": "string"},
      "data": {"type": "array", "items": {"type": "object", "required": ["object", "index", "embedding"],
        "properties": {"object": {"type": "string", "enum": ["embedding"]}, "index": {"type": "integer"},
                       "embedding": {"oneOf": [{"type": "array", "items": {"type": "number"}}, {"type": "string"}]}}}},
      "usage": {"type": "object", "required": ["prompt_tokens", "total_tokens"],
                "properties": {"prompt_tokens": {"type": "integer"}, "total_tokens": {"type": "integer"}}}}},
    "OllamaEmbedOptions": {"type": "object", "nullable": true, "properties": {
      "num_ctx": {"type": "integer", "minimum": 1, "nullable": true}}},
    "OllamaEmbedRequest": {"type": "object", "required": ["model", "input"], "properties": {
      "model": {"$ref": "#/components/schemas/OllamaModel"},
      "input": {"oneOf": [{"type": "string", "minLength": 1},
                          {"type": "array", "minItems": 1, "maxItems": 2048, "items": {"type": "string", "minLength": 1}}]},
      "truncate": {"type": "boolean", "nullable": true},
      "options": {"$ref": "#/components/schemas/OllamaEmbedOptions"},
      "keep_alive": {"nullable": true, "oneOf": [{"type": "string"}, {"type": "number"}]}}}
  }
})json";

// Ollama's routes (ollama_api.h), merged into kSpec's paths and schemas.
constexpr const char* kOllamaSpec = R"json({
  "paths": {
    "/api/chat": {"post": {
      "operationId": "ollamaChat",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OllamaChatRequest"}}}},
      "responses": {
        "200": {"description": "Ollama's chat answer, or its NDJSON stream unless stream is false",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OllamaAnswer"}},
                            "application/x-ndjson": {"schema": {"type": "string"}}}},
        "400": {"$ref": "#/components/responses/OllamaError"}, "401": {"$ref": "#/components/responses/OllamaError"},
        "404": {"$ref": "#/components/responses/OllamaError"}, "413": {"$ref": "#/components/responses/Error"},
        "503": {"$ref": "#/components/responses/OllamaError"}}}},
    "/api/generate": {"post": {
      "operationId": "ollamaGenerate",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OllamaGenerateRequest"}}}},
      "responses": {
        "200": {"description": "Ollama's generate answer, or its NDJSON stream unless stream is false",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OllamaAnswer"}},
                            "application/x-ndjson": {"schema": {"type": "string"}}}},
        "400": {"$ref": "#/components/responses/OllamaError"}, "401": {"$ref": "#/components/responses/OllamaError"},
        "404": {"$ref": "#/components/responses/OllamaError"}, "413": {"$ref": "#/components/responses/Error"},
        "503": {"$ref": "#/components/responses/OllamaError"}}}},
    "/api/show": {"post": {
      "operationId": "ollamaShow",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["model"],
        "properties": {"model": {"$ref": "#/components/schemas/OllamaModel"}, "verbose": {"type": "boolean", "nullable": true}}}}}},
      "responses": {
        "200": {"description": "the served model", "content": {"application/json": {"schema": {"type": "object",
          "required": ["template", "details", "model_info", "capabilities"],
          "properties": {"template": {"type": "string"}, "details": {"$ref": "#/components/schemas/OllamaDetails"},
                         "model_info": {"type": "object"}, "capabilities": {"type": "array", "items": {"type": "string"}}}}}}},
        "400": {"$ref": "#/components/responses/OllamaError"}, "401": {"$ref": "#/components/responses/OllamaError"},
        "404": {"$ref": "#/components/responses/OllamaError"}, "413": {"$ref": "#/components/responses/Error"}}}},
    "/api/tags": {"get": {"operationId": "ollamaTags", "responses": {
        "200": {"description": "the served model", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OllamaModels"}}}},
        "401": {"$ref": "#/components/responses/OllamaError"}}}},
    "/api/ps": {"get": {"operationId": "ollamaPs", "responses": {
        "200": {"description": "the loaded model (the one served)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OllamaModels"}}}},
        "401": {"$ref": "#/components/responses/OllamaError"}}}},
    "/api/version": {"get": {"operationId": "ollamaVersion", "responses": {
        "200": {"description": "the version of Ollama's API these routes follow", "content": {"application/json": {"schema": {"type": "object",
          "required": ["version"], "properties": {"version": {"type": "string"}}}}}},
        "401": {"$ref": "#/components/responses/OllamaError"}}}}
  },
  "responses": {
    "OllamaError": {"description": "an error in Ollama's shape",
                    "content": {"application/json": {"schema": {"type": "object", "required": ["error"],
                      "properties": {"error": {"type": "string"}}}}}}
  },
  "schemas": {
    "OllamaModel": {"type": "string"},
    "OllamaOptions": {"type": "object", "nullable": true, "properties": {
      "temperature": {"type": "number", "minimum": 0, "maximum": 2, "nullable": true},
      "top_k": {"type": "integer", "minimum": -1, "maximum": 1073741824, "nullable": true},
      "top_p": {"type": "number", "exclusiveMinimum": true, "minimum": 0, "maximum": 1, "nullable": true},
      "min_p": {"type": "number", "minimum": 0, "maximum": 1, "nullable": true},
      "seed": {"type": "integer", "nullable": true},
      "num_predict": {"type": "integer", "minimum": -2, "maximum": 8192, "not": {"enum": [0]}, "nullable": true},
      "num_ctx": {"type": "integer", "minimum": 1, "maximum": 1, "nullable": true},
      "stop": {"$ref": "#/components/schemas/Stop"},
      "repeat_penalty": {"type": "number", "minimum": 0.001, "maximum": 100, "nullable": true},
      "repeat_last_n": {"type": "integer", "enum": [-1, 0, null], "nullable": true},
      "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2, "nullable": true},
      "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2, "nullable": true}}},
    "OllamaCommon": {"type": "object", "required": ["model"], "properties": {
      "model": {"$ref": "#/components/schemas/OllamaModel"},
      "options": {"$ref": "#/components/schemas/OllamaOptions"},
      "format": {"nullable": true, "oneOf": [{"type": "string", "enum": ["", "json"]}, {"type": "object"}]},
      "stream": {"type": "boolean", "nullable": true},
      "keep_alive": {"nullable": true, "oneOf": [{"type": "string"}, {"type": "number"}]},
      "think": {"type": "boolean", "enum": [false, null], "nullable": true},
      "logprobs": {"type": "boolean", "nullable": true},
      "top_logprobs": {"type": "integer", "minimum": 0, "maximum": 20, "nullable": true}}},
    "OllamaChatRequest": {"allOf": [{"$ref": "#/components/schemas/OllamaCommon"}, {"type": "object", "properties": {
      "messages": {"type": "array", "nullable": true, "items": {"type": "object", "required": ["role"], "properties": {
        "role": {"type": "string"}, "content": {"type": "string", "nullable": true},
        "images": {"type": "array", "maxItems": 0, "nullable": true},
        "thinking": {"type": "string", "nullable": true},
        "tool_name": {"type": "string", "nullable": true}, "tool_call_id": {"type": "string", "nullable": true},
        "tool_calls": {"type": "array", "nullable": true, "items": {"type": "object", "required": ["function"],
          "properties": {"function": {"type": "object", "required": ["name"],
            "properties": {"name": {"type": "string"}, "arguments": {"type": "object", "nullable": true}}}}}}}}},
      "tools": {"type": "array", "nullable": true, "items": {"type": "object"}}}}]},
    "OllamaGenerateRequest": {"allOf": [{"$ref": "#/components/schemas/OllamaCommon"}, {"type": "object", "properties": {
      "prompt": {"type": "string", "nullable": true},
      "system": {"type": "string", "nullable": true},
      "raw": {"type": "boolean", "nullable": true},
      "suffix": {"type": "string", "maxLength": 0, "nullable": true},
      "template": {"type": "string", "maxLength": 0, "nullable": true},
      "context": {"type": "array", "maxItems": 0, "nullable": true},
      "images": {"type": "array", "maxItems": 0, "nullable": true}}}]},
    "OllamaAnswer": {"type": "object", "required": ["model", "created_at", "done"], "properties": {
      "model": {"type": "string"}, "created_at": {"type": "string"}, "done": {"type": "boolean"},
      "done_reason": {"type": "string", "enum": ["stop", "length", "load"]},
      "response": {"type": "string"},
      "message": {"type": "object", "required": ["role", "content"],
                  "properties": {"role": {"type": "string", "enum": ["assistant"]}, "content": {"type": "string"},
                                 "thinking": {"type": "string"},
                                 "tool_calls": {"type": "array", "items": {"type": "object"}}}},
      "thinking": {"type": "string"},
      "total_duration": {"type": "integer"}, "load_duration": {"type": "integer"},
      "prompt_eval_count": {"type": "integer"}, "prompt_eval_duration": {"type": "integer"},
      "eval_count": {"type": "integer"}, "eval_duration": {"type": "integer"}}},
    "OllamaDetails": {"type": "object", "required": ["format", "family", "parameter_size", "quantization_level"],
      "properties": {"format": {"type": "string"}, "family": {"type": "string"}, "families": {"type": "array", "items": {"type": "string"}},
                     "parameter_size": {"type": "string"}, "quantization_level": {"type": "string"}}},
    "OllamaModels": {"type": "object", "required": ["models"], "properties": {"models": {"type": "array", "items": {
      "type": "object", "required": ["name", "model", "size", "details"],
      "properties": {"name": {"type": "string"}, "model": {"type": "string"}, "size": {"type": "integer"},
                     "details": {"$ref": "#/components/schemas/OllamaDetails"}}}}}}
  }
})json";

}  // namespace

std::string openapi_json(const RequestLimits& limits, const ModelContext& model) {
  using nlohmann::json;
  static const json base = json::parse(kSpec);
  json spec = base;
  json& s = spec["components"]["schemas"];
  s["Sampling"]["properties"]["max_tokens"]["maximum"] = limits.max_tokens;
  s["Sampling"]["properties"]["n"]["maximum"] = limits.max_n;
  s["Stop"]["oneOf"][1]["maxItems"] = limits.max_stop;
  s["ChatRequest"]["allOf"][1]["properties"]["max_completion_tokens"]["maximum"] = limits.max_tokens;
  for (int i : {2, 3}) {
    s["CompletionRequest"]["allOf"][1]["properties"]["prompt"]["oneOf"][i]["maxItems"] = limits.max_prompts;
  }
  s["Sampling"]["properties"]["model"]["enum"] = json::array({model.name});
  if (model.loras != nullptr) {  // the adapters loaded now
    for (const std::string& a : model.loras->names()) {
      s["Sampling"]["properties"]["model"]["enum"].push_back(a);
    }
  }
  // Null is "not given" (OpenAPI 3.0 wants it in the enum of a nullable field).
  s["CountTokensRequest"]["properties"]["model"]["enum"] = json::array({model.name, nullptr});
  s["MessagesRequest"]["allOf"][1]["properties"]["max_tokens"]["maximum"] = limits.max_tokens;
  s["MessagesRequest"]["allOf"][1]["properties"]["stop_sequences"]["maxItems"] = limits.max_stop;
  static const json ollama = json::parse(kOllamaSpec);
  spec["paths"].update(ollama["paths"]);
  spec["components"]["responses"].update(ollama["responses"]);
  s.update(ollama["schemas"]);
  json& o = s["OllamaOptions"]["properties"];
  o["num_predict"]["maximum"] = limits.max_tokens;
  o["num_ctx"]["maximum"] = model.max_model_len;
  // Ollama's names: the id or an alias, bare or with the ":latest" tag.
  json names = json::array();
  for (const std::string& n : model.aliases) names.push_back(n);
  names.push_back(model.name);
  for (size_t i = 0, n = names.size(); i < n; ++i) names.push_back(names[i].get<std::string>() + ":latest");
  s["OllamaModel"]["enum"] = names;
  if (model.reasoning_syntax != ReasoningSyntax::kNone) {
    // A model that thinks: its budget, Messages' thinking enabled, Ollama's think true.
    s["ChatRequest"]["allOf"][1]["properties"]["reasoning_budget"] = {
        {"$ref", "#/components/schemas/ReasoningBudget"}};
    json& thinking = s["MessagesRequest"]["allOf"][1]["properties"]["thinking"];
    thinking["properties"]["type"]["enum"] = json::array({"enabled", "disabled"});
    thinking["properties"]["budget_tokens"] = {{"type", "integer"}, {"minimum", 0}};
    s["OllamaCommon"]["properties"]["think"].erase("enum");
  }
  add_responses_openapi(spec, limits, model);
  add_kv_save_openapi(spec);
  add_lora_openapi(spec);
  static const json embedding = json::parse(kEmbeddingSpec);
  spec["paths"].update(embedding["paths"]);
  s.update(embedding["schemas"]);
  s["EmbeddingRequest"]["properties"]["model"]["enum"] = json::array({model.name, nullptr});
  s["TokenIds"]["maxItems"] = model.embeddings ? model.embeddings->max_tokens() : model.max_model_len;
  s["TokenIds"]["items"]["maximum"] = model.vocab_size - 1;
  spec["paths"]["/detokenize"]["post"]["requestBody"]["content"]["application/json"]["schema"]
      ["properties"]["tokens"]["items"]["maximum"] = model.vocab_size - 1;
  return spec.dump(1);
}

}  // namespace pagoda::server
