// Routes, authentication, limits and lifecycle of pagoda serve (see http_server.h). The
// generation routes live in generation_route.cc.
#include "server/http_server.h"

#include <httplib.h>

#include <set>
#include <thread>

#include "core/error.h"
#include "server/api_error.h"
#include "server/responses.h"
#include "server/web_page.h"

namespace pagoda::server {
namespace {

using nlohmann::json;

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status(), e.to_json()); }

bool needs_key(const std::string& path) {
  return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
}

}  // namespace

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
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

HttpServer::HttpServer(ServerOptions options, ModelContext model, EngineThread& engine,
                       json model_info)
    : options_(std::move(options)),
      model_(std::move(model)),
      engine_(engine),
      model_info_(std::move(model_info)),
      http_(std::make_unique<httplib::Server>()),
      started_(std::chrono::steady_clock::now()) {
  const int threads = options_.http_threads > 0 ? options_.http_threads
                                                : std::max(16, options_.max_pending + 8);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_read_timeout(60);
  http_->set_write_timeout(60);
  add_routes();
}

HttpServer::~HttpServer() = default;

bool HttpServer::authorized(const httplib::Request& req) const {
  if (options_.api_key.empty()) return true;
  const std::string header = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (header.rfind(prefix, 0) != 0) return false;
  return constant_time_equal(header.substr(prefix.size()), options_.api_key);
}

json HttpServer::stats_json() const {
  const EngineStats s = engine_.stats();
  const double uptime =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  return {{"running", s.scheduler.num_running},
          {"waiting", s.scheduler.num_waiting},
          {"kv_blocks_total", s.scheduler.kv.num_blocks},
          {"kv_blocks_used", s.scheduler.kv.num_used_blocks},
          {"kv_utilization", s.scheduler.kv.utilization()},
          {"prefix_cache_hit_rate", s.scheduler.kv.prefix_hit_rate()},
          {"preemptions", s.scheduler.num_preemptions},
          {"generated_tokens", s.num_generated_tokens},
          {"computed_tokens", s.num_computed_tokens},
          {"finished_requests", s.num_finished_requests},
          {"in_flight", in_flight_.load()},
          {"uptime_s", uptime}};
}

void HttpServer::add_routes() {
  httplib::Server& h = *http_;
  h.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (needs_key(req.path) && !authorized(req)) {
      send_error(res, ApiError(401, "invalid_request_error", "Incorrect or missing API key",
                               "", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  h.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) {
      send_error(res, ApiError(404, "invalid_request_error",
                               "no route " + req.method + " " + req.path, "", "not_found"));
    } else if (res.status == 413) {
      send_error(res, ApiError(413, "invalid_request_error", "the request body is too large"));
    } else {
      send_error(res, ApiError(res.status, "invalid_request_error",
                               "HTTP " + std::to_string(res.status)));
    }
  });
  h.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const std::exception& e) {
      send_error(res, ApiError(500, "server_error", e.what()));
    }
  });
  h.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    // Known routes only, so random paths cannot grow the metric's label set without bound.
    static const std::set<std::string> routes = {
        "/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics",
        "/stats", "/tokenize", "/detokenize", "/"};
    metrics_.count_request(routes.count(req.path) ? req.path : "other", res.status);
  });
  h.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(req, res, Endpoint::kCompletions);
  });
  h.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(req, res, Endpoint::kChat);
  });
  h.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"object", "list"}, {"data", json::array({model_info_})}});
  });
  h.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != model_.name) {
      throw ApiError(404, "invalid_request_error",
                     "The model '" + std::string(req.matches[1]) + "' does not exist", "model",
                     "model_not_found");
    }
    send_json(res, 200, model_info_);
  });
  h.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining_) {
      send_error(res, ApiError(503, "server_error", "the server is shutting down"));
    } else {
      send_json(res, 200, {{"status", "ok"}});
    }
  });
  h.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(engine_.stats()), "text/plain; version=0.0.4");
  });
  h.Get("/stats", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, stats_json());
  });
  h.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    handle_tokenize(req, res);
  });
  h.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    handle_detokenize(req, res);
  });
  h.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(web_page_html()), "text/html; charset=utf-8");
  });
}

void HttpServer::handle_tokenize(const httplib::Request& req, httplib::Response& res) {
  const json body = parse_json_body(req.body);
  if (!body.is_object()) throw bad_param("prompt", "the request body must be a JSON object");
  std::vector<TokenId> ids;
  if (body.contains("messages")) {
    json chat = body;
    chat["max_tokens"] = 1;
    chat.erase("stream");
    ids = parse_chat_request(chat, model_, options_.limits, req.body).prompts.at(0);
  } else {
    const auto it = body.find("prompt");
    if (it == body.end() || !it->is_string()) {
      throw bad_param("prompt", "'prompt' must be a string (or give 'messages')");
    }
    bool add_special = true;
    if (auto a = body.find("add_special_tokens"); a != body.end()) {
      if (!a->is_boolean()) throw bad_param("add_special_tokens", "'add_special_tokens' must be a boolean");
      add_special = a->get<bool>();
    }
    ids = model_.tokenizer->encode(it->get<std::string>(),
                                   {.add_special = add_special, .parse_special = true});
  }
  send_json(res, 200, {{"tokens", ids}, {"count", ids.size()},
                       {"max_model_len", model_.max_model_len}});
}

void HttpServer::handle_detokenize(const httplib::Request& req, httplib::Response& res) {
  const json body = parse_json_body(req.body);
  const auto it = body.is_object() ? body.find("tokens") : body.end();
  if (it == body.end() || !it->is_array()) throw bad_param("tokens", "'tokens' must be a list of token ids");
  std::vector<TokenId> ids;
  for (const json& t : *it) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= model_.vocab_size) {
      throw bad_param("tokens", "'tokens' must hold token ids in [0, " +
                                    std::to_string(model_.vocab_size) + ")");
    }
    ids.push_back(static_cast<TokenId>(t.get<int64_t>()));
  }
  // Control tokens are shown (as Hugging Face decode does by default).
  send_json(res, 200, {{"prompt", model_.tokenizer->decode(ids, /*render_special=*/true)}});
}

int HttpServer::bind() {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
    if (port_ <= 0) fail("cannot listen on ", options_.host, ": no free port");
  } else {
    if (!http_->bind_to_port(options_.host, options_.port)) {
      fail("cannot listen on ", options_.host, ":", options_.port,
           " (address in use, or not an address of this machine)");
    }
    port_ = options_.port;
  }
  return port_;
}

void HttpServer::run() {
  http_->listen_after_bind();
  // A shutdown() stopped the listener: wait until it has returned, so the caller may destroy
  // this server.
  std::unique_lock lock(shutdown_mutex_);
  shutdown_cv_.wait(lock, [&] { return !draining_ || shutdown_done_; });
}

void HttpServer::shutdown() {
  draining_ = true;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(options_.shutdown_timeout_s);
  while (in_flight_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  aborting_ = true;  // what is left ends now (finish_reason "abort")
  while (in_flight_.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  http_->stop();
  std::lock_guard lock(shutdown_mutex_);
  shutdown_done_ = true;
  shutdown_cv_.notify_all();
}

}  // namespace pagoda::server
