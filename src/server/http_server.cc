// Routes, authentication, the access log and the lifecycle of pagoda serve (see http_server.h).
// The generation routes live in generation_route.cc.
#include "server/http_server.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <set>
#include <thread>

#include "core/error.h"
#include "server/anthropic_messages.h"
#include "server/api_error.h"
#include "server/embeddings.h"
#include "server/generation_task.h"
#include "server/request_fields.h"
#include "server/ollama_api.h"
#include "server/openapi.h"
#include "server/responses.h"
#include "server/responses_api.h"
#include "server/utc_time.h"
#include "server/web_page.h"

namespace pagoda::server {
namespace {

using nlohmann::json;

HttpResponse json_response(int status, const json& body) {
  return {status, "application/json", dump(body), {}};
}

HttpResponse error_response(const ApiError& e) {
  HttpResponse r = json_response(e.status(), e.to_json());
  if (e.retry_after_s() > 0) r.headers.emplace_back("Retry-After", std::to_string(e.retry_after_s()));
  return r;
}

// An error in the shape of the API the path belongs to.
HttpResponse error_response(const std::string& path, const ApiError& e) {
  if (!is_messages_path(path) && !is_ollama_path(path)) return error_response(e);
  HttpResponse r = json_response(
      e.status(), is_messages_path(path) ? anthropic_error_json(e) : ollama_error_json(e));
  if (e.retry_after_s() > 0) r.headers.emplace_back("Retry-After", std::to_string(e.retry_after_s()));
  return r;
}

// Routes whose answers are cheap enough to make on the connection's own thread.
bool is_light(const std::string& method) { return method == "GET" || method == "HEAD"; }

// Monitoring polls are logged only when they fail, so a dashboard does not flood the log.
bool is_poll(const AccessRecord& r) {
  return r.method == "GET" && r.status < 400 &&
         (r.path == "/health" || r.path == "/metrics" || r.path == "/stats");
}

// /stats' host-memory tier figures (--kv-offload-gb); null without one.
json kv_host_json(const EngineStats& s) {
  const HostTierStats& h = s.kv_host;
  if (!h.enabled) return nullptr;
  return {{"hit_tokens", s.scheduler.kv.num_host_tier_hit_tokens},
          {"hit_blocks", h.hit_blocks},
          {"blocks", h.blocks},
          {"bytes", h.bytes},
          {"max_bytes", h.max_bytes},
          {"stored_blocks", h.stored_blocks},
          {"evicted_blocks", h.evicted_blocks},
          {"handed_down_blocks", h.handed_down_blocks}};
}

// /stats' disk tier figures (--kv-disk); null without one.
json kv_disk_json(const EngineStats& s) {
  const KvDiskStats& d = s.kv_disk;
  if (!d.enabled) return nullptr;
  const int64_t hit_tokens =
      s.scheduler.kv.num_lower_tier_hit_tokens - s.scheduler.kv.num_host_tier_hit_tokens;
  return {{"hit_tokens", hit_tokens},
          {"hit_blocks", d.hit_blocks},
          {"blocks", d.records},
          {"bytes", d.bytes},
          {"max_bytes", d.max_bytes},
          {"written_blocks", d.written_blocks},
          {"bytes_written", d.bytes_written},
          {"bytes_read", d.bytes_read},
          {"dropped_writes", d.dropped_writes},
          {"write_failures", d.write_failures},
          {"corrupt_records", d.corrupt_records},
          {"evicted_blocks", d.evicted_blocks},
          {"loads", d.num_loads},
          {"loads_in_flight", s.scheduler.kv.num_lower_tier_loads},
          {"load_seconds", d.load_seconds},
          {"max_load_seconds", d.max_load_seconds}};
}

// /stats' loads from the tiers under the pool (request start to landing); null without a tier.
json kv_loads_json(const EngineStats& s) {
  if (!s.kv_host.enabled && !s.kv_disk.enabled) return nullptr;
  const TierLoadStats& l = s.kv_loads;
  return {{"loads", l.loads},
          {"blocks", l.blocks},
          {"seconds", l.seconds},
          {"last_seconds", l.last_seconds},
          {"max_seconds", l.max_seconds}};
}


}  // namespace

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

std::string escape_log_field(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f || c == '\\') {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

HttpServer::HttpServer(ServerOptions options, std::shared_ptr<ModelSet> models)
    : options_(std::move(options)),
      origins_(options_.host, options_.origins),
      models_(std::move(models)),
      responses_(options_.responses_max_count, options_.responses_max_bytes),
      started_(std::chrono::steady_clock::now()) {
  transport_ = std::make_unique<HttpTransport>(
      options_.http,
      [this](HttpRequest req, std::shared_ptr<Exchange> ex) {
        handle(std::move(req), std::move(ex));
      },
      options_.io_threads, options_.work_threads);
  transport_->set_access_log([this](const AccessRecord& r) { log_access(r); });
  // A request that waited for its model to load goes on on a work thread.
  models_->set_post([this](std::function<void()> f) { transport_->post_work(std::move(f)); });
}

HttpServer::~HttpServer() {
  models_->stop();
  stop_grammars();  // before the transport their jobs answer through
  models_->set_post(nullptr);
  transport_.reset();
}

void HttpServer::stop_grammars() {
  for (const auto& m : models_->loaded()) {
    if (m->context.grammars) m->context.grammars->stop();
  }
}

bool HttpServer::needs_key(const std::string& path) const {
  if (path == "/metrics" || path == "/stats" || path == "/openapi.json")
    return !options_.public_metrics;
  return path.rfind("/v1/", 0) == 0 || is_ollama_path(path) || path == "/tokenize" ||
         path == "/detokenize";
}

bool HttpServer::authorized(const HttpRequest& req) const {
  if (options_.api_key.empty()) return true;
  // Anthropic's clients send the key as x-api-key.
  if (const std::string key = req.header("x-api-key"); !key.empty()) {
    return constant_time_equal(key, options_.api_key);
  }
  const std::string header = req.header("Authorization");
  const std::string prefix = "Bearer ";
  if (header.rfind(prefix, 0) != 0) return false;
  return constant_time_equal(header.substr(prefix.size()), options_.api_key);
}

// The engine figures of one model for /stats.
json engine_stats_json(const EngineStats& s) {
  return {{"running", s.scheduler.num_running},
          {"waiting", s.scheduler.num_waiting},
          {"kv_blocks_total", s.scheduler.kv.num_blocks},
          {"kv_blocks_used", s.scheduler.kv.num_used_blocks},
          {"kv_utilization", s.scheduler.kv.utilization()},
          {"prefix_cache_hit_rate", s.scheduler.kv.prefix_hit_rate()},
          {"prefix_cache_hit_tokens", s.scheduler.kv.num_hit_tokens},
          {"prefix_cache_pool_hit_tokens",
           s.scheduler.kv.num_hit_tokens - s.scheduler.kv.num_lower_tier_hit_tokens},
          {"preemptions", s.scheduler.num_preemptions},
          {"generated_tokens", s.num_generated_tokens},
          {"computed_tokens", s.num_computed_tokens},
          {"finished_requests", s.num_finished_requests},
          {"spec_proposed_tokens", s.speculative.num_proposed},
          {"spec_accepted_tokens", s.speculative.num_accepted},
          {"spec_acceptance_rate", s.speculative.acceptance_rate()},
          {"spec_mean_accepted_length", s.speculative.mean_accepted_length()},
          {"kv_disk", kv_disk_json(s)},
          {"kv_host", kv_host_json(s)},
          {"kv_loads", kv_loads_json(s)},
          {"recomputed_tokens", s.scheduler.num_recomputed_tokens}};
}

json HttpServer::stats_json() const {
  const double uptime =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  json out = json::object();
  const auto loaded = models_->loaded();
  if (models_->single()) {
    out = engine_stats_json(loaded.at(0)->engine->stats());
  } else {
    json per_model = json::object();
    for (const ModelStatus& st : models_->status()) {
      json m = st.model ? engine_stats_json(st.model->engine->stats()) : json::object();
      m["state"] = state_name(st.state);
      per_model[st.spec->id] = m;
    }
    out["models"] = per_model;
  }
  out["in_flight"] = in_flight_.load();
  out["connections"] = transport_->num_connections();
  out["uptime_s"] = uptime;
  return out;
}

void HttpServer::log_access(const AccessRecord& r) {
  // Known routes only, so random paths cannot grow the metric's label set without bound.
  static const std::set<std::string> routes = {
      "/v1/completions", "/v1/chat/completions", "/v1/models",   "/health",
      "/metrics",        "/stats",               "/tokenize",    "/detokenize",
      "/",               "/openapi.json",        "/v1/messages", "/v1/messages/count_tokens",
      "/api/chat",       "/api/generate",        "/api/tags",    "/api/show",
      "/api/ps",         "/api/version",         "/api/embed",   "/v1/responses",
      "/api/embeddings", "/v1/embeddings", "/v1/kv/save", "/v1/kv/restore",
      "/v1/load_lora_adapter", "/v1/unload_lora_adapter"};
  metrics_.count_request(routes.count(r.path) ? r.path : "other", r.status);
  if (options_.log_format == LogFormat::kNone || is_poll(r)) return;
  json note = r.note.empty() ? json::object() : json::parse(r.note, nullptr, false);
  if (!note.is_object()) note = json::object();
  std::string line;
  if (options_.log_format == LogFormat::kJson) {
    json j = {{"time", utc_time_now(3)}, {"client", r.client}, {"method", r.method},
              {"path", r.path},    {"status", r.status}, {"duration_s", r.duration_s}};
    j.update(note);
    line = dump(j) + "\n";
  } else {
    char duration[32];
    std::snprintf(duration, sizeof duration, "%.3fs", r.duration_s);
    line = utc_time_now(3) + " " + r.client + " " + (r.method.empty() ? "-" : r.method) + " " +
           (r.path.empty() ? "-" : escape_log_field(r.path)) + " " + std::to_string(r.status) +
           " " + duration;
    for (const auto& [k, v] : note.items()) {
      line += ' ';
      line += escape_log_field(k);
      line += '=';
      line += escape_log_field(v.is_string() ? v.get<std::string>() : v.dump());
    }
    line += "\n";
  }
  std::lock_guard lock(log_mutex_);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

void HttpServer::handle(HttpRequest req, std::shared_ptr<Exchange> ex) {
  try {
    origins_.check(req);
  } catch (const ApiError& e) {
    return ex->respond(error_response(e));
  }
  if (const std::string origin = origins_.cors_origin(req); !origin.empty()) {
    if (req.method == "OPTIONS") return ex->respond(origins_.preflight(req, origin));
    ex = with_cors(std::move(ex), origin);
  }
  if (needs_key(req.path) && !authorized(req)) {
    ex->respond(error_response(req.path, ApiError(401, "invalid_request_error",
                                                  "Incorrect or missing API key", "",
                                                  "invalid_api_key")));
    return;
  }
  // A browser (it sends Origin) can post text/plain to any site without asking first; only
  // JSON is read from it, which it cannot send across sites without a preflight.
  if (req.method == "POST" && !req.header("Origin").empty() &&
      !is_json_content_type(req.header("Content-Type"))) {
    ex->respond(error_response(
        req.path, ApiError(415, "invalid_request_error",
                 "a request from a web page must have Content-Type: application/json", "",
                 "unsupported_media_type")));
    return;
  }
  auto answer = [this](const HttpRequest& r, const std::shared_ptr<Exchange>& e) {
    try {
      route(r, e);
    } catch (const ApiError& err) {
      e->respond(error_response(r.path, err));
    } catch (const std::exception& err) {
      e->respond(error_response(r.path, ApiError(500, "server_error", err.what())));
    }
  };
  if (is_light(req.method)) {
    answer(req, ex);
  } else {
    transport_->post_work([answer, req = std::move(req), ex = std::move(ex)] { answer(req, ex); });
  }
}

// A LoRA adapter in /v1/models, as vLLM lists one: its base model is its parent.
json HttpServer::adapter_info(const ServedModel& m, const ServedAdapter& a) const {
  json info = m.info;
  info["id"] = a.name;
  info["parent"] = m.context.name;
  info["root"] = a.path;
  return info;
}

void HttpServer::model_route(const HttpRequest& req, const std::shared_ptr<Exchange>& ex,
                             const ModelLease& m) {
  const std::string& p = req.path;
  const ModelContext& model = m->context;
  static const std::set<std::string> generation = {"/v1/completions", "/v1/chat/completions",
                                                   "/v1/messages", "/v1/responses", "/api/chat",
                                                   "/api/generate"};
  if (!model.generates && generation.count(p)) {
    throw ApiError(400, "invalid_request_error",
                   "the model '" + model.name + "' is an embedding model: it answers "
                   "/v1/embeddings and /api/embed, not " + p, "model", "model_not_generative");
  }
  if (p == "/v1/completions") return start_generation(req, ex, Endpoint::kCompletions, m);
  if (p == "/v1/chat/completions") return start_generation(req, ex, Endpoint::kChat, m);
  if (p == "/v1/messages") return start_generation(req, ex, Endpoint::kMessages, m);
  if (p == "/v1/responses") return start_generation(req, ex, Endpoint::kResponses, m);
  if (p == "/v1/messages/count_tokens") {
    const ApiRequest r = parse_messages_request(req.body, model, options_.limits, true);
    return ex->respond(json_response(200, {{"input_tokens", r.prompts.at(0).size()}}));
  }
  if (p == "/api/chat" || p == "/api/generate") return ollama_generation(req, ex, m);
  if (p == "/v1/embeddings") return ex->respond(openai_embeddings(req.body, model, options_.limits));
  if (p == "/api/embed" || p == "/api/embeddings") {
    return ex->respond(ollama_embed(p, req.body, model, options_.limits));
  }
  if (p == "/tokenize") return ex->respond(tokenize(req, model));
  if (p == "/detokenize") return ex->respond(detokenize(req, model));
  if (p == "/v1/kv/save") return ex->respond(json_response(200, kv_save(req, m)));
  if (p == "/v1/kv/restore") return ex->respond(json_response(200, kv_restore(req, m)));
  if (p == "/api/show") {
    nlohmann::ordered_json out;
    ollama_info_route(p, req.body, model, options_.limits, out);
    return ex->respond({200, "application/json", dump(out), {}});
  }
}

void HttpServer::with_model(const HttpRequest& req, const std::shared_ptr<Exchange>& ex) {
  if (models_->single()) return model_route(req, ex, models_->try_acquire(0, std::nullopt));
  // Several models: the body names one (its first model when it names none, except on
  // Ollama's routes, where the name is required).
  const json body = parse_json_body(req.body, options_.limits.max_json_depth);
  const bool ollama = is_ollama_path(req.path);
  const json* v = body.is_object() ? field(body, "model") : nullptr;
  if (v == nullptr && req.path == "/api/show" && body.is_object()) v = field(body, "name");
  if (v != nullptr && !v->is_string()) throw bad_param("model", "'model' must be a string");
  if (v == nullptr && ollama) throw bad_param("model", "'model' is required");
  const std::string id = v != nullptr ? v->get<std::string>() : models_->specs().at(0).id;
  const int index = models_->find(id);
  if (index < 0) throw models_->not_found(id);
  std::optional<double> keep_alive;
  if (const json* k = ollama && body.is_object() ? field(body, "keep_alive") : nullptr) {
    keep_alive = ollama_keep_alive_seconds(*k);
  }
  if (ModelLease m = models_->try_acquire(index, keep_alive)) return model_route(req, ex, m);
  // Ollama's "unload" (keep_alive 0 and nothing to generate) of a model that is not loaded.
  const bool generate = req.path == "/api/generate";
  if ((generate || req.path == "/api/chat") && keep_alive == 0.0 &&
      is_ollama_load_request(body, generate)) {
    nlohmann::ordered_json out = {{"model", id}, {"created_at", utc_time_now(6)}};
    if (generate) out["response"] = "";
    else out["message"] = {{"role", "assistant"}, {"content", ""}};
    out["done"] = true;
    out["done_reason"] = "unload";
    return ex->respond({200, "application/json", dump(out), {}});
  }
  // Not loaded: the request waits for the load without holding this thread.
  auto waiting = std::make_shared<HttpRequest>(req);
  models_->acquire(
      index, keep_alive,
      [this, waiting, ex](ModelLease m) {
        try {
          model_route(*waiting, ex, m);
        } catch (const ApiError& e) {
          ex->respond(error_response(waiting->path, e));
        } catch (const std::exception& e) {
          ex->respond(error_response(waiting->path, ApiError(500, "server_error", e.what())));
        }
      },
      [path = req.path, ex](const ApiError& e) { ex->respond(error_response(path, e)); });
}

void HttpServer::route(const HttpRequest& req, const std::shared_ptr<Exchange>& ex) {
  const std::string& p = req.path;
  static const std::set<std::string> model_routes = {
      "/v1/completions", "/v1/chat/completions", "/v1/messages", "/v1/responses",
      "/v1/messages/count_tokens", "/api/chat", "/api/generate", "/v1/embeddings",
      "/api/embed", "/api/embeddings", "/tokenize", "/detokenize", "/api/show",
      "/v1/kv/save", "/v1/kv/restore"};
  if (req.method == "POST" && model_routes.count(p)) return with_model(req, ex);
  if (req.method == "POST" && (p == "/v1/load_lora_adapter" || p == "/v1/unload_lora_adapter")) {
    return ex->respond(lora_route(req));
  }
  if (req.method == "GET" || req.method == "HEAD") {
    if (p == "/v1/models") return ex->respond(models_list());
    if (p.rfind("/v1/models/", 0) == 0 && p.size() > 11) return ex->respond(model_entry(p.substr(11)));
    if (p == "/api/tags" || p == "/api/ps" || p == "/api/version") return ollama_info(req, ex);
    if (is_responses_path(p) && p.size() > 14) return ex->respond(stored_response(req));
    if (p == "/health") {
      if (draining_) throw ApiError(503, "server_error", "the server is shutting down");
      return ex->respond(json_response(200, {{"status", "ok"}}));
    }
    if (p == "/metrics") return ex->respond({200, "text/plain; version=0.0.4", metrics_text(), {}});
    if (p == "/stats") return ex->respond(json_response(200, stats_json()));
    if (p == "/openapi.json") return ex->respond({200, "application/json", openapi_text(), {}});
    if (p == "/")
      return ex->respond({200, "text/html; charset=utf-8", std::string(web_page_html()), {}});
  }
  if (req.method == "DELETE" && is_responses_path(p) && p.size() > 14) {
    return ex->respond(stored_response(req));
  }
  if (req.method == "POST" && is_ollama_path(p) && p != "/api/tags" && p != "/api/ps" &&
      p != "/api/version") {
    return ollama_info(req, ex);
  }
  static const std::set<std::string> post_routes = {
      "/v1/completions", "/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens",
      "/tokenize",       "/detokenize",          "/api/chat",    "/api/generate",
      "/api/show",       "/api/embed",           "/api/embeddings", "/v1/responses",
      "/v1/embeddings",  "/v1/kv/save",          "/v1/kv/restore",
      "/v1/load_lora_adapter", "/v1/unload_lora_adapter"};
  static const std::set<std::string> get_routes = {"/v1/models", "/health",   "/metrics",
                                                   "/stats",     "/openapi.json", "/",
                                                   "/api/tags",  "/api/ps",   "/api/version"};
  const bool is_post_route = post_routes.count(p) > 0;
  const bool is_stored_response = is_responses_path(p) && !is_post_route;
  if (is_post_route || get_routes.count(p) || p.rfind("/v1/models/", 0) == 0 ||
      is_stored_response) {
    const std::string allow = is_post_route        ? "POST"
                              : is_stored_response ? "GET, HEAD, DELETE"
                                                   : "GET, HEAD";
    HttpResponse r = error_response(p, ApiError(405, "invalid_request_error",
                                             req.method + " is not allowed on " + p + "; use " + allow,
                                             "", "method_not_allowed"));
    r.headers.emplace_back("Allow", allow);
    return ex->respond(std::move(r));
  }
  throw ApiError(404, "invalid_request_error", "no route " + req.method + " " + p, "", "not_found");
}

void HttpServer::ollama_generation(const HttpRequest& req, const std::shared_ptr<Exchange>& ex,
                                   const ModelLease& m) {
  const bool generate = req.path == "/api/generate";
  const json body = parse_json_body(req.body, options_.limits.max_json_depth);
  if (!is_ollama_load_request(body, generate)) {
    return start_generation(req, ex, generate ? Endpoint::kOllamaGenerate : Endpoint::kOllamaChat,
                            m);
  }
  // Nothing to generate: Ollama's way of asking for the model to be loaded, which it now is,
  // or with keep_alive 0 (ollama stop) to be unloaded once idle.
  const json* keep = field(body, "keep_alive");
  const bool unload = keep != nullptr && !models_->single() && ollama_keep_alive_seconds(*keep) == 0.0;
  const std::string name = unload ? ollama_model_name(body, m->context)
                                  : check_ollama_load_request(body, m->context, options_.limits, generate);
  nlohmann::ordered_json out = {{"model", name}, {"created_at", utc_time_now(6)}};
  if (generate) {
    out["response"] = "";
  } else {
    out["message"] = {{"role", "assistant"}, {"content", ""}};
  }
  out["done"] = true;
  out["done_reason"] = unload ? "unload" : "load";
  if (unload) models_->unload_when_idle(models_->find(m->context.name));
  ex->respond({200, "application/json", dump(out), {}});
}

void HttpServer::ollama_info(const HttpRequest& req, const std::shared_ptr<Exchange>& ex) {
  nlohmann::ordered_json out;
  if (!models_->single() && (req.path == "/api/tags" || req.path == "/api/ps")) {
    out = req.path == "/api/tags" ? ollama_tags(*models_) : ollama_ps(*models_);
  } else if (!ollama_info_route(req.path, req.body, models_->loaded().at(0)->context,
                                options_.limits, out)) {
    throw ApiError(404, "invalid_request_error", "no route " + req.method + " " + req.path, "",
                   "not_found");
  }
  ex->respond({200, "application/json", dump(out), {}});
}

HttpResponse HttpServer::stored_response(const HttpRequest& req) {
  const std::string id = req.path.substr(std::string("/v1/responses/").size());
  if (id.find('/') != std::string::npos) {
    throw ApiError(404, "invalid_request_error",
                   "no route " + req.method + " " + req.path +
                       " (listing a response's input items and cancelling are not supported by "
                       "this server)", "", "not_found");
  }
  std::optional<StoredResponse> r;
  if (req.method == "DELETE" ? responses_.erase(id) : (r = responses_.get(id)).has_value()) {
    if (r) return {200, "application/json", dump(r->response), {}};
    return json_response(200, {{"id", id}, {"object", "response"}, {"deleted", true}});
  }
  throw ApiError(404, "invalid_request_error",
                 "No response found with id '" + id + "' (responses made with store false are "
                 "not kept, and the store keeps the " + std::to_string(responses_.max_count()) +
                 " most recently used)", "", "not_found");
}

HttpResponse HttpServer::tokenize(const HttpRequest& req, const ModelContext& model) {
  const json body = parse_json_body(req.body, options_.limits.max_json_depth);
  if (!body.is_object()) throw bad_param("prompt", "the request body must be a JSON object");
  std::vector<TokenId> ids;
  if (auto it = body.find("prompt"); it != body.end() && !it->is_string()) {
    throw bad_param("prompt", "'prompt' must be a string");
  }
  bool add_special = true;
  if (auto a = body.find("add_special_tokens"); a != body.end()) {
    if (!a->is_boolean()) {
      throw bad_param("add_special_tokens", "'add_special_tokens' must be a boolean");
    }
    add_special = a->get<bool>();
  }
  if (body.contains("messages")) {
    json chat = body;
    chat["max_tokens"] = 1;
    chat.erase("stream");
    ids = parse_chat_request(chat, model, options_.limits, req.body).prompts.at(0);
  } else {
    const auto it = body.find("prompt");
    if (it == body.end() || !it->is_string()) {
      throw bad_param("prompt", "'prompt' must be a string (or give 'messages')");
    }
    ids = model.tokenizer->encode(it->get<std::string>(),
                                   {.add_special = add_special, .parse_special = true});
  }
  return json_response(
      200, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", model.max_model_len}});
}

HttpResponse HttpServer::detokenize(const HttpRequest& req, const ModelContext& model) {
  const json body = parse_json_body(req.body, options_.limits.max_json_depth);
  const auto it = body.is_object() ? body.find("tokens") : body.end();
  if (it == body.end() || !it->is_array())
    throw bad_param("tokens", "'tokens' must be a list of token ids");
  std::vector<TokenId> ids;
  for (const json& t : *it) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= model.vocab_size) {
      throw bad_param("tokens", "'tokens' must hold token ids in [0, " +
                                    std::to_string(model.vocab_size) + ")");
    }
    ids.push_back(static_cast<TokenId>(t.get<int64_t>()));
  }
  // Control tokens are shown (as Hugging Face decode does by default).
  return json_response(200, {{"prompt", model.tokenizer->decode(ids, /*render_special=*/true)}});
}

int HttpServer::bind() {
  port_ = transport_->bind(options_.host, options_.port);
  return port_;
}

void HttpServer::run() { transport_->run(); }

void HttpServer::shutdown() {
  using Clock = std::chrono::steady_clock;
  draining_ = true;
  // Grammars still compiling end now (503), rather than holding up the exit.
  stop_grammars();
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(options_.shutdown_timeout_s));
  while (in_flight_.load() > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // What is left ends now, each stream with finish_reason "abort".
  std::vector<std::shared_ptr<GenerationTask>> left;
  {
    std::lock_guard lock(tasks_mutex_);
    for (auto& [p, t] : tasks_) left.push_back(t);
  }
  for (auto& t : left) t->abort();
  left.clear();
  const auto grace = Clock::now() + std::chrono::seconds(5);
  while (in_flight_.load() > 0 && Clock::now() < grace) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // A task counts as done once its last bytes are queued: let them reach the client (a stream
  // cut here would lose its [DONE]), but not wait on a client that does not read.
  transport_->drain(2.0);
  transport_->stop();
}

void HttpServer::fail_in_flight(const std::string& message, double timeout_s) {
  draining_ = true;
  stop_grammars();
  std::vector<std::shared_ptr<GenerationTask>> left;
  {
    std::lock_guard lock(tasks_mutex_);
    for (auto& [p, t] : tasks_) left.push_back(t);
  }
  for (auto& t : left) t->fail_now(ApiError(500, "server_error", message));
  left.clear();
  transport_->drain(timeout_s);
}

void HttpServer::track(const std::shared_ptr<GenerationTask>& task) {
  std::lock_guard lock(tasks_mutex_);
  tasks_.emplace(task.get(), task);
}

void HttpServer::untrack(GenerationTask* task, int32_t num_sequences) {
  {
    std::lock_guard lock(tasks_mutex_);
    tasks_.erase(task);
  }
  in_flight_.fetch_sub(num_sequences);
}

}  // namespace pagoda::server
