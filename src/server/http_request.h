// One HTTP/1.1 request as the server's handlers see it, and the reader that parses it from bytes
// as they arrive, within HttpLimits. The transport reads every request through RequestReader; the
// fuzz target drives it directly. No Boost type appears in this header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda::server {

struct HttpLimits {
  size_t max_header_bytes = 64u << 10;  // request line and headers together
  int32_t max_headers = 100;
  size_t max_body_bytes = 8u << 20;  // counted as received, chunked or not
  // From a request's first byte to the end of its header; on a new connection, from the accept
  // to the end of the first request's header.
  double header_timeout_s = 10;
  double body_timeout_s = 60;   // for the whole body
  double idle_timeout_s = 30;   // a keep-alive connection waiting for its next request
  double write_timeout_s = 60;  // any one write to the client
  // When every connection is taken, the one idle longest is closed to admit a new one.
  int32_t max_connections = 4096;
  int32_t max_connections_per_client = 512;  // per remote address
  int32_t listen_backlog = 4096;
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path and query
  std::string path;    // percent-decoded, without the query
  int version = 11;    // 10 or 11
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string client;  // the peer's address

  // The first header of that name (case-insensitive); empty when absent.
  std::string header(std::string_view name) const;
};

// ASCII case-insensitive equality, as header names and tokens compare.
bool iequals(std::string_view a, std::string_view b);

// Parses one request from bytes as they arrive, with HttpLimits' size checks. Refuses what
// RFC 9112 says a server must refuse: an HTTP/1.1 request without exactly one Host, a header
// line folded onto the next (obs-fold), and a Transfer-Encoding other than "chunked" alone
// (anything else would leave the body's end to guesswork, the ground of request smuggling).
class RequestReader {
 public:
  explicit RequestReader(const HttpLimits& limits);
  ~RequestReader();
  RequestReader(const RequestReader&) = delete;
  RequestReader& operator=(const RequestReader&) = delete;

  // Consumes a prefix of `data` (possibly none: more bytes are needed to go on) and returns its
  // length. Stops at the end of one request; bytes after it belong to the next. The whole of
  // what is buffered is passed each time (the header is parsed once it is all there).
  size_t feed(std::string_view data);
  bool header_done() const;
  bool complete() const;
  // Non-zero when the request is refused: 400, 413, 431 or 501; error() says why.
  int error_status() const { return error_status_; }
  const std::string& error() const { return error_; }
  // After header_done(): the client waits for "100 Continue" before it sends the body.
  bool expects_continue() const;
  // After complete(), before or after take(): whether the connection may carry another request
  // (not after "Connection: close", nor an HTTP/1.0 request without keep-alive).
  bool keep_alive() const;
  HttpRequest take();

 private:
  void check_raw_header(std::string_view data);
  void check_header();
  void refuse(int status, std::string message);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  const HttpLimits limits_;
  int error_status_ = 0;
  std::string error_;
};

}  // namespace pagoda::server
