#include "quant/reference.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/checked.h"
#include "core/error.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/reference_iq.h"
#include "quant/reference_k.h"
#include "quant/reference_weighted.h"

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

// ---- legacy blocks, importance-weighted (the searches are in reference_weighted.cc) ----

// Nibble j of a block's qs holds element j, its high nibble element j + 16, as in Q4_0.
void pack_nibbles(const int* q, uint8_t* qs) {
  for (int j = 0; j < kHalf; ++j) qs[j] = static_cast<uint8_t>(q[j] | (q[j + kHalf] << 4));
}

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

// ---- the dispatch tables ----

using DequantizeFn = void (*)(const uint8_t* src, float* dst, int64_t num_blocks);
using QuantizeFn = void (*)(const float* src, uint8_t* dst, int64_t num_blocks);
// weights: one per element of src, nullptr for all ones where the function allows it.
using WeightedQuantizeFn = void (*)(const float* src, const float* weights, uint8_t* dst,
                                    int64_t num_blocks);

// The K-quants' searches take weights; without them every element weighs 1.
template <WeightedQuantizeFn quantize>
void unit_weights(const float* src, uint8_t* dst, int64_t num_blocks) {
  quantize(src, nullptr, dst, num_blocks);
}

struct Codec {
  DType type;
  DequantizeFn dequantize;
  QuantizeFn quantize;
};

constexpr Codec kCodecs[] = {
    {DType::kF32, dequantize_f32, quantize_f32},
    {DType::kF16, dequantize_f16, quantize_f16},
    {DType::kBF16, dequantize_bf16, quantize_bf16},
    {DType::kQ4_0, dequantize_q4_0, quantize_q4_0},
    {DType::kQ4_1, dequantize_q4_1, quantize_q4_1},
    {DType::kQ5_0, dequantize_q5_0, quantize_q5_0},
    {DType::kQ5_1, dequantize_q5_1, quantize_q5_1},
    {DType::kQ8_0, dequantize_q8_0, quantize_q8_0},
    {DType::kQ2_K, dequantize_q2_k, unit_weights<quantize_q2_k>},
    {DType::kQ3_K, dequantize_q3_k, unit_weights<quantize_q3_k>},
    {DType::kQ4_K, dequantize_q4_k, unit_weights<quantize_q4_k>},
    {DType::kQ5_K, dequantize_q5_k, unit_weights<quantize_q5_k>},
    {DType::kQ6_K, dequantize_q6_k, unit_weights<quantize_q6_k>},
    {DType::kQ8_K, dequantize_q8_k, quantize_q8_k},
    {DType::kIQ4_NL, dequantize_iq4_nl, unit_weights<quantize_iq4_nl>},
    {DType::kIQ4_XS, dequantize_iq4_xs, unit_weights<quantize_iq4_xs>},
};

const Codec* find_codec(DType type) {
  for (const auto& codec : kCodecs) {
    if (codec.type == type) return &codec;
  }
  return nullptr;
}

// The types with a weighted search, and how each turns importance into per-element weights:
// w = importance * sqrt(sigma2 + x^2), sigma2 = sigma2_factor * the mean square of the row
// (legacy types), of each super-block (K types, IQ4_XS) or of each block of 32 (IQ4_NL). The
// spans and factors are llama.cpp's (it doubles sigma2 for Q3_K, Q4_K, Q5_K and the IQ4 types);
// its Q6_K weighs by importance alone, but here Q6_K follows the same formula as the rest,
// with Q2_K's factor, so that one rule holds for every type.
struct WeightedCodec {
  DType type;
  WeightedQuantizeFn quantize;
  int64_t span;  // elements sharing one sigma2; 0 for the whole row
  float sigma2_factor;
};

constexpr WeightedCodec kWeightedCodecs[] = {
    {DType::kQ4_0, quantize_q4_0_weighted, 0, 1.0f},
    {DType::kQ4_1, quantize_q4_1_weighted, 0, 1.0f},
    {DType::kQ5_0, quantize_q5_0_weighted, 0, 1.0f},
    {DType::kQ5_1, quantize_q5_1_weighted, 0, 1.0f},
    {DType::kQ2_K, quantize_q2_k, kSuperBlockSize, 1.0f},
    {DType::kQ3_K, quantize_q3_k, kSuperBlockSize, 2.0f},
    {DType::kQ4_K, quantize_q4_k, kSuperBlockSize, 2.0f},
    {DType::kQ5_K, quantize_q5_k, kSuperBlockSize, 2.0f},
    {DType::kQ6_K, quantize_q6_k, kSuperBlockSize, 1.0f},
    {DType::kIQ4_NL, quantize_iq4_nl, kBlockSize, 2.0f},
    {DType::kIQ4_XS, quantize_iq4_xs, kSuperBlockSize, 2.0f},
};

const WeightedCodec* find_weighted_codec(DType type) {
  for (const auto& codec : kWeightedCodecs) {
    if (codec.type == type) return &codec;
  }
  return nullptr;
}

void check_importance(const float* importance, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!(std::isfinite(importance[i]) && importance[i] >= 0.0f)) {
      fail("quantize_row_weighted: importance[", i, "] is ", importance[i],
           "; it must be finite and non-negative");
    }
  }
}

// w[0..n) for n elements that share one sigma2.
void span_weights(const float* x, const float* importance, int64_t n, double sigma2_factor,
                  double* w) {
  double sum_x2 = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_x2 += static_cast<double>(x[i]) * x[i];
  const double sigma2 = sigma2_factor * sum_x2 / static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) {
    w[i] = importance[i] * std::sqrt(sigma2 + static_cast<double>(x[i]) * x[i]);
  }
}

// The row's weights, divided by the largest (in double, before anything can overflow a
// float): scaling every weight alike changes no choice, and this keeps the searches' float sums
// far from float's limits whatever scale the importance matrix has. Empty when every weight
// is 0.
std::vector<float> row_weights(const WeightedCodec& codec, const float* x, const float* importance,
                               int64_t n) {
  std::vector<double> w(static_cast<size_t>(n));
  const int64_t span = codec.span > 0 ? codec.span : n;
  for (int64_t i = 0; i < n; i += span) {
    span_weights(x + i, importance + i, span, codec.sigma2_factor, w.data() + i);
  }
  const double max = n > 0 ? *std::max_element(w.begin(), w.end()) : 0.0;
  if (!(max > 0.0)) return {};
  std::vector<float> normalized(w.size());
  for (size_t i = 0; i < w.size(); ++i) normalized[i] = static_cast<float>(w[i] / max);
  return normalized;
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

void quantize_row_weighted(DType type, const float* src, void* dst, int64_t n,
                           const float* importance) {
  const WeightedCodec* codec = find_weighted_codec(type);
  if (importance == nullptr || codec == nullptr) {
    quantize_row(type, src, dst, n);
    return;
  }
  row_bytes(type, n);  // validates n
  check_importance(importance, n);
  const std::vector<float> weights = row_weights(*codec, src, importance, n);
  if (weights.empty()) {  // nothing to prefer: every encoding has weighted error 0
    quantize_row(type, src, dst, n);
    return;
  }
  codec->quantize(src, weights.data(), static_cast<uint8_t*>(dst),
                  n / dtype_traits(type).block_size);
}

}  // namespace pagoda
