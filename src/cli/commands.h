// One function per subcommand; main.cc registers each with CLI11 and dispatches.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

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
Action add_convert(CLI::App& app);
Action add_imatrix(CLI::App& app);
Action add_chat(CLI::App& app);
Action add_embed(CLI::App& app);
Action add_list(CLI::App& app);
Action add_ps(CLI::App& app);

// A command used wrongly (a missing argument, options that contradict each other): main prints
// it on one line and exits 2, where bad input (a file, a value) exits 1.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The candidate nearest to `word` by edit distance when it is near enough to be a typo
// ("runn" -> "run", "--tmep" -> "--temp"); empty otherwise.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace pagoda::cli
