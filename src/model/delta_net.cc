#include "model/delta_net.h"

#include <cmath>

namespace pagoda {
namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }

// Eight independent sums (one vector register's worth), added in a fixed order at the end: a
// compiler may keep them in one register without reassociating anything, and the result is the
// same whatever the compiler does.
float dot(const float* a, const float* b, int64_t n) {
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

void gated_delta_rule_head(const DeltaNetShape& s, const float* qkv, int64_t n, int64_t h,
                           const float* decay, const float* beta, float* state, float* out) {
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

}  // namespace pagoda
