// The HTTP transport's listener, admission and lifecycle (see http_transport.h); one
// connection's work is in http_session.cc.
#include "server/http_transport.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <cstdio>
#include <thread>

#include "core/error.h"
#include "server/http_session.h"

namespace pagoda::server {

bool HttpTransport::Impl::admit(const std::string& client, std::shared_ptr<Session>& evict) {
  std::lock_guard lock(mutex);
  if (stopped) return false;
  int32_t& n = per_client[client];
  if (n >= limits.max_connections_per_client) {
    if (n == 0) per_client.erase(client);
    return false;
  }
  if (static_cast<int32_t>(sessions.size()) - num_evicted >= limits.max_connections) {
    evict = idle_longest();
    if (!evict) {
      if (n == 0) per_client.erase(client);
      return false;
    }
    ++num_evicted;
  }
  ++n;
  return true;
}

// The connection waiting longest for a request's first byte, else the one longest in a request's
// header: neither has a request the server works on. Connections busy with a body or an answer
// are never closed for room.
std::shared_ptr<Session> HttpTransport::Impl::idle_longest() {
  // Raw pointers while searching: a reference dropped here, under the mutex, could be a
  // session's last, and its destructor takes the mutex.
  Session* best = nullptr;
  auto rank = [](const Session& s) { return std::pair(s.phase(), s.phase_since()); };
  for (const auto& [p, w] : sessions) {
    if (p->phase() == Session::Phase::kBusy || p->evicted()) continue;
    if (best == nullptr || rank(*p) < rank(*best)) best = p;
  }
  if (best == nullptr) return nullptr;
  std::shared_ptr<Session> s = sessions[best].lock();  // null: it is ending anyway
  if (s) s->mark_evicted();
  return s;
}

void HttpTransport::Impl::release(Session* s, const std::string& client, bool evicted) {
  std::lock_guard lock(mutex);
  sessions.erase(s);
  if (evicted) --num_evicted;
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
  std::shared_ptr<Session> evict;
  if (!admit(client, evict)) {
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
  // Dropped outside the registry's lock: the last reference ends the session, which takes it.
  if (evict) evict->close();
  evict.reset();
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
