// Overflow-safe arithmetic for sizes and offsets read from untrusted files.
#pragma once

#include <cstdint>
#include <optional>

namespace pagoda {

inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Rounds up to a multiple of `align` (> 0); nullopt on overflow.
inline std::optional<uint64_t> checked_align(uint64_t value, uint64_t align) {
  auto bumped = checked_add(value, align - 1);
  if (!bumped) return std::nullopt;
  return *bumped / align * align;
}

}  // namespace pagoda
