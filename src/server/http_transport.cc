// The event-driven HTTP transport (see http_transport.h). The only file that includes Boost.
//
// A connection is a Session on its own strand. It reads bytes into one buffer and feeds them to a
// RequestReader; a complete request goes to the handler with an Exchange. While the handler
// works, nothing is read (pipelined requests wait in the buffer, answered in order after), and a
// timer peeks at the socket every kWatchInterval to notice a client that closed. Answers are
// bytes queued on the session and written one after the other.
#include "server/http_transport.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "core/error.h"

namespace pagoda::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunk = 16u << 10;
constexpr std::chrono::milliseconds kWatchInterval{100};
// After an error answer, the rest of what the client sends is read and dropped this long, so a
// client still sending its body sees the answer instead of a reset.
constexpr std::chrono::seconds kLingerTime{5};

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The path of a request target ("/a%20b?x=1" -> "/a b"); an absolute-form target loses its
// scheme and authority.
std::string target_path(std::string_view target) {
  if (const size_t scheme = target.find("://");
      scheme != std::string_view::npos && target[0] != '/') {
    const size_t slash = target.find('/', scheme + 3);
    target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
  }
  target = target.substr(0, target.find('?'));
  std::string path;
  path.reserve(target.size());
  for (size_t i = 0; i < target.size(); ++i) {
    int hi = 0, lo = 0;
    if (target[i] == '%' && i + 2 < target.size() && (hi = hex_value(target[i + 1])) >= 0 &&
        (lo = hex_value(target[i + 2])) >= 0) {
      path += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      path += target[i];
    }
  }
  return path;
}

std::string reason_phrase(int status) {
  const std::string_view r =
      http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  return r.empty() || r == "<unknown-status>" ? "Status" : std::string(r);
}

// The status line and headers of an answer.
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

}  // namespace

// ---- HttpRequest ----------------------------------------------------------------------------

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (iequals(k, name)) return v;
  }
  return "";
}

// ---- RequestReader --------------------------------------------------------------------------

struct RequestReader::Impl {
  http::request_parser<http::string_body> parser;
  bool header_checked = false;
};

