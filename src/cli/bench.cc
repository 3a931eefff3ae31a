// pagoda bench <latency|throughput|memory|quality|serve>: the benchmark suite (docs/BENCHMARKS.md).
#include <utility>
#include <vector>

#include "cli/bench_commands.h"

namespace pagoda::cli {

Action add_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Measure latency, throughput, memory and quality");
  bench->require_subcommand(1);
  auto subs = std::make_shared<std::vector<std::pair<CLI::App*, Action>>>();
  auto add = [&](Action (*adder)(CLI::App&)) {
    const size_t before = bench->get_subcommands({}).size();
    Action action = adder(*bench);
    subs->emplace_back(bench->get_subcommands({})[before], std::move(action));
  };
  add(add_bench_latency);
  add(add_bench_throughput);
  add(add_bench_memory);
  add(add_bench_quality);
  add(add_bench_serve);
  return [subs] {
    for (auto& [sub, action] : *subs) {
      if (sub->parsed()) return action();
    }
    return 1;
  };
}

}  // namespace pagoda::cli
