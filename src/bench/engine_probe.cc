// A short latency run through the engine for the estimate's calibration (see engine_probe.h).
#include "bench/engine_probe.h"

#include <limits>
#include <random>
#include <vector>

#include "bench/bench_model.h"
#include "bench/offline_run.h"
#include "core/error.h"
#include "kv/block_pool.h"
#include "model/kv_storage.h"

namespace pagoda::bench {
namespace {

// One sequence at a time, no prefix caching (the repeated prompt would hit the cache), the
// K/V type and step budget `pagoda bench latency` defaults to.
EngineConfig probe_engine_config(int64_t tokens) {
  EngineConfig c;
  c.num_kv_cache_tokens = tokens;
  c.max_num_seqs = 1;
  c.max_num_batched_tokens = 2048;
  c.enable_prefix_caching = false;
  c.kv_type = parse_kv_type("f16");
  return c;
}

}  // namespace

CalibrationRun engine_probe_run(const std::string& model_path, const ModelCost& cost,
                                const EngineProbeOptions& o) {
  if (o.prompt_len < 1 || o.output_len < 2 || o.runs < 1) {
    fail("engine probe: needs a prompt, two output tokens and a run");
  }
  BenchModel m = load_bench_model(model_path, o.num_threads);
  std::mt19937_64 rng(0);
  const auto pool =
      prompt_token_pool(m.vocab(), static_cast<int32_t>(m.model->config().vocab_size));
  const BenchRequest request{random_prompt(pool, o.prompt_len, rng), o.output_len};
  const BenchRequest warmup{random_prompt(pool, 8, rng), 2};
  Engine engine(*m.model, *m.backend, probe_engine_config(o.prompt_len + o.output_len));
  run_sequential(engine, {warmup});
  double ttft = 0, decode = 0;
  for (int32_t i = 0; i < o.runs; ++i) {
    const OfflineResult r = run_sequential(engine, {request});
    if (!r.requests[0].finished) fail("engine probe: the run did not finish");
    ttft += r.requests[0].ttft_s() / o.runs;
    decode += r.requests[0].decode_s_per_token() / o.runs;
  }
  CalibrationRun run;
  run.path = "engine probe";
  run.benchmark = "latency";
  run.model_path = model_path;
  run.threads = m.num_threads;
  run.cost = cost;
  const int64_t tokens = o.prompt_len + o.output_len;
  const int64_t slots = (tokens + kDefaultBlockSize - 1) / kDefaultBlockSize * kDefaultBlockSize;
  run.cost.kv_bytes_per_token = engine.kv().bytes() / static_cast<uint64_t>(slots);
  run.engine.max_num_seqs = 1;
  run.engine.max_num_batched_tokens = 2048;
  run.requests = {{0, o.prompt_len, o.output_len}};
  run.ttft_s = ttft;
  run.last_ttft_s = std::numeric_limits<double>::quiet_NaN();
  run.decode_s = decode;
  run.wall_s = std::numeric_limits<double>::quiet_NaN();
  return run;
}

}  // namespace pagoda::bench
