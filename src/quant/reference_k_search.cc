// The K-quants' encoders' search (reference_k_search.h), pagoda's own: per group, a spread of
// starting scales each refitted by least squares, then Lloyd steps from the best; then the group
// scales are coded against the super-scale, which is itself refitted by least squares, trying
// each code's neighbours; then every element is re-rounded against the scale it will actually be
// decoded with. Every choice minimises a weighted squared error sum w (x - y)^2 with one weight
// per element.
#include "quant/reference_k_search.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/reference_k.h"

namespace pagoda {
namespace {

constexpr int kQK = kSuperBlockSize;

// Lloyd steps per group after the best start; each never increases the group's error. On
// Gaussian data the starts below do most of the work (Q4_K NMSE 6.2e-3 with neither, 5.1e-3
// with the starts alone, 4.9e-3 with both); more steps than this change nothing measurable.
constexpr int kRefineSteps = 4;

// Starting points for the group fits: the extreme values placed kDeltaStep * k quant steps
// beyond (k > 0) or inside (k < 0) the outermost level, k in -kNumDeltas..kNumDeltas.
constexpr int kNumDeltas = 10;
constexpr float kDeltaStep = 0.1f;

// ---- group fitting ----

// Quant of x under x ~= scale * q - offset, q in 0..max_q.
int affine_code(float x, float scale, float offset, int max_q) {
  if (scale == 0.0f) return 0;
  return std::clamp(nearest_int((x + offset) / scale), 0, max_q);
}

// Quant of x under x ~= scale * q, q in -levels..levels-1.
int symmetric_code(float x, float scale, int levels) {
  if (scale == 0.0f) return 0;
  return std::clamp(nearest_int(x / scale), -levels, levels - 1);
}

struct AffineFit {
  float scale;
  float offset;  // >= 0: the formats store a min that is subtracted
};

// w: the elements' weights, here and in every function below that takes x and w.
float affine_error(const float* x, const float* w, int n, int max_q, AffineFit fit) {
  float error = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float diff =
        fit.scale * affine_code(x[j], fit.scale, fit.offset, max_q) - fit.offset - x[j];
    error += w[j] * diff * diff;
  }
  return error;
}

// One Lloyd step: round every x under `fit`, then solve weighted least squares for (scale,
// offset) given those quants. Returns false when the quants leave nothing to fit (all equal,
// or all weights 0).
bool refit_affine(const float* x, const float* w, int n, int max_q, AffineFit* fit) {
  float sum_w = 0.0f, sum_q = 0.0f, sum_qq = 0.0f, sum_x = 0.0f, sum_qx = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float q = static_cast<float>(affine_code(x[j], fit->scale, fit->offset, max_q));
    sum_w += w[j];
    sum_q += w[j] * q;
    sum_qq += w[j] * q * q;
    sum_x += w[j] * x[j];
    sum_qx += w[j] * q * x[j];
  }
  const float det = sum_w * sum_qq - sum_q * sum_q;
  if (!(det > 0.0f)) return false;
  AffineFit next{(sum_w * sum_qx - sum_q * sum_x) / det, 0.0f};
  next.offset = (next.scale * sum_q - sum_x) / sum_w;
  // The unconstrained optimum wants a positive min; the best with offset 0 is then on the
  // boundary, a plain projection of x on q.
  if (next.offset < 0.0f) next = {sum_qx / sum_qq, 0.0f};
  if (!(next.scale > 0.0f)) return false;
  *fit = next;
  return true;
}

// The range an affine group must cover: [min(0, min x), max x] (offset >= 0 forces 0 into it).
void affine_range(const float* x, int n, float* lo, float* hi) {
  *lo = 0.0f;
  *hi = x[0];
  for (int j = 0; j < n; ++j) {
    *lo = std::min(*lo, x[j]);
    *hi = std::max(*hi, x[j]);
  }
}

