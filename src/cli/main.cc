// pagoda: an LLM inference engine. Subcommands live in one file each under src/cli/.
#include <iostream>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"pagoda: load, inspect and run language models on the CPU"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pagoda 0.1.0");
  std::vector<std::pair<CLI::App*, pagoda::cli::Action>> commands;
  auto add = [&](auto adder) {
    size_t before = app.get_subcommands({}).size();
    pagoda::cli::Action action = adder(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(action));
  };
  add(pagoda::cli::add_inspect);
  add(pagoda::cli::add_tokenize);
  add(pagoda::cli::add_detokenize);
  add(pagoda::cli::add_run);
  add(pagoda::cli::add_synth);
  add(pagoda::cli::add_quantize);
  add(pagoda::cli::add_estimate);
  add(pagoda::cli::add_bench);
  add(pagoda::cli::add_serve);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [sub, action] : commands) {
      if (sub->parsed()) return action();
    }
  } catch (const pagoda::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 1;
}