RequestReader::RequestReader(const HttpLimits& limits)
    : impl_(std::make_unique<Impl>()), limits_(limits) {
  impl_->parser.header_limit(static_cast<std::uint32_t>(
      std::min<size_t>(limits.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
  impl_->parser.body_limit(static_cast<std::uint64_t>(limits.max_body_bytes));
  impl_->parser.eager(true);
}

RequestReader::~RequestReader() = default;

size_t RequestReader::feed(std::string_view data) {
  if (error_status_ != 0 || complete()) return 0;
  auto& p = impl_->parser;
  size_t used = 0;
  // put() parses as much as it can; a whole header has to be there before it takes any of it.
  while (used < data.size() && !p.is_done()) {
    beast::error_code ec;
    const size_t n = p.put(net::buffer(data.data() + used, data.size() - used), ec);
    used += n;
    if (ec == http::error::need_more) break;
    if (ec == http::error::header_limit) {
      error_status_ = 431;
      error_ = "the request header is larger than " + std::to_string(limits_.max_header_bytes) +
               " bytes";
      return used;
    }
    if (ec == http::error::body_limit) {
      error_status_ = 413;
      error_ =
          "the request body is larger than " + std::to_string(limits_.max_body_bytes) + " bytes";
      return used;
    }
    if (ec) {
      error_status_ = ec == http::error::bad_transfer_encoding ? 501 : 400;
      error_ = "malformed HTTP request: " + ec.message();
      return used;
    }
    if (n == 0) break;
  }
  if (p.is_header_done() && !impl_->header_checked) {
    impl_->header_checked = true;
    const auto& h = p.get();
    const auto num_headers = std::distance(h.begin(), h.end());
    if (num_headers > limits_.max_headers) {
      error_status_ = 431;
      error_ = "the request has " + std::to_string(num_headers) + " headers; at most " +
               std::to_string(limits_.max_headers);
    }
  }
  return used;
}

bool RequestReader::header_done() const { return impl_->parser.is_header_done(); }
bool RequestReader::complete() const { return error_status_ == 0 && impl_->parser.is_done(); }

bool RequestReader::expects_continue() const {
  if (!header_done()) return false;
  const auto& h = impl_->parser.get();
  const auto it = h.find(http::field::expect);
  return it != h.end() && iequals(it->value(), "100-continue") && !impl_->parser.is_done();
}

bool RequestReader::keep_alive() const { return impl_->parser.get().keep_alive(); }

HttpRequest RequestReader::take() {
  auto msg = impl_->parser.release();
  HttpRequest r;
  r.method = std::string(msg.method_string());
  r.target = std::string(msg.target());
  r.path = target_path(r.target);
  r.version = static_cast<int>(msg.version());
  for (const auto& f : msg)
    r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  r.body = std::move(msg.body());
  return r;
}

// ---- Transport --------------------------------------------------------------------------------

class Session;

struct HttpTransport::Impl {
  Impl(HttpLimits l, HttpHandler h, int io, int work)
      : limits(l),
        handler(std::move(h)),
        num_io_threads(std::max(1, io)),
        workers(std::max(1, work)) {}

  void accept();
  void on_accept(beast::error_code ec, tcp::socket socket);
  bool admit(const std::string& client);
  void release(Session* s, const std::string& client);

  const HttpLimits limits;
  HttpHandler handler;
  const int num_io_threads;
  std::function<void(const AccessRecord&)> access_log;

  // The connection registry outlives the I/O context, whose pending handlers own sessions.
  mutable std::mutex mutex;
  std::unordered_map<std::string, int32_t> per_client;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  bool stopped = false;

  net::thread_pool workers;
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> guard;
  std::optional<tcp::acceptor> acceptor;
  std::optional<net::steady_timer> accept_retry;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpTransport::Impl& t, tcp::socket socket, std::string client)
      : t_(t),
        stream_(std::move(socket)),
        buffer_(t.limits.max_header_bytes + 2 * kReadChunk),
        watch_(stream_.get_executor()),
        client_(std::move(client)) {}
  ~Session() { t_.release(this, client_); }

  void start() { read_next(); }
  void close() {
    net::post(stream_.get_executor(), [self = shared_from_this()] { self->shut(); });
  }
  // The answer underway goes out, then the connection closes instead of reading another.
  void close_after_answer() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      self->draining_ = true;
      self->keep_alive_ = false;
      if (self->exchange_id_ == 0) self->shut();
    });
  }

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

 private:
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
  bool draining_ = false;  // the server is going down: no request after this one
  std::atomic<bool> answering_{false};  // an exchange is open: its answer is not all written
};

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
    started_ = Clock::now();
    stream_.expires_after(seconds(t_.limits.header_timeout_s));
    on_bytes();
    return;
  }
  stream_.expires_after(seconds(t_.limits.idle_timeout_s));
  stream_.async_read_some(
      buffer_.prepare(kReadChunk), [self = shared_from_this()](beast::error_code ec, size_t n) {
        if (!ec && n > 0) {
          self->started_ = Clock::now();
          self->stream_.expires_after(seconds(self->t_.limits.header_timeout_s));
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
    stream_.expires_after(seconds(t_.limits.body_timeout_s));
    if (reader_->expects_continue()) queue("HTTP/1.1 100 Continue\r\n\r\n");
  }
  read_more();
}

void Session::dispatch() {
  HttpRequest req = reader_->take();
  req.client = client_;
  keep_alive_ = reader_->keep_alive() && !draining_;
  reader_.reset();
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
  const bool head = method_ == "HEAD";
  std::string bytes =
      head_text(r.status, version_, r.content_type, r.headers,
                "Content-Length: " + std::to_string(r.body.size()) + "\r\n", keep_alive_);
  if (!head) bytes += r.body;
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

bool HttpTransport::Impl::admit(const std::string& client) {
  std::lock_guard lock(mutex);
  if (stopped) return false;
  if (static_cast<int32_t>(sessions.size()) >= limits.max_connections) return false;
  int32_t& n = per_client[client];
  if (n >= limits.max_connections_per_client) {
    if (n == 0) per_client.erase(client);
    return false;
  }
  ++n;
  return true;
}

void HttpTransport::Impl::release(Session* s, const std::string& client) {
  std::lock_guard lock(mutex);
  sessions.erase(s);
  auto it = per_client.find(client);
  if (it != per_client.end() && --it->second <= 0) per_client.erase(it);
}

void HttpTransport::Impl::accept() {
  acceptor->async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    on_accept(ec, std::move(socket));
  });
}

