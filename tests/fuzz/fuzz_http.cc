// libFuzzer target: any bytes, arriving in any pieces, as HTTP requests on one connection. The
// RequestReader (what the server reads every request with) must take each request or refuse it
// with a status, within the limits; a complete body then goes through the server's JSON body
// check. Never a crash, a hang, unbounded memory or UB.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/api_error.h"
#include "server/http_transport.h"
#include "server/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // The first byte sets the size of the pieces the bytes arrive in (1 to 256).
  const size_t piece = static_cast<size_t>(data[0]) + 1;
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  pagoda::server::HttpLimits limits;
  limits.max_header_bytes = 4096;
  limits.max_headers = 32;
  limits.max_body_bytes = 1 << 16;
  std::string buffer;
  size_t fed = 0;
  for (int requests = 0; requests < 64; ++requests) {
    pagoda::server::RequestReader reader(limits);
    // As the server's session does: feed what is buffered, drop what was taken, read more.
    for (;;) {
      buffer.erase(0, reader.feed(buffer));
      if (reader.complete() || reader.error_status() != 0) break;
      if (fed == input.size()) return 0;  // the connection would wait for more bytes
      const size_t n = std::min(piece, input.size() - fed);
      buffer.append(input.substr(fed, n));
      fed += n;
      if (buffer.size() > limits.max_header_bytes + (1 << 17)) __builtin_trap();
    }
    if (reader.error_status() != 0) {
      const int s = reader.error_status();
      if (s != 400 && s != 413 && s != 431 && s != 501) __builtin_trap();
      return 0;  // the server answers and closes the connection
    }
    pagoda::server::HttpRequest request = reader.take();
    if (request.body.size() > limits.max_body_bytes) __builtin_trap();
    try {
      (void)pagoda::server::parse_json_body(request.body, 16);
    } catch (const pagoda::server::ApiError& e) {
      if (e.status() != 400) __builtin_trap();
    }
    if (!reader.keep_alive()) return 0;
  }
  return 0;
}
