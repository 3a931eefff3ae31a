// pagoda quantize -i IN.gguf -o OUT.gguf --type TYPE: the same model in another weight type, for
// comparing types with `pagoda bench quality --ref` (see model/quantize.h).
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "model/quantize.h"

namespace pagoda::cli {

Action add_quantize(CLI::App& app) {
  auto o = std::make_shared<QuantizeOptions>();
  auto* cmd = app.add_subcommand("quantize", "Write a GGUF model's weights in another type");
  std::string names;
  for (const auto& n : quantize_type_names()) names += (names.empty() ? "" : " ") + n;
  cmd->add_option("-i,--input", o->input_path, "GGUF model file")->required();
  cmd->add_option("-o,--output", o->output_path, "Output GGUF path")->required();
  cmd->add_option("--type", o->type, "Weight type: " + names)
      ->required()
      ->check(CLI::IsMember(quantize_type_names()));
  cmd->add_option("-t,--threads", o->num_threads, "Threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  return [o] {
    const bool tty = isatty(STDERR_FILENO);
    int last_percent = -1;
    uint64_t total_bytes = 0;
    quantize_model(*o, [&](uint64_t done, uint64_t total) {
      total_bytes = total;
      const int percent = total ? static_cast<int>(100 * done / total) : 100;
      if (percent != last_percent && tty) {
        std::fprintf(stderr, "\rquantize: %3d%% of %s", percent, human_bytes(total).c_str());
        last_percent = percent;
      }
    });
    if (tty) std::fprintf(stderr, "\n");
    std::cout << "wrote " << o->output_path << " (" << human_bytes(total_bytes) << " of tensors, "
              << o->type << ")\n";
    return 0;
  };
}

}  // namespace pagoda::cli
