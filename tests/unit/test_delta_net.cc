// The gated delta rule's chunked form (prefill) against its token-by-token form (decode) on
// random inputs: several run lengths on both sides of the chunk size, an incoming state that is
// not zero, and the state left behind compared as well as the outputs; and which form a run
// takes (by its own length alone).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "model/delta_net.h"

namespace pagoda {
namespace {

struct Inputs {
  std::vector<float> qkv, decay, beta, state;
};

// qkv as the conv's output (normalised), decays as the model makes them (the log of a forget
// factor, here between exp(-4) and 1, with now and then a near-total forget), beta in (0, 1),
// and a state of the size a long prompt leaves.
Inputs random_inputs(const DeltaNetShape& s, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Inputs in;
  in.qkv.resize(static_cast<size_t>(n * s.channels()));
  for (float& x : in.qkv) x = normal(rng);
  normalize_qk(s, in.qkv.data(), n, 1e-6f);
  in.decay.resize(static_cast<size_t>(n * s.value_heads));
  for (float& g : in.decay) g = uni(rng) < 0.02f ? -30.0f : -4.0f * uni(rng) * uni(rng);
  in.beta.resize(in.decay.size());
  for (float& b : in.beta) b = uni(rng);
  in.state.resize(static_cast<size_t>(s.value_heads * s.head_dim * s.head_dim));
  for (float& x : in.state) x = 0.5f * normal(rng);
  return in;
}

using RuleFn = void (*)(const DeltaNetShape&, const float*, int64_t, int64_t, const float*,
                        const float*, float*, float*);

// Every value head of one run: the outputs [n, value_dim] and the state after it.
std::pair<std::vector<float>, std::vector<float>> run(RuleFn rule, const DeltaNetShape& s,
                                                      const Inputs& in, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n * s.value_dim()));
  std::vector<float> state = in.state;
  const int64_t dd = s.head_dim * s.head_dim;
  for (int64_t h = 0; h < s.value_heads; ++h) {
    rule(s, in.qkv.data(), n, h, in.decay.data(), in.beta.data(), state.data() + h * dd,
         out.data());
  }
  return {out, state};
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    worst = std::max(worst, std::fabs(a[i] - b[i]));
  }
  return worst;
}

float max_abs(const std::vector<float>& a) {
  float m = 0;
  for (float x : a) m = std::max(m, std::fabs(x));
  return m;
}

const DeltaNetShape kTiny{2, 4, 32, 4};      // qwen3.5-tiny's recurrent layers
const DeltaNetShape kSmall{16, 16, 128, 4};  // qwen3.5-0.8b's
const DeltaNetShape kOdd{1, 2, 20, 4};       // a head size off the 16-column tiles

TEST(DeltaNet, ChunkedMatchesTokenByToken) {
  for (const DeltaNetShape& s : {kTiny, kSmall, kOdd}) {
    for (int64_t n : {1, 7, 63, 64, 65, 128, 200, 300}) {
      SCOPED_TRACE("head_dim " + std::to_string(s.head_dim) + ", " + std::to_string(n) +
                   " tokens");
      const Inputs in = random_inputs(s, n, static_cast<uint32_t>(n * 31 + s.head_dim));
      const auto [want_out, want_state] = run(gated_delta_rule_head_recurrent, s, in, n);
      const auto [got_out, got_state] = run(gated_delta_rule_head_chunked, s, in, n);
      // Measured on AMD EPYC (Zen 4, the AVX-512 build): outputs within 7e-7 and states within
      // 2.2e-6 (values up to about 1.5); the bound leaves about 9x for other instruction sets.
      EXPECT_LE(max_abs_diff(got_out, want_out), 2e-5f * std::max(1.0f, max_abs(want_out)));
      EXPECT_LE(max_abs_diff(got_state, want_state), 2e-5f * std::max(1.0f, max_abs(want_state)));
    }
  }
}

// A run starting from a zero state (a fresh sequence) and one carried on from the state another
// run left: the chunked form over two pieces agrees with the token-by-token form over the whole.
TEST(DeltaNet, ChunkedCarriesTheStateAcrossCalls) {
  const DeltaNetShape s = kTiny;
  const int64_t n = 150, first = 70;
  Inputs in = random_inputs(s, n, 5);
  std::fill(in.state.begin(), in.state.end(), 0.0f);
  const auto [want_out, want_state] = run(gated_delta_rule_head_recurrent, s, in, n);
  std::vector<float> out(static_cast<size_t>(n * s.value_dim()));
  std::vector<float> state = in.state;
  const int64_t dd = s.head_dim * s.head_dim, ch = s.channels(), hv = s.value_heads;
  for (int64_t h = 0; h < hv; ++h) {
    gated_delta_rule_head_chunked(s, in.qkv.data(), first, h, in.decay.data(), in.beta.data(),
                                  state.data() + h * dd, out.data());
    gated_delta_rule_head_chunked(s, in.qkv.data() + first * ch, n - first, h,
                                  in.decay.data() + first * hv, in.beta.data() + first * hv,
                                  state.data() + h * dd, out.data() + first * s.value_dim());
  }
  EXPECT_LE(max_abs_diff(out, want_out), 2e-5f * std::max(1.0f, max_abs(want_out)));
  EXPECT_LE(max_abs_diff(state, want_state), 2e-5f * std::max(1.0f, max_abs(want_state)));
}

// The form a run takes depends on its length alone: below kDeltaChunkedFrom tokens the
// token-by-token one, from it the chunked one, bit for bit.
TEST(DeltaNet, RunLengthPicksTheForm) {
  const DeltaNetShape s = kTiny;
  for (int64_t n : {int64_t{1}, kDeltaChunkedFrom - 1, kDeltaChunkedFrom, int64_t{100}}) {
    const Inputs in = random_inputs(s, n, 9);
    const RuleFn want_rule =
        n < kDeltaChunkedFrom ? gated_delta_rule_head_recurrent : gated_delta_rule_head_chunked;
    const auto want = run(want_rule, s, in, n);
    const auto got = run(gated_delta_rule_head, s, in, n);
    EXPECT_EQ(got.first, want.first) << n << " tokens";
    EXPECT_EQ(got.second, want.second) << n << " tokens";
  }
}

}  // namespace
}  // namespace pagoda
