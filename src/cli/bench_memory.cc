// pagoda bench memory: under construction in this session.
#include "cli/bench_commands.h"
#include "core/error.h"

namespace pagoda::cli {

Action add_bench_memory(CLI::App& bench) {
  bench.add_subcommand("memory", "(not built yet)");
  return [] { fail("pagoda bench memory is not built yet"); return 1; };
}

}  // namespace pagoda::cli
