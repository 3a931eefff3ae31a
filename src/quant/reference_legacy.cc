// The plain types (F32, F16, BF16) and the legacy 32-element blocks (Q4_0 .. Q8_0): their
// scalar reference codecs, named by the weight-type table (weight_types.cc).
#include "quant/reference_legacy.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/reference_k.h"
#include "quant/reference_weighted.h"

namespace pagoda {

static_assert(std::endian::native == std::endian::little,
              "blocks are byte images of little-endian GGUF data");

// ---- plain types: one "block" per element ----

void dequantize_f32(const uint8_t* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void quantize_f32(const float* src, uint8_t* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void dequantize_f16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(load_block<uint16_t>(src, i));
}
void quantize_f16(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_block(fp32_to_fp16(src[i]), dst, i);
}

void dequantize_bf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load_block<uint16_t>(src, i));
}
void quantize_bf16(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_block(fp32_to_bf16(src[i]), dst, i);
}

// ---- legacy 32-element blocks ----
//
// The quantizers repeat ggml's reference arithmetic operation for operation (same scale
// choice, same truncations, same float expressions) so their bytes match llama.cpp's; the
// Python cross-check test holds them to that.

namespace {

constexpr int kHalf = kBlockSize / 2;

void min_max(const float* x, int n, float* min, float* max) {
  *min = std::numeric_limits<float>::max();
  *max = -std::numeric_limits<float>::max();
  for (int j = 0; j < n; ++j) {
    *min = std::min(*min, x[j]);
    *max = std::max(*max, x[j]);
  }
}

float inverse_or_zero(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

}  // namespace

void dequantize_q4_0(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const auto b = load_block<BlockQ4_0>(src, i);
    const float d = fp16_to_fp32(b.d);
    float* y = dst + i * kBlockSize;
    for (int j = 0; j < kHalf; ++j) {
      y[j] = static_cast<float>((b.qs[j] & 0xf) - 8) * d;
      y[j + kHalf] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
    }
  }
}

void quantize_q4_0(const float* src, uint8_t* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const float* x = src + i * kBlockSize;
    // The extreme value lands on -8, the level that has no positive partner, so all 16 are used.
    const float d = signed_absmax(x, kBlockSize) / -8;
    const float id = inverse_or_zero(d);
    BlockQ4_0 b{};
    b.d = fp32_to_fp16(d);
    for (int j = 0; j < kHalf; ++j) {
      // Truncating v + 8.5 (v >= -8) rounds half up; kept for byte equality with ggml.
      const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int q1 = std::min(15, static_cast<int>(x[j + kHalf] * id + 8.5f));
      b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
    store_block(b, dst, i);
  }
}

void dequantize_q4_1(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const auto b = load_block<BlockQ4_1>(src, i);
    const float d = fp16_to_fp32(b.d);
    const float m = fp16_to_fp32(b.m);
    float* y = dst + i * kBlockSize;
    for (int j = 0; j < kHalf; ++j) {
      y[j] = static_cast<float>(b.qs[j] & 0xf) * d + m;
      y[j + kHalf] = static_cast<float>(b.qs[j] >> 4) * d + m;
    }
  }
}

void quantize_q4_1(const float* src, uint8_t* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const float* x = src + i * kBlockSize;
    float min, max;
    min_max(x, kBlockSize, &min, &max);
    const float d = (max - min) / 15;
    const float id = inverse_or_zero(d);
    BlockQ4_1 b{};
    b.d = fp32_to_fp16(d);
    b.m = fp32_to_fp16(min);
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = std::min(15, static_cast<int>((x[j] - min) * id + 0.5f));
      const int q1 = std::min(15, static_cast<int>((x[j + kHalf] - min) * id + 0.5f));
      b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
    store_block(b, dst, i);
  }
}

namespace {

// Fifth bits of a Q5 block as one word: bit j belongs to element j.
uint32_t load_qh(const uint8_t (&qh)[4]) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof(bits));
  return bits;
}

}  // namespace

void dequantize_q5_0(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const auto b = load_block<BlockQ5_0>(src, i);
    const float d = fp16_to_fp32(b.d);
    const uint32_t qh = load_qh(b.qh);
    float* y = dst + i * kBlockSize;
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = (b.qs[j] & 0xf) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int q1 = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + kHalf)) & 1u) << 4);
      y[j] = static_cast<float>(q0 - 16) * d;
      y[j + kHalf] = static_cast<float>(q1 - 16) * d;
    }
  }
}

namespace {

// Packs 32 five-bit quants: low nibbles as in Q4_0, fifth bits into qh.
void pack_q5(const int* q, uint8_t* qs, uint8_t (&qh)[4]) {
  uint32_t high = 0;
  for (int j = 0; j < kHalf; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0xf) | ((q[j + kHalf] & 0xf) << 4));
    high |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    high |= static_cast<uint32_t>((q[j + kHalf] >> 4) & 1) << (j + kHalf);
  }
  std::memcpy(qh, &high, sizeof(high));
}

}  // namespace

