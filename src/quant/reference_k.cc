// K-quants: 256-element super-blocks split into groups of 16 or 32, each group with its own
// scale (and min) stored as a small integer code times one F16 super-scale.
//
// Dequantizers follow the GGUF formulas with the same float operation order as ggml
// ((d * code) * q - dmin * m), so they reproduce llama.cpp's values bit for bit.
// Quantizers are pagoda's own search (reference_k_search.h), which minimises a weighted squared
// error sum w (x - y)^2 with one weight per element: all ones for quantize_row,
// importance-derived for quantize_row_weighted. A weight of 1 is an exact float
// factor, so the weighted code with unit weights makes the same bytes as plain squared error
// would. On the rows of tests/data/quant_vectors.json the plain error is below llama.cpp's (no
// importance matrix) for every type and row set.
#include "quant/reference_k.h"

#include <algorithm>
#include <cmath>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/reference_k_search.h"

namespace pagoda {
namespace {

constexpr int kQK = kSuperBlockSize;

// ---- Q4_K / Q5_K scale packing ----

// Groups 0..3 keep scale and min in the low 6 bits of bytes g and g + 4; groups 4..7 keep their
// low 4 bits in the nibbles of byte g + 4 and their top 2 bits in the spare top bits of bytes
// g - 4 (scale) and g (min).
void pack_scale_min_k4(const int* scales, const int* mins, uint8_t* packed) {
  for (int g = 0; g < 4; ++g) {
    packed[g] = static_cast<uint8_t>(scales[g] | ((scales[g + 4] >> 4) << 6));
    packed[g + 4] = static_cast<uint8_t>(mins[g] | ((mins[g + 4] >> 4) << 6));
    packed[g + 8] = static_cast<uint8_t>((scales[g + 4] & 0xf) | ((mins[g + 4] & 0xf) << 4));
  }
}

// Two-bit fields of Q2_K / Q3_K: element h*128 + j*32 + l lives in bits 2j of qs[h*32 + l].
int two_bits(const uint8_t* qs, int e) {
  return (qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

void pack_two_bits(const int* q, uint8_t* qs) {
  for (int e = 0; e < kQK; ++e) {
    qs[(e / 128) * 32 + e % 32] |= static_cast<uint8_t>((q[e] & 3) << (2 * ((e % 128) / 32)));
  }
}

}  // namespace

// ---- Q2_K ----

void dequantize_q2_k(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const auto b = load_block<BlockQ2_K>(src, i);
    const float d = fp16_to_fp32(b.d);
    const float dmin = fp16_to_fp32(b.dmin);
    float* y = dst + i * kQK;
    for (int e = 0; e < kQK; ++e) {
      const float dl = d * static_cast<float>(b.scales[e / 16] & 0xf);
      const float ml = dmin * static_cast<float>(b.scales[e / 16] >> 4);
      y[e] = dl * static_cast<float>(two_bits(b.qs, e)) - ml;
    }
  }
}

void quantize_q2_k(const float* src, const float* weights, uint8_t* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    BlockQ2_K b{};
    int sc[16], m[16], q[kQK];
    quantize_affine_super_block(src + i * kQK, super_block_weights(weights, i), 16, 3, 15, &b.d,
                                &b.dmin, sc, m, q);
    for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<uint8_t>(sc[g] | (m[g] << 4));
    pack_two_bits(q, b.qs);
    store_block(b, dst, i);
  }
}

// ---- Q3_K ----

// The 6-bit scale of group g, unbiased to -32..31.
int q3_k_scale(const uint8_t* scales, int g) {
  const int low = (scales[g % 8] >> (4 * (g / 8))) & 0xf;
  const int high = (scales[8 + g % 4] >> (2 * (g / 4))) & 3;
  return (low | (high << 4)) - 32;
}

void dequantize_q3_k(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const auto b = load_block<BlockQ3_K>(src, i);
    const float d = fp16_to_fp32(b.d);
    float* y = dst + i * kQK;
    for (int e = 0; e < kQK; ++e) {
      const float dl = d * static_cast<float>(q3_k_scale(b.scales, e / 16));
      // A set hmask bit means "no -4": the stored high bit is the quant's third bit.
      const int high = (b.hmask[e % 32] >> (e / 32)) & 1;
      y[e] = dl * static_cast<float>(two_bits(b.qs, e) - (high ? 0 : 4));
    }
  }
}