void HttpTransport::Impl::on_accept(beast::error_code ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor || !acceptor->is_open()) return;
  if (ec) {
    // Out of descriptors or memory: wait a little instead of spinning on the error.
    std::fprintf(stderr, "serve: accept failed: %s\n", ec.message().c_str());
    accept_retry.emplace(ioc);
    accept_retry->expires_after(std::chrono::milliseconds(100));
    accept_retry->async_wait([this](beast::error_code e) {
      if (!e && acceptor && acceptor->is_open()) accept();
    });
    return;
  }
  beast::error_code e;
  const auto peer = socket.remote_endpoint(e);
  const std::string client = e ? "unknown" : peer.address().to_string();
  if (!admit(client)) {
    // Refused at once, in a few bytes the socket buffer takes without waiting.
    static const std::string busy = [] {
      const std::string body = error_body(503, "too many connections");
      return head_text(503, 11, "application/json", {},
                       "Content-Length: " + std::to_string(body.size()) + "\r\n", false) +
             body;
    }();
    ::send(socket.native_handle(), busy.data(), busy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    socket.shutdown(tcp::socket::shutdown_both, e);
    socket.close(e);
  } else {
    socket.set_option(tcp::no_delay(true), e);
    auto s = std::make_shared<Session>(*this, std::move(socket), client);
    {
      std::lock_guard lock(mutex);
      sessions.emplace(s.get(), s);
    }
    s->start();
  }
  accept();
}

// ---- HttpTransport ----------------------------------------------------------------------------

HttpTransport::HttpTransport(HttpLimits limits, HttpHandler handler, int num_io_threads,
                             int num_work_threads)
    : impl_(std::make_unique<Impl>(limits, std::move(handler), num_io_threads, num_work_threads)) {}

HttpTransport::~HttpTransport() {
  stop();
  impl_->workers.join();
}

int HttpTransport::bind(const std::string& host, int port) {
  // Each connection holds a descriptor: allow as many as the hard limit permits.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  Impl& t = *impl_;
  beast::error_code ec;
  tcp::resolver resolver(t.ioc);
  const auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || results.empty()) fail("cannot listen on ", host, ":", port, ": ", ec.message());
  const tcp::endpoint endpoint = results.begin()->endpoint();
  tcp::acceptor acceptor(t.ioc);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (ec == net::error::address_in_use) {
    fail("cannot listen on ", host, ":", port, ": address already in use");
  }
  if (!ec) acceptor.listen(t.limits.listen_backlog, ec);
  if (ec) fail("cannot listen on ", host, ":", port, ": ", ec.message());
  const int bound = acceptor.local_endpoint().port();
  t.acceptor.emplace(std::move(acceptor));
  return bound;
}

void HttpTransport::set_access_log(std::function<void(const AccessRecord&)> log) {
  impl_->access_log = std::move(log);
}

void HttpTransport::run() {
  Impl& t = *impl_;
  if (!t.acceptor) fail("HttpTransport::run before bind");
  t.guard.emplace(t.ioc.get_executor());
  t.accept();
  std::vector<std::thread> threads;
  for (int i = 1; i < t.num_io_threads; ++i) threads.emplace_back([&t] { t.ioc.run(); });
  t.ioc.run();
  for (auto& th : threads) th.join();
}

void HttpTransport::stop_accepting() {
  net::post(impl_->ioc, [t = impl_.get()] {
    beast::error_code ignored;
    if (t->acceptor) t->acceptor->close(ignored);
    if (t->accept_retry) t->accept_retry->cancel();
  });
}

void HttpTransport::drain(double timeout_s) {
  using Clock = std::chrono::steady_clock;
  Impl& t = *impl_;
  stop_accepting();
  std::vector<std::shared_ptr<Session>> open;
  {
    std::lock_guard lock(t.mutex);
    for (auto& [p, w] : t.sessions) {
      if (auto s = w.lock()) open.push_back(std::move(s));
    }
  }
  for (auto& s : open) s->close_after_answer();
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  // A connection whose answer is written may linger for the client's close; that is not waited on.
  const auto answering = [&] {
    for (auto& s : open) {
      if (s->answering()) return true;
    }
    return false;
  };
  while (answering() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void HttpTransport::stop() {
  Impl& t = *impl_;
  std::vector<std::shared_ptr<Session>> open;
  {
    std::lock_guard lock(t.mutex);
    if (t.stopped) return;
    t.stopped = true;
    for (auto& [p, w] : t.sessions) {
      if (auto s = w.lock()) open.push_back(std::move(s));
    }
  }
  stop_accepting();
  for (auto& s : open) s->close();
  open.clear();
  // The closes above run on the I/O threads; then nothing is left to do and run() returns.
  t.guard.reset();
}

void HttpTransport::post_work(std::function<void()> task) {
  net::post(impl_->workers, std::move(task));
}

int32_t HttpTransport::num_connections() const {
  std::lock_guard lock(impl_->mutex);
  return static_cast<int32_t>(impl_->sessions.size());
}

}  // namespace pagoda::server
