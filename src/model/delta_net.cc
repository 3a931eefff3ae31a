#include "model/delta_net.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

namespace pagoda {
namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }

// Eight independent sums (one vector register's worth), added in a fixed order at the end: a
// compiler may keep them in one register without reassociating anything, and the result is the
// same whatever the compiler does.
[[gnu::always_inline]] inline float dot(const float* a, const float* b, int64_t n) {
  float part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) part[l] += a[i + l] * b[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) part[l] += a[i] * b[i];
  return ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
}

void l2_normalize(float* x, int64_t n, float eps, float scale) {
  const float inv = scale / std::sqrt(dot(x, x, n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace

void causal_conv1d_silu(const DeltaNetShape& s, const float* in, int64_t n, const float* w,
                        float* window, float* out) {
  const int64_t channels = s.channels(), taps = s.conv_kernel, keep = taps - 1;
  for (int64_t c = 0; c < channels; ++c) {
    const float* wc = w + c * taps;
    float* wind = window + c * keep;
    // Input t' of this channel: the window for t' < 0, the tokens after.
    auto input = [&](int64_t t) { return t < 0 ? wind[keep + t] : in[t * channels + c]; };
    for (int64_t t = 0; t < n; ++t) {
      float sum = 0;
      for (int64_t j = 0; j < taps; ++j) sum += wc[j] * input(t + j - keep);
      out[t * channels + c] = silu(sum);
    }
    float last[16];  // conv_kernel is checked to be at most 17 by the loader
    for (int64_t j = 0; j < keep; ++j) last[j] = input(n - keep + j);
    for (int64_t j = 0; j < keep; ++j) wind[j] = last[j];
  }
}

void normalize_qk(const DeltaNetShape& s, float* qkv, int64_t n, float eps) {
  const int64_t d = s.head_dim;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t t = 0; t < n; ++t) {
    float* row = qkv + t * s.channels();
    for (int64_t h = 0; h < s.key_heads; ++h) {
      l2_normalize(row + h * d, d, eps, q_scale);
      l2_normalize(row + s.key_dim() + h * d, d, eps, 1.0f);
    }
  }
}

void gated_delta_rule_head_recurrent(const DeltaNetShape& s, const float* qkv, int64_t n,
                                     int64_t h, const float* decay, const float* beta,
                                     float* state, float* out) {
  const int64_t d = s.head_dim, hv = s.value_heads, kh = h % s.key_heads;
  for (int64_t t = 0; t < n; ++t) {
    const float* row = qkv + t * s.channels();
    const float* q = row + kh * d;
    const float* k = row + s.key_dim() + kh * d;
    const float* v = row + 2 * s.key_dim() + h * d;
    const float g = std::exp(decay[t * hv + h]), b = beta[t * hv + h];
    float* o = out + t * s.value_dim() + h * d;
    for (int64_t j = 0; j < d; ++j) {  // row j of the state: value j's weights over the keys
      float* Sj = state + j * d;
      for (int64_t i = 0; i < d; ++i) Sj[i] *= g;
      const float delta = (v[j] - dot(Sj, k, d)) * b;
      for (int64_t i = 0; i < d; ++i) Sj[i] += delta * k[i];
      o[j] = dot(Sj, q, d);
    }
  }
}

namespace {

// The chunked form's loops are plain loops; on x86-64 the compiler builds them for three
// instruction-set levels (AVX-512, AVX2 with FMA, the baseline) and the loader picks the one
// the CPU has, once. The token-by-token form (decode) stays one build, as before.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__SANITIZE_ADDRESS__)
#define PAGODA_DELTA_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PAGODA_DELTA_CLONES
#endif

// y[0, n) += a x[0, n)
[[gnu::always_inline]] inline void axpy(float* __restrict y, float a, const float* __restrict x,
                                        int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// Eight floats, one AVX register (two SSE ones at the baseline level): the product tiles below
// are written with it, since the compiler does not keep a tile of plain floats in registers.
using Float8 = float __attribute__((vector_size(32)));

// c[i, 0..n) += sum over k < kdim of a[i, k] b[k, 0..n), for rows i < m; with kLower, a is
// lower triangular (zero right of the diagonal), so row i sums over k <= i only. Tiles of
// 4 rows by 16 columns of c are summed in registers over the whole of k. Each value is summed
// in order of k, whatever the tiling.
template <bool kLower>
[[gnu::always_inline]] inline void add_product(int64_t m, int64_t n, int64_t kdim,
                                               const float* a, int64_t lda, const float* b,
                                               int64_t ldb, float* c, int64_t ldc) {
  constexpr int64_t kRows = 4, kVecs = 2, kCols = 8 * kVecs;
  int64_t i0 = 0;
  for (; i0 + kRows <= m; i0 += kRows) {
    const int64_t kend = kLower ? std::min(kdim, i0 + kRows) : kdim;
    int64_t j0 = 0;
    for (; j0 + kCols <= n; j0 += kCols) {
      Float8 acc[kRows][kVecs];
      for (int64_t r = 0; r < kRows; ++r) {
        for (int64_t v = 0; v < kVecs; ++v) {
          std::memcpy(&acc[r][v], c + (i0 + r) * ldc + j0 + 8 * v, sizeof(Float8));
        }
      }
      for (int64_t k = 0; k < kend; ++k) {
        Float8 bk[kVecs];
        for (int64_t v = 0; v < kVecs; ++v) {
          std::memcpy(&bk[v], b + k * ldb + j0 + 8 * v, sizeof(Float8));
        }
        for (int64_t r = 0; r < kRows; ++r) {
          const float ar = a[(i0 + r) * lda + k];
          for (int64_t v = 0; v < kVecs; ++v) acc[r][v] += ar * bk[v];
        }
      }
      for (int64_t r = 0; r < kRows; ++r) {
        for (int64_t v = 0; v < kVecs; ++v) {
          std::memcpy(c + (i0 + r) * ldc + j0 + 8 * v, &acc[r][v], sizeof(Float8));
        }
      }
    }
    for (int64_t r = 0; r < kRows && j0 < n; ++r) {
      for (int64_t k = 0; k < kend; ++k) {
        axpy(c + (i0 + r) * ldc + j0, a[(i0 + r) * lda + k], b + k * ldb + j0, n - j0);
      }
    }
  }
  for (; i0 < m; ++i0) {
    const int64_t kend = kLower ? std::min(kdim, i0 + 1) : kdim;
    for (int64_t k = 0; k < kend; ++k) axpy(c + i0 * ldc, a[i0 * lda + k], b + k * ldb, n);
  }
}

// The scratch of one (sequence, head) run, per thread (the forward pass runs heads in
// parallel): the state transposed and one chunk's matrices (C = kDeltaChunk rows, d = head
// dim).
struct ChunkScratch {
  int64_t dim;
  std::vector<float> data;
  float* st;  // [d, d]: the state transposed (keys by values), so that products run along values
  float* q;   // [C, d]: the chunk's queries, then times exp(g)
  float* k;   // [C, d]: its keys
  float* kt;  // [d, C]: its keys transposed, then decayed to the chunk's end
  float* vb;  // [C, d]: beta v
  float* kb;  // [C, d]: beta exp(g) k
  float* u;   // [C, d]: U = T (beta v), then the corrected values v_new = U - W S^T
  float* w;   // [C, d]: W = T (beta exp(g) k), negated
  float* a;   // [C, C]: k k^T, then the strictly lower system, then T - I
  float* p;   // [C, C]: q k^T, then decayed and lower triangular (the diagonal kept)
  float* g;   // [C]: the cumulative log decay within the chunk
  float* b;   // [C]: beta

  explicit ChunkScratch(int64_t d) : dim(d) {
    constexpr int64_t C = kDeltaChunk;
    data.assign(static_cast<size_t>(d * d + 8 * C * d + 2 * C * C + 2 * C), 0.0f);
    float* next = data.data();
    auto take = [&](int64_t floats) {
      float* f = next;
      next += floats;
      return f;
    };
    st = take(d * d);
    q = take(C * d);
    k = take(C * d);
    kt = take(C * d);
    vb = take(C * d);
    kb = take(C * d);
    u = take(C * d);
    w = take(C * d);
    a = take(C * C);
    p = take(C * C);
    g = take(C);
    b = take(C);
  }
};

// One chunk of L tokens: q, k, v rows `stride` floats apart from q0, k0, v0; decay, beta `hv`
// apart; outputs `vd` apart from out. Updates x.st.
PAGODA_DELTA_CLONES
void delta_chunk(ChunkScratch& x, int64_t d, int64_t L, const float* q0, const float* k0,
                 const float* v0, int64_t stride, const float* decay, const float* beta,
                 int64_t hv, float* out, int64_t vd) {
  constexpr int64_t C = kDeltaChunk;
  float *st = x.st, *q = x.q, *k = x.k, *kt = x.kt, *vb = x.vb, *kb = x.kb, *u = x.u, *w = x.w;
  float *a = x.a, *p = x.p, *g = x.g, *b = x.b;
  float cum = 0;
  for (int64_t t = 0; t < L; ++t) {
    cum += decay[t * hv];
    g[t] = cum;  // at most 0: every exp below is of g[later] - g[earlier] <= 0, or of g <= 0
    b[t] = beta[t * hv];
    const float bg = b[t] * std::exp(cum);
    for (int64_t j = 0; j < d; ++j) {
      q[t * d + j] = q0[t * stride + j];
      k[t * d + j] = k0[t * stride + j];
      kt[j * C + t] = k0[t * stride + j];
      vb[t * d + j] = b[t] * v0[t * stride + j];
      kb[t * d + j] = bg * k0[t * stride + j];
    }
  }
  // a = k k^T, p = q k^T; then a[i, j] = -beta_i a[i, j] exp(g_i - g_j) for j < i and
  // p[i, j] = p[i, j] exp(g_i - g_j) for j <= i, zero elsewhere.
  std::fill(a, a + L * C, 0.0f);
  std::fill(p, p + L * C, 0.0f);
  add_product<false>(L, L, d, k, d, kt, C, a, C);
  add_product<false>(L, L, d, q, d, kt, C, p, C);
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      const float e = std::exp(g[i] - g[j]);
      a[i * C + j] *= -b[i] * e;
      p[i * C + j] *= e;
    }
    a[i * C + i] = 0;
    std::fill(a + i * C + i + 1, a + i * C + L, 0.0f);
    std::fill(p + i * C + i + 1, p + i * C + L, 0.0f);
  }
  // T = (I - a)^-1 by forward substitution, T - I in a's place: row i of it is a_i plus the sum
  // over m < i of a[i, m] (row m of T - I). Going up m, a[i, m] is still a's own value when
  // read (only entries left of m have changed).
  for (int64_t i = 2; i < L; ++i) {
    for (int64_t m = 1; m < i; ++m) axpy(a + i * C, a[i * C + m], a + m * C, m);
  }
  // U = T (beta v), W = T (beta exp(g) k), T - I being strictly lower.
  std::copy(vb, vb + L * d, u);
  std::copy(kb, kb + L * d, w);
  add_product<true>(L, d, L, a, C, vb, d, u, d);
  add_product<true>(L, d, L, a, C, kb, d, w, d);
  // v_new = U - W S^T: the values each token writes, less what the incoming state already
  // holds of them.
  for (int64_t i = 0; i < L * d; ++i) w[i] = -w[i];
  add_product<false>(L, d, d, w, d, st, d, u, d);
  // out_t = exp(g_t) S q_t + sum over m <= t of p[t, m] v_new_m.
  for (int64_t t = 0; t < L; ++t) {
    const float e = std::exp(g[t]);
    for (int64_t j = 0; j < d; ++j) q[t * d + j] *= e;
    std::fill(out + t * vd, out + t * vd + d, 0.0f);
  }
  add_product<false>(L, d, d, q, d, st, d, out, vd);
  add_product<true>(L, d, L, p, C, u, d, out, vd);
  // S = exp(g_last) S + sum over t of v_new_t (exp(g_last - g_t) k_t)^T, transposed.
  const float last = g[L - 1];
  for (int64_t t = 0; t < L; ++t) {
    const float e = std::exp(last - g[t]);
    for (int64_t i = 0; i < d; ++i) kt[i * C + t] *= e;
  }
  const float e = std::exp(last);
  for (int64_t i = 0; i < d * d; ++i) st[i] *= e;
  add_product<false>(d, d, L, kt, C, u, d, st, d);
}

}  // namespace

void gated_delta_rule_head_chunked(const DeltaNetShape& s, const float* qkv, int64_t n, int64_t h,
                                   const float* decay, const float* beta, float* state,
                                   float* out) {
  const int64_t d = s.head_dim, hv = s.value_heads, kh = h % s.key_heads, ch = s.channels();
  thread_local std::unique_ptr<ChunkScratch> scratch;
  if (!scratch || scratch->dim != d) scratch = std::make_unique<ChunkScratch>(d);
  ChunkScratch& x = *scratch;
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j < d; ++j) x.st[i * d + j] = state[j * d + i];
  }
  for (int64_t t0 = 0; t0 < n; t0 += kDeltaChunk) {
    const float* row = qkv + t0 * ch;
    delta_chunk(x, d, std::min(kDeltaChunk, n - t0), row + kh * d, row + s.key_dim() + kh * d,
                row + 2 * s.key_dim() + h * d, ch, decay + t0 * hv + h, beta + t0 * hv + h, hv,
                out + t0 * s.value_dim() + h * d, s.value_dim());
  }
  for (int64_t j = 0; j < d; ++j) {
    for (int64_t i = 0; i < d; ++i) state[j * d + i] = x.st[i * d + j];
  }
}

void gated_delta_rule_head(const DeltaNetShape& s, const float* qkv, int64_t n, int64_t h,
                           const float* decay, const float* beta, float* state, float* out) {
  // Whole chunks, and a last part of at least kDeltaChunkedFrom tokens, chunked; a shorter last
  // part token by token: each chunk's form is its own length's, whatever the run holds after it.
  const int64_t tail = n % kDeltaChunk;
  const int64_t chunked = tail >= kDeltaChunkedFrom ? n : n - tail;
  if (chunked > 0) gated_delta_rule_head_chunked(s, qkv, chunked, h, decay, beta, state, out);
  if (chunked < n) {
    const int64_t hv = s.value_heads;
    gated_delta_rule_head_recurrent(s, qkv + chunked * s.channels(), n - chunked, h,
                                    decay + chunked * hv, beta + chunked * hv, state,
                                    out + chunked * s.value_dim());
  }
}

}  // namespace pagoda
