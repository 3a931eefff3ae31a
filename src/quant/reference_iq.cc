// IQ4_NL and IQ4_XS: 4-bit indices into a fixed non-linear grid (kIQ4Values, quant/blocks.h)
// times a signed scale per 32 elements. The grid is not evenly spaced, so no closed form gives
// the best scale: the search tries a spread of scales that put the block's extreme element near
// either end of the grid, takes each value's nearest level, refits the scale by (weighted)
// least squares with the levels held, and keeps the scale with the lowest error as it will
// decode (F16-rounded where the format stores it so). IQ4_XS then codes the eight sub-block
// scales as 6-bit multiples of one F16 super-scale, trying a few super-scales and, per
// sub-block, the multiples either side of the nearest.
#include "quant/reference_iq.h"

#include <algorithm>
#include <cmath>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/reference_k.h"

namespace pagoda {

// NaN (a zero scale's 0/0 is never formed: callers check) would land on the last.
int iq4_nearest_index(float v) {
  const int8_t* end = kIQ4Values + 16;
  const int i = static_cast<int>(std::upper_bound(kIQ4Values, end, v) - kIQ4Values);
  if (i == 0) return 0;
  if (i == 16) return 15;
  return v - static_cast<float>(kIQ4Values[i - 1]) <= static_cast<float>(kIQ4Values[i]) - v ? i - 1
                                                                                            : i;
}

namespace {

constexpr int kGroup = 32;                         // elements per scale, in both types
constexpr int kGroups = kSuperBlockSize / kGroup;  // sub-blocks of an IQ4_XS super-block

// Starting scales: the extreme element on kIQ4Values' end (-127 or 113) times
// 1 + kSpreadStep * k, k in -kNumSpreads..kNumSpreads. Shrinking the end lets the extreme
// overshoot the grid a little so the crowded inner levels fit the bulk better; stretching it
// does the opposite; the refit then settles between.
constexpr int kNumSpreads = 10;
constexpr float kSpreadStep = 0.015f;
constexpr int kRefineSteps = 4;  // Lloyd steps after the best start, kept while they help

// IQ4_XS: super-scales tried around each of the two that code the largest sub-block scale
// exactly (as -32 or as 31 times it), as factors 1 + kSuperStep * k, |k| <= kNumSuperSpreads.
constexpr int kNumSuperSpreads = 2;
constexpr float kSuperStep = 0.02f;

// The level index every element takes under scale s; a zero scale decodes everything to 0,
// and the level nearest 0 is the natural index for it.
void pick_indices(const float* x, int n, float s, int* idx) {
  const float inv = s != 0.0f ? 1.0f / s : 0.0f;
  for (int j = 0; j < n; ++j) {
    idx[j] = s != 0.0f ? iq4_nearest_index(x[j] * inv) : iq4_nearest_index(0.0f);
  }
}

double weight_of(const float* w, int j) { return w != nullptr ? w[j] : 1.0; }

// sum w (x - s * grid[index])^2 with each element on its nearest level.
double scale_error(const float* x, const float* w, int n, float s) {
  int idx[kGroup];
  pick_indices(x, n, s, idx);
  double error = 0.0;
  for (int j = 0; j < n; ++j) {
    const double diff = static_cast<double>(x[j]) - static_cast<double>(s) * kIQ4Values[idx[j]];
    error += weight_of(w, j) * diff * diff;
  }
  return error;
}

// The least-squares scale for the levels that scale s picks; s itself when they leave nothing
// to fit (all weights 0).
float refit(const float* x, const float* w, int n, float s) {
  int idx[kGroup];
  pick_indices(x, n, s, idx);
  double sqx = 0.0, sqq = 0.0;
  for (int j = 0; j < n; ++j) {
    const double q = kIQ4Values[idx[j]];
    sqx += weight_of(w, j) * q * x[j];
    sqq += weight_of(w, j) * q * q;
  }
  return sqq > 0.0 ? static_cast<float>(sqx / sqq) : s;
}

float as_f16(float s) { return fp16_to_fp32(fp32_to_fp16(s)); }

// The best scale for one group of n <= 32 elements; judged as stored (F16) when `f16`.
float search_scale(const float* x, const float* w, int n, bool f16) {
  const float max = signed_absmax(x, n);
  if (max == 0.0f) return 0.0f;
  auto stored = [f16](float s) { return f16 ? as_f16(s) : s; };
  float best = 0.0f;
  double best_error = scale_error(x, w, n, 0.0f);
  auto consider = [&](float s) {
    s = stored(s);
    if (!std::isfinite(s)) return false;
    const double error = scale_error(x, w, n, s);
    if (!(error < best_error)) return false;
    best = s;
    best_error = error;
    return true;
  };
  for (const int end : {0, 15}) {
    for (int k = -kNumSpreads; k <= kNumSpreads; ++k) {
      const float start = max / (static_cast<float>(kIQ4Values[end]) *
                                 (1.0f + kSpreadStep * static_cast<float>(k)));
      consider(start);
      consider(refit(x, w, n, start));
    }
  }
  for (int step = 0; step < kRefineSteps; ++step) {
    if (!consider(refit(x, w, n, best))) break;
  }
  return best;
}

void pack_indices(const int* idx, uint8_t* qs) {
  for (int j = 0; j < kGroup / 2; ++j) {
    qs[j] = static_cast<uint8_t>(idx[j] | (idx[j + kGroup / 2] << 4));
  }
}

double decoded_error(const float* x, const float* w, const float* y, int n) {
  double error = 0.0;
  for (int j = 0; j < n; ++j) {
    const double diff = static_cast<double>(x[j]) - y[j];
    error += weight_of(w, j) * diff * diff;
  }
  return error;
}

BlockIQ4_NL encode_nl(const float* x, const float* w) {
  const float s = search_scale(x, w, kGroup, true);
  int idx[kGroup];
  pick_indices(x, kGroup, s, idx);
  BlockIQ4_NL b{};
  b.d = fp32_to_fp16(s);
  pack_indices(idx, b.qs);
  return b;
}

// An IQ4_XS super-block with super-scale d (as stored) and every sub-block's best 6-bit
// multiple of it near `scales`; returns its error.
double encode_xs_with(const float* x, const float* w, const float* scales, float d,
                      BlockIQ4_XS* b) {
  *b = BlockIQ4_XS{};
  b->d = fp32_to_fp16(d);
  double total = 0.0;
  for (int g = 0; g < kGroups; ++g) {
    const float* xg = x + g * kGroup;
    const float* wg = w != nullptr ? w + g * kGroup : nullptr;
    const int nearest =
        d != 0.0f ? static_cast<int>(std::clamp(std::nearbyint(scales[g] / d), -32.0f, 31.0f)) : 0;
    int best_l = nearest;
    double best_error = scale_error(xg, wg, kGroup, d * static_cast<float>(nearest));
    for (const int l : {nearest - 1, nearest + 1}) {
      if (l < -32 || l > 31 || d == 0.0f) continue;
      const double error = scale_error(xg, wg, kGroup, d * static_cast<float>(l));
      if (error < best_error) {
        best_l = l;
        best_error = error;
      }
    }
    total += best_error;
    int idx[kGroup];
    pick_indices(xg, kGroup, d * static_cast<float>(best_l), idx);
    pack_indices(idx, b->qs + g * kGroup / 2);
    const int ls = best_l + 32;
    b->scales_l[g / 2] |= static_cast<uint8_t>((ls & 0xf) << (4 * (g % 2)));
    b->scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * g));
  }
  return total;
}

