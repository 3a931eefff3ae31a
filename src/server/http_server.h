// pagoda serve's routes: the OpenAI-compatible API, API-key checks, admission limits,
// streaming over Server-Sent Events, client disconnects, metrics, the access log and a graceful
// shutdown, on the event-driven HttpTransport. The engine runs on its own EngineThread; a
// generation is driven by the engine's events (each one posts a task to the connection's
// strand), so no thread waits on a request.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

#include "engine/engine_thread.h"
#include "server/http_transport.h"
#include "server/metrics.h"
#include "server/model_set.h"
#include "server/openai_request.h"
#include "server/origin_policy.h"
#include "server/response_store.h"

namespace pagoda::server {

enum class LogFormat { kText, kJson, kNone };

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port (see HttpServer::port())
  std::string api_key;  // empty: no key required
  // With an api_key: /metrics, /stats and /openapi.json answer without it too.
  bool public_metrics = false;
  OriginOptions origins;
  HttpLimits http;
  // Sequences (prompts x n) of generation requests in flight at once; more get 503.
  int32_t max_pending = 256;
  int io_threads = 2;    // threads running the connections
  int work_threads = 4;  // threads parsing and tokenizing requests
  double shutdown_timeout_s = 30.0;
  RequestLimits limits;
  // The Responses API's stored responses: at most this many, and this many bytes.
  size_t responses_max_count = 1024;
  size_t responses_max_bytes = size_t{256} << 20;
  LogFormat log_format = LogFormat::kText;
  // POST /v1/kv/save and /v1/kv/restore (kv_save_route.cc): the folder of saved prefixes
  // (empty: the routes are refused; ModelContext::kv_identity names what they belong to).
  std::string kv_save_dir;
};

class GenerationTask;

class HttpServer {
 public:
  // `models` (one model, or several loaded on demand) must outlive the server.
  HttpServer(ServerOptions options, std::shared_ptr<ModelSet> models);
  ~HttpServer();

  // Binds the socket; throws Error when it cannot (a port in use: "address already in use").
  // Returns the port (useful with port 0).
  int bind();
  // Serves until shutdown() has finished.
  void run();
  // Stops taking new generation requests (503), waits up to shutdown_timeout_s for the ones in
  // flight to finish, ends what is left (finish_reason "abort"), then closes every connection.
  // Any thread.
  void shutdown();
  // The engine cannot go on (tensor parallel: another rank is gone): every request in flight
  // ends now with a 500 carrying `message`, new ones get 503; waits up to `timeout_s` for those
  // answers to reach their clients. Any thread but an I/O one.
  void fail_in_flight(const std::string& message, double timeout_s);

  int port() const { return port_; }
  int32_t num_in_flight() const { return in_flight_.load(); }

 private:
  friend class GenerationTask;

  void handle(HttpRequest req, std::shared_ptr<Exchange> ex);
  void route(const HttpRequest& req, const std::shared_ptr<Exchange>& ex);
  // The routes that run on a model: find the model the request names (loading it when it is on
  // disk, without holding a thread while it loads), then model_route.
  void with_model(const HttpRequest& req, const std::shared_ptr<Exchange>& ex);
  void model_route(const HttpRequest& req, const std::shared_ptr<Exchange>& ex,
                   const ModelLease& m);
  void start_generation(const HttpRequest& req, const std::shared_ptr<Exchange>& ex,
                        Endpoint endpoint, const ModelLease& m);
  // Ollama's /api/chat and /api/generate (a request with nothing to generate is answered at
  // once, as Ollama answers a load), and the routes that describe the model (ollama_api.h).
  void ollama_generation(const HttpRequest& req, const std::shared_ptr<Exchange>& ex,
                         const ModelLease& m);
  void ollama_info(const HttpRequest& req, const std::shared_ptr<Exchange>& ex);
  // GET and DELETE /v1/responses/{id}.
  HttpResponse stored_response(const HttpRequest& req);
  HttpResponse tokenize(const HttpRequest& req, const ModelContext& model);
  nlohmann::json adapter_info(const ServedModel& m, const ServedAdapter& a) const;
  // POST /v1/load_lora_adapter and /v1/unload_lora_adapter (lora_routes.cc).
  HttpResponse lora_route(const HttpRequest& req);
  // The adapters' gauges in /metrics.
  std::string lora_metrics(const LoraSet& loras) const;
  HttpResponse detokenize(const HttpRequest& req, const ModelContext& model);
  // /v1/models and /v1/models/{id}.
  HttpResponse models_list() const;
  HttpResponse model_entry(const std::string& id) const;
  // POST /v1/kv/save and /v1/kv/restore (kv_save_route.cc). A save whose prompt is not cached
  // waits on its work thread while the engine computes it.
  nlohmann::json kv_save(const HttpRequest& req, const ModelLease& m);
  nlohmann::json kv_restore(const HttpRequest& req, const ModelLease& m);
  // DIR/NAME.pgkv, after the route is found enabled and the body's fields and name valid.
  std::string kv_save_path(const nlohmann::json& body, const char* route) const;
  ApiRequest kv_save_prompt(const nlohmann::json& body, const ModelContext& model,
                            const std::string& raw_body) const;
  nlohmann::json stats_json() const;
  std::string metrics_text() const;
  std::string openapi_text() const;
  // Stops every loaded model's grammar compiler (their jobs answer through the transport).
  void stop_grammars();
  bool needs_key(const std::string& path) const;
  bool authorized(const HttpRequest& req) const;
  void log_access(const AccessRecord& r);
  // Live generations, for the shutdown.
  void track(const std::shared_ptr<GenerationTask>& task);
  void untrack(GenerationTask* task, int32_t num_sequences);

  ServerOptions options_;
  OriginPolicy origins_;
  std::shared_ptr<ModelSet> models_;
  ServerMetrics metrics_;
  std::unique_ptr<HttpTransport> transport_;
  std::atomic<int32_t> in_flight_{0};  // sequences
  std::atomic<bool> draining_{false};
  // /v1/kv/save requests waiting for their prompt's prefill, each holding a work thread: one at
  // a time, so saves cannot take every work thread from the other routes.
  std::atomic<int32_t> kv_saves_computing_{0};
  std::mutex tasks_mutex_;
  // Live generations; the map owns them until they end.
  std::unordered_map<GenerationTask*, std::shared_ptr<GenerationTask>> tasks_;
  std::mutex log_mutex_;
  std::atomic<uint64_t> next_id_{1};
  ResponseStore responses_;
  std::chrono::steady_clock::time_point started_;
  int port_ = 0;
};

// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

// `text` with control characters, spaces and backslashes written as \xNN, so that a line of the
// text access log stays one line of fields whatever a client sent.
std::string escape_log_field(const std::string& text);

// Compares in time that depends only on the lengths, not on where the strings differ.
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace pagoda::server
