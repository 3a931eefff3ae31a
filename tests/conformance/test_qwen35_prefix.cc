// Prefix caching on Qwen3.5's hybrid models (qwen3.5-tiny, qwen3.5-moe-tiny) through the
// engine: a hit restores the recurrent state from a checkpoint (sched/state_checkpoints.h) and
// computes only the tokens after it, giving the greedy ids and log-probabilities of the same
// request computed cold (prefix caching off), for the same prompt again and for a chat's next
// turn; the hit's tokens are really skipped (the rows the engine computed are counted).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "conformance/engine_harness.h"
#include "test_util.h"
#include "tools/synth.h"

namespace pagoda {
namespace {

struct Generated {
  std::vector<TokenId> ids;
  std::vector<std::vector<std::pair<TokenId, float>>> top;  // [token] the 5 most likely
  int32_t num_cached_tokens = -1;
  int64_t num_computed_rows = 0;  // token rows the engine ran for this request
};

// Runs `r` alone on `engine` to its end.
Generated generate(Engine& engine, GenerationRequest r) {
  r.sampling.logprobs = true;
  r.sampling.num_logprobs = 5;
  Generated g;
  const int64_t rows_before = engine.stats().num_computed_tokens;
  engine.add_request(r);
  while (engine.has_work()) {
    for (const OutputEvent& e : engine.step()) {
      if (g.num_cached_tokens < 0) g.num_cached_tokens = e.num_cached_tokens;
      g.ids.insert(g.ids.end(), e.token_ids.begin(), e.token_ids.end());
      for (const SampleResult& s : e.logprobs) g.top.push_back(s.top_logprobs);
    }
    engine.check_invariants();
  }
  g.num_computed_rows = engine.stats().num_computed_tokens - rows_before;
  return g;
}

// The same ids, and log-probabilities within `bound` (a hit splits the prompt's computation
// where a cold run may not: the same sums in another order).
void expect_same(const Generated& got, const Generated& want, float bound) {
  EXPECT_EQ(got.ids, want.ids);
  ASSERT_EQ(got.top.size(), want.top.size());
  for (size_t i = 0; i < got.top.size(); ++i) {
    ASSERT_EQ(got.top[i].size(), want.top[i].size());
    for (size_t k = 0; k < got.top[i].size(); ++k) {
      EXPECT_EQ(got.top[i][k].first, want.top[i][k].first) << "token " << i << ", rank " << k;
      EXPECT_NEAR(got.top[i][k].second, want.top[i][k].second, bound)
          << "token " << i << ", rank " << k;
    }
  }
}

class Qwen35Prefix : public ::testing::TestWithParam<const char*> {
 protected:
  LoadedModel tiny(const std::string& shared) const {
    const std::string path = test::temp_dir() + "/" + GetParam() + "-prefix.gguf";
    static std::set<std::string> written;
    if (written.insert(path).second) {
      SynthOptions o;
      o.preset = GetParam();
      o.type = "f32";
      o.seed = 1;
      o.vocab_path = stories260k(shared);
      o.output_path = path;
      write_synthetic_model(o, {});
    }
    return load(path);
  }
};

TEST_P(Qwen35Prefix, HitRestoresTheStateAndGivesTheColdResult) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = tiny(shared);
  auto backend = make_cpu_backend(2);
  std::vector<TokenId> prompt = encode(m, kStoryA);
  ASSERT_GE(prompt.size(), 70u);
  prompt.resize(70);  // 4 full blocks of 16 and 6 tokens
  const GenerationRequest first = greedy_request(prompt, 70);

  Engine cold(*m.model, *backend, config_with(4096, false));
  const Generated want = generate(cold, first);
  EXPECT_EQ(want.num_computed_rows, 70 + 69);

  Engine warm(*m.model, *backend, config_with(4096, true));
  const Generated once = generate(warm, first);
  EXPECT_EQ(once.num_cached_tokens, 0);
  expect_same(once, want, 1e-4f);
  const Generated again = generate(warm, first);
  // Checkpoints are kept at multiples of the delta rule's chunk (64 tokens, 4 blocks), where a
  // cold prompt's chunks start too: the hit computes bit for bit what the cold run did.
  EXPECT_EQ(again.num_cached_tokens, 64);
  EXPECT_EQ(again.num_computed_rows, 6 + 69);  // the hit's 64 tokens not computed
  expect_same(again, want, 0.0f);

  // The chat's next turn: the prompt, the reply, and more. The checkpoint saved while decoding
  // at 128 of 140 tokens (139 computed) is where the hit starts; the cold run computes the
  // reply as a prompt, the warm one decoded it token by token: the same to rounding.
  std::vector<TokenId> turn = prompt;
  turn.insert(turn.end(), want.ids.begin(), want.ids.end());
  const std::vector<TokenId> more = encode(m, kStoryB);
  turn.insert(turn.end(), more.begin(), more.begin() + 20);
  const GenerationRequest second = greedy_request(turn, 8);
  const Generated turn_cold = generate(cold, second);
  const Generated turn_warm = generate(warm, second);
  EXPECT_EQ(turn_warm.num_cached_tokens, 128);
  EXPECT_EQ(turn_warm.num_computed_rows, static_cast<int64_t>(turn.size()) - 128 + 7);
  expect_same(turn_warm, turn_cold, 1e-4f);
  EXPECT_GT(warm.stats().scheduler.num_state_checkpoints, 0);
}

// "qwen3.5-tiny" as a test name: qwen3_5_tiny.
std::string shape_name(const ::testing::TestParamInfo<const char*>& info) {
  std::string name = info.param;
  std::replace_if(name.begin(), name.end(), [](char ch) { return ch == '.' || ch == '-'; }, '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(Shapes, Qwen35Prefix,
                         ::testing::Values("qwen3.5-tiny", "qwen3.5-moe-tiny"), shape_name);

}  // namespace
}  // namespace pagoda
