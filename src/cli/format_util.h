// Small text helpers for command output.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace pagoda::cli {

inline std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

// A context past what the model was trained on runs, but its output degrades: say so.
inline void warn_past_trained_context(int64_t context, uint32_t trained) {
  if (trained == 0 || context <= static_cast<int64_t>(trained)) return;
  std::fprintf(stderr,
               "warning: a context of %lld tokens is longer than the %u the model was trained "
               "on; expect worse output past that point\n",
               static_cast<long long>(context), trained);
}

}  // namespace pagoda::cli