void quantize_q5_0(const float* src, uint8_t* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const float* x = src + i * kBlockSize;
    const float d = signed_absmax(x, kBlockSize) / -16;  // extreme on -16, as in Q4_0
    const float id = inverse_or_zero(d);
    int q[kBlockSize];
    for (int j = 0; j < kBlockSize; ++j) q[j] = std::min(31, static_cast<int>(x[j] * id + 16.5f));
    BlockQ5_0 b{};
    b.d = fp32_to_fp16(d);
    pack_q5(q, b.qs, b.qh);
    store_block(b, dst, i);
  }
}

void dequantize_q5_1(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const auto b = load_block<BlockQ5_1>(src, i);
    const float d = fp16_to_fp32(b.d);
    const float m = fp16_to_fp32(b.m);
    const uint32_t qh = load_qh(b.qh);
    float* y = dst + i * kBlockSize;
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = (b.qs[j] & 0xf) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int q1 = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + kHalf)) & 1u) << 4);
      y[j] = static_cast<float>(q0) * d + m;
      y[j + kHalf] = static_cast<float>(q1) * d + m;
    }
  }
}

void quantize_q5_1(const float* src, uint8_t* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const float* x = src + i * kBlockSize;
    float min, max;
    min_max(x, kBlockSize, &min, &max);
    const float d = (max - min) / 31;
    const float id = inverse_or_zero(d);
    int q[kBlockSize];
    for (int j = 0; j < kBlockSize; ++j) {
      q[j] = std::min(31, static_cast<int>((x[j] - min) * id + 0.5f));
    }
    BlockQ5_1 b{};
    b.d = fp32_to_fp16(d);
    b.m = fp32_to_fp16(min);
    pack_q5(q, b.qs, b.qh);
    store_block(b, dst, i);
  }
}

void dequantize_q8_0(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const auto b = load_block<BlockQ8_0>(src, i);
    const float d = fp16_to_fp32(b.d);
    float* y = dst + i * kBlockSize;
    for (int j = 0; j < kBlockSize; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
  }
}

void quantize_q8_0(const float* src, uint8_t* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const float* x = src + i * kBlockSize;
    float amax = 0.0f;
    for (int j = 0; j < kBlockSize; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;  // symmetric: -128 is never used, as in ggml
    const float id = inverse_or_zero(d);
    BlockQ8_0 b{};
    b.d = fp32_to_fp16(d);
    // roundf (half away from zero), not nearbyint: ggml's choice, kept for byte equality.
    for (int j = 0; j < kBlockSize; ++j) b.qs[j] = static_cast<int8_t>(std::round(x[j] * id));
    store_block(b, dst, i);
  }
}

// ---- legacy blocks, importance-weighted (the searches are in reference_weighted.cc) ----

namespace {

// Nibble j of a block's qs holds element j, its high nibble element j + 16, as in Q4_0.
void pack_nibbles(const int* q, uint8_t* qs) {
  for (int j = 0; j < kHalf; ++j) qs[j] = static_cast<uint8_t>(q[j] | (q[j + kHalf] << 4));
}

}  // namespace

void quantize_q4_0_weighted(const float* src, const float* weights, uint8_t* dst,
                            int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const BlockFit fit = fit_symmetric_block(src + i * kBlockSize, weights + i * kBlockSize, 8);
    BlockQ4_0 b{};
    b.d = fit.d_bits;
    pack_nibbles(fit.q, b.qs);
    store_block(b, dst, i);
  }
}

void quantize_q4_1_weighted(const float* src, const float* weights, uint8_t* dst,
                            int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const BlockFit fit = fit_affine_block(src + i * kBlockSize, weights + i * kBlockSize, 15);
    BlockQ4_1 b{};
    b.d = fit.d_bits;
    b.m = fit.m_bits;
    pack_nibbles(fit.q, b.qs);
    store_block(b, dst, i);
  }
}

void quantize_q5_0_weighted(const float* src, const float* weights, uint8_t* dst,
                            int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const BlockFit fit = fit_symmetric_block(src + i * kBlockSize, weights + i * kBlockSize, 16);
    BlockQ5_0 b{};
    b.d = fit.d_bits;
    pack_q5(fit.q, b.qs, b.qh);
    store_block(b, dst, i);
  }
}

void quantize_q5_1_weighted(const float* src, const float* weights, uint8_t* dst,
                            int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const BlockFit fit = fit_affine_block(src + i * kBlockSize, weights + i * kBlockSize, 31);
    BlockQ5_1 b{};
    b.d = fit.d_bits;
    b.m = fit.m_bits;
    pack_q5(fit.q, b.qs, b.qh);
    store_block(b, dst, i);
  }
}

}  // namespace pagoda
