// Real models' shapes by name, from each model's published config.json (and a few test-sized
// ones): the shapes `pagoda synth` writes random weights in and `pagoda estimate --preset`
// counts. One table for both.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"

namespace pagoda {

struct ModelShape {
  std::string name;  // "llama-3.2-1b", ...
  ModelConfig config;
};

const std::vector<ModelShape>& model_shapes();
// nullptr when `name` is none of them (the caller names the known ones in its error).
const ModelShape* find_model_shape(std::string_view name);

}  // namespace pagoda
