// The thinking budget on a real model: after N tokens inside the thinking the engine forces the
// closing tokens, and the model goes on from there as it would after those tokens.
#include <gtest/gtest.h>

#include "conformance/engine_harness.h"
#include "engine/engine.h"
#include "test_util.h"

namespace pagoda {
namespace {

TEST(EngineThinkingBudget, ForcesTheEndAfterNTokensThenContinues) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(stories260k(shared));
  auto backend = make_cpu_backend(2);
  const std::vector<TokenId> prompt = encode(m, "Once upon a time");
  const std::vector<TokenId> end =
      m.tokenizer->encode("</think>", {.add_special = false, .parse_special = false});
  ASSERT_FALSE(end.empty());
  const RunResult free_run = run(*m.model, *backend, config_with(1024, true),
                                 {greedy_request(prompt, 20)}, Arrival::kAlone);
  for (int32_t budget : {0, 3}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    GenerationRequest r = greedy_request(prompt, 20);
    r.n = 2;  // the children are forced too
    r.thinking = {.max_tokens = budget, .syntax = ReasoningSyntax::kThinkTags,
                  .starts_inside = true, .end_tokens = end, .tokenizer = m.tokenizer.get()};
    const RunResult capped = run(*m.model, *backend, config_with(1024, true), {r}, Arrival::kAlone);
    // The model's own tokens, then the forced end, then what greedy decoding gives after them.
    std::vector<TokenId> expected(free_run.samples[0][0].ids.begin(),
                                  free_run.samples[0][0].ids.begin() + budget);
    expected.insert(expected.end(), end.begin(), end.end());
    std::vector<TokenId> after_prompt = prompt;
    after_prompt.insert(after_prompt.end(), expected.begin(), expected.end());
    const auto rest_len = static_cast<int32_t>(20 - expected.size());
    const RunResult rest = run(*m.model, *backend, config_with(1024, true),
                               {greedy_request(after_prompt, rest_len)}, Arrival::kAlone);
    expected.insert(expected.end(), rest.samples[0][0].ids.begin(), rest.samples[0][0].ids.end());
    for (int i = 0; i < 2; ++i) EXPECT_EQ(capped.samples[0][static_cast<size_t>(i)].ids, expected);
  }
}

TEST(EngineThinkingBudget, RefusedWithBeamSearch) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(stories260k(shared));
  auto backend = make_cpu_backend(1);
  Engine engine(*m.model, *backend, config_with(1024, true));
  GenerationRequest r = greedy_request(encode(m, "Once"), 4);
  r.beam.width = 2;
  r.thinking = {.max_tokens = 1, .syntax = ReasoningSyntax::kThinkTags, .starts_inside = true,
                .end_tokens = {1}, .tokenizer = m.tokenizer.get()};
  EXPECT_THROW(engine.check_request(r), Error);
}

}  // namespace
}  // namespace pagoda