// That range in max_q steps.
AffineFit plain_affine(const float* x, int n, int max_q) {
  float lo, hi;
  affine_range(x, n, &lo, &hi);
  return {(hi - lo) / static_cast<float>(max_q), -lo};
}

// Tries that range split into max_q + delta steps for a spread of deltas, since stretching the
// steps past the outliers often pays; refits each once and keeps the best, then runs Lloyd
// steps from it.
AffineFit fit_affine(const float* x, const float* w, int n, int max_q) {
  float lo, hi;
  affine_range(x, n, &lo, &hi);
  AffineFit best{(hi - lo) / static_cast<float>(max_q), -lo};
  if (!(best.scale > 0.0f)) return best;  // constant group: offset alone reproduces it
  float best_error = affine_error(x, w, n, max_q, best);
  for (int k = -kNumDeltas; k <= kNumDeltas; ++k) {
    const float steps = static_cast<float>(max_q) + kDeltaStep * static_cast<float>(k);
    AffineFit candidate{(hi - lo) / steps, -lo};
    if (!refit_affine(x, w, n, max_q, &candidate)) continue;
    const float error = affine_error(x, w, n, max_q, candidate);
    if (error < best_error) {
      best = candidate;
      best_error = error;
    }
  }
  for (int step = 0; step < kRefineSteps; ++step) {
    AffineFit next = best;
    if (!refit_affine(x, w, n, max_q, &next)) break;
    const float error = affine_error(x, w, n, max_q, next);
    if (!(error < best_error)) break;
    best = next;
    best_error = error;
  }
  return best;
}

float symmetric_error(const float* x, const float* w, int n, int levels, float scale) {
  float error = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float diff = scale * symmetric_code(x[j], scale, levels) - x[j];
    error += w[j] * diff * diff;
  }
  return error;
}

// Weighted least-squares scale sum(w q x) / sum(w q q) for the quants that `scale` rounds x to;
// 0 when every quant (or weight) is 0.
float refit_symmetric(const float* x, const float* w, int n, int levels, float scale) {
  float sum_qq = 0.0f, sum_qx = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float q = static_cast<float>(symmetric_code(x[j], scale, levels));
    sum_qq += w[j] * q * q;
    sum_qx += w[j] * q * x[j];
  }
  return sum_qq > 0.0f ? sum_qx / sum_qq : 0.0f;
}

// The scale that puts the extreme element on the lone negative level.
float plain_symmetric(const float* x, int n, int levels) {
  return signed_absmax(x, n) / static_cast<float>(-levels);
}

// Tries the extreme element on -(levels + delta) for a spread of deltas (delta = 0 puts it on
// the lone negative level), refits each once, keeps the best and runs Lloyd steps from it.
float fit_symmetric(const float* x, const float* w, int n, int levels) {
  const float extreme = signed_absmax(x, n);
  float best = plain_symmetric(x, n, levels);
  if (best == 0.0f) return 0.0f;
  float best_error = symmetric_error(x, w, n, levels, best);
  for (int k = -kNumDeltas; k <= kNumDeltas; ++k) {
    const float steps = static_cast<float>(levels) + kDeltaStep * static_cast<float>(k);
    const float candidate = refit_symmetric(x, w, n, levels, extreme / -steps);
    if (candidate == 0.0f) continue;
    const float error = symmetric_error(x, w, n, levels, candidate);
    if (error < best_error) {
      best = candidate;
      best_error = error;
    }
  }
  for (int step = 0; step < kRefineSteps; ++step) {
    const float next = refit_symmetric(x, w, n, levels, best);
    if (next == 0.0f) break;
    const float error = symmetric_error(x, w, n, levels, next);
    if (!(error < best_error)) break;
    best = next;
    best_error = error;
  }
  return best;
}

