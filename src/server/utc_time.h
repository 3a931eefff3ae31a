// The wall clock as RFC 3339 UTC text, for the access log and API timestamps.
#pragma once

#include <chrono>
#include <string>

namespace pagoda::server {

// "2026-12-06T09:05:24.123Z" with `fraction_digits` of the second: 3 (ms) or 6 (us).
std::string utc_time_now(int fraction_digits);
// "2026-12-06T09:05:24Z": a time point to the second.
std::string utc_time(std::chrono::system_clock::time_point t);

}  // namespace pagoda::server
