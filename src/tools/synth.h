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
#include "model/shapes.h"

namespace pagoda {

// One of model_shapes() (model/shapes.h); throws Error listing the known names when `name` is
// not one.
const ModelShape& find_synth_preset(const std::string& name);

struct SynthOptions {
  std::string preset;
  std::string type = "q4_0";  // a weight recipe (model/recipe.h)
  std::string vocab_path;     // a GGUF file whose tokenizer.* keys are copied
  std::string output_path;
  uint64_t seed = 1;
  int num_threads = 0;
};

// Writes the file; `progress` (may be empty) is called with (bytes written, total bytes).
void write_synthetic_model(const SynthOptions& options,
                           const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace pagoda