void quantize_q3_k(const float* src, const float* weights, uint8_t* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    BlockQ3_K b{};
    int sc[16], q[kQK];
    b.d = quantize_symmetric_super_block(src + i * kQK, super_block_weights(weights, i), 4, 31, sc,
                                         q);
    for (int g = 0; g < 16; ++g) {
      const int biased = sc[g] + 32;
      b.scales[g % 8] |= static_cast<uint8_t>((biased & 0xf) << (4 * (g / 8)));
      b.scales[8 + g % 4] |= static_cast<uint8_t>((biased >> 4) << (2 * (g / 4)));
    }
    for (int e = 0; e < kQK; ++e) b.hmask[e % 32] |= static_cast<uint8_t>((q[e] >> 2) << (e / 32));
    pack_two_bits(q, b.qs);
    store_block(b, dst, i);
  }
}

// ---- Q4_K / Q5_K ----

void unpack_scale_min_k4(const uint8_t* packed, int g, int* scale, int* min) {
  if (g < 4) {
    *scale = packed[g] & 63;
    *min = packed[g + 4] & 63;
  } else {
    *scale = (packed[g + 4] & 0xf) | ((packed[g - 4] >> 6) << 4);
    *min = (packed[g + 4] >> 4) | ((packed[g] >> 6) << 4);
  }
}

// Decodes one super-block of Q4_K (qh == nullptr) or Q5_K; they differ only in the fifth bit.
void dequantize_k4(uint16_t d_bits, uint16_t dmin_bits, const uint8_t* scales, const uint8_t* qh,
                   const uint8_t* qs, float* y) {
  const float d = fp16_to_fp32(d_bits);
  const float dmin = fp16_to_fp32(dmin_bits);
  for (int g = 0; g < 8; ++g) {
    int sc, m;
    unpack_scale_min_k4(scales, g, &sc, &m);
    const float dl = d * static_cast<float>(sc);
    const float ml = dmin * static_cast<float>(m);
    // Group g is the low (even g) or high (odd g) nibbles of qs[(g / 2) * 32 ..][0..32).
    const uint8_t* nibbles = qs + (g / 2) * 32;
    const int shift = 4 * (g % 2);
    for (int l = 0; l < 32; ++l) {
      int q = (nibbles[l] >> shift) & 0xf;
      if (qh != nullptr) q |= ((qh[l] >> g) & 1) << 4;
      y[g * 32 + l] = dl * static_cast<float>(q) - ml;
    }
  }
}

// Chunk c of qs holds elements c*64 .. +32 in its low nibbles, the next 32 in its high ones;
// bit g of qh[l] is the fifth bit of element g*32 + l.
void pack_levels_k4(const int* q, uint8_t* qs, uint8_t* qh) {
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      qs[c * 32 + l] =
          static_cast<uint8_t>((q[c * 64 + l] & 0xf) | ((q[c * 64 + 32 + l] & 0xf) << 4));
    }
  }
  if (qh == nullptr) return;
  for (int e = 0; e < kQK; ++e) qh[e % 32] |= static_cast<uint8_t>((q[e] >> 4) << (e / 32));
}

void dequantize_q4_k(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const auto b = load_block<BlockQ4_K>(src, i);
    dequantize_k4(b.d, b.dmin, b.scales, nullptr, b.qs, dst + i * kQK);
  }
}