// ---- coding the group fits against F16 super-scales ----
//
// A super-block stores its group scales (and mins) as small integer codes times one F16 step
// each. Steps taken from the largest fit are only a start: F16 rounding and coarse codes can
// move every group's levels the same way, which costs most on flat data (a near-constant row
// lands a fixed distance off). So the start is coded, its steps are refitted by least squares
// with codes and quants held, and each group's codes are tried against their neighbours. That
// is done from two sets of group fits, the searched ones and the plain ones (extreme on the
// outermost level), and the coding with the lower error is kept: on flat data searched fits
// that are equally good alone may disagree across groups where the plain ones agree.

struct Coding {
  uint16_t d_bits = 0;     // F16 step of the scale codes
  uint16_t dmin_bits = 0;  // F16 step of the min codes (affine types only)
  int sc[kQK / 16] = {};
  int m[kQK / 16] = {};
  float error = std::numeric_limits<float>::infinity();  // weighted, over the super-block
};

// Nearest code in 0..max_code to v / step (v >= 0). A nonzero value never gets code 0, which
// would flatten its whole group.
int unsigned_code(float v, float step, int max_code) {
  if (!(step > 0.0f)) return 0;
  const float ratio = std::min(v / step, static_cast<float>(max_code));
  return std::max(nearest_int(ratio), v > 0.0f ? 1 : 0);
}

// Nearest code in -(max_code + 1)..max_code to v / step, never 0 for a nonzero value.
int signed_code(float v, float step, int max_code) {
  if (step == 0.0f) return 0;
  const float limit = static_cast<float>(max_code);
  const float ratio = std::clamp(v / step, -limit - 1.0f, limit);
  const int code = nearest_int(ratio);
  if (code == 0 && v != 0.0f) return ratio > 0.0f ? 1 : -1;
  return code;
}

// Group g's scale and offset as the decoder computes them.
AffineFit coded_affine(const Coding& c, int g) {
  return {fp16_to_fp32(c.d_bits) * static_cast<float>(c.sc[g]),
          fp16_to_fp32(c.dmin_bits) * static_cast<float>(c.m[g])};
}

float affine_coding_error(const float* x, const float* w, int group, int max_q, const Coding& c) {
  float error = 0.0f;
  for (int g = 0; g < kQK / group; ++g) {
    error += affine_error(x + g * group, w + g * group, group, max_q, coded_affine(c, g));
  }
  return error;
}

// Codes the fits against steps taken from their largest scale and offset.
Coding code_affine(const float* x, const float* w, int group, int max_q, int max_code,
                   const AffineFit* fits) {
  float max_scale = 0.0f, max_offset = 0.0f;
  for (int g = 0; g < kQK / group; ++g) {
    max_scale = std::max(max_scale, fits[g].scale);
    max_offset = std::max(max_offset, fits[g].offset);
  }
  Coding c;
  c.d_bits = fp32_to_fp16(max_scale / static_cast<float>(max_code));
  c.dmin_bits = fp32_to_fp16(max_offset / static_cast<float>(max_code));
  const float d = fp16_to_fp32(c.d_bits);  // code against the steps the decoder will see
  const float dmin = fp16_to_fp32(c.dmin_bits);
  for (int g = 0; g < kQK / group; ++g) {
    c.sc[g] = unsigned_code(fits[g].scale, d, max_code);
    c.m[g] = unsigned_code(fits[g].offset, dmin, max_code);
  }
  c.error = affine_coding_error(x, w, group, max_q, c);
  return c;
}

