// Reading one request (see http_request.h), on Boost.Beast's parser.
#include "server/http_request.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <limits>

namespace pagoda::server {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;

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

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// True when the comma-separated codings of every Transfer-Encoding line are "chunked" alone.
bool chunked_alone(const http::request<http::string_body>& h, std::string& codings) {
  int num_codings = 0;
  bool all_chunked = true;
  for (const auto& f : h) {
    if (f.name() != http::field::transfer_encoding) continue;
    if (!codings.empty()) codings += ", ";
    codings += std::string(f.value());
    std::string_view rest = f.value();
    while (true) {
      const size_t comma = rest.find(',');
      const std::string_view coding = trim(rest.substr(0, comma));
      if (!coding.empty()) {
        ++num_codings;
        all_chunked = all_chunked && iequals(coding, "chunked");
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return num_codings <= 1 && all_chunked;
}

}  // namespace

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

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (iequals(k, name)) return v;
  }
  return "";
}

struct RequestReader::Impl {
  http::request_parser<http::string_body> parser;
  bool raw_checked = false;     // the header's bytes, before the parser takes them
  bool header_checked = false;  // the parsed header
  bool taken = false;
  bool keep_alive = false;  // kept by take(), which releases the parser's message
};

RequestReader::RequestReader(const HttpLimits& limits)
    : impl_(std::make_unique<Impl>()), limits_(limits) {
  impl_->parser.header_limit(static_cast<std::uint32_t>(
      std::min<size_t>(limits.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
  impl_->parser.body_limit(static_cast<std::uint64_t>(limits.max_body_bytes));
  impl_->parser.eager(true);
}

RequestReader::~RequestReader() = default;

void RequestReader::refuse(int status, std::string message) {
  if (error_status_ != 0) return;
  error_status_ = status;
  error_ = std::move(message);
}

// The parser takes a header only once all of it is buffered, so it is all in `data` then. A line
// that starts with a space or tab continues the one before (obs-fold): refused, as RFC 9112
// allows, rather than read one way here and another by a proxy in front.
void RequestReader::check_raw_header(std::string_view data) {
  if (impl_->raw_checked) return;
  const size_t end = data.substr(0, limits_.max_header_bytes + 4).find("\r\n\r\n");
  if (end == std::string_view::npos) return;
  impl_->raw_checked = true;
  const std::string_view header = data.substr(0, end + 2);
  for (size_t i = header.find('\n'); i != std::string_view::npos; i = header.find('\n', i + 1)) {
    if (i + 1 < header.size() && (header[i + 1] == ' ' || header[i + 1] == '\t')) {
      refuse(400, "a header line is folded onto the next (obs-fold); send each header on one line");
      return;
    }
  }
}

void RequestReader::check_header() {
  impl_->header_checked = true;
  const auto& h = impl_->parser.get();
  const auto num_headers = std::distance(h.begin(), h.end());
  if (num_headers > limits_.max_headers) {
    refuse(431, "the request has " + std::to_string(num_headers) + " headers; at most " +
                    std::to_string(limits_.max_headers));
    return;
  }
  const auto num_hosts = h.count(http::field::host);
  if (num_hosts > 1 || (num_hosts == 0 && h.version() >= 11)) {
    refuse(400, "an HTTP/1.1 request needs exactly one Host header (it has " +
                    std::to_string(num_hosts) + ")");
    return;
  }
  if (std::string codings; !chunked_alone(h, codings)) {
    refuse(400, "Transfer-Encoding '" + codings +
                    "' is not accepted: send a body with Content-Length, or with "
                    "Transfer-Encoding: chunked alone");
  }
}

size_t RequestReader::feed(std::string_view data) {
  if (error_status_ != 0 || complete()) return 0;
  auto& p = impl_->parser;
  if (!p.is_header_done()) {
    check_raw_header(data);
    if (error_status_ != 0) return 0;
  }
  size_t used = 0;
  // put() parses as much as it can; a whole header has to be there before it takes any of it.
  while (used < data.size() && !p.is_done()) {
    beast::error_code ec;
    const size_t n = p.put(boost::asio::buffer(data.data() + used, data.size() - used), ec);
    used += n;
    if (ec == http::error::need_more) break;
    if (ec == http::error::header_limit) {
      refuse(431, "the request header is larger than " + std::to_string(limits_.max_header_bytes) +
                      " bytes");
      return used;
    }
    if (ec == http::error::body_limit) {
      refuse(413, "the request body is larger than " + std::to_string(limits_.max_body_bytes) +
                      " bytes");
      return used;
    }
    if (ec) {
      refuse(ec == http::error::bad_transfer_encoding ? 501 : 400,
             "malformed HTTP request: " + ec.message());
      return used;
    }
    if (n == 0) break;
    // Checked before the body is read: a body framed wrongly is never taken as one.
    if (p.is_header_done() && !impl_->header_checked) {
      check_header();
      if (error_status_ != 0) return used;
    }
  }
  if (p.is_header_done() && !impl_->header_checked) check_header();
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

bool RequestReader::keep_alive() const {
  return impl_->taken ? impl_->keep_alive : impl_->parser.get().keep_alive();
}

HttpRequest RequestReader::take() {
  impl_->keep_alive = impl_->parser.get().keep_alive();
  impl_->taken = true;
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

}  // namespace pagoda::server
