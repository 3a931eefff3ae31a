// Sampler::verify, the acceptance step of speculative decoding, on a small vocabulary where the
// target distribution is known exactly: greedy verification gives greedy decoding's tokens, and
// modified rejection sampling gives tokens distributed exactly as the target's, whatever the
// proposal and its distribution (chi-squared goodness of fit over fixed seeds, bound 1e-3 fixed
// in advance).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"
#include "test_util.h"

namespace pagoda {
namespace {

constexpr int kVocab = 6;

// Softmax at temperature 1 after `penalty` is subtracted from the logits of `seen` tokens.
std::vector<double> softmax(const std::vector<float>& logits, const std::vector<TokenId>& seen = {},
                            float penalty = 0) {
  std::vector<double> p(logits.size());
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    double l = logits[i];
    for (TokenId s : seen) {
      if (s == static_cast<TokenId>(i)) {
        l -= penalty;
        break;
      }
    }
    p[i] = std::exp(l);
    total += p[i];
  }
  for (double& x : p) x /= total;
  return p;
}

const std::vector<float> kRow0 = {1.0f, 0.2f, 2.0f, -0.5f, 0.7f, 1.4f};
const std::vector<float> kRow1 = {0.3f, 1.8f, -1.0f, 0.9f, 0.0f, 1.1f};

std::vector<float> rows(std::initializer_list<std::vector<float>> list) {
  std::vector<float> out;
  for (const auto& r : list) out.insert(out.end(), r.begin(), r.end());
  return out;
}

SamplingParams params(uint64_t seed, float presence = 0) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = seed;
  p.has_seed = true;
  p.presence_penalty = presence;
  return p;
}

TEST(SamplerVerify, GreedyAcceptsTheArgmaxChainAndStopsAtTheFirstMiss) {
  SamplingParams g;
  g.temperature = 0;
  SamplerScratch scratch;
  const std::vector<float> logits = rows({kRow0, kRow1, kRow0});
  {
    Sampler s(g, {}, kVocab);
    // argmax(row0) = 2, argmax(row1) = 1, argmax(row2) = 2: both proposals right, then a bonus.
    const auto out = s.verify(logits, std::vector<TokenId>{2, 1}, {}, scratch);
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[0].token, 2);
    EXPECT_EQ(out[1].token, 1);
    EXPECT_EQ(out[2].token, 2);
    EXPECT_EQ(s.history().num_output_tokens(), 3);
  }
  {
    Sampler s(g, {}, kVocab);
    // The second proposal is wrong: the argmax of its row replaces it and nothing follows.
    const auto out = s.verify(logits, std::vector<TokenId>{2, 4}, {}, scratch);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[1].token, 1);
  }
  {
    Sampler s(g, {}, kVocab);
    const auto out = s.verify(logits, std::vector<TokenId>{0, 1}, {}, scratch);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].token, 2);
  }
}

TEST(SamplerVerify, LogprobsAreThoseOfEachRow) {
  SamplingParams g;
  g.temperature = 0;
  g.logprobs = true;
  SamplerScratch scratch;
  Sampler s(g, {}, kVocab);
  const auto out = s.verify(rows({kRow0, kRow1}), std::vector<TokenId>{2}, {}, scratch);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_NEAR(out[0].logprob, std::log(softmax(kRow0)[2]), 1e-5);
  EXPECT_NEAR(out[1].logprob, std::log(softmax(kRow1)[1]), 1e-5);
}

// Outcomes of verify(row0, row1; proposal x): a token t != x alone, or x and the token after it.
// Their exact probabilities: p0(t), and p0(x) * p1'(y) where p1' is row 1 with x in the history.
struct Outcomes {
  std::map<int32_t, int64_t> counts;
  std::map<int32_t, double> expected;
};