BlockIQ4_XS encode_xs(const float* x, const float* w) {
  float scales[kGroups];
  for (int g = 0; g < kGroups; ++g) {
    scales[g] =
        search_scale(x + g * kGroup, w != nullptr ? w + g * kGroup : nullptr, kGroup, false);
  }
  const float max_scale = signed_absmax(scales, kGroups);
  BlockIQ4_XS best;
  double best_error = encode_xs_with(x, w, scales, 0.0f, &best);
  if (max_scale == 0.0f) return best;
  for (const float base : {max_scale / -32.0f, max_scale / 31.0f}) {
    for (int k = -kNumSuperSpreads; k <= kNumSuperSpreads; ++k) {
      const float d = as_f16(base * (1.0f + kSuperStep * static_cast<float>(k)));
      if (!std::isfinite(d)) continue;
      BlockIQ4_XS b;
      const double error = encode_xs_with(x, w, scales, d, &b);
      if (error < best_error) {
        best = b;
        best_error = error;
      }
    }
  }
  return best;
}

void decode_nl(const BlockIQ4_NL& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int j = 0; j < kGroup / 2; ++j) {
    y[j] = d * static_cast<float>(kIQ4Values[b.qs[j] & 0xf]);
    y[j + kGroup / 2] = d * static_cast<float>(kIQ4Values[b.qs[j] >> 4]);
  }
}

void decode_xs(const BlockIQ4_XS& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int g = 0; g < kGroups; ++g) {
    const int ls = iq4_xs_scale_code(b, g);
    const float dl = d * static_cast<float>(ls - 32);
    const uint8_t* qs = b.qs + g * kGroup / 2;
    float* yg = y + g * kGroup;
    for (int j = 0; j < kGroup / 2; ++j) {
      yg[j] = dl * static_cast<float>(kIQ4Values[qs[j] & 0xf]);
      yg[j + kGroup / 2] = dl * static_cast<float>(kIQ4Values[qs[j] >> 4]);
    }
  }
}

// With weights, the block searched for them or the unweighted one, whichever decodes with the
// lower weighted error: the weighted search starts from other scales and could, rarely, end
// worse than the plain one on the very error it minimises.
template <typename Block, Block (*Encode)(const float*, const float*),
          void (*Decode)(const Block&, float*), int kSize>
Block encode_best(const float* x, const float* w) {
  const Block plain = Encode(x, nullptr);
  if (w == nullptr) return plain;
  const Block weighted = Encode(x, w);
  float y_plain[kSize], y_weighted[kSize];
  Decode(plain, y_plain);
  Decode(weighted, y_weighted);
  return decoded_error(x, w, y_weighted, kSize) <= decoded_error(x, w, y_plain, kSize) ? weighted
                                                                                       : plain;
}

}  // namespace

void dequantize_iq4_nl(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    decode_nl(load_block<BlockIQ4_NL>(src, i), dst + i * kGroup);
  }
}

void dequantize_iq4_xs(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    decode_xs(load_block<BlockIQ4_XS>(src, i), dst + i * kSuperBlockSize);
  }
}

void quantize_iq4_nl(const float* src, const float* weights, uint8_t* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const float* w = weights != nullptr ? weights + i * kGroup : nullptr;
    store_block(encode_best<BlockIQ4_NL, encode_nl, decode_nl, kGroup>(src + i * kGroup, w), dst,
                i);
  }
}

void quantize_iq4_xs(const float* src, const float* weights, uint8_t* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const float* w = weights != nullptr ? weights + i * kSuperBlockSize : nullptr;
    store_block(encode_best<BlockIQ4_XS, encode_xs, decode_xs, kSuperBlockSize>(
                    src + i * kSuperBlockSize, w),
                dst, i);
  }
}

}  // namespace pagoda
