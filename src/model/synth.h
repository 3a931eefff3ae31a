// Synthetic models: random weights with a real model's shapes and a real vocabulary, written as
// GGUF, so any shape can be benchmarked without downloading weights (vLLM's "dummy" load format
// serves the same purpose). The files load in llama.cpp too.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace pagoda {

struct SynthPreset {
  std::string name;  // "llama-3.2-1b", ...
  ModelConfig config;
};

const std::vector<SynthPreset>& synth_presets();
// Throws Error listing the known names when `name` is not one.
const SynthPreset& find_synth_preset(const std::string& name);

// llama.cpp's choice of the layers whose attn_v / ffn_down get more bits in a K-quant mix
// (Q4_K_M, Q5_K_M): the first and last eighth of the layers, and every third in between.
bool kquant_mix_more_bits(uint32_t layer, uint32_t num_layers);
// The type a row of `cols` elements really gets: rows that are no whole number of blocks fall
// back the way llama.cpp's quantizer does.
DType quant_fallback_type(DType type, uint64_t cols);

struct SynthOptions {
  std::string preset;
  std::string type = "q4_0";  // q4_0, q4_1, q5_0, q5_1, q8_0, q4_k_m, q4_k, q5_k_m, q6_k, f16, bf16, f32
  std::string vocab_path;     // a GGUF file whose tokenizer.* keys are copied
  std::string output_path;
  uint64_t seed = 1;
  int num_threads = 0;
};

// Writes the file; `progress` (may be empty) is called with (bytes written, total bytes).
void write_synthetic_model(const SynthOptions& options,
                           const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace pagoda
