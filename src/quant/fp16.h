// IEEE half (F16) and bfloat16 (BF16) <-> float, bit-exact with round-to-nearest-even.
//
// Everything works on raw 16-bit patterns: weight blocks store halves as uint16_t so that a
// block struct is a plain byte image of the file. All functions are constexpr so tests can
// check edge cases at compile time, and inline because the dequantizers call them per block.
#pragma once

#include <bit>
#include <cstdint>

namespace pagoda {

// Half -> float is exact for every half, including subnormals, infinities and NaN payloads.
constexpr float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in float (10 bits times a power of two).
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  if (exponent == 31) {  // Inf (mantissa 0) or NaN, payload kept in the top mantissa bits
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  }
  // Rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Float -> half, round to nearest, ties to even; overflow gives Inf, NaN stays NaN (quiet).
constexpr uint16_t fp32_to_fp16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {
    // Keep the top payload bits and force the quiet bit so a payload that lives only in the
    // low bits cannot turn into Inf.
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  // 65520 = 0x477ff000 is halfway between the largest half (65504) and 2^16; ties go to the
  // even neighbour, which is 2^16, i.e. Inf. Inf itself lands here too.
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude < 0x38800000u) {  // below 2^-14: the result is a half subnormal or zero
    const uint32_t exponent = magnitude >> 23;
    // Below 2^-25 (half the smallest subnormal) everything rounds to zero; this also keeps
    // the shift below under 32.
    if (exponent < 102) return static_cast<uint16_t>(sign);
    const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
    // value / 2^-24 = significand * 2^(exponent - 126); shift is 14..24.
    const uint32_t shift = 126 - exponent;
    uint32_t result = significand >> shift;
    const uint32_t remainder = significand & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return static_cast<uint16_t>(sign | result);  // 0x400 after a carry is the smallest normal
  }
  // Normal half: rebias 127 -> 15 and round away 13 mantissa bits; a carry into the exponent
  // is the correct result (and cannot reach Inf, which the bound above excluded).
  const uint32_t rebiased = magnitude - (112u << 23);
  const uint32_t rounded = (rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13;
  return static_cast<uint16_t>(sign | rounded);
}

// BF16 is the top half of a float, so widening is a shift.
constexpr float bf16_to_fp32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

// Float -> bfloat16, round to nearest, ties to even; as ggml does it, so files written by
// pagoda match files written by llama.cpp bit for bit. Subnormals are kept (no flush to zero).
constexpr uint16_t fp32_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    // Truncating a NaN could clear every payload bit left and give Inf; set the quiet bit.
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  // Overflow past the largest bf16 carries into the exponent and yields Inf, as it should.
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace pagoda
