// pagoda bench latency: under construction in this session.
#include "cli/bench_commands.h"
#include "core/error.h"

namespace pagoda::cli {

Action add_bench_latency(CLI::App& bench) {
  bench.add_subcommand("latency", "(not built yet)");
  return [] { fail("pagoda bench latency is not built yet"); return 1; };
}

}  // namespace pagoda::cli
