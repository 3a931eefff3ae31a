#include "quant/gptq.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/reference.h"
#include "quant/reference_iq.h"
#include "quant/reference_k.h"

namespace pagoda {
namespace {

// A block's grid: value = d * (level - bias) + m, level in [lo, hi]; or, for the IQ4 types
// (`nonlinear`), value = d * kIQ4Values[level].
struct Grid {
  float d = 0;
  float m = 0;
  int bias = 0;
  int lo = 0;
  int hi = 0;
  bool nonlinear = false;
};

// The bias is added after rounding, as the K encoders round (x - m) / d and then offset it, so
// that GPTQ with nothing to carry writes their exact levels.
int level_of(const Grid& g, float x) {
  if (g.nonlinear) return iq4_nearest_index(g.d != 0.0f ? x * (1.0f / g.d) : 0.0f);
  if (!(g.d != 0.0f)) return std::clamp(g.bias, g.lo, g.hi);
  const float v = (x - g.m) / g.d;
  if (std::isnan(v)) return std::clamp(g.bias, g.lo, g.hi);
  const float lo = static_cast<float>(g.lo - g.bias), hi = static_cast<float>(g.hi - g.bias);
  return static_cast<int>(std::nearbyint(std::clamp(v, lo, hi))) + g.bias;
}

float value_of(const Grid& g, int level) {
  if (g.nonlinear) return g.d * static_cast<float>(kIQ4Values[level]);
  return g.d * static_cast<float>(level - g.bias) + g.m;
}

// Elements per unit the pass fits at once: a legacy block, or a K super-block.
int64_t unit_size(DType type) {
  const bool super = type == DType::kQ4_K || type == DType::kQ5_K || type == DType::kQ6_K ||
                     type == DType::kIQ4_XS;
  return super ? kSuperBlockSize : kBlockSize;
}

// The grid of a legacy block as the type's encoder wrote it to `block`.
Grid read_legacy_grid(DType type, const uint8_t* block) {
  Grid g;
  switch (type) {
    case DType::kQ4_0: {
      const auto b = load_block<BlockQ4_0>(block, 0);
      g = {fp16_to_fp32(b.d), 0.0f, 8, 0, 15};
      break;
    }
    case DType::kQ4_1: {
      const auto b = load_block<BlockQ4_1>(block, 0);
      g = {fp16_to_fp32(b.d), fp16_to_fp32(b.m), 0, 0, 15};
      break;
    }
    case DType::kQ5_0: {
      const auto b = load_block<BlockQ5_0>(block, 0);
      g = {fp16_to_fp32(b.d), 0.0f, 16, 0, 31};
      break;
    }
    case DType::kQ5_1: {
      const auto b = load_block<BlockQ5_1>(block, 0);
      g = {fp16_to_fp32(b.d), fp16_to_fp32(b.m), 0, 0, 31};
      break;
    }
    case DType::kQ8_0: {
      const auto b = load_block<BlockQ8_0>(block, 0);
      g = {fp16_to_fp32(b.d), 0.0f, 0, -128, 127};
      break;
    }
    case DType::kIQ4_NL: {
      const auto b = load_block<BlockIQ4_NL>(block, 0);
      g = {fp16_to_fp32(b.d), 0.0f, 0, 0, 15, true};
      break;
    }
    default:
      fail("gptq: type ", dtype_traits(type).name, " is not a type GPTQ writes");
  }
  return g;
}

// Every element's grid in the unit at `block`: a K super-block's groups each have their own
// scale (and min) codes.
void read_grids(DType type, const uint8_t* block, Grid* grids) {
  if (type == DType::kQ4_K || type == DType::kQ5_K) {
    const bool five = type == DType::kQ5_K;
    const auto b4 = five ? BlockQ4_K{} : load_block<BlockQ4_K>(block, 0);
    const auto b5 = five ? load_block<BlockQ5_K>(block, 0) : BlockQ5_K{};
    const float d = fp16_to_fp32(five ? b5.d : b4.d), dmin = fp16_to_fp32(five ? b5.dmin : b4.dmin);
    for (int g = 0; g < 8; ++g) {
      int sc = 0, m = 0;
      unpack_scale_min_k4(five ? b5.scales : b4.scales, g, &sc, &m);
      const Grid grid{d * static_cast<float>(sc), -(dmin * static_cast<float>(m)), 0, 0,
                      five ? 31 : 15};
      for (int l = 0; l < 32; ++l) grids[g * 32 + l] = grid;
    }
    return;
  }
  if (type == DType::kIQ4_XS) {
    const auto b = load_block<BlockIQ4_XS>(block, 0);
    const float d = fp16_to_fp32(b.d);
    for (int g = 0; g < 8; ++g) {
      const int ls = iq4_xs_scale_code(b, g);
      const Grid grid{d * static_cast<float>(ls - 32), 0.0f, 0, 0, 15, true};
      for (int l = 0; l < 32; ++l) grids[g * 32 + l] = grid;
    }
    return;
  }
  if (type == DType::kQ6_K) {
    const auto b = load_block<BlockQ6_K>(block, 0);
    const float d = fp16_to_fp32(b.d);
    for (int e = 0; e < kSuperBlockSize; ++e)
      grids[e] = {d * static_cast<float>(b.scales[e / 16]), 0.0f, 32, 0, 63};
    return;
  }
  const Grid g = read_legacy_grid(type, block);
  for (int j = 0; j < kBlockSize; ++j) grids[j] = g;
}

void pack_nibbles(const int* q, uint8_t* qs) {
  for (int j = 0; j < kBlockSize / 2; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0xf) | ((q[j + kBlockSize / 2] & 0xf) << 4));
  }
}

