// How much memory this process can still take, so a KV cache or buffer that cannot fit is
// refused with a message before the kernel kills the process for it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace pagoda {

// Bytes the process could still allocate: the smaller of /proc/meminfo's MemAvailable and what
// is left under a cgroup v2 memory.max. nullopt where neither can be read.
std::optional<uint64_t> available_memory_bytes();

// Throws Error when `bytes` exceed available_memory_bytes(): "<what> needs X GiB but only Y GiB
// are available; <hint>". Does nothing where the figure is unknown.
void check_memory_available(uint64_t bytes, const std::string& what, const std::string& hint);

}  // namespace pagoda
