// One function per subcommand; main.cc registers each with CLI11 and dispatches.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace pagoda::cli {

// Each adds its subcommand to `app` and returns the action to run when it is chosen. Actions
// return the process exit code.
using Action = std::function<int()>;
Action add_inspect(CLI::App& app);
Action add_tokenize(CLI::App& app);
Action add_detokenize(CLI::App& app);
Action add_run(CLI::App& app);
Action add_synth(CLI::App& app);
Action add_estimate(CLI::App& app);
Action add_bench(CLI::App& app);
Action add_serve(CLI::App& app);
Action add_quantize(CLI::App& app);

}  // namespace pagoda::cli
