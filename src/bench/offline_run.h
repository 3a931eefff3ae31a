// Runs benchmark requests through the Engine in-process and times them: all at once (offline
// batching) or one after another, each alone. What is timed is Engine::step(), the same loop
// `pagoda run` and the server drive, so what is measured is what is served.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "planner/workload.h"
#include "engine/engine.h"

namespace pagoda::bench {

// One request as the engine ran it. Times are seconds from the run's start; NaN when not
// reached (no token yet, or interrupted before the end).
struct RequestResult {
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;  // produced (a stop id is not counted; benchmarks set none)
  double start_s = 0;             // queued
  double first_token_s = 0;       // the step that produced its first token returned
  double end_s = 0;               // the step that produced its last token returned
  bool finished = false;          // all output_len tokens produced
  double ttft_s() const { return first_token_s - start_s; }
  double e2e_s() const { return end_s - start_s; }
  // (end - first token) / (tokens - 1); NaN for fewer than 2 tokens.
  double decode_s_per_token() const;
};

// Per-step samples, taken after each step (Engine::stats()).
struct StepTotals {
  int64_t num_steps = 0;
  int64_t num_tokens = 0;  // token rows scheduled, summed over steps
  int64_t num_seqs = 0;    // sequences running in the step, summed over steps
  double sum_kv_utilization = 0;
  double peak_kv_utilization = 0;
  int32_t peak_running = 0;
  double mean_tokens_per_step() const;
  double mean_seqs_per_step() const;
  double mean_kv_utilization() const;
};

struct OfflineResult {
  std::vector<RequestResult> requests;  // in the order given
  double wall_s = 0;                    // start to the last step (or the interruption)
  StepTotals steps;
  int64_t num_preemptions = 0;
  bool interrupted = false;
  int64_t num_prompt_tokens() const;  // of every request started
  int64_t num_output_tokens() const;  // produced so far
  int64_t num_finished() const;
};

struct RunHooks {
  const std::atomic<bool>* stop = nullptr;  // set (by SIGINT): abort what is live and return
  // Called after every step with output tokens produced so far.
  std::function<void(int64_t num_output_tokens)> on_step;
};

// Greedy, end-of-generation ids ignored: every request produces exactly output_len tokens.
GenerationRequest generation_request(const BenchRequest& request);

// Every request queued at once, then steps until all finish.
OfflineResult run_batched(Engine& engine, const std::vector<BenchRequest>& requests,
                          const RunHooks& hooks = {});
// Each request queued only when the previous one has finished; wall_s is the sum.
OfflineResult run_sequential(Engine& engine, const std::vector<BenchRequest>& requests,
                             const RunHooks& hooks = {});

}  // namespace pagoda::bench
