// Importance-weighted fits of the legacy blocks. ggml's plain code takes a block's scale (and
// min) from its extremes alone; with weights, the elements that matter should land near a
// level even if the others pay for it. The search starts from the plain fit and from scales
// stretched and shrunk around it, refits each by weighted least squares with its quants held,
// then runs Lloyd steps (re-round, refit) from the best. Each candidate is judged as it will
// decode: scale and min rounded to F16, every quant re-rounded against them. The plain fit is
// one of the candidates, and its nearest quants decode no worse than ggml's truncated ones, so
// the weighted error never exceeds quantize_row's.
#include "quant/reference_weighted.h"

#include <algorithm>
#include <cmath>

#include "quant/fp16.h"
#include "quant/reference_k.h"

namespace pagoda {
namespace {

// Starting scales: the plain one times 1 + step * k, k in -spreads..spreads, then up to
// `refine` Lloyd steps after the best start, each kept only while it lowers the error. A
// weighted block often has one or two elements that outweigh the rest; each start puts them
// on different levels, and the refit then lands the heaviest almost exactly.
struct SearchSpan {
  int spreads;
  float step;
  int refine;
};
// Q5_0, Q4_1 and Q5_1 gain from the wide search. Q4_0's 16 levels do not: the weights are an
// estimate, and the widest fits trade the lighter elements for the heaviest ones, which raises
// KL against F32 (the narrow span beats llama.cpp's imatrix Q4_0 on both tiny models where the
// wide one lost to it). A source already on a coarse grid (a decoded Q4_1 file) is the
// exception: there a wide search can land whole blocks on the grid and wins (docs/BENCHMARKS.md,
// "Q4_0's scale search"); the span is chosen for weights trained in float.
constexpr SearchSpan kWideSearch{16, 0.025f, 4};
constexpr SearchSpan kQ4_0Search{6, 0.0125f, 0};

// y = d * (q - bias) + m, q in 0..max_q: Q4_0 / Q5_0 are bias = levels with m = 0 (adding 0
// changes no float), Q4_1 / Q5_1 are bias = 0.
struct Grid {
  float d;
  float m;
  int bias;
  int max_q;
  bool affine;  // whether m is free; else it stays 0
};

// The nearest level; clamping before rounding keeps a huge ratio (tiny scale) defined.
int encode(const Grid& g, float x) {
  const float v = (x - g.m) / g.d + static_cast<float>(g.bias);
  if (!(g.d != 0.0f) || std::isnan(v)) return g.bias;
  return static_cast<int>(std::nearbyint(std::clamp(v, 0.0f, static_cast<float>(g.max_q))));
}

float decode(const Grid& g, int q) { return g.d * static_cast<float>(q - g.bias) + g.m; }

float grid_error(const float* x, const float* w, const Grid& g) {
  float error = 0.0f;
  for (int j = 0; j < kBlockSize; ++j) {
    const float diff = decode(g, encode(g, x[j])) - x[j];
    error += w[j] * diff * diff;
  }
  return error;
}

// Weighted least squares for d (and m when affine) with the quants `g` rounds x to held.
// Returns false when they leave nothing to fit (all weights 0, or all quants alike).
bool refit(const float* x, const float* w, Grid* g) {
  double sw = 0.0, sa = 0.0, saa = 0.0, sx = 0.0, sax = 0.0;
  for (int j = 0; j < kBlockSize; ++j) {
    const double a = encode(*g, x[j]) - g->bias;
    sw += w[j];
    sa += w[j] * a;
    saa += w[j] * a * a;
    sx += w[j] * x[j];
    sax += w[j] * a * x[j];
  }
  if (!g->affine) {
    if (!(saa > 0.0)) return false;
    g->d = static_cast<float>(sax / saa);
    return true;
  }
  const double det = sw * saa - sa * sa;
  if (!(det > 0.0)) return false;
  const double d = (sw * sax - sa * sx) / det;
  g->d = static_cast<float>(d);
  g->m = static_cast<float>((sx - d * sa) / sw);
  return true;
}

// A grid as the decoder will see it, and its error.
struct Judged {
  Grid grid;
  uint16_t d_bits;
  uint16_t m_bits;
  float error;
};

Judged judge(const float* x, const float* w, Grid g) {
  Judged j{g, fp32_to_fp16(g.d), fp32_to_fp16(g.m), 0.0f};
  j.grid.d = fp16_to_fp32(j.d_bits);
  j.grid.m = fp16_to_fp32(j.m_bits);
  j.error = grid_error(x, w, j.grid);
  return j;
}

BlockFit search(const float* x, const float* w, const Grid& plain, const SearchSpan& span) {
  Judged best = judge(x, w, plain);
  for (int k = -span.spreads; k <= span.spreads; ++k) {
    Grid start = plain;
    start.d *= 1.0f + span.step * static_cast<float>(k);
    if (!refit(x, w, &start)) continue;
    const Judged candidate = judge(x, w, start);
    if (candidate.error < best.error) best = candidate;
  }
  for (int step = 0; step < span.refine; ++step) {
    Grid next = best.grid;
    if (!refit(x, w, &next)) break;
    const Judged candidate = judge(x, w, next);
    if (!(candidate.error < best.error)) break;
    best = candidate;
  }
  BlockFit fit;
  fit.d_bits = best.d_bits;
  fit.m_bits = best.m_bits;
  for (int j = 0; j < kBlockSize; ++j) fit.q[j] = encode(best.grid, x[j]);
  return fit;
}

}  // namespace

BlockFit fit_symmetric_block(const float* x, const float* w, int levels) {
  // ggml's plain scale: the extreme element on the lone negative level.
  const float d = signed_absmax(x, kBlockSize) / static_cast<float>(-levels);
  return search(x, w, Grid{d, 0.0f, levels, 2 * levels - 1, false},
                levels == 8 ? kQ4_0Search : kWideSearch);
}

BlockFit fit_affine_block(const float* x, const float* w, int max_q) {
  // ggml's plain fit: the range split into max_q steps from the minimum.
  const float lo = *std::min_element(x, x + kBlockSize);
  const float hi = *std::max_element(x, x + kBlockSize);
  return search(x, w, Grid{(hi - lo) / static_cast<float>(max_q), lo, 0, max_q, true},
                kWideSearch);
}

}  // namespace pagoda
