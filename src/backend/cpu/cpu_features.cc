#include "backend/cpu/cpu_features.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace pagoda {
namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// CPUID leaf 1, ECX bit 29 (some compilers' __builtin_cpu_supports has no "f16c").
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

CpuLevel detect() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
  if (!avx2) return CpuLevel::kScalar;
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return avx512 ? CpuLevel::kAvx512 : CpuLevel::kAvx2;
#else
  return CpuLevel::kScalar;
#endif
}

CpuLevel from_environment(CpuLevel detected) {
  const char* value = std::getenv("PAGODA_CPU_LEVEL");
  if (value == nullptr) return detected;
  std::optional<CpuLevel> wanted = cpu_level_from_name(value);
  return wanted ? std::min(*wanted, detected) : detected;
}

// -1: nothing forced.
std::atomic<int> g_forced{-1};

}  // namespace

CpuLevel detected_cpu_level() {
  static const CpuLevel level = detect();
  return level;
}

CpuLevel active_cpu_level() {
  static const CpuLevel configured = from_environment(detected_cpu_level());
  const int forced = g_forced.load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<CpuLevel>(forced) : configured;
}

void set_cpu_level_for_testing(std::optional<CpuLevel> level) {
  g_forced.store(level ? static_cast<int>(std::min(*level, detected_cpu_level())) : -1,
                 std::memory_order_relaxed);
}

std::string_view cpu_level_name(CpuLevel level) {
  switch (level) {
    case CpuLevel::kScalar: return "scalar";
    case CpuLevel::kAvx2: return "avx2";
    case CpuLevel::kAvx512: return "avx512";
  }
  return "?";
}

std::optional<CpuLevel> cpu_level_from_name(std::string_view name) {
  for (CpuLevel level : {CpuLevel::kScalar, CpuLevel::kAvx2, CpuLevel::kAvx512}) {
    if (name == cpu_level_name(level)) return level;
  }
  return std::nullopt;
}

}  // namespace pagoda