// With every code and quant held, the weighted least-squares steps for x ~= d * (sc q) - dmin *
// m; taken when their F16 values lower the error.
void refit_affine_steps(const float* x, const float* w, int group, int max_q, Coding* c) {
  double aa = 0.0, ab = 0.0, bb = 0.0, ax = 0.0, bx = 0.0;
  for (int e = 0; e < kQK; ++e) {
    const int g = e / group;
    const AffineFit fit = coded_affine(*c, g);
    const double a = c->sc[g] * affine_code(x[e], fit.scale, fit.offset, max_q);
    const double b = c->m[g];
    aa += w[e] * a * a;
    ab += w[e] * a * b;
    bb += w[e] * b * b;
    ax += w[e] * a * x[e];
    bx += w[e] * b * x[e];
  }
  if (!(aa > 0.0)) return;
  double d = 0.0, dmin = fp16_to_fp32(c->dmin_bits);
  const double det = aa * bb - ab * ab;
  if (det > 1e-9 * aa * bb) {
    d = (ax * bb - ab * bx) / det;
    dmin = (ab * ax - aa * bx) / det;
  } else {  // no mins, or mins in proportion to the scales: hold dmin
    d = (ax + dmin * ab) / aa;
  }
  if (dmin < 0.0) {  // the formats subtract their mins
    dmin = 0.0;
    d = ax / aa;
  }
  if (!(d > 0.0)) return;
  Coding next = *c;
  next.d_bits = fp32_to_fp16(static_cast<float>(d));
  next.dmin_bits = fp32_to_fp16(static_cast<float>(dmin));
  next.error = affine_coding_error(x, w, group, max_q, next);
  if (next.error < c->error) *c = next;
}

// Rounding each code alone ignores how scale and min trade off; a neighbour pair often fits
// the group better once both are on their grids.
void polish_affine_codes(const float* x, const float* w, int group, int max_q, int max_code,
                         Coding* c) {
  const float d = fp16_to_fp32(c->d_bits);
  const float dmin = fp16_to_fp32(c->dmin_bits);
  c->error = 0.0f;
  for (int g = 0; g < kQK / group; ++g) {
    const int sc0 = c->sc[g], m0 = c->m[g];
    float best_error = std::numeric_limits<float>::infinity();
    for (int s = std::max(0, sc0 - 1); s <= std::min(max_code, sc0 + 1); ++s) {
      for (int o = std::max(0, m0 - 1); o <= std::min(max_code, m0 + 1); ++o) {
        const AffineFit fit{d * static_cast<float>(s), dmin * static_cast<float>(o)};
        const float error = affine_error(x + g * group, w + g * group, group, max_q, fit);
        if (error < best_error) {
          best_error = error;
          c->sc[g] = s;
          c->m[g] = o;
        }
      }
    }
    c->error += best_error;
  }
}

// The symmetric types have 16 groups of 16.
float symmetric_coding_error(const float* x, const float* w, int levels, const Coding& c) {
  const float d = fp16_to_fp32(c.d_bits);
  float error = 0.0f;
  for (int g = 0; g < 16; ++g) {
    error += symmetric_error(x + g * 16, w + g * 16, 16, levels, d * static_cast<float>(c.sc[g]));
  }
  return error;
}

// Codes the scales against a step that puts the one of largest magnitude on the lone negative
// code.
Coding code_symmetric(const float* x, const float* w, int levels, int max_code,
                      const float* scales) {
  Coding c;
  c.d_bits = fp32_to_fp16(signed_absmax(scales, 16) / static_cast<float>(-(max_code + 1)));
  const float d = fp16_to_fp32(c.d_bits);
  for (int g = 0; g < 16; ++g) c.sc[g] = signed_code(scales[g], d, max_code);
  c.error = symmetric_coding_error(x, w, levels, c);
  return c;
}

// As refit_affine_steps, for x ~= d * (sc q).
void refit_symmetric_steps(const float* x, const float* w, int levels, Coding* c) {
  const float d0 = fp16_to_fp32(c->d_bits);
  double aa = 0.0, ax = 0.0;
  for (int e = 0; e < kQK; ++e) {
    const int sc = c->sc[e / 16];
    const double a = sc * symmetric_code(x[e], d0 * static_cast<float>(sc), levels);
    aa += w[e] * a * a;
    ax += w[e] * a * x[e];
  }
  if (!(aa > 0.0)) return;
  Coding next = *c;
  next.d_bits = fp32_to_fp16(static_cast<float>(ax / aa));
  next.error = symmetric_coding_error(x, w, levels, next);
  if (next.error < c->error) *c = next;
}

