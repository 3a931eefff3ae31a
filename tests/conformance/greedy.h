// Greedy ids from the single-sequence Generator, past any end-of-generation token, for tests
// that compare a model's tokens or text with a peer's.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "engine/generator.h"
#include "model/model.h"

namespace pagoda::test {

inline std::vector<TokenId> greedy_ids(Model& model, Backend& backend,
                                       const std::vector<TokenId>& prompt, int32_t n) {
  Generator gen(model, backend, static_cast<int32_t>(prompt.size()) + n + 1);
  GenerateOptions options;
  options.max_new_tokens = n;
  options.stop_at_eog = false;  // a peer's vectors run past the end of a turn too
  options.sampling.temperature = 0;
  std::vector<TokenId> out;
  gen.generate(prompt, options, {}, [&](TokenId id) {
    out.push_back(id);
    return true;
  });
  return out;
}

}  // namespace pagoda::test
