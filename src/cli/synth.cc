// pagoda synth --like SHAPE --type TYPE --vocab FILE -o OUT: a random-weight GGUF for benchmarks.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "model/recipe.h"
#include "tools/synth.h"

namespace pagoda::cli {

Action add_synth(CLI::App& app) {
  auto o = std::make_shared<SynthOptions>();
  auto* cmd = app.add_subcommand(
      "synth", "Write a random-weight GGUF with a real model's shapes, for benchmarks");
  std::string names;
  for (const auto& p : model_shapes()) names += (names.empty() ? "" : ", ") + p.name;
  cmd->add_option("--like", o->preset, "Model shape: " + names)->required();
  cmd->add_option("--type", o->type, "Weight type: " + weight_recipe_names())
      ->default_val("q4_0");
  cmd->add_option("--vocab", o->vocab_path, "GGUF file whose tokenizer is copied")->required();
  cmd->add_option("-o,--output", o->output_path, "Output GGUF path")->required();
  cmd->add_option("--seed", o->seed, "Random seed")->default_val(1);
  cmd->add_option("-t,--threads", o->num_threads, "Threads (default: all cores)");
  return [o] {
    int last_percent = -1;
    write_synthetic_model(*o, [&](uint64_t done, uint64_t total) {
      int percent = total ? static_cast<int>(100 * done / total) : 100;
      if (percent != last_percent && isatty(STDERR_FILENO)) {
        std::fprintf(stderr, "\rsynth: %3d%% of %s", percent, human_bytes(total).c_str());
        last_percent = percent;
      }
    });
    std::fprintf(stderr, "\n");
    std::cout << "wrote " << o->output_path << "\n";
    return 0;
  };
}

}  // namespace pagoda::cli
