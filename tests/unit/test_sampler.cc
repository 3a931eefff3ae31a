#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"

namespace pagoda {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

SamplingParams seeded(uint64_t seed = 1234) {
  SamplingParams params;
  params.seed = seed;
  params.has_seed = true;
  return params;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature = 1.0) {
  double max_logit = -std::numeric_limits<double>::infinity();
  for (float l : logits) max_logit = std::max(max_logit, static_cast<double>(l));
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = std::exp((logits[i] - max_logit) / temperature);
    sum += p[i];
  }
  for (double& x : p) x /= sum;
  return p;
}

std::vector<double> log_softmax(const std::vector<float>& logits) {
  std::vector<double> p = softmax(logits);
  for (double& x : p) x = std::log(x);
  return p;
}

// log(p) for each p, so a test can state the distribution it wants at temperature 1.
std::vector<float> logits_for(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

std::vector<float> random_logits(size_t n, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(n);
  for (float& l : logits) l = normal(rng);
  return logits;
}

TokenId argmax(const std::vector<float>& logits) {
  return static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Fraction of num_draws that picked each token.
std::vector<double> frequencies(Sampler& sampler, const std::vector<float>& logits, int num_draws) {
  std::vector<double> freq(logits.size(), 0.0);
  for (int i = 0; i < num_draws; ++i) freq[static_cast<size_t>(sampler.sample(logits).token)] += 1;
  for (double& f : freq) f /= num_draws;
  return freq;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0.0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(a[i] - b[i]));
  return diff;
}

TEST(Sampler, GreedyPicksArgmax) {
  SamplingParams params = seeded();
  params.temperature = 0.0f;
  std::vector<float> logits = {0.1f, 2.5f, -1.0f, 2.4f, -7.0f};
  Sampler sampler(params, {}, 5);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(sampler.sample(logits).token, 1);
  sampler.check_invariants();
}

TEST(Sampler, GreedyTiesGoToLowestId) {
  SamplingParams params = seeded();
  params.temperature = 0.0f;
  Sampler sampler(params, {}, 6);
  EXPECT_EQ(sampler.sample(std::vector<float>{1, 3, 0, 3, 3, 2}).token, 1);
  EXPECT_EQ(sampler.sample(std::vector<float>{5, 5, 5, 5, 5, 5}).token, 0);
  EXPECT_EQ(sampler.sample(std::vector<float>{0, 0, 0, 0, 9, 9}).token, 4);
}

TEST(Sampler, TinyTemperatureActsGreedy) {
  std::vector<float> logits = random_logits(1000, 7);
  SamplingParams params = seeded();
  params.temperature = 1e-3f;
  Sampler sampler(params, {}, 1000);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(sampler.sample(logits).token, argmax(logits));
}

TEST(Sampler, TopK1EqualsGreedy) {
  std::vector<float> logits = random_logits(1000, 8);
  SamplingParams params = seeded();
  params.temperature = 1.5f;
  params.top_k = 1;
  Sampler sampler(params, {}, 1000);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(sampler.sample(logits).token, argmax(logits));
  // With a tie at the top, top-k keeps the lower id, exactly as greedy does.
  logits[900] = logits[static_cast<size_t>(argmax(logits))];
  TokenId greedy = argmax(logits);
  ASSERT_LT(greedy, 900);
  for (int i = 0; i < 50; ++i) ASSERT_EQ(sampler.sample(logits).token, greedy);
}

TEST(Sampler, TopKRenormalizesOverTheKBest) {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.5f, 2.5f};
  SamplingParams params = seeded(5);
  params.top_k = 3;  // ids 2, 4, 1
  Sampler sampler(params, {}, 5);
  std::vector<double> expected = softmax({-kInf, 2.0f, 3.0f, -kInf, 2.5f});
  std::vector<double> freq = frequencies(sampler, logits, 20000);
  EXPECT_EQ(freq[0], 0.0);
  EXPECT_EQ(freq[3], 0.0);
  EXPECT_LT(max_abs_diff(freq, expected), 0.01);
}

