#include "server/utc_time.h"

#include <chrono>
#include <cstdio>
#include <ctime>

namespace pagoda::server {

std::string utc_time_now(int fraction_digits) {
  const bool micro = fraction_digits > 3;
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto since = now.time_since_epoch();
  const long long fraction =
      micro ? std::chrono::duration_cast<std::chrono::microseconds>(since).count() % 1000000
            : std::chrono::duration_cast<std::chrono::milliseconds>(since).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[80];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%0*lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, micro ? 6 : 3,
                fraction);
  return buf;
}

std::string utc_time(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace pagoda::server
