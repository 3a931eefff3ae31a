#include "cli/commands.h"
#include "core/error.h"

namespace pagoda::cli {

Action add_tokenize(CLI::App& app) {
  app.add_subcommand("tokenize", "Turn text into token ids");
  return [] { fail("tokenize: not written yet"); return 1; };
}

Action add_detokenize(CLI::App& app) {
  app.add_subcommand("detokenize", "Turn token ids into text");
  return [] { fail("detokenize: not written yet"); return 1; };
}

}  // namespace pagoda::cli