TEST(Sampler, TinyTopPKeepsOnlyTheTopToken) {
  std::vector<float> logits = {1.0f, 1.01f, 0.99f, 1.005f};
  SamplingParams params = seeded();
  params.top_p = 1e-6f;
  Sampler sampler(params, {}, 4);
  for (int i = 0; i < 500; ++i) ASSERT_EQ(sampler.sample(logits).token, 1);
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  // 0.5 + 0.3 >= 0.75 > 0.5: tokens 0 and 1 remain, renormalized to 0.625 / 0.375.
  std::vector<float> logits = logits_for({0.5, 0.3, 0.15, 0.05});
  SamplingParams params = seeded(6);
  params.top_p = 0.75f;
  Sampler sampler(params, {}, 4);
  std::vector<double> freq = frequencies(sampler, logits, 20000);
  EXPECT_EQ(freq[2], 0.0);
  EXPECT_EQ(freq[3], 0.0);
  EXPECT_LT(max_abs_diff(freq, {0.625, 0.375, 0.0, 0.0}), 0.01);
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheBest) {
  // Threshold 0.2 * 0.5 = 0.1: only token 3 (0.05) goes.
  std::vector<float> logits = logits_for({0.5, 0.3, 0.15, 0.05});
  SamplingParams params = seeded(7);
  params.min_p = 0.2f;
  Sampler sampler(params, {}, 4);
  std::vector<double> freq = frequencies(sampler, logits, 20000);
  EXPECT_EQ(freq[3], 0.0);
  EXPECT_LT(max_abs_diff(freq, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0}), 0.01);
}

TEST(Sampler, EmpiricalDistributionMatchesSoftmaxOverTemperature) {
  std::vector<float> logits = {0.3f, -1.2f, 1.1f, 0.0f, 0.8f, -0.4f, 1.5f, -2.0f};
  for (float temperature : {0.7f, 1.0f, 1.6f}) {
    SamplingParams params = seeded(11);
    params.temperature = temperature;
    Sampler sampler(params, {}, 8);
    std::vector<double> freq = frequencies(sampler, logits, 20000);
    EXPECT_LT(max_abs_diff(freq, softmax(logits, temperature)), 0.01) << "T=" << temperature;
  }
}

// Steps 6-10 the slow, obvious way: a full stable sort (ties to the lower id), the same float
// exp() as the sampler, sums in best-first order. Returns id -> unnormalized probability.
std::map<TokenId, float> reference_candidates(const std::vector<float>& logits,
                                              const SamplingParams& params) {
  std::vector<TokenId> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
  });
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < order.size()) {
    order.resize(static_cast<size_t>(params.top_k));
  }
  const float max_logit = logits[static_cast<size_t>(order[0])];
  std::vector<std::pair<TokenId, float>> kept;
  double total = 0.0;
  for (TokenId id : order) {
    float p = std::exp((logits[static_cast<size_t>(id)] - max_logit) / params.temperature);
    if (p > 0.0f) kept.emplace_back(id, p);
    total += p;
  }
  if (params.top_p < 1.0f) {
    double sum = 0.0;
    size_t n = 0;
    while (n < kept.size()) {
      sum += kept[n++].second;
      if (sum >= params.top_p * total) break;
    }
    kept.resize(n);
  }
  std::map<TokenId, float> out;
  for (const auto& [id, p] : kept) {
    if (p >= params.min_p) out[id] = p;
  }
  return out;
}

