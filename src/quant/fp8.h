// FP8 E4M3 (the "fn" variant Hopper GPUs compute in: 1 sign, 4 exponent bits with bias 7,
// 3 mantissa bits, no infinities, only 0x7f / 0xff are NaN, largest finite 448, subnormals
// down to 2^-9) <-> float. Like fp16.h: raw bit patterns, constexpr, round to nearest even.
#pragma once

#include <bit>
#include <cstdint>

namespace pagoda {

inline constexpr float kFp8E4M3Max = 448.0f;

// The code's bits placed in a half: sign to bit 15, exponent and mantissa to bits 13..7. The
// half then reads 2^-8 times the E4M3 value, for every code including subnormals (both formats
// have a leading zero there), so a vector unit decodes with a shift and its F16 conversion and
// folds the 2^8 into a scale it multiplies by anyway.
constexpr uint16_t fp8_e4m3_as_scaled_fp16(uint8_t code) {
  return static_cast<uint16_t>(((code & 0x80u) << 8) | ((code & 0x7fu) << 7));
}
inline constexpr float kFp8AsFp16Scale = 256.0f;

// Exact for every code but the two NaNs (read as ±480; the encoder never writes them).
constexpr float fp8_e4m3_to_fp32(uint8_t code) {
  const uint32_t exponent = (code >> 3) & 0xfu, mantissa = code & 7u;
  const float magnitude = exponent == 0
                              ? static_cast<float>(mantissa) * 0x1p-9f
                              : std::bit_cast<float>(((exponent + 120) << 23) | (mantissa << 20));
  return (code & 0x80u) ? -magnitude : magnitude;
}

// Float -> E4M3, round to nearest, ties to even; saturates at ±448 (never writes NaN); a NaN
// input gives 0, since a KV cache or weight must not poison every sum it enters.
constexpr uint8_t fp32_to_fp8_e4m3(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return 0;
  const float a = std::bit_cast<float>(magnitude);
  if (a >= kFp8E4M3Max) return sign | 0x7e;
  if (a < 0x1p-6f) {
    // Subnormal: a multiple of 2^-9. a * 512 < 8 is exact; round half to even by hand (a
    // constexpr cannot call nearbyint). 8 is the smallest normal's code, so the carry is right.
    const float scaled = a * 512.0f;
    auto whole = static_cast<uint32_t>(scaled);
    const float rest = scaled - static_cast<float>(whole);
    if (rest > 0.5f || (rest == 0.5f && (whole & 1u))) ++whole;
    return static_cast<uint8_t>(sign | whole);
  }
  // Normal: keep 3 of 23 mantissa bits, rounding to even; a carry into the exponent is right,
  // and a < 448 keeps the result at most 448 (0x7e).
  const uint32_t rounded = (magnitude + 0x7ffffu + ((magnitude >> 20) & 1u)) >> 20;
  const uint32_t code = rounded - (120u << 3);  // rebias 127 -> 7 (exponent sits above 3 bits)
  return static_cast<uint8_t>(sign | (code > 0x7eu ? 0x7eu : code));
}

}  // namespace pagoda
