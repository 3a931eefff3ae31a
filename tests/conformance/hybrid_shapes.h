// The synthetic hybrid shapes the Qwen3.5 engine tests run on (test_qwen35_engine.cc,
// test_qwen35_fork.cc): qwen3.5-tiny (Gated DeltaNet, full attention, Gated DeltaNet) and
// qwen3.5-moe-tiny (the same layers with routed and shared experts).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace pagoda {

struct HybridShape {
  const char* preset;
  uint64_t seed;  // that of its llama.cpp vectors (scripts/make_logit_vectors.py)
  // Negated in test_qwen35_fork.cc's perturbed draft: qwen3.5-tiny's greedy ids then differ
  // from the model's now and then; qwen3.5-moe-tiny's, whatever one matrix is negated, never
  // did in those runs.
  const char* draft_tensor;
  bool draft_rejected;
};

inline const HybridShape kHybridShapes[] = {
    {"qwen3.5-tiny", 1, "blk.2.ffn_down.weight", true},
    {"qwen3.5-moe-tiny", 4, "blk.2.ffn_down_shexp.weight", false}};

// The test name's suffix: the preset with '_' for '.' and '-'.
inline std::string hybrid_shape_name(const ::testing::TestParamInfo<HybridShape>& info) {
  std::string name = info.param.preset;
  for (char& ch : name) {
    if (ch == '.' || ch == '-') ch = '_';
  }
  return name;
}

}  // namespace pagoda