TEST(Sampler, TruncationOnALargeVocabularyMatchesAFullSort) {
  const size_t vocab_size = 256000;
  std::vector<float> normal = random_logits(vocab_size, 99, 2.0f);
  std::vector<float> coarse = normal;  // many exact ties
  for (float& l : coarse) l = std::round(l * 2.0f) / 2.0f;
  std::vector<float> dense(vocab_size);  // nearly flat: distinct scores differing in low bits
  for (size_t i = 0; i < vocab_size; ++i) dense[i] = static_cast<float>(i % 4093) * 1e-6f;
  struct Case {
    float temperature;
    int top_k;
    float top_p;
    float min_p;
  };
  const Case cases[] = {
      {1.0f, 0, 0.3f, 0.0f},   {1.0f, 0, 0.9f, 0.0f},    {0.7f, 0, 0.5f, 0.0f},
      {1.0f, 40, 1.0f, 0.0f},  {1.0f, 40, 0.5f, 0.0f},   {0.8f, 0, 1.0f, 0.05f},
      {1.0f, 0, 0.95f, 0.01f}, {1.3f, 1000, 0.8f, 0.0f}, {2.0f, 0, 0.999f, 0.0f},
      {1.0f, 0, 1e-7f, 0.0f},
  };
  SamplerScratch scratch;
  for (const std::vector<float>* logits : {&normal, &coarse, &dense}) {
    for (const Case& c : cases) {
      SamplingParams params = seeded();
      params.temperature = c.temperature;
      params.top_k = c.top_k;
      params.top_p = c.top_p;
      params.min_p = c.min_p;
      std::string label = "T=" + std::to_string(c.temperature) + " k=" + std::to_string(c.top_k) +
                          " p=" + std::to_string(c.top_p) + " min_p=" + std::to_string(c.min_p) +
                          (logits == &normal   ? " normal"
                           : logits == &coarse ? " coarse"
                                               : " dense");
      std::map<TokenId, float> expected = reference_candidates(*logits, params);
      CandidateSet got = sampling_candidates(*logits, params, scratch);
      std::map<TokenId, float> actual;
      double total = 0.0;
      for (const ScoredToken& t : got.tokens) {
        actual[t.id] = t.score;
        total += t.score;
      }
      ASSERT_EQ(actual.size(), got.tokens.size()) << label << ": an id appears twice";
      EXPECT_EQ(actual.size(), expected.size()) << label;
      EXPECT_TRUE(actual == expected) << label;
      EXPECT_NEAR(got.total_score, total, 1e-9 * total) << label;
    }
  }
}

TEST(Sampler, DrawsOnALargeVocabularyStayInTheNucleus) {
  const size_t vocab_size = 256000;
  std::vector<float> logits = random_logits(vocab_size, 98, 2.0f);
  SamplingParams params = seeded(3);
  params.top_p = 0.3f;
  std::map<TokenId, float> nucleus = reference_candidates(logits, params);
  ASSERT_GT(nucleus.size(), 1024u);  // past the sorting path, into the radix select
  Sampler sampler(params, {}, static_cast<int>(vocab_size));
  std::set<TokenId> seen;
  for (int i = 0; i < 100; ++i) {
    TokenId token = sampler.sample(logits).token;
    ASSERT_TRUE(nucleus.count(token)) << token;
    seen.insert(token);
  }
  EXPECT_GT(seen.size(), 20u);
}

TEST(Sampler, TopPAppliesAfterTopKRenormalizes) {
  // top_k = 3 leaves 0.4 / 0.3 / 0.2, renormalized to 4/9, 3/9, 2/9. 4/9 + 3/9 >= 0.75, so top-p
  // keeps two tokens (on the raw 0.4 + 0.3 it would have kept three).
  std::vector<float> logits = logits_for({0.4, 0.3, 0.2, 0.1});
  SamplingParams params = seeded(8);
  params.top_k = 3;
  params.top_p = 0.75f;
  Sampler sampler(params, {}, 4);
  std::vector<double> freq = frequencies(sampler, logits, 20000);
  EXPECT_EQ(freq[2], 0.0);
  EXPECT_EQ(freq[3], 0.0);
  EXPECT_LT(max_abs_diff(freq, {4.0 / 7, 3.0 / 7, 0.0, 0.0}), 0.01);
}

TEST(Sampler, TopPCutsInsideATieAtTheRightId) {
  // Every third id has logit 1, the rest 0. Top-p keeps all the 1s and then the 0s in id order
  // until the mass reaches top_p; the cut, computed here the same way, lands mid-way through the
  // 0s. 30000 candidates take the radix-select path.
  const size_t vocab_size = 30000;
  std::vector<float> logits(vocab_size);
  for (size_t i = 0; i < vocab_size; ++i) logits[i] = i % 3 == 0 ? 1.0f : 0.0f;
  const float low = std::exp(-1.0f);
  const double total = 10000.0 + 20000.0 * low;
  const float top_p = 0.8f;
  double need = top_p * total - 10000.0;
  TokenId cut = -1;  // the last low token kept
  for (size_t i = 0; i < vocab_size && need > 0.0; ++i) {
    if (i % 3 == 0) continue;
    need -= low;
    cut = static_cast<TokenId>(i);
  }
  ASSERT_GT(cut, 5000);
  ASSERT_LT(cut, 25000);

  SamplingParams params = seeded(12);
  params.top_p = top_p;
  SamplerScratch scratch;
  CandidateSet kept = sampling_candidates(logits, params, scratch);
  ASSERT_EQ(kept.tokens.size(), 10000u + static_cast<size_t>(cut) - static_cast<size_t>(cut) / 3);
  TokenId last_low = -1;
  for (const ScoredToken& t : kept.tokens) {
    if (t.id % 3 != 0) last_low = std::max(last_low, t.id);
  }
  EXPECT_EQ(last_low, cut);
  Sampler sampler(params, {}, static_cast<int>(vocab_size));
  TokenId highest_low = -1;
  for (int i = 0; i < 500; ++i) {
    TokenId t = sampler.sample(logits).token;
    if (t % 3 != 0) highest_low = std::max(highest_low, t);
  }
  EXPECT_LE(highest_low, cut);
  EXPECT_GT(highest_low, cut - 300);
}

