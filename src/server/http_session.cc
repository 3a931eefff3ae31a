// One connection of the HTTP transport (see http_session.h).
#include "server/http_session.h"

#include <sys/socket.h>

#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstdio>

namespace pagoda::server {
namespace {

namespace http = beast::http;

constexpr size_t kReadChunk = 16u << 10;
constexpr std::chrono::milliseconds kWatchInterval{100};
// After an error answer, the rest of what the client sends is read and dropped this long, so a
// client still sending its body sees the answer instead of a reset.
constexpr std::chrono::seconds kLingerTime{5};

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

std::string reason_phrase(int status) {
  const std::string_view r =
      http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  return r.empty() || r == "<unknown-status>" ? "Status" : std::string(r);
}

}  // namespace

std::string head_text(int status, int version, const std::string& content_type,
                      const std::vector<std::pair<std::string, std::string>>& headers,
                      const std::string& framing, bool keep_alive) {
  std::string h = (version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ") + std::to_string(status) + " " +
                  reason_phrase(status) + "\r\n";
  if (!content_type.empty()) h += "Content-Type: " + content_type + "\r\n";
  for (const auto& [name, value] : headers) h += name + ": " + value + "\r\n";
  h += framing;
  h += keep_alive ? (version == 10 ? "Connection: keep-alive\r\n" : "") : "Connection: close\r\n";
  h += "\r\n";
  return h;
}

std::string error_body(int status, const std::string& message) {
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) escaped += c;
  }
  return "{\"error\":{\"message\":\"" + escaped +
         "\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}";
}

Session::Session(HttpTransport::Impl& t, tcp::socket socket, std::string client)
    : t_(t),
      stream_(std::move(socket)),
      buffer_(t.limits.max_header_bytes + 2 * kReadChunk),
      watch_(stream_.get_executor()),
      client_(std::move(client)) {
  phase_since_ = Clock::now().time_since_epoch().count();
}

void Session::close_after_answer() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    self->draining_ = true;
    self->keep_alive_ = false;
    if (self->exchange_id_ == 0) self->shut();
  });
}

void Session::set_phase(Phase p) {
  phase_since_ = Clock::now().time_since_epoch().count();
  phase_ = p;
}

namespace {

class ExchangeImpl : public Exchange {
 public:
  ExchangeImpl(std::shared_ptr<Session> s, uint64_t id) : s_(std::move(s)), id_(id) {}
  void respond(HttpResponse r) override {
    s_->post([s = s_, id = id_, r = std::move(r)]() mutable { s->respond(id, std::move(r)); });
  }
  void start_stream(int status, std::string type,
                    std::vector<std::pair<std::string, std::string>> headers) override {
    s_->post([s = s_, id = id_, status, type = std::move(type), h = std::move(headers)]() mutable {
      s->start_stream(id, status, std::move(type), std::move(h));
    });
  }
  void write(std::string data) override {
    s_->post(
        [s = s_, id = id_, d = std::move(data)]() mutable { s->write_piece(id, std::move(d)); });
  }
  void finish() override {
    s_->post([s = s_, id = id_] { s->finish(id); });
  }
  void on_closed(std::function<void()> f) override {
    s_->post(
        [s = s_, id = id_, f = std::move(f)]() mutable { s->set_on_closed(id, std::move(f)); });
  }
  void post(std::function<void()> task) override { s_->post(std::move(task)); }
  void annotate(std::string note) override {
    s_->post([s = s_, id = id_, n = std::move(note)]() mutable { s->annotate(id, std::move(n)); });
  }
  size_t num_unsent_bytes() const override { return s_->unsent(); }

 private:
  std::shared_ptr<Session> s_;
  const uint64_t id_;
};

std::atomic<uint64_t> next_exchange_id{1};

}  // namespace

