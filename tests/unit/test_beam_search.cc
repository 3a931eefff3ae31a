// BeamSearch's selection without a model: which beams go on, fork, end, and when it is done.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/beam_search.h"

namespace pagoda {
namespace {

struct Outputs {
  std::map<int64_t, std::vector<TokenId>> of;
  const std::vector<TokenId>& operator()(int64_t beam) { return of[beam]; }
};

TEST(BeamSearchTest, KeepsTheBestWidthContinuationsAcrossBeams) {
  BeamParams p;
  p.width = 2;
  BeamSearch b(p, /*num_prompt_tokens=*/3, /*max_tokens=*/10, /*stop_ids=*/{99}, /*first=*/1);
  Outputs out;
  // Round 1: one beam, its four best tokens; the best two go on (one continues, one forks).
  std::vector<BeamCandidates> c = {
      {1, {{5, std::log(0.5)}, {6, std::log(0.3)}, {7, std::log(0.2)}}}};
  BeamSearch::Round r = b.step(c, std::ref(out));
  ASSERT_EQ(r.continues.size(), 1u);
  EXPECT_EQ(r.continues[0], (std::pair<int64_t, std::optional<TokenId>>{1, 5}));
  ASSERT_EQ(r.forks.size(), 1u);
  EXPECT_EQ(r.forks[0], (std::pair<int64_t, TokenId>{1, 6}));
  out.of[1] = {5};
  b.add_beam(1, 2, 6);
  out.of[2] = {6};
  EXPECT_EQ(b.live_beams(), (std::vector<int64_t>{1, 2}));
  // Round 2: beam 2's second token beats beam 1's first: beam 1 goes on, beam 2 forks twice?
  // No: only two live slots, taken by (2, 8) at 0.3*0.9 and (1, 5) at 0.5*0.5.
  c = {{1, {{5, std::log(0.5)}, {6, std::log(0.4)}}},
       {2, {{8, std::log(0.9)}, {9, std::log(0.1)}}}};
  r = b.step(c, std::ref(out));
  std::map<int64_t, std::optional<TokenId>> goes;
  for (auto& [beam, t] : r.continues) goes[beam] = t;
  EXPECT_EQ(goes[2], std::optional<TokenId>(8));
  EXPECT_EQ(goes[1], std::optional<TokenId>(5));
  EXPECT_TRUE(r.forks.empty());
  EXPECT_NEAR(b.live_logprob(2), std::log(0.3 * 0.9), 1e-12);
  b.check_invariants();
}

TEST(BeamSearchTest, StopsAndLengthsBecomeHypotheses) {
  BeamParams p;
  p.width = 2;
  p.early_stopping = EarlyStopping::kTrue;
  BeamSearch b(p, 2, 2, {99}, 1);
  Outputs out;
  // The best candidate is the stop id: a finished hypothesis (its output without the stop).
  BeamSearch::Round r = b.step(
      std::vector<BeamCandidates>{{1, {{99, std::log(0.6)}, {4, std::log(0.4)}}}}, std::ref(out));
  EXPECT_EQ(r.continues[0].second, std::optional<TokenId>(4));
  out.of[1] = {4};
  EXPECT_FALSE(b.done());
  // At max_tokens every continuation is a hypothesis: the beam is dropped, the search is done.
  r = b.step(std::vector<BeamCandidates>{{1, {{7, std::log(0.5)}, {8, std::log(0.5)}}}},
             std::ref(out));
  EXPECT_EQ(r.continues[0].second, std::nullopt);
  EXPECT_TRUE(b.done());
  const std::vector<BeamHypothesis> best = b.best(2, std::ref(out));
  ASSERT_EQ(best.size(), 2u);
  EXPECT_TRUE(best[0].stopped);  // log 0.6 over length 2 beats log 0.2 over length 4
  EXPECT_EQ(best[0].output, std::vector<TokenId>{});
  EXPECT_EQ(best[0].stop_token, 99);
  EXPECT_FALSE(best[1].stopped);
  EXPECT_EQ(best[1].output.size(), 2u);
}

TEST(BeamSearchTest, LengthPenaltyDecidesBetweenLengths) {
  // Hypothesis A stops after two tokens with log p = -1.75 (length 2 + 2); beam B goes on to
  // four tokens with log p = -2.25 (length 2 + 4). Penalty 1: B (-0.375) beats A (-0.4375), and
  // "never" keeps searching since B could still win; penalty 0: A wins and the search stops.
  for (float penalty : {1.0f, 0.0f}) {
    BeamParams p;
    p.width = 1;
    p.length_penalty = penalty;
    p.early_stopping = EarlyStopping::kNever;
    BeamSearch b(p, 2, 4, {99}, 1);
    Outputs out;
    b.step(std::vector<BeamCandidates>{{1, {{3, -1.0}}}}, std::ref(out));
    out.of[1] = {3};
    b.step(std::vector<BeamCandidates>{{1, {{3, -0.5}}}}, std::ref(out));
    out.of[1] = {3, 3};
    b.step(std::vector<BeamCandidates>{{1, {{99, -0.25}, {3, -0.5}}}}, std::ref(out));
    out.of[1] = {3, 3, 3};
    EXPECT_EQ(b.done(), penalty == 0.0f) << "penalty " << penalty;
    if (!b.done()) b.step(std::vector<BeamCandidates>{{1, {{3, -0.25}}}}, std::ref(out));
    EXPECT_TRUE(b.done());
    const BeamHypothesis best = b.best(1, std::ref(out))[0];
    EXPECT_EQ(best.output.size(), penalty == 1.0f ? 4u : 2u) << "penalty " << penalty;
  }
}

TEST(BeamSearchTest, TopLogprobsAreALogSoftmax) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  const auto top = top_logprobs(logits, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, 1);  // ties to the lower id
  EXPECT_EQ(top[1].first, 3);
  EXPECT_EQ(top[2].first, 2);
  double z = 0;
  for (float x : logits) z += std::exp(x);
  EXPECT_NEAR(top[0].second, 3.0 - std::log(z), 1e-6);
}

}  // namespace
}  // namespace pagoda