TEST(Sampler, TopPOnAFlatDistributionKeepsTheLowerIds) {
  // 20000 equal probabilities: top_p = 0.5 keeps exactly ids 0..9999, ties going to lower ids.
  std::vector<float> logits(20000, 0.25f);
  SamplingParams params = seeded(4);
  params.top_p = 0.5f;
  Sampler sampler(params, {}, 20000);
  TokenId highest = 0;
  for (int i = 0; i < 500; ++i) highest = std::max(highest, sampler.sample(logits).token);
  EXPECT_LT(highest, 10000);
  EXPECT_GT(highest, 9800);
}

TEST(Sampler, LogitBiasBansAndForces) {
  std::vector<float> logits = random_logits(100, 12);
  TokenId best = argmax(logits);
  std::vector<float> without_best = logits;
  without_best[static_cast<size_t>(best)] = -kInf;
  TokenId second = argmax(without_best);

  for (float ban : {-kInf, -100.0f}) {
    SamplingParams params = seeded();
    params.temperature = 0.0f;
    params.logit_bias = {{best, ban}};
    Sampler sampler(params, {}, 100);
    EXPECT_EQ(sampler.sample(logits).token, second) << ban;
  }
  {
    SamplingParams params = seeded();
    params.logit_bias = {{best, -kInf}};
    Sampler sampler(params, {}, 100);
    for (int i = 0; i < 500; ++i) ASSERT_NE(sampler.sample(logits).token, best);
  }
  {
    TokenId worst =
        static_cast<TokenId>(std::min_element(logits.begin(), logits.end()) - logits.begin());
    SamplingParams params = seeded();
    params.logit_bias = {{worst, 100.0f}};
    Sampler sampler(params, {}, 100);
    for (int i = 0; i < 200; ++i) ASSERT_EQ(sampler.sample(logits).token, worst);
  }
}

TEST(SamplerPenalties, ApplyTheExactFormulas) {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
  TokenHistory history;
  std::vector<TokenId> prompt = {0, 1, 0};
  history.set_prompt(prompt);
  for (TokenId t : {2, 2, 1, 2}) history.add_output(t);
  SamplingParams params;
  params.repetition_penalty = 1.5f;
  params.presence_penalty = 0.4f;
  params.frequency_penalty = 0.3f;
  params.logit_bias = {{4, 1.0f}, {0, 0.5f}};
  apply_bias_and_penalties(logits, params, history);

  // bias -> repetition (prompt or output; divide positive, multiply negative) -> presence and
  // frequency (output only).
  EXPECT_NEAR(logits[0], (2.0f + 0.5f) / 1.5f, 1e-6);            // prompt only
  EXPECT_NEAR(logits[1], -1.0f * 1.5f - 0.4f - 0.3f * 1, 1e-6);  // prompt and output x1
  EXPECT_NEAR(logits[2], 0.5f / 1.5f - 0.4f - 0.3f * 3, 1e-6);   // output x3
  EXPECT_EQ(logits[3], 3.0f);                                    // untouched
  EXPECT_NEAR(logits[4], -2.0f + 1.0f, 1e-6);                    // bias only
  EXPECT_EQ(logits[5], 1.0f);
}

