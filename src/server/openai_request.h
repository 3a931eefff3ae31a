// Parsing and checking OpenAI API requests (/v1/completions, /v1/chat/completions) into what
// the engine runs. Every problem is an ApiError naming the parameter; nothing is silently
// truncated or ignored (unknown parameters are accepted, as OpenAI's API accepts them).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/beam_search.h"
#include "engine/reasoning.h"
#include "engine/thinking_budget.h"
#include "engine/sampler.h"
#include "grammar/grammar_compiler.h"
#include "grammar/token_mask.h"
#include "server/lora_set.h"
#include "server/template_options.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::server {

// What Ollama's /api/tags, /api/show and /api/ps tell of the served model (request parsing
// does not read it).
struct ModelDescription {
  std::string architecture;   // "llama", "qwen2", ...
  std::string format;         // "gguf", "safetensors"
  std::string quantization;   // the tensor type holding most of the weights' bytes: "Q4_K"
  std::string chat_template;  // the template's source; empty when none
  std::string modified_at;    // the model file's time, RFC 3339
  uint64_t size_bytes = 0;    // the weights
  uint64_t size_vram = 0;     // of those, in accelerator memory
  uint64_t num_parameters = 0;
  uint32_t trained_context = 0;
};

// The served model, as request parsing needs it.
class EmbeddingService;

struct ModelContext {
  std::string name;  // the id /v1/models lists and responses carry
  // Other names requests may use for it: the file's name and its stem.
  std::vector<std::string> aliases;
  // True when a request's `model` names this model: its id or one of its aliases.
  bool answers_to(std::string_view id) const;
  // Its LoRA adapters (server/lora_set.h), each a model id of its own; null: none.
  std::shared_ptr<LoraSet> loras;
  // The adapter a request's `model` names, held; null (the base model or an unknown name).
  AdapterHold adapter_named(std::string_view id) const;
  const Tokenizer* tokenizer = nullptr;
  // Renders a chat (messages JSON array, add_generation_prompt, extra template variables such
  // as "tools") into prompt text; throws pagoda::Error when the template fails. Empty: the
  // model has no chat template.
  // Objects keep the request's key order (as Python dicts do for Hugging Face's renderer), which
  // shows when a template prints them with tojson or iterates over them.
  std::function<std::string(const nlohmann::ordered_json&, bool, const nlohmann::ordered_json&)>
      render_chat;
  int32_t max_model_len = 0;  // prompt + output tokens at most
  // serve --kv-save-dir: the model file and K/V format its saved prefixes belong to.
  std::string kv_identity;
  int32_t vocab_size = 0;
  // Control-token text in message contents (and tools) becomes control tokens, as it did before
  // pagoda kept it as text (--allow-special-in-content).
  bool allow_special_in_content = false;
  // Structured output: compiles grammars into masks over this model's vocabulary, on threads
  // of its own and under its limits (the server runs ApiRequest::grammar_source with it).
  // nullptr: structured output is not available.
  std::shared_ptr<GrammarCompiler> grammars;
  // Function calling: where the chat template writes tool calls, and whether it describes the
  // tools itself (otherwise pagoda adds a system message that does).
  ToolFormat tool_format = ToolFormat::kJson;
  bool template_renders_tools = false;
  // What the chat template reads (the developer role, reasoning_effort).
  TemplateTraits template_traits;
  // Reasoning: the thinking syntax of the template; whether chat answers split the thinking
  // out (serve --reasoning-format auto) or leave it in the content (none); the thinking budget
  // of a request that gives none (serve --reasoning-budget; -1: none).
  ReasoningSyntax reasoning_syntax = ReasoningSyntax::kNone;
  bool split_reasoning = true;
  int32_t reasoning_budget = -1;
  ModelDescription description;
  // Embeddings (server/embeddings.h): null when the model does not embed; `generates` is false
  // for an embedding-only model (BERT), whose generation routes are refused.
  std::shared_ptr<EmbeddingService> embeddings;
  bool generates = true;
};

// Limits a server operator sets (pagoda serve options).
struct RequestLimits {
  int32_t max_n = 16;
  int32_t max_tokens = 8192;  // a request's max_tokens at most
  int32_t max_prompts = 64;   // prompts in one /v1/completions request
  int32_t max_stop = 16;      // stop strings
  int32_t max_json_depth = 64;  // nesting of arrays and objects in a request body
};

