#include "core/memory.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace pagoda {
namespace {

std::optional<uint64_t> read_number(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  try {
    return std::stoull(text);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB",
                static_cast<double>(bytes) / double(uint64_t{1} << 30));
  return buf;
}

}  // namespace

std::optional<uint64_t> available_memory_bytes() {
  std::optional<uint64_t> available;
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    uint64_t kib = 0;
    if (fields >> kib) available = kib * 1024;
  }
  const auto limit = read_number("/sys/fs/cgroup/memory.max");
  const auto used = read_number("/sys/fs/cgroup/memory.current");
  if (limit && used) {
    const uint64_t left = *limit > *used ? *limit - *used : 0;
    if (!available || left < *available) available = left;
  }
  return available;
}

void check_memory_available(uint64_t bytes, const std::string& what, const std::string& hint) {
  const auto available = available_memory_bytes();
  if (!available || bytes <= *available) return;
  fail(what, " needs ", gib(bytes), " but only ", gib(*available), " of memory are available; ",
       hint);
}

}  // namespace pagoda
