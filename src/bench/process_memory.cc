// Resident memory from /proc/self/status (see process_memory.h).
#include "bench/process_memory.h"

#include <fstream>
#include <sstream>

namespace pagoda::bench {
namespace {

// The value of "key:   N kB" in bytes.
std::optional<uint64_t> field_bytes(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(key.size() + 1));
    uint64_t value = 0;
    std::string unit;
    if (!(fields >> value)) return std::nullopt;
    fields >> unit;
    return unit == "kB" ? value * 1024 : value;
  }
  return std::nullopt;
}

}  // namespace

std::optional<ProcessMemory> parse_proc_status(const std::string& text) {
  const auto rss = field_bytes(text, "VmRSS");
  const auto peak = field_bytes(text, "VmHWM");
  if (!rss || !peak) return std::nullopt;
  return ProcessMemory{*rss, *peak};
}

std::optional<ProcessMemory> read_process_memory() {
  std::ifstream in("/proc/self/status");
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return parse_proc_status(text.str());
}

}  // namespace pagoda::bench
