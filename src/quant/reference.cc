#include "quant/reference.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/checked.h"
#include "core/error.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/reference_k.h"

namespace pagoda {
namespace {

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

// Fifth bits of a Q5 block as one word: bit j belongs to element j.
uint32_t load_qh(const uint8_t (&qh)[4]) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof(bits));
  return bits;
}

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

// ---- the dispatch table ----

using DequantizeFn = void (*)(const uint8_t* src, float* dst, int64_t num_blocks);
using QuantizeFn = void (*)(const float* src, uint8_t* dst, int64_t num_blocks);

struct Codec {
  DType type;
  DequantizeFn dequantize;
  QuantizeFn quantize;
};

constexpr Codec kCodecs[] = {
    {DType::kF32, dequantize_f32, quantize_f32},    {DType::kF16, dequantize_f16, quantize_f16},
    {DType::kBF16, dequantize_bf16, quantize_bf16}, {DType::kQ4_0, dequantize_q4_0, quantize_q4_0},
    {DType::kQ4_1, dequantize_q4_1, quantize_q4_1}, {DType::kQ5_0, dequantize_q5_0, quantize_q5_0},
    {DType::kQ5_1, dequantize_q5_1, quantize_q5_1}, {DType::kQ8_0, dequantize_q8_0, quantize_q8_0},
    {DType::kQ2_K, dequantize_q2_k, quantize_q2_k}, {DType::kQ3_K, dequantize_q3_k, quantize_q3_k},
    {DType::kQ4_K, dequantize_q4_k, quantize_q4_k}, {DType::kQ5_K, dequantize_q5_k, quantize_q5_k},
    {DType::kQ6_K, dequantize_q6_k, quantize_q6_k}, {DType::kQ8_K, dequantize_q8_k, quantize_q8_k},
};

const Codec* find_codec(DType type) {
  for (const auto& codec : kCodecs) {
    if (codec.type == type) return &codec;
  }
  return nullptr;
}

// The codec for `type` and the number of blocks in n elements; throws on either being wrong.
const Codec& codec_and_blocks(const char* what, DType type, int64_t n, int64_t* num_blocks) {
  const Codec* codec = find_codec(type);
  if (codec == nullptr) fail(what, ": no reference code for type ", dtype_traits(type).name);
  row_bytes(type, n);  // validates n
  *num_blocks = n / dtype_traits(type).block_size;
  return *codec;
}

}  // namespace

size_t row_bytes(DType type, int64_t n) {
  const DTypeTraits& traits = dtype_traits(type);
  if (n < 0 || n % traits.block_size != 0) {
    fail("a row of ", n, " elements is not a whole number of ", traits.name, " blocks of ",
         traits.block_size);
  }
  const auto bytes = checked_mul(static_cast<uint64_t>(n / traits.block_size), traits.type_size);
  if (!bytes || *bytes > std::numeric_limits<size_t>::max()) {
    fail("a row of ", n, " ", traits.name, " elements is too large to address");
  }
  return static_cast<size_t>(*bytes);
}

bool can_dequantize(DType type) { return find_codec(type) != nullptr; }
bool can_quantize(DType type) { return find_codec(type) != nullptr; }

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  int64_t num_blocks = 0;
  const Codec& codec = codec_and_blocks("dequantize_row", type, n, &num_blocks);
  codec.dequantize(static_cast<const uint8_t*>(src), dst, num_blocks);
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  int64_t num_blocks = 0;
  const Codec& codec = codec_and_blocks("quantize_row", type, n, &num_blocks);
  codec.quantize(src, static_cast<uint8_t*>(dst), num_blocks);
}

}  // namespace pagoda