Outcomes run_verify(TokenId x, const std::vector<ProposalDistribution>& q, float presence,
                    int count, uint64_t first_seed) {
  Outcomes o;
  const std::vector<double> p0 = softmax(kRow0);
  const std::vector<double> p1 = softmax(kRow1, {x}, presence);
  for (int t = 0; t < kVocab; ++t) {
    if (t != x) o.expected[t] = p0[static_cast<size_t>(t)];
  }
  for (int y = 0; y < kVocab; ++y) {
    o.expected[100 + y] = p0[static_cast<size_t>(x)] * p1[static_cast<size_t>(y)];
  }
  const std::vector<float> logits = rows({kRow0, kRow1});
  SamplerScratch scratch;
  for (int i = 0; i < count; ++i) {
    Sampler s(params(first_seed + static_cast<uint64_t>(i), presence), {}, kVocab);
    const auto out = s.verify(logits, std::vector<TokenId>{x}, q, scratch);
    if (out.size() == 1) {
      EXPECT_NE(out[0].token, x);  // a rejected proposal is never drawn again
      ++o.counts[out[0].token];
    } else {
      EXPECT_EQ(out[0].token, x);
      ++o.counts[100 + out[1].token];
    }
  }
  return o;
}

TEST(SamplerVerify, APointMassProposalGivesTheTargetDistribution) {
  for (TokenId x : {2, 3}) {  // the most likely token, and an unlikely one
    const Outcomes o = run_verify(x, {}, 0.0f, 20000, 1000);
    EXPECT_GT(test::chi_squared_fit_p(o.counts, o.expected), 1e-3) << "proposal " << x;
  }
}

TEST(SamplerVerify, ADraftDistributionGivesTheTargetDistribution) {
  // Proposals drawn from a q far from p (it overrates the tokens p finds unlikely): the first
  // token out of verify, accepted proposal or redrawn, is distributed as p.
  ProposalDistribution q;
  q.probs = {{0, 0.05f}, {1, 0.30f}, {2, 0.05f}, {3, 0.35f}, {4, 0.15f}, {5, 0.10f}};
  const std::vector<double> p0 = softmax(kRow0);
  std::map<int32_t, double> expected;
  for (int t = 0; t < kVocab; ++t) expected[t] = p0[static_cast<size_t>(t)];
  std::map<int32_t, int64_t> counts;
  const std::vector<float> logits = rows({kRow0, kRow1});
  SamplerScratch scratch;
  std::mt19937_64 draft_rng(7);
  int64_t num_accepted = 0;
  for (int i = 0; i < 40000; ++i) {
    double u = static_cast<double>(draft_rng() >> 11) * 0x1.0p-53;
    TokenId x = 0;
    while (x + 1 < kVocab && u >= q.probs[static_cast<size_t>(x)].second) {
      u -= q.probs[static_cast<size_t>(x)].second;
      ++x;
    }
    Sampler s(params(50000 + static_cast<uint64_t>(i)), {}, kVocab);
    const auto out =
        s.verify(logits, std::vector<TokenId>{x}, std::vector<ProposalDistribution>{q}, scratch);
    ++counts[out[0].token];
    if (out.size() == 2) {
      EXPECT_EQ(out[0].token, x);
      ++num_accepted;
    }
  }
  EXPECT_GT(test::chi_squared_fit_p(counts, expected), 1e-3);
  // Accepted about sum_x min(q(x), p(x)) of the time: both paths ran.
  EXPECT_GT(num_accepted, 10000);
  EXPECT_LT(num_accepted, 30000);
}

TEST(SamplerVerify, PenaltiesOfALaterRowSeeTheAcceptedTokens) {
  // Row 1 is drawn with the accepted proposal in the history, so its presence penalty applies.
  const Outcomes o = run_verify(1, {}, 1.5f, 20000, 90000);
  EXPECT_GT(test::chi_squared_fit_p(o.counts, o.expected), 1e-3);
}

TEST(SamplerVerify, RejectsMismatchedShapes) {
  Sampler s(params(1), {}, kVocab);
  SamplerScratch scratch;
  EXPECT_THROW(s.verify(kRow0, std::vector<TokenId>{1}, {}, scratch), Error);
  const std::vector<ProposalDistribution> two(2);
  EXPECT_THROW(s.verify(rows({kRow0, kRow1}), std::vector<TokenId>{1}, two, scratch), Error);
}

}  // namespace
}  // namespace pagoda
