// The portable level: every kernel in plain C++, computing the same integer sums as the SIMD
// levels (so all levels agree up to float summation order). Weight blocks are decoded one at a
// time into signed 8-bit quants plus scales, then dotted with every token of the tile, so even
// here a weight block is decoded once per tile rather than once per token.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/ops.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/fp8.h"

namespace pagoda::cpu {
namespace {

constexpr int kTileTokens = 4;

template <typename Block>
Block load(const uint8_t* row, int64_t i) {
  Block b;
  std::memcpy(&b, row + i * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return b;
}

// ---- activation quantization ----

// q = round(x * 127 / amax) (nearest-even, as the SIMD levels' cvtps2dq); returns amax.
float quantize_block(const float* x, int n, int8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int i = 0; i < n; ++i) q[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
  return amax;
}

float round_f16(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }

void quantize_q8(const float* x, int64_t cols, uint8_t* out) {
  int8_t* qs = reinterpret_cast<int8_t*>(out);
  float* d = reinterpret_cast<float*>(out + cols);
  auto* s = reinterpret_cast<int32_t*>(d + cols / kQ8Block);
  float* sm = d + 2 * (cols / kQ8Block);
  for (int64_t b = 0; b < cols / kQ8Block; ++b) {
    int8_t* q = qs + b * kQ8Block;
    const float step = quantize_block(x + b * kQ8Block, kQ8Block, q) / 127.0f;
    int sum = 0;
    for (int i = 0; i < kQ8Block; ++i) sum += q[i];
    d[b] = round_f16(step);
    s[b] = sum;
    sm[b] = round_f16(step * static_cast<float>(sum));
  }
}

void quantize_q8k(const float* x, int64_t cols, uint8_t* out) {
  int8_t* qs = reinterpret_cast<int8_t*>(out);
  float* d = reinterpret_cast<float*>(out + cols);
  int16_t* bsums = reinterpret_cast<int16_t*>(d + cols / kQ8KBlock);
  for (int64_t b = 0; b < cols / kQ8KBlock; ++b) {
    const float amax = quantize_block(x + b * kQ8KBlock, kQ8KBlock, qs + b * kQ8KBlock);
    d[b] = amax > 0.0f ? 1.0f / (127.0f / amax) : 0.0f;
  }
  for (int64_t g = 0; g < cols / 16; ++g) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += qs[g * 16 + i];
    bsums[g] = static_cast<int16_t>(sum);
  }
}

// ---- legacy types (blocks of 32, Q8 activations) ----

// Each decodes block i of a row into signed quants q with x = d * q + m.
struct DecodedBlock {
  int8_t q[kBlockSize];
  float d;
  float m;
};

void decode_q4_0(const uint8_t* row, int64_t i, DecodedBlock* out) {
  const auto b = load<BlockQ4_0>(row, i);
  for (int j = 0; j < 16; ++j) {
    out->q[j] = static_cast<int8_t>((b.qs[j] & 0xf) - 8);
    out->q[j + 16] = static_cast<int8_t>((b.qs[j] >> 4) - 8);
  }
  out->d = fp16_to_fp32(b.d);
  out->m = 0.0f;
}

void decode_q4_1(const uint8_t* row, int64_t i, DecodedBlock* out) {
  const auto b = load<BlockQ4_1>(row, i);
  for (int j = 0; j < 16; ++j) {
    out->q[j] = static_cast<int8_t>(b.qs[j] & 0xf);
    out->q[j + 16] = static_cast<int8_t>(b.qs[j] >> 4);
  }
  out->d = fp16_to_fp32(b.d);
  out->m = fp16_to_fp32(b.m);
}

template <typename Block>
void decode_5bit(const Block& b, int offset, DecodedBlock* out) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  for (int j = 0; j < 16; ++j) {
    out->q[j] = static_cast<int8_t>(((b.qs[j] & 0xf) | ((qh >> j) & 1) << 4) - offset);
    out->q[j + 16] = static_cast<int8_t>(((b.qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - offset);
  }
  out->d = fp16_to_fp32(b.d);
}

void decode_q5_0(const uint8_t* row, int64_t i, DecodedBlock* out) {
  decode_5bit(load<BlockQ5_0>(row, i), 16, out);
  out->m = 0.0f;
}

void decode_q5_1(const uint8_t* row, int64_t i, DecodedBlock* out) {
  const auto b = load<BlockQ5_1>(row, i);
  decode_5bit(b, 0, out);
  out->m = fp16_to_fp32(b.m);
}

void decode_q8_0(const uint8_t* row, int64_t i, DecodedBlock* out) {
  const auto b = load<BlockQ8_0>(row, i);
  std::memcpy(out->q, b.qs, kBlockSize);
  out->d = fp16_to_fp32(b.d);
  out->m = 0.0f;
}

// IQ4_NL: the grid values themselves are the signed quants, as Q8_0's are.
void decode_iq4_nl(const uint8_t* row, int64_t i, DecodedBlock* out) {
  const auto b = load<BlockIQ4_NL>(row, i);
  for (int j = 0; j < 16; ++j) {
    out->q[j] = kIQ4Values[b.qs[j] & 0xf];
    out->q[j + 16] = kIQ4Values[b.qs[j] >> 4];
  }
  out->d = fp16_to_fp32(b.d);
  out->m = 0.0f;
}

// MXFP4: the doubled E2M1 grid values are the signed quants, the halved E8M0 exponent the scale.
void decode_mxfp4(const uint8_t* row, int64_t i, DecodedBlock* out) {
  const auto b = load<BlockMXFP4>(row, i);
  for (int j = 0; j < 16; ++j) {
    out->q[j] = kFP4Values[b.qs[j] & 0xf];
    out->q[j + 16] = kFP4Values[b.qs[j] >> 4];
  }
  out->d = e8m0_half(b.e);
  out->m = 0.0f;
}

// IQ4_XS: block i is sub-block i % 8 of super-block i / 8, dotted as an IQ4_NL block whose
// scale is the super-scale times the sub-block's 6-bit multiple (an exact float product).
void decode_iq4_xs(const uint8_t* row, int64_t i, DecodedBlock* out) {
  const auto b = load<BlockIQ4_XS>(row, i / 8);
  const int s = static_cast<int>(i % 8);
  const uint8_t* qs = b.qs + 16 * s;
  for (int j = 0; j < 16; ++j) {
    out->q[j] = kIQ4Values[qs[j] & 0xf];
    out->q[j + 16] = kIQ4Values[qs[j] >> 4];
  }
  const int ls = ((b.scales_l[s / 2] >> (4 * (s % 2))) & 0xf) | (((b.scales_h >> (2 * s)) & 3) << 4);
  out->d = fp16_to_fp32(b.d) * static_cast<float>(ls - 32);
  out->m = 0.0f;
}

template <void (*Decode)(const uint8_t*, int64_t, DecodedBlock*)>
void tile_legacy(const uint8_t* w, size_t w_stride, int num_rows, const uint8_t* x,
                 size_t x_stride, int num_tokens, int64_t cols, float* y, int64_t y_stride) {
  for (int r = 0; r < num_rows; ++r) {
    float acc[kTileTokens] = {};
    for (int64_t b = 0; b < cols / kBlockSize; ++b) {
      DecodedBlock blk;
      Decode(w + r * w_stride, b, &blk);
      for (int t = 0; t < num_tokens; ++t) {
        const uint8_t* xt = x + t * x_stride;
        const int8_t* xq = act_qs(xt) + b * kBlockSize;
        int32_t sum = 0;
        for (int j = 0; j < kBlockSize; ++j) sum += blk.q[j] * xq[j];
        acc[t] += blk.d * act_d(xt, cols)[b] * static_cast<float>(sum) +
                  blk.m * act_sm(xt, cols)[b];
      }
    }
    for (int t = 0; t < num_tokens; ++t) y[t * y_stride + r] = acc[t];
  }
}

// ---- FP8_E4M3 (blocks of 32, F32 activations) ----

// Codes decoded exactly to floats and dotted with the float activations; each block's sum is
// then scaled: acc += d * sum. No 8-bit activations: E4M3 values need 18-bit integers.
void tile_fp8(const uint8_t* w, size_t w_stride, int num_rows, const uint8_t* x, size_t x_stride,
              int num_tokens, int64_t cols, float* y, int64_t y_stride) {
  for (int r = 0; r < num_rows; ++r) {
    float acc[kTileTokens] = {};
    for (int64_t b = 0; b < cols / kBlockSize; ++b) {
      const auto blk = load<BlockFP8>(w + r * w_stride, b);
      float v[kBlockSize];
      for (int j = 0; j < kBlockSize; ++j) v[j] = fp8_e4m3_to_fp32(blk.qs[j]);
      const float d = fp16_to_fp32(blk.d);
      for (int t = 0; t < num_tokens; ++t) {
        const float* xt = reinterpret_cast<const float*>(x + t * x_stride) + b * kBlockSize;
        float sum = 0.0f;
        for (int j = 0; j < kBlockSize; ++j) sum += v[j] * xt[j];
        acc[t] += d * sum;
      }
    }
    for (int t = 0; t < num_tokens; ++t) y[t * y_stride + r] = acc[t];
  }
}

// ---- 2- and 3-bit i-quants (float activations) ----

// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S: each super-block decoded to floats by the reference
// decoder (quant/weight_types.h; bit for bit the gguf package's values) and dotted with the float
// activations; acc += the block's sum. Decoded once per tile, so once per row and kTileTokens
// tokens. The simplest correct path: these types carry a scale per 32 (IQ2_XS: per 16) times a
// grid magnitude up to 62, which no 8-bit quant plus one scale per 32 holds.
template <DType kType>
void tile_iq_low(const uint8_t* w, size_t w_stride, int num_rows, const uint8_t* x,
                 size_t x_stride, int num_tokens, int64_t cols, float* y, int64_t y_stride) {
  static const DequantizeBlocksFn decode = find_weight_type(kType)->dequantize;
  static const int64_t block_bytes = dtype_traits(kType).type_size;
  for (int r = 0; r < num_rows; ++r) {
    float acc[kTileTokens] = {};
    for (int64_t b = 0; b < cols / kSuperBlockSize; ++b) {
      float v[kSuperBlockSize];
      decode(w + r * w_stride + b * block_bytes, v, 1);
      for (int t = 0; t < num_tokens; ++t) {
        const float* xt = reinterpret_cast<const float*>(x + t * x_stride) + b * kSuperBlockSize;
        float sum = 0.0f;
        for (int j = 0; j < kSuperBlockSize; ++j) sum += v[j] * xt[j];
        acc[t] += sum;
      }
    }
    for (int t = 0; t < num_tokens; ++t) y[t * y_stride + r] = acc[t];
  }
}

// ---- K-quants (super-blocks of 256, Q8K activations) ----

// x = d * sc[g] * q - dmin * mn[g] for element e of group g = e / 16.
struct DecodedSuperBlock {
  int8_t q[kSuperBlockSize];
  int sc[16];
  int mn[16];
  float d;
  float dmin;
};

// Q2_K / Q3_K: element h*128 + j*32 + l is bits 2j..2j+1 of qs[h*32 + l].
int two_bits(const uint8_t* qs, int e) {
  return (qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

void decode_q2_k(const uint8_t* row, int64_t i, DecodedSuperBlock* out) {
  const auto b = load<BlockQ2_K>(row, i);
  for (int e = 0; e < kSuperBlockSize; ++e) out->q[e] = static_cast<int8_t>(two_bits(b.qs, e));
  for (int g = 0; g < 16; ++g) {
    out->sc[g] = b.scales[g] & 0xf;
    out->mn[g] = b.scales[g] >> 4;
  }
  out->d = fp16_to_fp32(b.d);
  out->dmin = fp16_to_fp32(b.dmin);
}

void decode_q3_k(const uint8_t* row, int64_t i, DecodedSuperBlock* out) {
  const auto b = load<BlockQ3_K>(row, i);
  for (int e = 0; e < kSuperBlockSize; ++e) {
    const int high = (b.hmask[e % 32] >> (e / 32)) & 1;  // set: no -4
    out->q[e] = static_cast<int8_t>(two_bits(b.qs, e) - (high ? 0 : 4));
  }
  for (int g = 0; g < 16; ++g) {
    const int low = (b.scales[g % 8] >> (4 * (g / 8))) & 0xf;
    const int high = (b.scales[8 + g % 4] >> (2 * (g / 4))) & 3;
    out->sc[g] = (low | (high << 4)) - 32;
    out->mn[g] = 0;
  }
  out->d = fp16_to_fp32(b.d);
  out->dmin = 0.0f;
}

// Q4_K / Q5_K: scale and min of group g (of 32) packed in 6 bits each.
void unpack_scale_min_k4(const uint8_t* packed, int g, int* scale, int* min) {
  if (g < 4) {
    *scale = packed[g] & 63;
    *min = packed[g + 4] & 63;
  } else {
    *scale = (packed[g + 4] & 0xf) | ((packed[g - 4] >> 6) << 4);
    *min = (packed[g + 4] >> 4) | ((packed[g] >> 6) << 4);
  }
}

void decode_k4(uint16_t d, uint16_t dmin, const uint8_t* scales, const uint8_t* qh,
               const uint8_t* qs, DecodedSuperBlock* out) {
  for (int g = 0; g < 8; ++g) {
    int sc, m;
    unpack_scale_min_k4(scales, g, &sc, &m);
    out->sc[2 * g] = out->sc[2 * g + 1] = sc;
    out->mn[2 * g] = out->mn[2 * g + 1] = m;
    for (int l = 0; l < 32; ++l) {
      int q = (qs[(g / 2) * 32 + l] >> (4 * (g % 2))) & 0xf;
      if (qh != nullptr) q |= ((qh[l] >> g) & 1) << 4;
      out->q[g * 32 + l] = static_cast<int8_t>(q);
    }
  }
  out->d = fp16_to_fp32(d);
  out->dmin = fp16_to_fp32(dmin);
}

void decode_q4_k(const uint8_t* row, int64_t i, DecodedSuperBlock* out) {
  const auto b = load<BlockQ4_K>(row, i);
  decode_k4(b.d, b.dmin, b.scales, nullptr, b.qs, out);
}

void decode_q5_k(const uint8_t* row, int64_t i, DecodedSuperBlock* out) {
  const auto b = load<BlockQ5_K>(row, i);
  decode_k4(b.d, b.dmin, b.scales, b.qh, b.qs, out);
}

void decode_q6_k(const uint8_t* row, int64_t i, DecodedSuperBlock* out) {
  const auto b = load<BlockQ6_K>(row, i);
  for (int e = 0; e < kSuperBlockSize; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    const int low = (b.ql[h * 64 + (j % 2) * 32 + l] >> (4 * (j / 2))) & 0xf;
    const int high = (b.qh[h * 32 + l] >> (2 * j)) & 3;
    out->q[e] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
  for (int g = 0; g < 16; ++g) {
    out->sc[g] = b.scales[g];
    out->mn[g] = 0;
  }
  out->d = fp16_to_fp32(b.d);
  out->dmin = 0.0f;
}

template <void (*Decode)(const uint8_t*, int64_t, DecodedSuperBlock*)>
void tile_kquant(const uint8_t* w, size_t w_stride, int num_rows, const uint8_t* x,
                 size_t x_stride, int num_tokens, int64_t cols, float* y, int64_t y_stride) {
  for (int r = 0; r < num_rows; ++r) {
    float acc[kTileTokens] = {};
    for (int64_t b = 0; b < cols / kSuperBlockSize; ++b) {
      DecodedSuperBlock blk;
      Decode(w + r * w_stride, b, &blk);
      for (int t = 0; t < num_tokens; ++t) {
        const uint8_t* xt = x + t * x_stride;
        const int8_t* xq = act_qs(xt) + b * kSuperBlockSize;
        const int16_t* bsums = act_bsums(xt, cols) + b * 16;
        int32_t sum_q = 0, sum_m = 0;
        for (int g = 0; g < 16; ++g) {
          int32_t sum = 0;
          for (int l = 0; l < 16; ++l) sum += blk.q[g * 16 + l] * xq[g * 16 + l];
          sum_q += blk.sc[g] * sum;
          sum_m += blk.mn[g] * bsums[g];
        }
        const float dx = act_d(xt, cols)[b];
        acc[t] += blk.d * dx * static_cast<float>(sum_q) - blk.dmin * dx * static_cast<float>(sum_m);
      }
    }
    for (int t = 0; t < num_tokens; ++t) y[t * y_stride + r] = acc[t];
  }
}

// ---- float weights (F32 activations) ----

void to_float(DType type, const uint8_t* row, int64_t first, int n, float* out) {
  for (int i = 0; i < n; ++i) {
    const int64_t c = first + i;
    if (type == DType::kF32) {
      std::memcpy(&out[i], row + c * 4, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, row + c * 2, 2);
      out[i] = type == DType::kF16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
    }
  }
}

template <DType kType>
void tile_float(const uint8_t* w, size_t w_stride, int num_rows, const uint8_t* x,
                size_t x_stride, int num_tokens, int64_t cols, float* y, int64_t y_stride) {
  constexpr int kChunk = 64;
  for (int r = 0; r < num_rows; ++r) {
    float acc[kTileTokens] = {};
    float buf[kChunk];
    for (int64_t c0 = 0; c0 < cols; c0 += kChunk) {
      const int n = static_cast<int>(std::min<int64_t>(kChunk, cols - c0));
      to_float(kType, w + r * w_stride, c0, n, buf);
      for (int t = 0; t < num_tokens; ++t) {
        const float* xt = reinterpret_cast<const float*>(x + t * x_stride) + c0;
        float sum = 0.0f;
        for (int i = 0; i < n; ++i) sum += buf[i] * xt[i];
        acc[t] += sum;
      }
    }
    for (int t = 0; t < num_tokens; ++t) y[t * y_stride + r] = acc[t];
  }
}

// ---- attention ----

// Element d of the key in slot o of a key slab, or of a value row: F32 / F16 values, or a
// Q8_0 / FP8 code (as float, without its scale).
float kv_element(const void* base, KvType type, int64_t i) {
  switch (type) {
    case KvType::kF32: return static_cast<const float*>(base)[i];
    case KvType::kF16: return fp16_to_fp32(static_cast<const uint16_t*>(base)[i]);
    case KvType::kQ8_0: return static_cast<float>(static_cast<const int8_t*>(base)[i]);
    case KvType::kFp8: return fp8_e4m3_to_fp32(static_cast<const uint8_t*>(base)[i]);
  }
  return 0.0f;
}

float kv_scale(const void* scales, int64_t i) {
  uint16_t h;
  std::memcpy(&h, static_cast<const uint8_t*>(scales) + 2 * i, 2);
  return fp16_to_fp32(h);
}

void qk_block(const float* const* q, int num_rows, const void* k, KvType type, int64_t dim,
              int block_size, float* scores, int64_t s_stride) {
  const bool quantized = kv_quantized(type);
  const int64_t group = quantized ? kKvGroup : dim;
  const void* scales = static_cast<const uint8_t*>(k) + dim * block_size;
  for (int r = 0; r < num_rows; ++r) {
    for (int o = 0; o < block_size; ++o) {
      float score = 0.0f;
      for (int64_t c0 = 0; c0 < dim; c0 += group) {
        float even = 0.0f, odd = 0.0f;
        for (int64_t c = c0; c < std::min(dim, c0 + group); ++c) {
          float& sum = c % 2 == 0 ? even : odd;
          sum = std::fma(q[r][c], kv_element(k, type, c * block_size + o), sum);
        }
        score = quantized ? std::fma(even + odd, kv_scale(scales, c0 / group * block_size + o), score)
                          : even + odd;
      }
      scores[r * s_stride + o] = score;
    }
  }
}

void pv_rows(const float* p, int64_t p_stride, int num_rows, const void* const* v, KvType type,
             int num_values, int64_t dim, float* out, int64_t out_stride) {
  const bool quantized = kv_quantized(type);
  for (int r = 0; r < num_rows; ++r) {
    float* o = out + r * out_stride;
    std::fill(o, o + dim, 0.0f);
    for (int j = 0; j < num_values; ++j) {
      const float w = p[r * p_stride + j];
      const void* scales = static_cast<const uint8_t*>(v[j]) + dim;
      for (int64_t c = 0; c < dim; ++c) {
        const float x = kv_element(v[j], type, c);
        o[c] = std::fma(w, quantized ? x * kv_scale(scales, c / kKvGroup) : x, o[c]);
      }
    }
  }
}

// ---- vector ops ----

float dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

float sum_squares(const float* x, int64_t n) { return dot(x, x, n); }

void scale_mul(const float* x, float s, const float* w, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s * w[i];
}

float exp_shift_sum(float* x, int64_t n, float shift) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - shift));
  return sum;
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void gelu_mul(const float* gate, const float* up, int64_t n, float* out) {
  constexpr float kSqrt2OverPi = 0.7978845608f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * up[i];
  }
}

void add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void scale(float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

float scale_max(float* x, float s, int64_t n) {
  float top = (x[0] *= s);
  for (int64_t i = 1; i < n; ++i) top = std::max(top, x[i] *= s);
  return top;
}

void f16_to_f32(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

void f32_to_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void set(Kernels& k, DType type, ActFormat act, TileFn tile) {
  k.matmul[dtype_index(type)] = {act, tile, 1, kTileTokens};
}

}  // namespace

void fill_scalar_kernels(Kernels& k) {
  k.level = CpuLevel::kScalar;
  set(k, DType::kF32, ActFormat::kF32, tile_float<DType::kF32>);
  set(k, DType::kF16, ActFormat::kF32, tile_float<DType::kF16>);
  set(k, DType::kBF16, ActFormat::kF32, tile_float<DType::kBF16>);
  set(k, DType::kQ4_0, ActFormat::kQ8, tile_legacy<decode_q4_0>);
  set(k, DType::kQ4_1, ActFormat::kQ8, tile_legacy<decode_q4_1>);
  set(k, DType::kQ5_0, ActFormat::kQ8, tile_legacy<decode_q5_0>);
  set(k, DType::kQ5_1, ActFormat::kQ8, tile_legacy<decode_q5_1>);
  set(k, DType::kQ8_0, ActFormat::kQ8, tile_legacy<decode_q8_0>);
  set(k, DType::kIQ4_NL, ActFormat::kQ8, tile_legacy<decode_iq4_nl>);
  set(k, DType::kIQ4_XS, ActFormat::kQ8, tile_legacy<decode_iq4_xs>);
  set(k, DType::kMXFP4, ActFormat::kQ8, tile_legacy<decode_mxfp4>);
  set(k, DType::kFP8_E4M3, ActFormat::kF32, tile_fp8);
  set(k, DType::kIQ2_XXS, ActFormat::kF32, tile_iq_low<DType::kIQ2_XXS>);
  set(k, DType::kIQ2_XS, ActFormat::kF32, tile_iq_low<DType::kIQ2_XS>);
  set(k, DType::kIQ2_S, ActFormat::kF32, tile_iq_low<DType::kIQ2_S>);
  set(k, DType::kIQ3_XXS, ActFormat::kF32, tile_iq_low<DType::kIQ3_XXS>);
  set(k, DType::kIQ3_S, ActFormat::kF32, tile_iq_low<DType::kIQ3_S>);
  set(k, DType::kQ2_K, ActFormat::kQ8K, tile_kquant<decode_q2_k>);
  set(k, DType::kQ3_K, ActFormat::kQ8K, tile_kquant<decode_q3_k>);
  set(k, DType::kQ4_K, ActFormat::kQ8K, tile_kquant<decode_q4_k>);
  set(k, DType::kQ5_K, ActFormat::kQ8K, tile_kquant<decode_q5_k>);
  set(k, DType::kQ6_K, ActFormat::kQ8K, tile_kquant<decode_q6_k>);
  k.quantize_q8 = quantize_q8;
  k.quantize_q8k = quantize_q8k;
  k.qk_block = qk_block;
  k.pv_rows = pv_rows;
  k.f16_to_f32 = f16_to_f32;
  k.f32_to_f16 = f32_to_f16;
  k.dot = dot;
  k.axpy = axpy;
  k.sum_squares = sum_squares;
  k.scale_mul = scale_mul;
  k.exp_shift_sum = exp_shift_sum;
  k.silu_mul = silu_mul;
  k.gelu_mul = gelu_mul;
  k.add = add;
  k.scale = scale;
  k.scale_max = scale_max;
  k.low_rank_down = low_rank_down_scalar;
  k.low_rank_up = low_rank_up_scalar;
}

const Kernels& cpu_kernels(CpuLevel level) {
  static const auto tables = [] {
    struct Tables {
      Kernels levels[3];
    } t;
    // A level the CPU lacks is never filled: its fill function, compiled for that ISA, may
    // itself use the ISA's instructions (SIGILL). Asked for, it gives the CPU's own level.
    const int detected = static_cast<int>(detected_cpu_level());
    for (int l = 0; l < 3; ++l) {
      Kernels& k = t.levels[l];
      if (l > detected) {
        k = t.levels[detected];
        continue;
      }
      fill_scalar_kernels(k);
      if (l >= static_cast<int>(CpuLevel::kAvx2)) fill_avx2_kernels(k);
      if (l >= static_cast<int>(CpuLevel::kAvx512)) fill_avx512_kernels(k);
      k.level = static_cast<CpuLevel>(l);
    }
    return t;
  }();
  return tables.levels[static_cast<int>(level)];
}

}  // namespace pagoda::cpu
