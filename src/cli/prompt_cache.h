// pagoda run --prompt-cache FILE: the prompt's full KV blocks are saved to FILE once computed,
// and a later run whose prompt starts the same way loads them instead of computing them
// (engine/prefix_file.h). A file of another model or K/V format, or one that does not read
// whole, is a miss said in one line; the run then computes the prompt and saves it anew.
#pragma once

#include <string>
#include <vector>

#include "cli/speculative_options.h"
#include "engine/engine.h"
#include "model/model_file.h"

namespace pagoda::cli {

// Before the model loads: throws Error in one line when --prompt-cache is given with a backend
// other than the CPU or with a draft model.
void check_prompt_cache_option(const std::string& path, const std::string& backend,
                               const SpeculativeOptions& speculative);

// The identity a prompt cache file of this model and config carries (the disk tier's, with
// `also`: run's LoRA adapter).
std::string prompt_cache_identity(const ModelFile& file, const EngineConfig& config,
                                  const std::string& also);

class PromptCache {
 public:
  // `path` empty: does nothing.
  PromptCache(std::string path, Engine& engine, std::string identity);
  // Before the prompt runs: restores the file's blocks into the engine's prefix cache.
  void load(const std::vector<TokenId>& prompt);
  // After it ran: saves the prompt's cached full blocks when the file lacks some of them.
  void save(const std::vector<TokenId>& prompt);

 private:
  std::string path_;
  Engine& engine_;
  std::string identity_;
  int32_t num_matching_ = 0;  // tokens of the prompt the file holds, from its start
};

// The stats line's note on where prompt tokens came from: " (N from host memory, N from the
// disk cache, N from the prompt cache)", those of the three that are on, or nothing.
std::string cache_summary(const Engine& engine, bool disk, bool prompt_cache, bool host = false);

}  // namespace pagoda::cli