void quantize_q4_k(const float* src, const float* weights, uint8_t* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    BlockQ4_K b{};
    int sc[8], m[8], q[kQK];
    quantize_affine_super_block(src + i * kQK, super_block_weights(weights, i), 32, 15, 63, &b.d,
                                &b.dmin, sc, m, q);
    pack_scale_min_k4(sc, m, b.scales);
    pack_levels_k4(q, b.qs, nullptr);
    store_block(b, dst, i);
  }
}

void dequantize_q5_k(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const auto b = load_block<BlockQ5_K>(src, i);
    dequantize_k4(b.d, b.dmin, b.scales, b.qh, b.qs, dst + i * kQK);
  }
}

void quantize_q5_k(const float* src, const float* weights, uint8_t* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    BlockQ5_K b{};
    int sc[8], m[8], q[kQK];
    quantize_affine_super_block(src + i * kQK, super_block_weights(weights, i), 32, 31, 63, &b.d,
                                &b.dmin, sc, m, q);
    pack_scale_min_k4(sc, m, b.scales);
    pack_levels_k4(q, b.qs, b.qh);
    store_block(b, dst, i);
  }
}

// ---- Q6_K ----

// Element h*128 + j*32 + l: low 4 bits in nibble j / 2 of ql[h*64 + (j % 2)*32 + l], high 2
// bits in bits 2j of qh[h*32 + l].
void pack_levels_q6_k(const int* q, uint8_t* ql, uint8_t* qh) {
  for (int e = 0; e < kQK; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    ql[h * 64 + (j % 2) * 32 + l] |= static_cast<uint8_t>((q[e] & 0xf) << (4 * (j / 2)));
    qh[h * 32 + l] |= static_cast<uint8_t>((q[e] >> 4) << (2 * j));
  }
}

void dequantize_q6_k(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const auto b = load_block<BlockQ6_K>(src, i);
    const float d = fp16_to_fp32(b.d);
    float* y = dst + i * kQK;
    for (int e = 0; e < kQK; ++e) {
      const int h = e / 128, j = (e % 128) / 32, l = e % 32;
      const int low = (b.ql[h * 64 + (j % 2) * 32 + l] >> (4 * (j / 2))) & 0xf;
      const int high = (b.qh[h * 32 + l] >> (2 * j)) & 3;
      y[e] =
          d * static_cast<float>(b.scales[e / 16]) * static_cast<float>((low | (high << 4)) - 32);
    }
  }
}

void quantize_q6_k(const float* src, const float* weights, uint8_t* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    BlockQ6_K b{};
    int sc[16], q[kQK];
    b.d = quantize_symmetric_super_block(src + i * kQK, super_block_weights(weights, i), 32, 127,
                                         sc, q);
    for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<int8_t>(sc[g]);
    pack_levels_q6_k(q, b.ql, b.qh);
    store_block(b, dst, i);
  }
}

// ---- Q8_K ----

void dequantize_q8_k(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const auto b = load_block<BlockQ8_K>(src, i);
    for (int e = 0; e < kQK; ++e) dst[i * kQK + e] = b.d * static_cast<float>(b.qs[e]);
  }
}

void quantize_q8_k(const float* src, uint8_t* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const float* x = src + i * kQK;
    BlockQ8_K b{};
    const float max = signed_absmax(x, kQK);
    if (max != 0.0f) {
      // As ggml: the extreme element lands on -127 (not -128) and d is stored as a float.
      const float iscale = -127.0f / max;
      for (int e = 0; e < kQK; ++e)
        b.qs[e] = static_cast<int8_t>(std::clamp(nearest_int(iscale * x[e]), -128, 127));
      for (int g = 0; g < 16; ++g) {
        int sum = 0;
        for (int l = 0; l < 16; ++l) sum += b.qs[g * 16 + l];
        b.bsums[g] = static_cast<int16_t>(sum);
      }
      b.d = 1.0f / iscale;
    }
    store_block(b, dst, i);
  }
}

}  // namespace pagoda
