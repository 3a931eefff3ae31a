// The inside of HttpTransport (see http_transport.h), shared by its two files: the transport's
// state and the Session that serves one connection (http_session.cc). Only these files and
// http_request.cc include Boost.
//
// A connection is a Session on its own strand. It reads bytes into one buffer and feeds them to a
// RequestReader; a complete request goes to the handler with an Exchange. While the handler
// works, nothing is read (pipelined requests wait in the buffer, answered in order after), and a
// timer peeks at the socket every kWatchInterval to notice a client that closed. Answers are
// bytes queued on the session and written one after the other.
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/http_transport.h"

namespace pagoda::server {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;

class Session;

struct HttpTransport::Impl {
  Impl(HttpLimits l, HttpHandler h, int io, int work)
      : limits(l),
        handler(std::move(h)),
        num_io_threads(std::max(1, io)),
        workers(std::max(1, work)) {}

  void accept();
  void on_accept(beast::error_code ec, tcp::socket socket);
  // Whether a connection from `client` may open; when every connection is taken, `evict` gets
  // the one to close to make room for it (the one idle longest).
  bool admit(const std::string& client, std::shared_ptr<Session>& evict);
  std::shared_ptr<Session> idle_longest();  // under `mutex`
  void release(Session* s, const std::string& client, bool evicted);

  const HttpLimits limits;
  HttpHandler handler;
  const int num_io_threads;
  std::function<void(const AccessRecord&)> access_log;

  // The connection registry outlives the I/O context, whose pending handlers own sessions.
  mutable std::mutex mutex;
  std::unordered_map<std::string, int32_t> per_client;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  int32_t num_evicted = 0;  // closed to make room, not yet gone from `sessions`
  bool stopped = false;

  net::thread_pool workers;
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> guard;
  std::optional<tcp::acceptor> acceptor;
  std::optional<net::steady_timer> accept_retry;
};

// The status line and headers of an answer.
std::string head_text(int status, int version, const std::string& content_type,
                      const std::vector<std::pair<std::string, std::string>>& headers,
                      const std::string& framing, bool keep_alive);
// An error answer's JSON body, as the API's errors look.
std::string error_body(int status, const std::string& message);

class Session : public std::enable_shared_from_this<Session> {
 public:
  using Clock = std::chrono::steady_clock;

  // What the connection is doing, for choosing one to close under pressure.
  enum class Phase : int { kIdle, kHeader, kBusy };

  Session(HttpTransport::Impl& t, tcp::socket socket, std::string client);
  ~Session() { t_.release(this, client_, evicted_.load()); }

  void start() { read_next(); }
  void close() {
    net::post(stream_.get_executor(), [self = shared_from_this()] { self->shut(); });
  }
  // The answer underway goes out, then the connection closes instead of reading another.
  void close_after_answer();

  // Exchange operations, on the strand.
  void post(std::function<void()> f) { net::post(stream_.get_executor(), std::move(f)); }
  void respond(uint64_t id, HttpResponse r);
  void start_stream(uint64_t id, int status, std::string type,
                    std::vector<std::pair<std::string, std::string>> headers);
  void write_piece(uint64_t id, std::string data);
  void finish(uint64_t id);
  void set_on_closed(uint64_t id, std::function<void()> f) {
    if (id == exchange_id_ && !answer_done_ && !closed_) on_closed_ = std::move(f);
  }
  void annotate(uint64_t id, std::string note) {
    if (id == exchange_id_) note_ = std::move(note);
  }
  size_t unsent() const { return unsent_.load(); }
  bool answering() const { return answering_.load(); }

  // Read under the transport's mutex from any thread.
  Phase phase() const { return phase_.load(); }
  Clock::rep phase_since() const { return phase_since_.load(); }
  // Marks the connection as one closed to make room.
  void mark_evicted() { evicted_ = true; }
  bool evicted() const { return evicted_.load(); }

 private:
  void set_phase(Phase p);
  void read_next();
  void read_more();
  void on_read(beast::error_code ec, size_t n);
  void on_bytes();
  void dispatch();
  void refuse(int status, const std::string& message);
  void queue(std::string bytes);
  void write_front();
  void on_written(beast::error_code ec, size_t n);
  void answer_written();
  void watch();
  void client_gone();
  void linger();
  void shut();
  void log(int status);

  HttpTransport::Impl& t_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  net::steady_timer watch_;
  const std::string client_;
  std::optional<RequestReader> reader_;
  Clock::time_point started_;
  bool body_phase_ = false;
  bool first_request_ = true;  // none read yet: the header timeout runs from the accept

  // The request being answered.
  uint64_t exchange_id_ = 0;  // 0: none
  std::string method_, path_, note_;
  int version_ = 11;
  int status_ = 0;
  bool keep_alive_ = false;
  bool streaming_ = false;
  bool answer_done_ = false;  // respond() or finish() called
  std::function<void()> on_closed_;

  std::deque<std::string> out_;
  bool writing_ = false;
  std::atomic<size_t> unsent_{0};
  bool closed_ = false;
  bool draining_ = false;               // the server is going down: no request after this one
  std::atomic<bool> answering_{false};  // an exchange is open: its answer is not all written
  std::atomic<Phase> phase_{Phase::kIdle};
  std::atomic<Clock::rep> phase_since_{0};
  std::atomic<bool> evicted_{false};
};

}  // namespace pagoda::server