// kMessages: Anthropic's Messages API, parsed as a chat (anthropic_messages.h). kOllamaChat,
// kOllamaGenerate: Ollama's /api/chat and /api/generate, parsed as a chat or, for a raw
// generate, a completion (ollama_api.h).
// kResponses: OpenAI's Responses API, parsed as a chat (responses_api.h).
enum class Endpoint { kCompletions, kChat, kMessages, kOllamaChat, kOllamaGenerate, kResponses };

struct ResponsesInput;

struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  // `model` names a LoRA adapter of the model: its index and digest (ServedAdapter); 0: none.
  int32_t adapter = 0;
  uint64_t adapter_digest = 0;
  AdapterHold adapter_hold;  // keeps the adapter's slot while the request lives
  std::vector<std::vector<TokenId>> prompts;  // completions: one or more; chat: exactly one
  std::vector<std::string> prompt_texts;      // [prompts.size()] for echo
  SamplingParams sampling;
  // Output tokens per choice (resolved; a stop token counts). 0: completions with echo, the
  // prompt alone (its log-probabilities), nothing generated.
  int32_t max_tokens = 16;
  int32_t n = 1;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: the prompt text is put before each choice's text
  bool logprobs = false;
  int top_logprobs = 0;
  bool ignore_eos = false;  // extension (vLLM, llama.cpp): do not stop at end-of-generation ids
  // Extension: speculative proposals per step for this request (0: off); -1: the server's.
  int32_t num_speculative_tokens = -1;
  // Structured output (response_format, tool_choice required, or the extensions grammar /
  // regex): what makes the GBNF text the output must match, and the parameter it came from.
  // Parsing only records it; the server compiles it off the request threads (see
  // GrammarCompiler) into `grammar`. Empty: anything.
  GrammarCompiler::Source grammar_source;
  std::string grammar_param;
  std::shared_ptr<GrammarMasks> grammar;
  // Extension (vLLM): use_beam_search with best_of beams, length_penalty, early_stopping.
  BeamParams beam;
  // Chat function calling: the tools output is parsed for (empty: none, or tool_choice none).
  std::vector<ToolSpec> tools;
  ToolFormat tool_format = ToolFormat::kJson;
  // kResponses: the conversation and the request fields its Response repeats.
  std::shared_ptr<const ResponsesInput> responses;
  // Chat: the syntax the output's thinking is split out by (kNone: all of it is content), and
  // whether the rendered prompt opened the thinking. `thinking`: the engine's budget.
  ReasoningSyntax reasoning = ReasoningSyntax::kNone;
  bool thinking_in_prompt = false;
  ThinkingBudget thinking;
};

// The prompt of a chat: `messages` rendered by model.render_chat with a generation prompt, then
// tokenized with control tokens recognised where the template wrote them but not in the text of
// the messages (unless allow_special_in_content). `text` gets the rendered text. Throws
// pagoda::Error when the template fails.
std::vector<TokenId> render_chat_prompt(const ModelContext& model,
                                        const nlohmann::ordered_json& messages,
                                        const nlohmann::ordered_json& extra,
                                        std::string* text = nullptr);

// The id a served model gets: --model-name when set, else the file's general.name, else its
// stem ("smollm2-135m-instruct-q4_1" for smollm2-135m-instruct-q4_1.gguf). The aliases are
// the file's name and its stem, when they differ from the id.
ModelContext named_model(const std::string& path, const std::string& general_name,
                         const std::string& model_name_option);

// The request body as JSON; 400 when it is not valid JSON or nests arrays and objects deeper
// than `max_depth` (checked on the text before anything is built).
nlohmann::json parse_json_body(const std::string& text, int32_t max_depth);

// How deeply arrays and objects nest in JSON text (strings skipped); stops counting past
// `limit` and returns limit + 1.
int32_t json_nesting_depth(std::string_view text, int32_t limit);

// `raw_body`: the request body text, read again in key order where order matters (the
// messages, tools, a JSON schema's properties).
ApiRequest parse_completion_request(const nlohmann::json& body, const ModelContext& model,
                                    const RequestLimits& limits, const std::string& raw_body = "");
// `raw_body`: the request body text, read again in key order for the messages and tools.
ApiRequest parse_chat_request(const nlohmann::json& body, const ModelContext& model,
                              const RequestLimits& limits, const std::string& raw_body = "");

// The text of a chat message's content: a string, or an array of {"type": "text", "text"}
// parts joined; null gives "". Other part types are an error naming `param`.
std::string message_text(const nlohmann::json& content, const std::string& param);

}  // namespace pagoda::server
