// pagoda serve's HTTP side: the OpenAI-compatible routes on cpp-httplib, API-key checks, body
// and queue limits, streaming over Server-Sent Events, client disconnects, metrics, and a
// graceful shutdown. The engine runs on its own EngineThread; each HTTP request is served on a
// worker thread that submits to it and waits on its output streams.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine_thread.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace pagoda::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;          // 0: any free port (see HttpServer::port())
  std::string api_key;      // empty: no key required
  size_t max_body_bytes = 8u << 20;
  int32_t max_pending = 256;  // generation requests in flight at once; more get 503
  int http_threads = 0;       // 0: enough for max_pending streams
  double shutdown_timeout_s = 30.0;
  RequestLimits limits;
};

class HttpServer {
 public:
  // `model.tokenizer` and `engine` must outlive the server.
  HttpServer(ServerOptions options, ModelContext model, EngineThread& engine,
             nlohmann::json model_info);
  ~HttpServer();

  // Binds the socket; throws Error when it cannot. Returns the port (useful with port 0).
  int bind();
  // Serves until shutdown() (or stop()) is called from another thread.
  void run();
  // Stops taking new generation requests (503), waits up to shutdown_timeout_s for the ones in
  // flight to finish, aborts what is left, then stops the listener. Any thread.
  void shutdown();

  int port() const { return port_; }
  int32_t num_in_flight() const { return in_flight_.load(); }

 private:
  void add_routes();
  void handle_generation(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  void handle_tokenize(const httplib::Request& req, httplib::Response& res);
  void handle_detokenize(const httplib::Request& req, httplib::Response& res);
  nlohmann::json stats_json() const;
  bool authorized(const httplib::Request& req) const;

  ServerOptions options_;
  ModelContext model_;
  EngineThread& engine_;
  nlohmann::json model_info_;
  ServerMetrics metrics_;
  std::unique_ptr<httplib::Server> http_;
  std::atomic<int32_t> in_flight_{0};
  std::atomic<bool> draining_{false};
  std::atomic<bool> aborting_{false};  // shutdown timed out: generations end now
  std::mutex shutdown_mutex_;
  std::condition_variable shutdown_cv_;
  bool shutdown_done_ = false;
  std::atomic<uint64_t> next_id_{1};
  std::chrono::steady_clock::time_point started_;
  int port_ = 0;
};

// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

// Compares in time that depends only on the lengths, not on where the strings differ.
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace pagoda::server