void pack_high_bits(const int* q, uint8_t (&qh)[4]) {
  uint32_t high = 0;
  for (int j = 0; j < kBlockSize; ++j) high |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &high, sizeof(high));
}

// Writes `levels` into the unit at `block`, whose scale (and min) fields the encoder already set.
void write_levels(DType type, const int* levels, uint8_t* block) {
  switch (type) {
    case DType::kQ4_0: {
      auto b = load_block<BlockQ4_0>(block, 0);
      pack_nibbles(levels, b.qs);
      store_block(b, block, 0);
      break;
    }
    case DType::kQ4_1: {
      auto b = load_block<BlockQ4_1>(block, 0);
      pack_nibbles(levels, b.qs);
      store_block(b, block, 0);
      break;
    }
    case DType::kQ5_0: {
      auto b = load_block<BlockQ5_0>(block, 0);
      pack_nibbles(levels, b.qs);
      pack_high_bits(levels, b.qh);
      store_block(b, block, 0);
      break;
    }
    case DType::kQ5_1: {
      auto b = load_block<BlockQ5_1>(block, 0);
      pack_nibbles(levels, b.qs);
      pack_high_bits(levels, b.qh);
      store_block(b, block, 0);
      break;
    }
    case DType::kQ8_0: {
      auto b = load_block<BlockQ8_0>(block, 0);
      for (int j = 0; j < kBlockSize; ++j) b.qs[j] = static_cast<int8_t>(levels[j]);
      store_block(b, block, 0);
      break;
    }
    case DType::kIQ4_NL: {
      auto b = load_block<BlockIQ4_NL>(block, 0);
      pack_nibbles(levels, b.qs);
      store_block(b, block, 0);
      break;
    }
    case DType::kIQ4_XS: {  // each sub-block's 32 indices packed as IQ4_NL's
      auto b = load_block<BlockIQ4_XS>(block, 0);
      for (int g = 0; g < 8; ++g) pack_nibbles(levels + g * 32, b.qs + g * 16);
      store_block(b, block, 0);
      break;
    }
    case DType::kQ4_K: {
      auto b = load_block<BlockQ4_K>(block, 0);
      pack_levels_k4(levels, b.qs, nullptr);
      store_block(b, block, 0);
      break;
    }
    case DType::kQ5_K: {
      auto b = load_block<BlockQ5_K>(block, 0);
      std::memset(b.qh, 0, sizeof(b.qh));
      pack_levels_k4(levels, b.qs, b.qh);
      store_block(b, block, 0);
      break;
    }
    case DType::kQ6_K: {
      auto b = load_block<BlockQ6_K>(block, 0);
      std::memset(b.ql, 0, sizeof(b.ql));
      std::memset(b.qh, 0, sizeof(b.qh));
      pack_levels_q6_k(levels, b.ql, b.qh);
      store_block(b, block, 0);
      break;
    }
    default:
      fail("gptq: type ", dtype_traits(type).name, " is not a type GPTQ writes");
  }
}

// In-place lower Cholesky factor of the symmetric n x n `a` (row-major; the upper triangle is
// left as it was). False when a pivot is not positive.
bool cholesky_lower(std::vector<double>& a, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (int64_t k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    if (!(d > 0.0)) return false;
    d = std::sqrt(d);
    a[j * n + j] = d;
    for (int64_t i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      for (int64_t k = 0; k < j; ++k) s -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = s / d;
    }
  }
  return true;
}

}  // namespace

bool gptq_supports(DType type) {
  return type == DType::kQ4_0 || type == DType::kQ4_1 || type == DType::kQ5_0 ||
         type == DType::kQ5_1 || type == DType::kQ8_0 || type == DType::kQ4_K ||
         type == DType::kQ5_K || type == DType::kQ6_K || type == DType::kIQ4_NL ||
         type == DType::kIQ4_XS;
}

