// Prompt log-probabilities on a real model: scoring a prompt gives, at each position, the
// log-probability the model gave that token when it generated it (teacher forcing equals
// generation), whether the prompt runs in one step or in small chunks.
#include <gtest/gtest.h>

#include "conformance/engine_harness.h"
#include "core/error.h"
#include "engine/engine.h"
#include "test_util.h"

namespace pagoda {
namespace {

std::vector<SampleResult> prompt_logprobs_of(Model& model, Backend& backend,
                                             const EngineConfig& config, GenerationRequest r) {
  Engine engine(model, backend, config);
  engine.add_request(std::move(r));
  std::vector<SampleResult> out;
  int events_with_scores = 0;
  while (engine.has_work()) {
    for (OutputEvent& e : engine.step()) {
      if (e.prompt_logprobs.empty()) continue;
      ++events_with_scores;
      out = std::move(e.prompt_logprobs);
    }
  }
  EXPECT_EQ(events_with_scores, 1);
  return out;
}

TEST(EnginePromptLogprobs, EqualTheLogprobsOfGeneration) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(stories260k(shared));
  auto backend = make_cpu_backend(2);
  const std::vector<TokenId> prompt = encode(m, "Once upon a time");
  GenerationRequest gen = greedy_request(prompt, 12);
  gen.sampling.logprobs = true;
  gen.sampling.num_logprobs = 2;
  Engine engine(*m.model, *backend, config_with(1024, true));
  engine.add_request(gen);
  std::vector<TokenId> ids;
  std::vector<SampleResult> generated;
  while (engine.has_work()) {
    for (OutputEvent& e : engine.step()) {
      ids.insert(ids.end(), e.token_ids.begin(), e.token_ids.end());
      generated.insert(generated.end(), e.logprobs.begin(), e.logprobs.end());
    }
  }
  ASSERT_EQ(ids.size(), 12u);
  std::vector<TokenId> whole = prompt;
  whole.insert(whole.end(), ids.begin(), ids.end());
  GenerationRequest score = greedy_request(whole, 1);
  score.sampling = gen.sampling;
  score.prompt_logprobs = true;
  // One step, then chunks of 5 tokens (and a second sample, which gets none).
  for (int32_t budget : {2048, 5}) {
    SCOPED_TRACE("token budget " + std::to_string(budget));
    score.n = budget == 5 ? 2 : 1;
    const std::vector<SampleResult> scored =
        prompt_logprobs_of(*m.model, *backend, config_with(1024, true, budget), score);
    ASSERT_EQ(scored.size(), whole.size() - 1);
    for (size_t i = 0; i < scored.size(); ++i) EXPECT_EQ(scored[i].token, whole[i + 1]);
    for (size_t k = 0; k < ids.size(); ++k) {
      const SampleResult& s = scored[prompt.size() - 1 + k];
      EXPECT_NEAR(s.logprob, generated[k].logprob, 1e-4) << "token " << k;
      ASSERT_EQ(s.top_logprobs.size(), 2u);
      EXPECT_EQ(s.top_logprobs[0].first, generated[k].top_logprobs[0].first);
    }
  }
}

TEST(EnginePromptLogprobs, ARepeatedPromptIsComputedAgain) {
  // The prefix cache would skip the positions a second request shares; scored requests do not
  // share, so both get every position.
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(stories260k(shared));
  auto backend = make_cpu_backend(2);
  GenerationRequest r = greedy_request(encode(m, kStoryA), 1);
  r.sampling.logprobs = true;
  r.prompt_logprobs = true;
  Engine engine(*m.model, *backend, config_with(2048, true));
  engine.add_request(r);
  while (engine.has_work()) engine.step();
  engine.add_request(r);
  size_t scored = 0;
  while (engine.has_work()) {
    for (OutputEvent& e : engine.step()) scored += e.prompt_logprobs.size();
  }
  EXPECT_EQ(scored, r.prompt.size() - 1);
}

}  // namespace
}  // namespace pagoda