TEST(SamplerPenalties, NegativePenaltiesRaiseAndNeutralOnesDoNothing) {
  std::vector<float> logits = {1.0f, -0.5f, 0.25f};
  TokenHistory history;
  std::vector<TokenId> prompt = {0, 1, 2};
  history.set_prompt(prompt);
  history.add_output(1);
  SamplingParams neutral;
  std::vector<float> copy = logits;
  apply_bias_and_penalties(copy, neutral, history);
  EXPECT_EQ(copy, logits);

  SamplingParams params;
  params.presence_penalty = -1.0f;
  params.frequency_penalty = -0.5f;
  apply_bias_and_penalties(copy, params, history);
  EXPECT_EQ(copy[0], 1.0f);
  EXPECT_NEAR(copy[1], -0.5f + 1.0f + 0.5f, 1e-6);
  EXPECT_EQ(copy[2], 0.25f);
}

TEST(SamplerPenalties, SteerGreedyDecodingThroughAccept) {
  std::vector<float> logits = {3.0f, 2.5f, 0.0f};
  SamplingParams params = seeded();
  params.temperature = 0.0f;
  params.frequency_penalty = 0.4f;
  std::vector<TokenId> prompt = {0, 0, 0};  // the prompt never counts for frequency
  Sampler sampler(params, prompt, 3);
  EXPECT_EQ(sampler.sample(logits).token, 0);
  EXPECT_EQ(sampler.sample(logits).token, 0);  // sample() alone records nothing
  sampler.accept(0);                           // 3.0 - 0.4 = 2.6 > 2.5
  EXPECT_EQ(sampler.sample(logits).token, 0);
  sampler.accept(0);  // 3.0 - 0.8 = 2.2 < 2.5
  EXPECT_EQ(sampler.sample(logits).token, 1);
  EXPECT_EQ(sampler.history().output_count(0), 2);
  sampler.check_invariants();

  // The repetition penalty does read the prompt: 3.0 / 1.5 = 2.0 < 2.5.
  SamplingParams repeat = seeded();
  repeat.temperature = 0.0f;
  repeat.repetition_penalty = 1.5f;
  Sampler repeating(repeat, prompt, 3);
  EXPECT_EQ(repeating.sample(logits).token, 1);
}

TEST(Sampler, SameSeedSameDrawsDifferentSeedDifferentDraws) {
  std::vector<float> logits = random_logits(1000, 21, 1.0f);
  auto draws = [&](SamplingParams params) {
    params.top_k = 50;
    params.top_p = 0.9f;
    Sampler sampler(params, {}, 1000);
    std::vector<TokenId> out;
    for (int i = 0; i < 200; ++i) {
      out.push_back(sampler.sample(logits).token);
      sampler.accept(out.back());
    }
    return out;
  };
  std::vector<TokenId> a = draws(seeded(42));
  EXPECT_EQ(a, draws(seeded(42)));
  EXPECT_NE(a, draws(seeded(43)));

  // An unseeded sampler reports the seed it drew, which replays it.
  SamplingParams unseeded;
  unseeded.top_k = 50;
  unseeded.top_p = 0.9f;
  Sampler first(unseeded, {}, 1000);
  std::vector<TokenId> b;
  for (int i = 0; i < 200; ++i) {
    b.push_back(first.sample(logits).token);
    first.accept(b.back());
  }
  EXPECT_EQ(b, draws(seeded(first.seed())));
}

TEST(Sampler, SharedScratchGivesTheSameDraws) {
  std::vector<float> small = random_logits(50, 1);
  std::vector<float> large = random_logits(5000, 2);
  Sampler own(seeded(9), {}, 50);
  Sampler shared(seeded(9), {}, 50);
  Sampler other(seeded(10), {}, 5000);
  SamplerScratch scratch;
  for (int i = 0; i < 100; ++i) {
    other.sample(large, scratch);  // leaves larger, stale buffers behind
    ASSERT_EQ(own.sample(small).token, shared.sample(small, scratch).token);
  }
}

