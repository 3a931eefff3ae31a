// `pagoda estimate -m FILE --hardware this`: a short request through the real engine on the model
// file, timed as `pagoda bench latency` times it, so that calibrate() can fit the kernel probe's
// profile to what the engine does (its thread hand-offs, sampling, the model's mix of weight
// types) and not only to what isolated products reach.
#pragma once

#include <cstdint>
#include <string>

#include "planner/calibrate.h"

namespace pagoda::bench {

struct EngineProbeOptions {
  int32_t prompt_len = 64;  // long enough that prefill runs at its per-token rate
  int32_t output_len = 8;   // decode steps: output_len - 1 per run
  int32_t runs = 2;         // measured, after one short warm-up run
  int num_threads = 0;      // 0: every core, as `pagoda bench` runs
};

// Loads the model, runs the request and returns it as a latency calibration run: the mean TTFT
// and decode time per token of the measured runs, `cost` with the engine's K/V bytes per token.
// `path` names the run in the calibration's figures. Throws Error when the model cannot run.
CalibrationRun engine_probe_run(const std::string& model_path, const ModelCost& cost,
                                const EngineProbeOptions& options);

}  // namespace pagoda::bench
