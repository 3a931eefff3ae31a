#include "cli/commands.h"
#include "core/error.h"

namespace pagoda::cli {

Action add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Show a model file's architecture, tokenizer and tensors");
  auto path = std::make_shared<std::string>();
  cmd->add_option("file", *path, "GGUF file, or a Hugging Face model folder")->required();
  return [path] { fail("inspect: not written yet"); return 1; };
}

}  // namespace pagoda::cli