TEST(Sampler, LogprobsAreLogSoftmaxAfterBiasBeforeTemperature) {
  std::vector<float> logits = random_logits(50, 31);
  SamplingParams params = seeded();
  params.temperature = 0.6f;
  params.top_k = 3;
  params.num_logprobs = 5;
  params.logit_bias = {{7, 2.0f}};
  Sampler sampler(params, {}, 50);
  std::vector<float> biased = logits;
  biased[7] += 2.0f;
  std::vector<double> expected = log_softmax(biased);
  std::vector<TokenId> order(50);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
    return expected[static_cast<size_t>(a)] > expected[static_cast<size_t>(b)];
  });

  for (int i = 0; i < 20; ++i) {
    SampleResult result = sampler.sample(logits);
    EXPECT_NEAR(result.logprob, expected[static_cast<size_t>(result.token)], 1e-5);
    ASSERT_EQ(result.top_logprobs.size(), 5u);
    for (size_t j = 0; j < 5; ++j) {
      EXPECT_EQ(result.top_logprobs[j].first, order[j]);
      EXPECT_NEAR(result.top_logprobs[j].second, expected[static_cast<size_t>(order[j])], 1e-5);
    }
  }
}

TEST(Sampler, LogprobWithoutAlternativesAndOffByDefault) {
  std::vector<float> logits = {0.5f, 1.5f, -0.5f};
  SamplingParams params = seeded();
  params.temperature = 0.0f;
  params.logprobs = true;
  SampleResult with = Sampler(params, {}, 3).sample(logits);
  EXPECT_EQ(with.token, 1);
  EXPECT_NEAR(with.logprob, log_softmax(logits)[1], 1e-6);
  EXPECT_TRUE(with.top_logprobs.empty());

  params.logprobs = false;
  SampleResult without = Sampler(params, {}, 3).sample(logits);
  EXPECT_EQ(without.logprob, 0.0f);
  EXPECT_TRUE(without.top_logprobs.empty());
}

TEST(Sampler, NanNeverChosenAndAllBannedFails) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  SamplingParams greedy = seeded();
  greedy.temperature = 0.0f;
  Sampler a(greedy, {}, 4);
  EXPECT_EQ(a.sample(std::vector<float>{nan, -3.0f, nan, -4.0f}).token, 1);
  Sampler b(seeded(), {}, 4);
  for (int i = 0; i < 100; ++i) {
    TokenId t = b.sample(std::vector<float>{nan, 0.0f, nan, 0.0f}).token;
    ASSERT_TRUE(t == 1 || t == 3);
  }
  // +inf is a certain winner, not a NaN source.
  EXPECT_EQ(b.sample(std::vector<float>{0.0f, kInf, 1.0f, 2.0f}).token, 1);

  std::vector<float> banned = {-kInf, nan, -kInf, -kInf};
  EXPECT_THROW(a.sample(banned), Error);
  EXPECT_THROW(b.sample(banned), Error);
  SamplingParams ban_rest = seeded();
  ban_rest.logit_bias = {{1, -kInf}, {3, -kInf}};
  Sampler c(ban_rest, {}, 4);
  EXPECT_THROW(c.sample(std::vector<float>{nan, 1.0f, -kInf, 2.0f}), Error);
}

