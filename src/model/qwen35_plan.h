// Qwen3.5's tensors and hyper-parameters as llama.cpp's converter writes them (architectures
// "qwen35" and, with experts, "qwen35moe"): what `pagoda synth` writes and `pagoda estimate
// --preset` counts for a qwen35 shape.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "model/recipe.h"

namespace pagoda {

class GgufWriter;

// Qwen3.5-MoE's shared expert width: expert_shared_feed_forward_length, else the model's
// feed-forward size (llama.cpp's default).
inline uint32_t shared_expert_ffn_size(const ModelConfig& c) {
  return c.shared_expert_intermediate ? c.shared_expert_intermediate : c.intermediate_size;
}

// Every tensor of a Qwen3.5 model of shape `c` (qwen35moe's experts where c has them), in file
// order, typed by `recipe`.
std::vector<PlannedTensor> plan_qwen35_tensors(const ModelConfig& c, const WeightRecipe& recipe);

// The Gated DeltaNet keys (ssm.*, full_attention_interval) and the RoPE sections, under prefix
// `a` ("qwen35.").
void write_hybrid_layout(const ModelConfig& c, GgufWriter& w, const std::string& a);

}  // namespace pagoda
