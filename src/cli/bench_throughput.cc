// pagoda bench throughput: under construction in this session.
#include "cli/bench_commands.h"
#include "core/error.h"

namespace pagoda::cli {

Action add_bench_throughput(CLI::App& bench) {
  bench.add_subcommand("throughput", "(not built yet)");
  return [] { fail("pagoda bench throughput is not built yet"); return 1; };
}

}  // namespace pagoda::cli