// As polish_affine_codes: a neighbour code may fit a group better.
void polish_symmetric_codes(const float* x, const float* w, int levels, int max_code, Coding* c) {
  const float d = fp16_to_fp32(c->d_bits);
  c->error = 0.0f;
  for (int g = 0; g < 16; ++g) {
    const int sc0 = c->sc[g];
    float best_error = std::numeric_limits<float>::infinity();
    for (int s = std::max(-(max_code + 1), sc0 - 1); s <= std::min(max_code, sc0 + 1); ++s) {
      const float error =
          symmetric_error(x + g * 16, w + g * 16, 16, levels, d * static_cast<float>(s));
      if (error < best_error) {
        best_error = error;
        c->sc[g] = s;
      }
    }
    c->error += best_error;
  }
}

}  // namespace

// Codes a super-block whose groups of `group` elements are x ~= d * sc * q - dmin * m: fits
// every group, codes scales and mins with `max_code`, re-rounds every element into q.
void quantize_affine_super_block(const float* x, const float* w, int group, int max_q, int max_code,
                                 uint16_t* d_bits, uint16_t* dmin_bits, int* sc, int* m, int* q) {
  const int num_groups = kQK / group;
  AffineFit searched[kQK / 16], plain[kQK / 16];
  for (int g = 0; g < num_groups; ++g) {
    searched[g] = fit_affine(x + g * group, w + g * group, group, max_q);
    plain[g] = plain_affine(x + g * group, group, max_q);
  }
  Coding best;
  for (const AffineFit* fits : {searched, plain}) {
    Coding c = code_affine(x, w, group, max_q, max_code, fits);
    refit_affine_steps(x, w, group, max_q, &c);
    polish_affine_codes(x, w, group, max_q, max_code, &c);
    if (fits == searched || c.error < best.error) best = c;
  }
  *d_bits = best.d_bits;
  *dmin_bits = best.dmin_bits;
  for (int g = 0; g < num_groups; ++g) {
    sc[g] = best.sc[g];
    m[g] = best.m[g];
  }
  for (int e = 0; e < kQK; ++e) {
    const AffineFit fit = coded_affine(best, e / group);
    q[e] = affine_code(x[e], fit.scale, fit.offset, max_q);
  }
}

// Codes a super-block of 16 groups of 16 as x ~= d * sc * q; q is returned offset by +levels.
uint16_t quantize_symmetric_super_block(const float* x, const float* w, int levels, int max_code,
                                        int* sc, int* q) {
  float searched[16], plain[16];
  for (int g = 0; g < 16; ++g) {
    searched[g] = fit_symmetric(x + g * 16, w + g * 16, 16, levels);
    plain[g] = plain_symmetric(x + g * 16, 16, levels);
  }
  Coding best;
  for (const float* scales : {searched, plain}) {
    Coding c = code_symmetric(x, w, levels, max_code, scales);
    refit_symmetric_steps(x, w, levels, &c);
    polish_symmetric_codes(x, w, levels, max_code, &c);
    if (scales == searched || c.error < best.error) best = c;
  }
  const float d = fp16_to_fp32(best.d_bits);
  for (int g = 0; g < 16; ++g) sc[g] = best.sc[g];
  for (int e = 0; e < kQK; ++e) {
    q[e] = symmetric_code(x[e], d * static_cast<float>(sc[e / 16]), levels) + levels;
  }
  return best.d_bits;
}

// Super-block i's weights: the caller's, or all ones (plain squared error) without them.
const float* super_block_weights(const float* weights, int64_t i) {
  static constexpr auto kUnitWeights = [] {
    std::array<float, kQK> ones{};
    ones.fill(1.0f);
    return ones;
  }();
  return weights != nullptr ? weights + i * kQK : kUnitWeights.data();
}

}  // namespace pagoda
