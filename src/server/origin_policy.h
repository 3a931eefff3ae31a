// Who may drive pagoda serve from a browser. A server on a loopback address answers only requests
// addressed to a loopback name (the Host header), so a web page cannot reach it through a DNS name
// rebound to 127.0.0.1; a request a browser sends from another site (its Origin header) is refused
// unless the operator named that origin, and for the origins named the server answers CORS: the
// preflight OPTIONS and Access-Control-Allow-Origin on every answer, streams included.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/http_transport.h"

namespace pagoda::server {

struct OriginOptions {
  // Host names answered besides the loopback ones (--allowed-host; "*": any). On an address
  // that is not loopback, any Host is answered unless some are named here.
  std::vector<std::string> allowed_hosts;
  // Origins (scheme://host[:port]) whose pages may call the API (--cors-origin; "*": any).
  std::vector<std::string> cors_origins;
};

class OriginPolicy {
 public:
  OriginPolicy(const std::string& bind_host, OriginOptions options);

  // Throws ApiError 403 when the request's Host is not one the server answers to, or its Origin
  // is neither the server's own (the Host it was sent to) nor one named.
  void check(const HttpRequest& req) const;
  // The request's Origin when it is a named one (its answers carry CORS headers), else "".
  std::string cors_origin(const HttpRequest& req) const;
  // The answer to a CORS preflight from a named `origin`.
  HttpResponse preflight(const HttpRequest& req, const std::string& origin) const;

 private:
  bool host_allowed(const std::string& name) const;

  bool check_hosts_;
  OriginOptions options_;
};

// The name in a Host header, lower-case, without port or IPv6 brackets ("[::1]:80" -> "::1").
std::string host_name(const std::string& host_header);

// True for "localhost" and IP literals in 127.0.0.0/8 or ::1.
bool is_loopback_name(const std::string& name);

// True when a Content-Type header's media type is application/json (parameters aside).
bool is_json_content_type(const std::string& content_type);

// `inner` with Access-Control-Allow-Origin: `origin` (and Vary: Origin) on its answer.
std::shared_ptr<Exchange> with_cors(std::shared_ptr<Exchange> inner, std::string origin);

}  // namespace pagoda::server
