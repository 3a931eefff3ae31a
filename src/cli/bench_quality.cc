// pagoda bench quality: under construction in this session.
#include "cli/bench_commands.h"
#include "core/error.h"

namespace pagoda::cli {

Action add_bench_quality(CLI::App& bench) {
  bench.add_subcommand("quality", "(not built yet)");
  return [] { fail("pagoda bench quality is not built yet"); return 1; };
}

}  // namespace pagoda::cli
