// The speculative-decoding options `run`, `serve` and `bench` share: a draft model, how many
// tokens to propose per step, and where proposals come from.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/speculator.h"
#include "model/model.h"
#include "model/model_file.h"

namespace pagoda::cli {

struct SpeculativeOptions {
  std::string draft_model;  // a GGUF file or Hugging Face folder with the same vocabulary
  int32_t num_tokens = -1;  // -1: 4 with a draft model or a method, else 0 (off)
  std::string method;       // ngram, draft or both; empty: draft with a draft model
  int32_t max_num_running = 8;
};

// Adds --draft-model, --num-speculative-tokens, --spec-method, --spec-max-running to `cmd`.
void add_speculative_options(CLI::App* cmd, SpeculativeOptions& options);

// A draft model, loaded.
struct DraftModel {
  std::unique_ptr<ModelFile> file;
  std::unique_ptr<Model> model;
};

// The engine's speculative config from the options; loads the draft into `draft` (which must
// outlive the engine). Throws Error when the draft's vocabulary is not the target's (token by
// token), or the options contradict each other.
SpeculativeConfig speculative_config(const SpeculativeOptions& options, const ModelFile& target,
                                     DraftModel& draft);

// "proposed 120, accepted 84 (70.0 %), 2.68 tokens per verifying step" or "" when none.
std::string speculative_summary(const SpeculativeStats& stats);

// The counters of `after` minus those of `before` (a measured part of a run).
SpeculativeStats speculative_delta(const SpeculativeStats& after, const SpeculativeStats& before);

// {proposed_tokens, accepted_tokens, acceptance_rate, mean_accepted_length,
//  accepted_at_position, proposed_at_position}; null when nothing was proposed.
nlohmann::ordered_json speculative_json(const SpeculativeStats& stats);

}  // namespace pagoda::cli
