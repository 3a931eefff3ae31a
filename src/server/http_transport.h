// The HTTP/1.1 transport under pagoda serve: an event-driven server on Boost.Asio / Beast. A few
// I/O threads serve every connection (an idle or slow one costs its socket and a small buffer,
// never a thread), every input is bounded (header bytes and count, body bytes however they are
// encoded, how long a header, a body, an idle keep-alive or a write may take, connections in
// total and per client address), pipelined requests are answered in order, and a client that
// goes away while its request runs is reported to the handler.
//
// Handlers see plain structs: HttpRequest in, an Exchange to answer through (a whole response,
// or a chunked stream). No Boost type appears in this header.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/http_request.h"

namespace pagoda::server {

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// What the access log gets for each answered request.
struct AccessRecord {
  std::string method, path, client;
  int status = 0;
  double duration_s = 0;  // from the first byte of the request to the last byte of the answer
  std::string note;       // the handler's annotation (Exchange::annotate), a JSON object or empty
};

// One request's answer. Every method may be called from any thread; the work happens in order
// on the connection's own strand. Exactly one of respond() or start_stream() ... finish().
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual void respond(HttpResponse response) = 0;
  // A chunked response (close-delimited for HTTP/1.0 clients); then write() pieces and finish().
  virtual void start_stream(int status, std::string content_type,
                            std::vector<std::pair<std::string, std::string>> headers) = 0;
  virtual void write(std::string data) = 0;
  virtual void finish() = 0;
  // Called once, on the strand, if the client goes away (it closed, reset, or a write failed or
  // timed out) before the answer is complete. Set it before the answer can end; it is dropped
  // when the answer completes.
  virtual void on_closed(std::function<void()> callback) = 0;
  // Runs `task` on this exchange's strand, after what was posted before it.
  virtual void post(std::function<void()> task) = 0;
  // Extra fields for the access log (a JSON object's text).
  virtual void annotate(std::string note) = 0;
  // Bytes handed to write() and not yet sent.
  virtual size_t num_unsent_bytes() const = 0;
};

using HttpHandler = std::function<void(HttpRequest, std::shared_ptr<Exchange>)>;

class HttpTransport {
 public:
  // `handler` runs on a connection's strand for each request read in full; it must not block
  // (hand long work to post_work()).
  HttpTransport(HttpLimits limits, HttpHandler handler, int num_io_threads, int num_work_threads);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds and listens (no SO_REUSEPORT: a port in use is an Error). Port 0 picks a free port;
  // returns the port.
  int bind(const std::string& host, int port);
  void set_access_log(std::function<void(const AccessRecord&)> log);
  // Serves until stop(); blocks the caller.
  void run();
  // Closes the listener; open connections carry on.
  void stop_accepting();
  // Closes the listener and lets each answer underway reach its client: a connection closes
  // once its answer is written (idle ones at once). Returns when none is left or after
  // `timeout_s`. Not from an I/O thread: it waits on them.
  void drain(double timeout_s);
  // Closes every connection and ends run(). Any thread.
  void stop();
  // Runs `task` on a worker thread (tokenizing, rendering templates: work too long for I/O).
  void post_work(std::function<void()> task);

  int32_t num_connections() const;

  struct Impl;  // the connections' side (http_session.h)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda::server
