// The encoder ops' reference (Backend's defaults, encoder_ops.cc) against values worked out by
// hand, and the CPU backend against the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/backend.h"

namespace pagoda {
namespace {

TEST(EncoderOps, LayerNormCentresScalesAndShifts) {
  auto be = make_reference_backend();
  const std::vector<float> x = {1, 2, 3, 4, -1, -1, 1, 1};
  const std::vector<float> w = {1, 2, 1, 0.5f}, b = {0, 1, -1, 0};
  std::vector<float> y(8);
  be->layer_norm(x.data(), w.data(), b.data(), 2, 4, 0.0f, y.data());
  // Row 0: mean 2.5, variance 1.25.
  const double s = 1 / std::sqrt(1.25);
  const double want0[] = {-1.5 * s, -0.5 * s * 2 + 1, 0.5 * s - 1, 1.5 * s * 0.5};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], want0[i], 1e-6) << i;
  // Row 1: mean 0, variance 1.
  const double want1[] = {-1, -2 + 1, 1 - 1, 0.5};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[4 + i], want1[i], 1e-6) << i;
}

TEST(EncoderOps, GeluIsTheErfForm) {
  auto be = make_reference_backend();
  std::vector<float> x = {-3, -1, 0, 0.5f, 1, 3};
  be->gelu_erf(x.data(), static_cast<int64_t>(x.size()));
  // x * Phi(x): Phi(1) = 0.8413447461, Phi(0.5) = 0.6914624613, Phi(3) = 0.9986501020.
  const double want[] = {-3 * (1 - 0.9986501020), -(1 - 0.8413447461), 0, 0.5 * 0.6914624613,
                         0.8413447461, 3 * 0.9986501020};
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], want[i], 1e-6) << i;
  // The tanh approximation differs here by about 2e-4: the test tells them apart.
  std::vector<float> one = {1}, up = {1}, tanh_form(1);
  be->gelu_mul(one.data(), up.data(), 1, tanh_form.data());
  EXPECT_GT(std::abs(tanh_form[0] - x[4]), 1e-4);
}

// Naive softmax attention of token i over tokens [first, last) of one head.
std::vector<double> naive(const std::vector<float>& q, const std::vector<float>& k,
                          const std::vector<float>& v, int i, int first, int last, int heads,
                          int kv_heads, int hd, int h, double scale) {
  std::vector<double> w;
  double sum = 0;
  const int kh = h / (heads / kv_heads);
  for (int j = first; j < last; ++j) {
    double dot = 0;
    for (int d = 0; d < hd; ++d) dot += q[(i * heads + h) * hd + d] * k[(j * kv_heads + kh) * hd + d];
    w.push_back(std::exp(dot * scale));
    sum += w.back();
  }
  std::vector<double> out(hd, 0.0);
  for (int j = first; j < last; ++j) {
    for (int d = 0; d < hd; ++d) out[d] += w[j - first] / sum * v[(j * kv_heads + kh) * hd + d];
  }
  return out;
}

TEST(EncoderOps, AttentionSeesTheWholeSequenceAndOnlyIt) {
  const int heads = 4, kv_heads = 2, hd = 8, n = 7;
  const std::vector<int32_t> starts = {0, 3, 7};  // two sequences: 3 and 4 tokens
  std::vector<float> q(n * heads * hd), k(n * kv_heads * hd), v(n * kv_heads * hd);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37 * i);
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.11 * i);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.53 * i + 1);
  AttentionParams p;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = hd;
  p.scale = 0.35f;
  std::vector<float> ref_out(q.size()), cpu_out(q.size());
  auto ref = make_reference_backend();
  ref->encoder_attention(q.data(), k.data(), v.data(), starts.data(), 2, p, ref_out.data());
  for (int i = 0; i < n; ++i) {
    const int s = i < 3 ? 0 : 1;
    for (int h = 0; h < heads; ++h) {
      auto want = naive(q, k, v, i, starts[s], starts[s + 1], heads, kv_heads, hd, h, p.scale);
      for (int d = 0; d < hd; ++d) EXPECT_NEAR(ref_out[(i * heads + h) * hd + d], want[d], 1e-6);
    }
  }
  auto cpu = make_cpu_backend(2);
  cpu->encoder_attention(q.data(), k.data(), v.data(), starts.data(), 2, p, cpu_out.data());
  for (size_t i = 0; i < q.size(); ++i) EXPECT_NEAR(cpu_out[i], ref_out[i], 1e-5) << i;
}

// Long enough for the CPU backend's threads (and rows past one work item's run of 16): every
// row still equals the reference's within float rounding.
TEST(EncoderOps, ThreadedCpuAttentionMatchesTheReference) {
  const int heads = 6, kv_heads = 6, hd = 32;
  const std::vector<int32_t> starts = {0, 70, 70 + 128};
  const int n = starts.back();
  std::vector<float> q(n * heads * hd), k(n * kv_heads * hd), v(n * kv_heads * hd);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37 * i) * 2;
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.11 * i) * 2;
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.53 * i + 1);
  AttentionParams p;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = hd;
  p.scale = 1.0f / std::sqrt(32.0f);
  std::vector<float> ref_out(q.size()), cpu_out(q.size(), NAN);
  make_reference_backend()->encoder_attention(q.data(), k.data(), v.data(), starts.data(), 2, p,
                                              ref_out.data());
  make_cpu_backend(2)->encoder_attention(q.data(), k.data(), v.data(), starts.data(), 2, p,
                                         cpu_out.data());
  for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(cpu_out[i], ref_out[i], 2e-5) << i;
}

// The CPU backend's layer norm is the reference's arithmetic, threaded: equal bits.
TEST(EncoderOps, CpuLayerNormEqualsTheReferenceExactly) {
  const int64_t rows = 300, dim = 384;
  std::vector<float> x(rows * dim), w(dim), b(dim);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.013 * i) * 3);
  for (int64_t i = 0; i < dim; ++i) {
    w[i] = static_cast<float>(1 + 0.01 * i);
    b[i] = static_cast<float>(0.1 * std::cos(i));
  }
  auto ref = make_reference_backend();
  auto cpu = make_cpu_backend(2);
  std::vector<float> want(x.size()), got(x.size());
  ref->layer_norm(x.data(), w.data(), b.data(), rows, dim, 1e-12f, want.data());
  cpu->layer_norm(x.data(), w.data(), b.data(), rows, dim, 1e-12f, got.data());
  EXPECT_EQ(got, want);
}

// The CPU backend's GELU: erf in float by a rational approximation (absolute error below 1.5e-7)
// against the reference's double erf, over the range a network's activations take.
TEST(EncoderOps, CpuGeluIsTheErfFormWithinFloatError) {
  std::vector<float> x;
  for (int i = -12000; i <= 12000; ++i) x.push_back(static_cast<float>(i) * 1e-3f);
  x.insert(x.end(), {-50.0f, -9.5f, 9.5f, 50.0f, 1e-30f, -1e-30f});
  std::vector<float> want = x, got = x;
  make_reference_backend()->gelu_erf(want.data(), static_cast<int64_t>(want.size()));
  make_cpu_backend(2)->gelu_erf(got.data(), static_cast<int64_t>(got.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 2e-7 * std::max(1.0f, std::abs(x[i]))) << "x = " << x[i];
  }
}

}  // namespace
}  // namespace pagoda
