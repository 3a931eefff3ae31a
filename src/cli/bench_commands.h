// The subcommands of `pagoda bench`, one file each (src/cli/bench_*.cc); bench.cc groups them.
#pragma once

#include "cli/commands.h"

namespace pagoda::cli {

// Each adds its subcommand to `bench` and returns the action to run when it is chosen.
Action add_bench_latency(CLI::App& bench);
Action add_bench_throughput(CLI::App& bench);
Action add_bench_memory(CLI::App& bench);
Action add_bench_quality(CLI::App& bench);
Action add_bench_serve(CLI::App& bench);

}  // namespace pagoda::cli