std::vector<double> gptq_gram(const float* x, int64_t n, int64_t cols,
                              std::span<const float> col_div) {
  PAGODA_CHECK(col_div.empty() || static_cast<int64_t>(col_div.size()) == cols);
  std::vector<double> h(static_cast<size_t>(cols * cols), 0.0);
  std::vector<double> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < cols; ++i) {
      row[i] = col_div.empty() ? double(x[r * cols + i]) : double(x[r * cols + i]) / col_div[i];
    }
    for (int64_t i = 0; i < cols; ++i) {
      const double xi = row[i];
      if (xi == 0.0) continue;
      double* hi = h.data() + i * cols;
      for (int64_t j = 0; j <= i; ++j) hi[j] += xi * row[j];
    }
  }
  for (int64_t i = 0; i < cols; ++i) {
    for (int64_t j = 0; j < i; ++j) h[j * cols + i] = h[i * cols + j];
  }
  return h;
}

std::vector<double> gptq_factor(std::span<const double> h_in, int64_t n, double damp) {
  PAGODA_CHECK(static_cast<int64_t>(h_in.size()) == n * n);
  std::vector<double> h(h_in.begin(), h_in.end());
  double mean_diag = 0.0;
  for (int64_t i = 0; i < n; ++i) mean_diag += h[i * n + i];
  mean_diag /= static_cast<double>(std::max<int64_t>(n, 1));
  for (int64_t i = 0; i < n; ++i) {
    if (!(h[i * n + i] > 0.0)) {  // never reached: its row and column are 0
      for (int64_t k = 0; k < n; ++k) h[i * n + k] = h[k * n + i] = 0.0;
      h[i * n + i] = 1.0;
    }
    h[i * n + i] += damp * mean_diag;
  }
  if (!cholesky_lower(h, n))
    fail("gptq: the inputs' second-moment matrix is not positive definite");
  // L^-1 (lower), then H^-1 = L^-T L^-1.
  std::vector<double> inv(static_cast<size_t>(n * n), 0.0);
  for (int64_t j = 0; j < n; ++j) {
    inv[j * n + j] = 1.0 / h[j * n + j];
    for (int64_t i = j + 1; i < n; ++i) {
      double s = 0.0;
      for (int64_t k = j; k < i; ++k) s += h[i * n + k] * inv[k * n + j];
      inv[i * n + j] = -s / h[i * n + i];
    }
  }
  std::vector<double> hinv(static_cast<size_t>(n * n), 0.0);
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      double s = 0.0;
      for (int64_t k = i; k < n; ++k) s += inv[k * n + i] * inv[k * n + j];
      hinv[i * n + j] = s;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < i; ++j) hinv[j * n + i] = hinv[i * n + j];
  }
  if (!cholesky_lower(hinv, n))
    fail("gptq: the inverse second-moment matrix is not positive definite");
  std::vector<double> u(static_cast<size_t>(n * n), 0.0);  // U = L^T
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j <= i; ++j) u[j * n + i] = hinv[i * n + j];
  }
  return u;
}

void gptq_quantize(DType type, float* w, int64_t rows, int64_t cols, std::span<const double> u,
                   const float* importance, uint8_t* dst, int threads) {
  if (!gptq_supports(type))
    fail("gptq: type ", dtype_traits(type).name, " is not a type GPTQ writes");
  const int64_t unit = unit_size(type);
  if (cols % unit != 0) fail("gptq: ", cols, " columns are not whole blocks of ", unit);
  PAGODA_CHECK(static_cast<int64_t>(u.size()) == cols * cols);
  const size_t unit_bytes = row_bytes(type, unit);
  const size_t rb = row_bytes(type, cols);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads > 0 ? threads : 1)
  for (int64_t r = 0; r < rows; ++r) {
    float* x = w + r * cols;
    int levels[kSuperBlockSize];
    Grid grids[kSuperBlockSize];
    for (int64_t b = 0; b < cols / unit; ++b) {
      uint8_t* block = dst + r * rb + b * unit_bytes;
      float* xb = x + b * unit;
      if (importance != nullptr) {
        quantize_row_weighted(type, xb, block, unit, importance + b * unit);
      } else {
        quantize_row(type, xb, block, unit);
      }
      read_grids(type, block, grids);
      for (int64_t j = 0; j < unit; ++j) {
        const int64_t c = b * unit + j;
        const Grid& g = grids[j];
        levels[j] = level_of(g, x[c]);
        const double err = (static_cast<double>(x[c]) - value_of(g, levels[j])) / u[c * cols + c];
        const double* uc = u.data() + c * cols;
        for (int64_t k = c + 1; k < cols; ++k) x[k] -= static_cast<float>(err * uc[k]);
      }
      write_levels(type, levels, block);
    }
  }
}

}  // namespace pagoda
