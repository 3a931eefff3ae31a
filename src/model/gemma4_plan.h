// Gemma 4's tensors and hyper-parameters as llama.cpp's converter writes them: what `pagoda
// synth` writes and `pagoda estimate --preset` counts for a gemma4 shape.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "model/recipe.h"

namespace pagoda {

class GgufWriter;

// Every tensor of a Gemma 4 model of shape `c`, in file order, typed by `recipe`.
std::vector<PlannedTensor> plan_gemma4_tensors(const ModelConfig& c, const WeightRecipe& recipe);

// The per-layer keys (sliding-window pattern, the sliding layers' head size, rotation and RoPE
// base, shared K/V layers, per-layer input size, final soft cap), under prefix `a` ("gemma4.").
void write_layer_layout(const ModelConfig& c, GgufWriter& w, const std::string& a);

// The divisors of the global layers' rotary frequencies that leave all but the leading
// `global_rotary_fraction` of each head unrotated (llama.cpp's rope_freqs for Gemma 4).
std::vector<float> gemma4_rope_freqs(const ModelConfig& c);

}  // namespace pagoda
