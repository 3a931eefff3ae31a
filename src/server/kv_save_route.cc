// POST /v1/kv/save and /v1/kv/restore (issue 36's explicit save and restore): a prompt's full
// KV blocks saved to a named file under serve --kv-save-dir, and put back into the prefix cache
// by name, so that the next request with that prefix computes only the rest. The file format is
// engine/prefix_file.h; the blocks move in and out of the KV memory on the engine thread
// (Engine::export_prefix, import_prefix).
#include <filesystem>
#include <set>

#include "core/error.h"
#include "engine/prefix_file.h"
#include "server/api_error.h"
#include "server/http_server.h"
#include "server/model_set.h"

namespace pagoda::server {
namespace {

using json = nlohmann::json;

// The fields each route takes; any other is refused, not dropped.
const std::set<std::string> kSaveFields = {"name", "model", "prompt", "messages", "tools",
                                           "chat_template_kwargs"};
const std::set<std::string> kRestoreFields = {"name", "model"};

void check_fields(const json& body, const std::set<std::string>& allowed, const char* route) {
  if (!body.is_object()) throw bad_param("", "the request body must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (!allowed.count(key)) {
      throw bad_param(key, str_cat("'", key, "' is not a field of ", route));
    }
  }
}

std::string checked_name(const json& body) {
  const auto it = body.find("name");
  if (it == body.end() || !it->is_string() || !valid_prefix_name(it->get<std::string>())) {
    throw bad_param("name",
                    "'name' must be 1 to 128 characters of letters, digits, '.', '_' and '-', "
                    "not starting with '.'");
  }
  return it->get<std::string>();
}

}  // namespace

std::string HttpServer::kv_save_path(const json& body, const char* route) const {
  if (options_.kv_save_dir.empty()) {
    throw ApiError(400, "invalid_request_error",
                   "this server keeps no saved prefixes: start it with --kv-save-dir DIR", "",
                   "kv_save_disabled");
  }
  if (draining_) throw ApiError(503, "server_error", "the server is shutting down");
  check_fields(body, route == std::string("/v1/kv/save") ? kSaveFields : kRestoreFields, route);
  return options_.kv_save_dir + "/" + checked_name(body) + ".pgkv";
}

// The prompt as a generation route reads it: `prompt` (text or token ids) as /v1/completions
// does, or `messages` (with `tools`, `chat_template_kwargs`) as /v1/chat/completions does.
ApiRequest HttpServer::kv_save_prompt(const json& body, const ModelContext& model,
                                      const std::string& raw_body) const {
  const bool chat = body.contains("messages");
  if (chat == body.contains("prompt")) {
    throw bad_param("prompt", "give one of 'prompt' (text or token ids) and 'messages'");
  }
  json request = body;
  request.erase("name");
  request["max_tokens"] = 1;  // checks the prompt against the context
  if (!chat && (body.contains("tools") || body.contains("chat_template_kwargs"))) {
    throw bad_param("tools", "'tools' and 'chat_template_kwargs' go with 'messages'");
  }
  ApiRequest r = chat ? parse_chat_request(request, model, options_.limits, raw_body)
                      : parse_completion_request(request, model, options_.limits);
  if (r.prompts.size() != 1) throw bad_param("prompt", "'prompt' must be one prompt");
  return r;
}

