// Host and Origin checks and CORS (see origin_policy.h).
#include "server/origin_policy.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "server/api_error.h"

namespace pagoda::server {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// "HTTP://Host:80/" -> "http://host": origins compare in this form.
std::string normalize_origin(const std::string& origin) {
  std::string o = lower(trim(origin));
  while (!o.empty() && o.back() == '/') o.pop_back();
  const auto strip_port = [&o](const char* scheme, const char* port) {
    if (o.rfind(scheme, 0) == 0 && o.size() > std::strlen(port) &&
        o.compare(o.size() - std::strlen(port), std::string::npos, port) == 0 &&
        o.find(':', std::strlen(scheme)) == o.size() - std::strlen(port)) {
      o.resize(o.size() - std::strlen(port));
    }
  };
  strip_port("http://", ":80");
  strip_port("https://", ":443");
  return o;
}

bool listed(const std::vector<std::string>& list, const std::string& value) {
  return std::any_of(list.begin(), list.end(),
                     [&](const std::string& x) { return x == "*" || x == value; });
}

class CorsExchange : public Exchange {
 public:
  CorsExchange(std::shared_ptr<Exchange> inner, std::string origin)
      : inner_(std::move(inner)), origin_(std::move(origin)) {}
  void respond(HttpResponse r) override {
    add(r.headers);
    inner_->respond(std::move(r));
  }
  void start_stream(int status, std::string type,
                    std::vector<std::pair<std::string, std::string>> headers) override {
    add(headers);
    inner_->start_stream(status, std::move(type), std::move(headers));
  }
  void write(std::string data) override { inner_->write(std::move(data)); }
  void finish() override { inner_->finish(); }
  void on_closed(std::function<void()> f) override { inner_->on_closed(std::move(f)); }
  void post(std::function<void()> task) override { inner_->post(std::move(task)); }
  void annotate(std::string note) override { inner_->annotate(std::move(note)); }
  size_t num_unsent_bytes() const override { return inner_->num_unsent_bytes(); }

 private:
  void add(std::vector<std::pair<std::string, std::string>>& headers) const {
    headers.emplace_back("Access-Control-Allow-Origin", origin_);
    headers.emplace_back("Vary", "Origin");
  }
  std::shared_ptr<Exchange> inner_;
  const std::string origin_;
};

}  // namespace

std::string host_name(const std::string& host_header) {
  std::string h = lower(trim(host_header));
  if (!h.empty() && h[0] == '[') {
    const size_t close = h.find(']');
    return close == std::string::npos ? h : h.substr(1, close - 1);
  }
  if (const size_t colon = h.find(':');
      colon != std::string::npos && h.find(':', colon + 1) == std::string::npos) {
    h.resize(colon);
  }
  if (!h.empty() && h.back() == '.') h.pop_back();  // "localhost." is "localhost"
  return h;
}

bool is_loopback_name(const std::string& name) {
  if (name == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, name.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, name.c_str(), &v6) == 1 &&
         std::memcmp(&v6, &in6addr_loopback, sizeof v6) == 0;
}

bool is_json_content_type(const std::string& content_type) {
  return lower(trim(content_type.substr(0, content_type.find(';')))) == "application/json";
}

OriginPolicy::OriginPolicy(const std::string& bind_host, OriginOptions options)
    : options_(std::move(options)) {
  for (std::string& h : options_.allowed_hosts) h = host_name(h);
  for (std::string& o : options_.cors_origins) o = normalize_origin(o);
  check_hosts_ = is_loopback_name(host_name(bind_host)) || !options_.allowed_hosts.empty();
}

bool OriginPolicy::host_allowed(const std::string& name) const {
  return !check_hosts_ || is_loopback_name(name) || listed(options_.allowed_hosts, name);
}

void OriginPolicy::check(const HttpRequest& req) const {
  const std::string host = req.header("Host");
  // An HTTP/1.0 request may lack a Host; a browser always sends one.
  if (!host.empty() && !host_allowed(host_name(host))) {
    throw ApiError(403, "invalid_request_error",
                   "this server does not answer to the Host '" + host +
                       "' (start it with --allowed-host " + host_name(host) + " to allow it)",
                   "", "host_not_allowed");
  }
  const std::string origin = req.header("Origin");
  if (origin.empty()) return;
  const std::string o = normalize_origin(origin);
  const std::string h = lower(trim(host));
  if (!h.empty() && (o == normalize_origin("http://" + h) || o == normalize_origin("https://" + h)))
    return;
  if (listed(options_.cors_origins, o)) return;
  throw ApiError(403, "invalid_request_error",
                 "requests from pages at the origin '" + origin +
                     "' are refused (start the server with --cors-origin " + origin +
                     " to allow them)",
                 "", "origin_not_allowed");
}

std::string OriginPolicy::cors_origin(const HttpRequest& req) const {
  const std::string origin = req.header("Origin");
  if (origin.empty() || !listed(options_.cors_origins, normalize_origin(origin))) return "";
  return origin;
}

HttpResponse OriginPolicy::preflight(const HttpRequest& req, const std::string& origin) const {
  // The headers a client may send: the two the API reads, and whatever else the page asks for
  // (an SDK's own headers), which the server ignores.
  std::string allowed = "Authorization, Content-Type";
  const std::string asked = req.header("Access-Control-Request-Headers");
  for (size_t start = 0; start < asked.size();) {
    const size_t comma = std::min(asked.find(',', start), asked.size());
    const std::string name = lower(trim(asked.substr(start, comma - start)));
    const bool token = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
    });
    if (token && name != "authorization" && name != "content-type") allowed += ", " + name;
    start = comma + 1;
  }
  HttpResponse r{204, "", "", {}};
  r.headers = {{"Access-Control-Allow-Origin", origin},
               {"Access-Control-Allow-Methods", "GET, HEAD, POST, DELETE, OPTIONS"},
               {"Access-Control-Allow-Headers", allowed},
               {"Access-Control-Max-Age", "600"},
               {"Vary", "Origin"}};
  return r;
}

std::shared_ptr<Exchange> with_cors(std::shared_ptr<Exchange> inner, std::string origin) {
  return std::make_shared<CorsExchange>(std::move(inner), std::move(origin));
}

}  // namespace pagoda::server
