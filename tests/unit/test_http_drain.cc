// HttpTransport::drain: a server going down delivers the answers it has finished (a stream's
// last chunk included), does not wait on idle connections, and gives up on a client that does
// not read.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "server/http_transport.h"

namespace pagoda::server {
namespace {

using Clock = std::chrono::steady_clock;

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

void send_all(int fd, const std::string& s) {
  ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
}

// Everything the server sends until it closes.
std::string read_to_end(int fd) {
  std::string got;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

// Streams `pieces` chunks of 64 KiB, then finishes; `finished` turns true after finish().
struct StreamingServer {
  explicit StreamingServer(int pieces)
      : transport({}, [this, pieces](HttpRequest req, std::shared_ptr<Exchange> ex) {
          if (req.path != "/stream") {
            ex->respond({200, "text/plain", "ok", {}});
            return;
          }
          ex->start_stream(200, "text/plain", {});
          for (int i = 0; i < pieces; ++i) ex->write(std::string(64 << 10, 'a' + i % 26));
          ex->write("the end");
          ex->finish();
          finished = true;
        }, /*num_io_threads=*/1, /*num_work_threads=*/1) {
    port = transport.bind("127.0.0.1", 0);
    runner = std::thread([this] { transport.run(); });
  }
  ~StreamingServer() {
    transport.stop();
    runner.join();
  }
  void wait_finished() {
    while (!finished) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  std::atomic<bool> finished{false};
  HttpTransport transport;
  int port = 0;
  std::thread runner;
};

TEST(HttpDrain, AFinishedStreamReachesASlowClientWhole) {
  StreamingServer server(64);  // 4 MiB: more than the socket buffers hold
  const int fd = connect_to(server.port);
  send_all(fd, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  server.wait_finished();
  std::string got;
  std::thread client([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // reads only after the drain began
    got = read_to_end(fd);
  });
  server.transport.drain(20);
  server.transport.stop();
  client.join();
  ::close(fd);
  EXPECT_GT(got.size(), size_t{64} << 16);
  EXPECT_TRUE(got.ends_with("the end\r\n0\r\n\r\n")) << got.size() << " bytes arrived";
}

TEST(HttpDrain, DoesNotWaitOnAnIdleKeepAliveConnection) {
  StreamingServer server(1);
  const int fd = connect_to(server.port);
  send_all(fd, "GET /small HTTP/1.1\r\nHost: x\r\n\r\n");
  char buf[4096];
  ASSERT_GT(::recv(fd, buf, sizeof buf, 0), 0);  // answered; the connection stays open
  const auto t0 = Clock::now();
  server.transport.drain(20);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
  EXPECT_EQ(read_to_end(fd), "");  // closed by the drain, nothing more sent
  ::close(fd);
}

TEST(HttpDrain, GivesUpOnAClientThatDoesNotRead) {
  StreamingServer server(1024);  // 64 MiB that nobody reads
  const int fd = connect_to(server.port);
  send_all(fd, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  server.wait_finished();
  const auto t0 = Clock::now();
  server.transport.drain(0.5);
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(waited, 0.5);
  EXPECT_LT(waited, 10.0);
  ::close(fd);
}

}  // namespace
}  // namespace pagoda::server
