// The process's resident memory from /proc/self/status (Linux): VmRSS now and VmHWM, the peak
// resident set since the process started.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace pagoda::bench {

struct ProcessMemory {
  uint64_t rss_bytes = 0;       // VmRSS
  uint64_t peak_rss_bytes = 0;  // VmHWM
};

// nullopt where /proc/self/status is missing or lacks the fields.
std::optional<ProcessMemory> read_process_memory();
// The fields of a /proc/<pid>/status text ("VmHWM:\t  123456 kB"); nullopt when absent.
std::optional<ProcessMemory> parse_proc_status(const std::string& text);

}  // namespace pagoda::bench