void Session::read_next() {
  if (closed_) return;
  reader_.emplace(t_.limits);
  body_phase_ = false;
  exchange_id_ = 0;
  answering_ = false;
  if (buffer_.size() > 0) {  // a pipelined request is already here
    set_phase(Phase::kHeader);
    started_ = Clock::now();
    stream_.expires_after(seconds(t_.limits.header_timeout_s));
    on_bytes();
    return;
  }
  set_phase(Phase::kIdle);
  // A new connection has the header timeout from its accept: one that never sends a byte holds
  // its place no longer than one that sends its header slowly.
  const bool first = first_request_;
  stream_.expires_after(seconds(first ? t_.limits.header_timeout_s : t_.limits.idle_timeout_s));
  stream_.async_read_some(
      buffer_.prepare(kReadChunk),
      [self = shared_from_this(), first](beast::error_code ec, size_t n) {
        if (!ec && n > 0) {
          self->set_phase(Phase::kHeader);
          self->started_ = Clock::now();
          if (!first) self->stream_.expires_after(seconds(self->t_.limits.header_timeout_s));
        }
        self->on_read(ec, n);
      });
}

void Session::read_more() {
  size_t room = kReadChunk;
  try {
    buffer_.prepare(room);
  } catch (const std::length_error&) {
    refuse(431, "the request header is larger than " + std::to_string(t_.limits.max_header_bytes) +
                    " bytes");
    return;
  }
  stream_.async_read_some(
      buffer_.prepare(room),
      [self = shared_from_this()](beast::error_code ec, size_t n) { self->on_read(ec, n); });
}

void Session::on_read(beast::error_code ec, size_t n) {
  if (closed_) return;
  if (ec) {
    // The stream closes itself on a timeout. One on a request under way is logged; an idle
    // keep-alive connection or a client that left is just closed.
    if (ec == beast::error::timeout && (buffer_.size() > 0 || reader_->header_done())) {
      method_.clear();
      path_.clear();
      note_.clear();
      log(408);
    }
    shut();
    return;
  }
  buffer_.commit(n);
  on_bytes();
}

void Session::on_bytes() {
  const auto data = buffer_.data();
  const size_t used =
      reader_->feed(std::string_view(static_cast<const char*>(data.data()), data.size()));
  buffer_.consume(used);
  if (reader_->error_status() != 0) {
    refuse(reader_->error_status(), reader_->error());
    return;
  }
  if (reader_->complete()) {
    dispatch();
    return;
  }
  if (reader_->header_done() && !body_phase_) {
    body_phase_ = true;
    set_phase(Phase::kBusy);
    stream_.expires_after(seconds(t_.limits.body_timeout_s));
    if (reader_->expects_continue()) queue("HTTP/1.1 100 Continue\r\n\r\n");
  }
  read_more();
}

void Session::dispatch() {
  keep_alive_ = reader_->keep_alive() && !draining_;
  HttpRequest req = reader_->take();
  req.client = client_;
  reader_.reset();
  first_request_ = false;
  set_phase(Phase::kBusy);
  stream_.expires_never();
  exchange_id_ = next_exchange_id++;
  answering_ = true;
  method_ = req.method;
  path_ = req.path;
  version_ = req.version;
  note_.clear();
  status_ = 0;
  streaming_ = false;
  answer_done_ = false;
  on_closed_ = nullptr;
  watch();
  auto ex = std::make_shared<ExchangeImpl>(shared_from_this(), exchange_id_);
  try {
    t_.handler(std::move(req), std::move(ex));
  } catch (const std::exception& e) {
    respond(exchange_id_, {500, "application/json", error_body(500, e.what()), {}});
  }
}

void Session::respond(uint64_t id, HttpResponse r) {
  if (id != exchange_id_ || answer_done_ || streaming_ || closed_) return;
  status_ = r.status;
  answer_done_ = true;
  on_closed_ = nullptr;
  // A 204 (a CORS preflight's answer) has neither a body nor a length (RFC 9110 8.6).
  const bool no_content = r.status == 204;
  std::string bytes = head_text(
      r.status, version_, r.content_type, r.headers,
      no_content ? "" : "Content-Length: " + std::to_string(r.body.size()) + "\r\n", keep_alive_);
  if (method_ != "HEAD" && !no_content) bytes += r.body;
  queue(std::move(bytes));
}