void expect_error_naming(const std::function<void()>& action, const std::string& name) {
  try {
    action();
    ADD_FAILURE() << "no error for " << name;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

TEST(Sampler, ValidateNamesTheBadField) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    std::function<void(SamplingParams&)> mutate;
    std::string field;
  };
  std::vector<Case> cases = {
      {[](SamplingParams& p) { p.temperature = -0.1f; }, "temperature"},
      {[&](SamplingParams& p) { p.temperature = nan; }, "temperature"},
      {[](SamplingParams& p) { p.top_k = -1; }, "top_k"},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, "top_p"},
      {[](SamplingParams& p) { p.top_p = 1.01f; }, "top_p"},
      {[](SamplingParams& p) { p.min_p = -0.01f; }, "min_p"},
      {[](SamplingParams& p) { p.min_p = 1.5f; }, "min_p"},
      {[](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty"},
      {[](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty"},
      {[&](SamplingParams& p) { p.presence_penalty = nan; }, "presence_penalty"},
      {[](SamplingParams& p) { p.frequency_penalty = -2.01f; }, "frequency_penalty"},
      {[](SamplingParams& p) { p.num_logprobs = 21; }, "num_logprobs"},
      {[](SamplingParams& p) { p.num_logprobs = -1; }, "num_logprobs"},
      {[](SamplingParams& p) { p.logit_bias.emplace_back(3, 100.5f); }, "logit_bias"},
      {[](SamplingParams& p) { p.logit_bias.emplace_back(-1, 1.0f); }, "logit_bias"},
      {[&](SamplingParams& p) { p.logit_bias.emplace_back(3, nan); }, "logit_bias"},
  };
  for (const Case& c : cases) {
    SamplingParams params;
    c.mutate(params);
    expect_error_naming([&] { validate(params, 10); }, c.field);
    expect_error_naming([&] { Sampler(params, {}, 10); }, c.field);
  }

  SamplingParams edges;  // the ends of every range are allowed
  edges.temperature = 0.0f;
  edges.top_p = 1.0f;
  edges.min_p = 1.0f;
  edges.presence_penalty = -2.0f;
  edges.frequency_penalty = 2.0f;
  edges.num_logprobs = 20;
  edges.logit_bias = {{0, -100.0f}, {1, 100.0f}, {2, -kInf}};
  EXPECT_NO_THROW(validate(edges, 10));
}

// The server answers 400 naming param(), so it must be the field's name.
TEST(Sampler, ValidateErrorCarriesTheFieldName) {
  auto param_of = [](const SamplingParams& params, int32_t vocab_size) -> std::string {
    try {
      validate(params, vocab_size);
    } catch (const SamplingParamError& e) {
      return e.param();
    }
    return "";
  };
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_EQ(param_of(p, 10), "top_p");
  p = SamplingParams{};
  p.repetition_penalty = -1.0f;
  EXPECT_EQ(param_of(p, 10), "repetition_penalty");
  p = SamplingParams{};
  p.logit_bias = {{9, 1.0f}};
  EXPECT_EQ(param_of(p, 10), "");
  EXPECT_EQ(param_of(p, 9), "logit_bias");  // ids are held to the vocabulary given
  EXPECT_EQ(param_of(p, 0), "");            // 0: the vocabulary is not known yet
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_EQ(param_of(p, 0), "logit_bias");
}

TEST(Sampler, RejectsInputOutsideTheVocabulary) {
  std::vector<TokenId> bad_prompt = {1, 2, 10};
  expect_error_naming([] { Sampler(SamplingParams{}, {}, 0); }, "vocab_size");
  expect_error_naming([&] { Sampler(SamplingParams{}, bad_prompt, 10); }, "prompt token 10");
  SamplingParams biased;
  biased.logit_bias = {{10, 1.0f}};
  expect_error_naming([&] { Sampler(biased, {}, 10); }, "logit_bias");

  Sampler sampler(seeded(), {}, 10);
  expect_error_naming([&] { sampler.sample(std::vector<float>(9, 0.0f)); }, "9 logits");
  expect_error_naming([&] { sampler.accept(10); }, "accepted token 10");
  expect_error_naming([&] { sampler.accept(-1); }, "accepted token -1");
  sampler.check_invariants();

  std::vector<float> logits(3, 0.0f);
  TokenHistory history;
  history.add_output(5);
  expect_error_naming([&] { apply_bias_and_penalties(logits, biased, history); },
                      "outside the vocabulary");
}

TEST(SamplerTokenHistory, CountsDistinctSortedIds) {
  TokenHistory history;
  std::vector<TokenId> prompt = {9, 3, 3, 7, 9};
  history.set_prompt(prompt);
  EXPECT_EQ(std::vector<TokenId>(history.prompt_tokens().begin(), history.prompt_tokens().end()),
            (std::vector<TokenId>{3, 7, 9}));
  EXPECT_TRUE(history.in_prompt(7));
  EXPECT_FALSE(history.in_prompt(8));
  for (TokenId t : {5, 1, 5, 9, 5}) {
    history.add_output(t);
    history.check_invariants();
  }
  EXPECT_EQ(history.output_count(5), 3);
  EXPECT_EQ(history.output_count(1), 1);
  EXPECT_EQ(history.output_count(3), 0);  // the prompt is not output
  EXPECT_EQ(history.num_output_tokens(), 5);
  ASSERT_EQ(history.output_counts().size(), 3u);
  EXPECT_EQ(history.output_counts()[0].first, 1);
  EXPECT_EQ(history.output_counts()[2].first, 9);
}

}  // namespace
}  // namespace pagoda
