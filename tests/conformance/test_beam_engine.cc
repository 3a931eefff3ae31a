// Beam search in the engine on a real model: width 1 is greedy decoding; the best beam is at
// least as likely as greedy's output, and equals an exhaustive search where the search space
// can be enumerated; beams share their prompt's blocks and free them when pruned.
#include <gtest/gtest.h>

#include <cmath>

#include "conformance/engine_harness.h"
#include "engine/generator.h"
#include "test_util.h"

namespace pagoda {
namespace {

GenerationRequest beam_request(std::vector<TokenId> prompt, int32_t max_tokens, int32_t width,
                               int32_t n = 1) {
  GenerationRequest r = greedy_request(std::move(prompt), max_tokens);
  r.beam.width = width;
  r.n = n;
  return r;
}

// log p of `output` after `prompt`, from the model's logits.
double sequence_logprob(Model& model, Backend& backend, const std::vector<TokenId>& prompt,
                        const std::vector<TokenId>& output) {
  std::vector<TokenId> all = prompt;
  all.insert(all.end(), output.begin(), output.end());
  Generator g(model, backend, static_cast<int32_t>(all.size()) + 1);
  const std::vector<float> logits = g.prompt_logits(all);
  const size_t vocab = logits.size() / all.size();
  double total = 0;
  for (size_t i = 0; i < output.size(); ++i) {
    const size_t row = prompt.size() - 1 + i;
    const std::span<const float> r(logits.data() + row * vocab, vocab);
    float max = r[0];
    for (float x : r) max = std::max(max, x);
    double z = 0;
    for (float x : r) z += std::exp(static_cast<double>(x - max));
    total += static_cast<double>(r[static_cast<size_t>(output[i])] - max) - std::log(z);
  }
  return total;
}

TEST(EngineBeamSearch, WidthOneIsGreedy) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  auto backend = make_cpu_backend(2);
  LoadedModel m = load(stories260k(shared));
  std::vector<GenerationRequest> greedy = make_requests(m, 6, 60, 20);
  std::vector<GenerationRequest> beams = greedy;
  for (GenerationRequest& r : beams) r.beam.width = 1;
  const RunResult a = run(*m.model, *backend, config_with(4096, true), greedy, Arrival::kTogether);
  const RunResult b = run(*m.model, *backend, config_with(4096, true), beams, Arrival::kTogether);
  EXPECT_EQ(ids_of(a), ids_of(b));
  for (size_t i = 0; i < greedy.size(); ++i) {
    EXPECT_EQ(a.samples[i][0].finish, b.samples[i][0].finish) << i;
  }
}

TEST(EngineBeamSearch, TheBestBeamIsAtLeastAsLikelyAsGreedy) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  auto backend = make_cpu_backend(2);
  LoadedModel m = load(stories260k(shared));
  const std::vector<TokenId> story = encode(m, kStoryA);
  int32_t better = 0;
  for (int32_t len : {2, 3, 5, 9, 14, 20, 27, 33, 41, 50}) {
    const std::vector<TokenId> prompt(story.begin(), story.begin() + len);
    GenerationRequest g = greedy_request(prompt, 8);  // no stop ids: every output has 8 tokens
    const RunResult greedy = run(*m.model, *backend, config_with(4096, true), {g}, Arrival::kAlone);
    const RunResult beam = run(*m.model, *backend, config_with(4096, true),
                               {beam_request(prompt, 8, 6, 3)}, Arrival::kAlone);
    const double lp_greedy = sequence_logprob(*m.model, *backend, prompt, greedy.samples[0][0].ids);
    const double lp_beam = sequence_logprob(*m.model, *backend, prompt, beam.samples[0][0].ids);
    EXPECT_GE(lp_beam, lp_greedy - 1e-4) << "prompt of " << len;
    better += lp_beam > lp_greedy + 1e-4;
    // The n samples come best first, all of max_tokens.
    ASSERT_EQ(beam.samples[0].size(), 3u);
    double last = 0;
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(beam.samples[0][k].ids.size(), 8u);
      const double lp = sequence_logprob(*m.model, *backend, prompt, beam.samples[0][k].ids);
      if (k > 0) {
        EXPECT_LE(lp, last + 1e-4);
      }
      last = lp;
    }
  }
  // Where greedy is already the likeliest output the two agree; the search found better ones
  // at least once.
  EXPECT_GT(better, 0);
}

TEST(EngineBeamSearch, AWideEnoughBeamIsExhaustive) {
  // Two tokens with a beam as wide as the vocabulary: every pair is considered, so the best
  // beam is the most likely pair.
  PAGODA_SHARED_OR_SKIP(shared, "");
  auto backend = make_cpu_backend(2);
  LoadedModel m = load(stories260k(shared));
  const std::vector<TokenId> story = encode(m, kStoryB);
  const std::vector<TokenId> prompt(story.begin(), story.begin() + 12);
  const auto vocab = static_cast<int32_t>(m.model->config().vocab_size);
  double best = -1e300;
  std::vector<TokenId> best_pair;
  Generator gen(*m.model, *backend, static_cast<int32_t>(prompt.size()) + 2);
  for (TokenId t1 = 0; t1 < vocab; ++t1) {
    std::vector<TokenId> all = prompt;
    all.push_back(t1);
    const std::vector<float> logits = gen.prompt_logits(all);
    auto logprob_at = [&](size_t row, TokenId t) {
      const std::span<const float> r(logits.data() + row * vocab, static_cast<size_t>(vocab));
      float max = r[0];
      for (float x : r) max = std::max(max, x);
      double z = 0;
      for (float x : r) z += std::exp(static_cast<double>(x - max));
      return static_cast<double>(r[static_cast<size_t>(t)] - max) - std::log(z);
    };
    const double lp1 = logprob_at(prompt.size() - 1, t1);
    for (TokenId t2 = 0; t2 < vocab; ++t2) {
      const double lp = lp1 + logprob_at(prompt.size(), t2);
      if (lp > best) {
        best = lp;
        best_pair = {t1, t2};
      }
    }
  }
  EngineConfig config = config_with(1 << 16, true);
  config.max_num_seqs = vocab;
  const RunResult beam =
      run(*m.model, *backend, config, {beam_request(prompt, 2, vocab)}, Arrival::kAlone);
  EXPECT_EQ(beam.samples[0][0].ids, best_pair);
}

TEST(EngineBeamSearch, BeamsShareThePromptsBlocks) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  auto backend = make_cpu_backend(2);
  LoadedModel m = load(stories260k(shared));
  const std::vector<TokenId> story = encode(m, kStoryA);
  const std::vector<TokenId> prompt(story.begin(), story.begin() + 80);  // 5 full blocks
  for (int32_t width : {4, 8}) {
    const RunResult one = run(*m.model, *backend, config_with(4096, true),
                              {greedy_request(prompt, 24)}, Arrival::kAlone);
    const RunResult beams = run(*m.model, *backend, config_with(4096, true),
                                {beam_request(prompt, 24, width)}, Arrival::kAlone);
    // Independent copies would hold width times one sequence's blocks; the beams share the
    // prompt's and hold their own tails only (run() checks every block is freed at the end and
    // the invariants after every step).
    EXPECT_LT(beams.peak_used_blocks, width * one.peak_used_blocks) << "width " << width;
    EXPECT_LE(beams.peak_used_blocks, one.peak_used_blocks + width * 3) << "width " << width;
  }
}

}  // namespace
}  // namespace pagoda
