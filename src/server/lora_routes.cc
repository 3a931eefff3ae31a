// POST /v1/load_lora_adapter and /v1/unload_lora_adapter, vLLM's routes for LoRA adapters at
// run time (open only under serve --allow-lora-loading: a request names a file on the server's
// disk), and the adapters' gauges in /metrics. The adapters themselves: server/lora_set.h.
#include <set>

#include "core/error.h"
#include "server/api_error.h"
#include "server/http_server.h"
#include "server/model_set.h"
#include "server/openapi.h"
#include "server/request_fields.h"

namespace pagoda::server {
namespace {

using json = nlohmann::json;

constexpr const char* kLoraSpec = R"json({
  "/v1/load_lora_adapter": {"post": {"operationId": "loadLoraAdapter",
    "description": "Loads a LoRA adapter of the served model from a file or PEFT folder on the server (serve --allow-lora-loading); requests then name it as their model.",
    "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object",
      "required": ["lora_name", "lora_path"], "additionalProperties": false,
      "properties": {"lora_name": {"type": "string", "minLength": 1},
                     "lora_path": {"type": "string", "minLength": 1},
                     "load_inplace": {"type": "boolean"}}}}}},
    "responses": {
      "200": {"description": "loaded", "content": {"text/plain": {"schema": {"type": "string"}}}},
      "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
      "403": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"},
      "413": {"$ref": "#/components/responses/Error"}, "503": {"$ref": "#/components/responses/Error"}}}},
  "/v1/unload_lora_adapter": {"post": {"operationId": "unloadLoraAdapter",
    "description": "Unloads a LoRA adapter: its name is gone at once, its memory once its requests end.",
    "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object",
      "required": ["lora_name"], "additionalProperties": false,
      "properties": {"lora_name": {"type": "string", "minLength": 1}}}}}},
    "responses": {
      "200": {"description": "unloaded", "content": {"text/plain": {"schema": {"type": "string"}}}},
      "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
      "403": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"},
      "413": {"$ref": "#/components/responses/Error"}}}}
})json";

const std::set<std::string> kLoadFields = {"lora_name", "lora_path", "load_inplace"};
const std::set<std::string> kUnloadFields = {"lora_name"};

std::string string_field(const json& body, const char* name) {
  const json* v = field(body, name);
  if (v == nullptr) throw bad_param(name, str_cat("'", name, "' is required"));
  if (!v->is_string() || v->get_ref<const std::string&>().empty()) {
    throw bad_param(name, str_cat("'", name, "' must be a non-empty string"));
  }
  return v->get<std::string>();
}

json checked_body(const HttpRequest& req, int32_t max_depth, const std::set<std::string>& allowed) {
  json body = parse_json_body(req.body, max_depth);
  if (!body.is_object()) throw bad_param("", "the request body must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (allowed.count(key) == 0) {
      throw bad_param(key, str_cat("'", key, "' is not a field of ", req.path,
                                   key == "lora_int_id" ? " (adapters are unloaded by lora_name)"
                                                        : ""));
    }
  }
  return body;
}

}  // namespace

HttpResponse HttpServer::lora_route(const HttpRequest& req) {
  if (!models_->single()) {
    throw ApiError(400, "invalid_request_error",
                   "LoRA adapters are served by a server of one model (serve -m PATH)", "",
                   "adapters_unavailable");
  }
  const ModelLease m = models_->try_acquire(0, std::nullopt);
  const std::shared_ptr<LoraSet>& loras = m->context.loras;
  if (loras == nullptr || !loras->runtime_loading()) {
    throw ApiError(403, "invalid_request_error",
                   "loading and unloading LoRA adapters at run time is off: start the server "
                   "with --allow-lora-loading (and --api-key where others can reach it)", "",
                   "lora_loading_disabled");
  }
  const bool load = req.path == "/v1/load_lora_adapter";
  const json body = checked_body(req, options_.limits.max_json_depth,
                                 load ? kLoadFields : kUnloadFields);
  const std::string name = string_field(body, "lora_name");
  if (!load) {
    loras->unload(name);
    metrics_.forget_adapter(name);
    return {200, "text/plain; charset=utf-8",
            "Success: LoRA adapter '" + name + "' removed successfully.", {}};
  }
  const std::string path = string_field(body, "lora_path");
  bool replace = false;
  if (const json* v = field(body, "load_inplace")) {
    if (!v->is_boolean()) throw bad_param("load_inplace", "'load_inplace' must be a boolean");
    replace = v->get<bool>();
  }
  if (m->context.answers_to(name)) {
    throw bad_param("lora_name", "'" + name + "' is the base model's name");
  }
  loras->load(name, path, replace);
  metrics_.forget_adapter(name);  // a replaced adapter's counts are not the new one's
  return {200, "text/plain; charset=utf-8",
          "Success: LoRA adapter '" + name + "' added successfully.", {}};
}

void add_lora_openapi(nlohmann::json& spec) {
  static const json paths = json::parse(kLoraSpec);
  spec["paths"].update(paths);
}

std::string HttpServer::lora_metrics(const LoraSet& loras) const {
  std::string text =
      "# HELP pagoda_lora_adapters_loaded LoRA adapters loaded.\n"
      "# TYPE pagoda_lora_adapters_loaded gauge\n";
  const std::vector<LoraSet::Listed> listed = loras.list();
  text += "pagoda_lora_adapters_loaded " + std::to_string(listed.size()) + "\n";
  text += "# HELP pagoda_lora_adapters_max LoRA adapters that may be loaded at once (--max-loras).\n"
          "# TYPE pagoda_lora_adapters_max gauge\n";
  text += "pagoda_lora_adapters_max " + std::to_string(loras.max_loras()) + "\n";
  text += "# HELP pagoda_lora_requests_running Requests of each LoRA adapter in flight.\n"
          "# TYPE pagoda_lora_requests_running gauge\n";
  for (const LoraSet::Listed& a : listed) {
    text += "pagoda_lora_requests_running{" + label("adapter", a.adapter.name) + "} " +
            std::to_string(a.requests) + "\n";
  }
  return text;
}

}  // namespace pagoda::server
