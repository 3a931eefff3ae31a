// The cost of a hybrid model's state copies: one slot of the qwen3.5-0.8b shape (18 Gated
// DeltaNet layers, 20.2 MB of F32 state) copied into another, as a prefix-cache checkpoint save
// or restore, a fork, or a speculative roll-back does. A decoding request saves one every 64
// tokens (SchedulerConfig::state_align); set this beside a decode step's time.
//   build/bench/bench_state
#include <benchmark/benchmark.h>

#include "model/shapes.h"
#include "model/state_storage.h"

namespace {

void BM_StateSlotCopy(benchmark::State& state) {
  const pagoda::ModelShape* shape = pagoda::find_model_shape("qwen3.5-0.8b");
  pagoda::StateStorage storage(shape->config, 4);
  for (int32_t slot = 0; slot < 4; ++slot) storage.clear(slot);  // touch every page first
  int32_t from = 0;
  for (auto _ : state) {
    storage.copy(from, (from + 2) % 4);  // never the slot just written: no cache reuse
    from = (from + 1) % 4;
    benchmark::ClobberMemory();
  }
  const auto bytes = static_cast<double>(pagoda::StateStorage::slot_bytes(shape->config));
  state.counters["slot_MB"] = bytes / 1e6;
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_StateSlotCopy)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
