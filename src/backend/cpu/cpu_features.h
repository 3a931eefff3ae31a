// Which instruction-set level the CPU backend runs at. Chosen once from the CPU (and the
// PAGODA_CPU_LEVEL environment variable), read by every op at its entry point; tests force a
// level to check each code path against the reference backend on one machine.
#pragma once

#include <optional>
#include <string_view>

namespace pagoda {

enum class CpuLevel {
  kScalar = 0,  // portable C++, always present
  kAvx2 = 1,    // AVX2 + FMA + F16C
  kAvx512 = 2,  // kAvx2 + AVX512F/BW/VL/VNNI (256-bit vectors: 32 registers and VPDPBUSD)
};

// The best level this CPU supports.
CpuLevel detected_cpu_level();
// The level ops run at: the detected one, lowered by PAGODA_CPU_LEVEL=scalar|avx2|avx512 (a
// level above what the CPU has is ignored), or the one forced for tests.
CpuLevel active_cpu_level();
// Forces `level` (clamped to the detected one) until reset with nullopt. Not thread-safe with
// running ops: call between them.
void set_cpu_level_for_testing(std::optional<CpuLevel> level);

std::string_view cpu_level_name(CpuLevel level);
std::optional<CpuLevel> cpu_level_from_name(std::string_view name);

}  // namespace pagoda
