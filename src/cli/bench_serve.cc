// pagoda bench serve: under construction in this session.
#include "cli/bench_commands.h"
#include "core/error.h"

namespace pagoda::cli {

Action add_bench_serve(CLI::App& bench) {
  bench.add_subcommand("serve", "(not built yet)");
  return [] { fail("pagoda bench serve is not built yet"); return 1; };
}

}  // namespace pagoda::cli