void Session::start_stream(uint64_t id, int status, std::string type,
                           std::vector<std::pair<std::string, std::string>> headers) {
  if (id != exchange_id_ || answer_done_ || streaming_ || closed_) return;
  status_ = status;
  streaming_ = true;
  // HTTP/1.0 has no chunked encoding: the stream ends when the connection does.
  if (version_ == 10) keep_alive_ = false;
  queue(head_text(status, version_, type, headers,
                  version_ == 10 ? "" : "Transfer-Encoding: chunked\r\n", keep_alive_));
}

void Session::write_piece(uint64_t id, std::string data) {
  if (id != exchange_id_ || !streaming_ || answer_done_ || closed_ || data.empty()) return;
  if (version_ == 10) {
    queue(std::move(data));
    return;
  }
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  queue(std::string(size) + data + "\r\n");
}

void Session::finish(uint64_t id) {
  if (id != exchange_id_ || !streaming_ || answer_done_ || closed_) return;
  answer_done_ = true;
  on_closed_ = nullptr;
  if (version_ == 10) {
    if (!writing_) answer_written();
    return;
  }
  queue("0\r\n\r\n");
}

void Session::queue(std::string bytes) {
  unsent_ += bytes.size();
  out_.push_back(std::move(bytes));
  if (!writing_) write_front();
}

void Session::write_front() {
  writing_ = true;
  stream_.expires_after(seconds(t_.limits.write_timeout_s));
  net::async_write(
      stream_, net::buffer(out_.front()),
      [self = shared_from_this()](beast::error_code ec, size_t n) { self->on_written(ec, n); });
}

void Session::on_written(beast::error_code ec, size_t n) {
  writing_ = false;
  if (closed_) return;
  if (ec) {
    client_gone();
    return;
  }
  unsent_ -= out_.front().size();
  out_.pop_front();
  if (!out_.empty()) {
    write_front();
    return;
  }
  if (answer_done_ && exchange_id_ != 0) answer_written();
}

void Session::answer_written() {
  log(status_);
  exchange_id_ = 0;
  answering_ = false;
  watch_.cancel();
  if (keep_alive_) {
    read_next();
  } else {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    linger();
  }
}

// Every kWatchInterval while a handler works: has the client closed its side, or reset?
void Session::watch() {
  watch_.expires_after(kWatchInterval);
  watch_.async_wait([self = shared_from_this(), id = exchange_id_](beast::error_code ec) {
    if (ec || self->closed_ || self->exchange_id_ != id || self->answer_done_) return;
    char c;
    const ssize_t r =
        ::recv(self->stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      self->client_gone();
      return;
    }
    if (r > 0) return;  // the next (pipelined) request is here: a close shows on a write
    self->watch();
  });
}

void Session::client_gone() {
  if (exchange_id_ != 0 && !answer_done_) log(499);  // as nginx counts a client that left
  if (auto f = std::move(on_closed_)) {
    on_closed_ = nullptr;
    f();
  }
  shut();
}

void Session::refuse(int status, const std::string& message) {
  exchange_id_ = next_exchange_id++;
  answering_ = true;
  method_.clear();
  path_.clear();
  note_.clear();
  version_ = 11;
  status_ = status;
  keep_alive_ = false;
  streaming_ = false;
  answer_done_ = true;
  queue(head_text(status, 11, "application/json", {},
                  "Content-Length: " + std::to_string(error_body(status, message).size()) + "\r\n",
                  false) +
        error_body(status, message));
}

// Reads and drops what the client still sends, for a bounded time, then closes.
void Session::linger() {
  stream_.expires_after(kLingerTime);
  buffer_.clear();
  stream_.async_read_some(buffer_.prepare(kReadChunk),
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                            if (ec) {
                              self->shut();
                            } else {
                              self->linger();
                            }
                          });
}

void Session::shut() {
  if (closed_) return;
  closed_ = true;
  answering_ = false;
  watch_.cancel();
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.close();
  out_.clear();
  unsent_ = 0;
}

void Session::log(int status) {
  if (!t_.access_log) return;
  AccessRecord r;
  r.method = method_;
  r.path = path_;
  r.client = client_;
  r.status = status;
  r.duration_s = std::chrono::duration<double>(Clock::now() - started_).count();
  r.note = note_;
  t_.access_log(r);
}

}  // namespace pagoda::server