json HttpServer::kv_save(const HttpRequest& req, const ModelLease& m) {
  const json body = parse_json_body(req.body, options_.limits.max_json_depth);
  const std::string path = kv_save_path(body, "/v1/kv/save");
  const ApiRequest r = kv_save_prompt(body, m->context, req.body);
  EngineThread& engine = *m->engine;
  const std::vector<TokenId>& prompt = r.prompts.at(0);
  const int32_t block_size = engine.block_size();
  if (static_cast<int32_t>(prompt.size()) < block_size) {
    throw bad_param("prompt", str_cat("the prompt has ", prompt.size(),
                                      " tokens, less than one KV block (", block_size,
                                      "): nothing to save"));
  }
  const uint64_t cache_key = r.adapter != 0 ? r.adapter_digest : 0;
  auto export_blocks = [&] {
    PrefixBlocks blocks;
    engine.with_engine([&](Engine& e) { blocks = e.export_prefix(prompt, cache_key); });
    return blocks;
  };
  PrefixBlocks blocks = export_blocks();
  const int32_t num_full = static_cast<int32_t>(prompt.size()) / block_size * block_size;
  int32_t num_computed = 0;
  if (blocks.num_tokens() < num_full) {
    // Not all cached: the engine computes the prompt (one token sampled and dropped), and its
    // full blocks are cached as it goes.
    if (kv_saves_computing_.fetch_add(1) > 0) {
      kv_saves_computing_.fetch_sub(1);
      throw ApiError(503, "server_error",
                     "another /v1/kv/save is computing its prompt; try again when it is done", "",
                     "kv_save_busy");
    }
    struct Done {
      std::atomic<int32_t>& n;
      ~Done() { n.fetch_sub(1); }
    } done{kv_saves_computing_};
    GenerationRequest g;
    g.prompt = prompt;
    g.max_tokens = 1;
    g.adapter = r.adapter;
    g.cache_key = cache_key;
    std::shared_ptr<OutputStream> stream = engine.submit(std::move(g));
    while (std::optional<OutputEvent> e = stream->next()) {
      if (e->finish_reason == FinishReason::kError) {
        throw ApiError(500, "server_error", "computing the prompt failed: " + e->error);
      }
      if (e->finish_reason == FinishReason::kAbort) {
        throw ApiError(503, "server_error", "computing the prompt was aborted");
      }
    }
    num_computed = num_full - blocks.num_tokens();
    blocks = export_blocks();
  }
  if (blocks.num_tokens() == 0) {
    throw ApiError(503, "server_error",
                   "the prompt's blocks were evicted before they could be saved; try again");
  }
  try {
    write_prefix_file(path, m->context.kv_identity, blocks);
  } catch (const Error& e) {
    throw ApiError(500, "server_error", e.what());
  }
  return {{"object", "kv.save"},
          {"name", body["name"]},
          {"num_prompt_tokens", prompt.size()},
          {"num_tokens", blocks.num_tokens()},
          {"num_computed_tokens", num_computed},
          {"bytes", std::filesystem::file_size(path)}};
}

json HttpServer::kv_restore(const HttpRequest& req, const ModelLease& m) {
  const json body = parse_json_body(req.body, options_.limits.max_json_depth);
  const std::string path = kv_save_path(body, "/v1/kv/restore");
  EngineThread& engine = *m->engine;
  if (const auto name = body.find("model"); name != body.end()) {
    if (!name->is_string() || !m->context.answers_to(name->get<std::string>())) {
      throw ApiError(404, "invalid_request_error",
                     "The model '" + (name->is_string() ? name->get<std::string>() : name->dump()) +
                         "' does not exist",
                     "model", "model_not_found");
    }
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw ApiError(404, "invalid_request_error",
                   "no saved prefix named '" + body["name"].get<std::string>() + "'", "name",
                   "kv_save_not_found");
  }
  const int32_t block_size = engine.block_size();
  PrefixBlocks blocks;
  int32_t num_restored = 0;
  try {
    blocks = read_prefix_file(path, m->context.kv_identity, block_size, engine.kv_block_bytes());
  } catch (const Error& e) {
    // "PATH: why": the client named the file, the folder is the server's own business.
    const std::string why = std::string(e.what()).substr(path.size() + 2);
    throw ApiError(409, "invalid_request_error",
                   "saved prefix '" + body["name"].get<std::string>() + "': " + why, "name",
                   "kv_save_unusable");
  }
  engine.with_engine([&](Engine& e) { num_restored = e.import_prefix(blocks); });
  return {{"object", "kv.restore"},
          {"name", body["name"]},
          {"num_tokens", blocks.num_tokens()},
          {"num_restored_tokens", num_restored},
          {"bytes", std::filesystem::file_size(path, ec)}};
}

}  // namespace pagoda::server
