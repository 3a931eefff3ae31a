// Ollama's API (/api/chat, /api/generate, /api/tags, /api/show, /api/ps, /api/version) as a
// front door onto the chat completions and completions path: a request is checked with
// Ollama's field names (every option honoured or refused by name), translated into an OpenAI
// body and parsed by parse_chat_request or parse_completion_request (same template, tools,
// grammar, sampling and limits); the answer is written as one JSON object or as Ollama's
// newline-delimited JSON stream. Errors are {"error": "..."}.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/generation.h"
#include "server/responses.h"
#include "server/openai_request.h"
#include "server/tool_calls.h"

namespace pagoda::server {

// Ollama's keep_alive in seconds: a number of seconds or a Go duration ("5m", "1h30m", "-1");
// negative keeps the model loaded. 400 naming keep_alive otherwise.
double ollama_keep_alive_seconds(const nlohmann::json& v);

class ModelSet;
// /api/tags and /api/ps of a server of several models (model_routes.cc).
nlohmann::ordered_json ollama_tags(const ModelSet& models);
nlohmann::ordered_json ollama_ps(const ModelSet& models);

// True for /api/ and the paths below it: their errors take Ollama's shape.
bool is_ollama_path(const std::string& path);

// {"error": message}.
nlohmann::json ollama_error_json(const ApiError& e);

// The model a request names, as Ollama matches it: the served id or an alias, bare or with the
// ":latest" tag, or with `adapters` a LoRA adapter's name (returned untagged). 404 "model 'x'
// not found" otherwise; 400 when it is missing or not a string.
std::string ollama_model_name(const nlohmann::json& body, const ModelContext& model,
                              bool adapters = false);

// An /api/chat or /api/generate body that only asks for the model to be loaded (no messages,
// no prompt): Ollama answers it at once with done_reason "load".
bool is_ollama_load_request(const nlohmann::json& body, bool generate);
// Checks such a request's fields as a generation's would be checked; returns its model name.
std::string check_ollama_load_request(const nlohmann::json& body, const ModelContext& model,
                                      const RequestLimits& limits, bool generate);

// The OpenAI body an /api/chat (`generate` false) or /api/generate request means; throws
// ApiError naming Ollama's field. `*raw` is set for a raw generate (a completions body).
nlohmann::ordered_json ollama_to_openai(const nlohmann::json& body,
                                        const nlohmann::ordered_json& ordered,
                                        const ModelContext& model, bool generate, bool* raw);

// An /api/chat or /api/generate request parsed onto the chat (or, raw, the completions) path;
// endpoint kOllamaChat or kOllamaGenerate, `model` the name the client gave.
ApiRequest parse_ollama_request(const std::string& raw_body, const ModelContext& model,
                                const RequestLimits& limits, bool generate);

// Writes one generation as Ollama's answer: the NDJSON stream of chunks ending with a done
// chunk that carries the counts and durations, or the one object of stream: false.
class OllamaWriter {
 public:
  OllamaWriter(const ApiRequest& request, const Tokenizer& tokenizer);

  // The lines for one delta of the (only) choice; at its end, the tool calls too.
  std::string delta(const ChoiceDelta& d);
  // The last line: done, done_reason, counts and durations.
  std::string finish(const Generation& g);
  // The whole answer of a finished generation.
  nlohmann::ordered_json response(const Generation& g) const;
  // An error line, for a stream whose status line has gone out.
  static std::string error_line(const ApiError& e);

 private:
  bool chat() const;
  nlohmann::ordered_json chunk(const std::string& text, const std::string& thinking = "") const;
  void add_stats(nlohmann::ordered_json& out, const Generation& g) const;

  const ApiRequest& request_;
  const Tokenizer& tokenizer_;
  std::vector<ToolCallStream> tool_stream_;  // one when the request has tools
};

// The GET and POST routes that describe the served model (the caller checks the method):
// /api/tags, /api/ps, /api/version, /api/show; and the model management routes, which are
// refused (501). Returns false for any other path (/api/embed is server/embeddings.h's).
bool ollama_info_route(const std::string& path, const std::string& body,
                       const ModelContext& model, const RequestLimits& limits,
                       nlohmann::ordered_json& out);

}  // namespace pagoda::server
