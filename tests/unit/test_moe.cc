// Expert routing on hand-made router logits: softmax or sigmoid scores, the top k with ties to
// the lower index, weights normalized or not.
#include <gtest/gtest.h>

#include <cmath>

#include "model/moe.h"

namespace pagoda {
namespace {

ModelConfig moe(uint32_t experts, uint32_t used) {
  ModelConfig c;
  c.num_experts = experts;
  c.num_experts_used = used;
  return c;
}

TEST(MoeRouting, SoftmaxTopKNormalized) {
  const float logits[] = {0.0f, 2.0f, 1.0f, 2.0f,   // tie between experts 1 and 3
                          3.0f, -1.0f, 0.0f, 0.5f};
  Routing r = route(logits, 2, moe(4, 2));
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 3, 0, 3}));
  EXPECT_FLOAT_EQ(r.weights[0], 0.5f);
  EXPECT_FLOAT_EQ(r.weights[1], 0.5f);
  // exp(3) / (exp(3) + exp(0.5)): the other experts' share of the softmax drops out.
  EXPECT_NEAR(r.weights[2], std::exp(3.0) / (std::exp(3.0) + std::exp(0.5)), 1e-6);
  EXPECT_NEAR(r.weights[2] + r.weights[3], 1.0f, 1e-6);
}

TEST(MoeRouting, UnnormalizedKeepsTheSoftmaxShare) {
  ModelConfig c = moe(3, 1);
  c.expert_weights_norm = false;
  const float logits[] = {0.0f, 0.0f, std::log(2.0f)};
  Routing r = route(logits, 1, c);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2}));
  EXPECT_NEAR(r.weights[0], 0.5f, 1e-6);  // 2 / (1 + 1 + 2)
}

TEST(MoeRouting, SigmoidScores) {
  ModelConfig c = moe(3, 2);
  c.expert_gating_sigmoid = true;
  c.expert_weights_norm = false;
  const float logits[] = {-1.0f, 0.0f, 4.0f};
  Routing r = route(logits, 1, c);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 1}));
  EXPECT_NEAR(r.weights[0], 1.0 / (1.0 + std::exp(-4.0)), 1e-6);
  EXPECT_NEAR(r.weights[1], 0.5, 1e-6);
}

}  // namespace
}  // namespace pagoda
