// `pagoda estimate --calibrate FILE`: fits a hardware profile's effective bandwidth, compute
// and fixed overheads to what `pagoda bench latency | throughput --json` measured. Each
// measured run is replayed through the step simulator (the same requests, the same engine
// settings, the model file it names), and three multipliers of the profile (bandwidth,
// compute, the step and layer overheads together) are chosen to minimise the squared log error of
// the run's mean TTFT, mean decode time per token and (offline runs) wall time. A figure the runs
// do not determine (a direction of the fit no other figure could take over) keeps its prior value
// and is reported as modelled.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/hardware.h"
#include "planner/serving_sim.h"
#include "tokenizer/vocab.h"

namespace pagoda {

struct CalibrationRun {
  std::string path;
  std::string benchmark;  // "latency" or "throughput"
  std::string model_path;
  int threads = 0;
  ModelCost cost;
  SimEngine engine;
  std::vector<SimRequest> requests;
  // Measured means, in seconds; NaN when the report has none.
  double ttft_s = 0;
  double last_ttft_s = 0;  // the longest TTFT (offline runs): all prompts prefilled by then
  double decode_s = 0;
  double wall_s = 0;
};

// Reads a report and the model file it names (model_path, as given to the bench run). Throws
// Error naming the file and the field for a report of another kind, an interrupted run, a
// dataset workload (its request lengths are not in the report) or a model that cannot be
// opened.
CalibrationRun read_calibration_run(const std::string& path);
// The same from the report's text, with the model given (for tests).
// `vocab` (may be null) and `vocab_size` give the pool a run of random prompt lengths drew
// its ids from, which the lengths' random sequence depends on.
CalibrationRun calibration_run_from_json(const std::string& json_text, const std::string& path,
                                         const ModelCost& cost, const Vocab* vocab,
                                         int32_t vocab_size);

// Multipliers of a profile's figures.
struct CalibrationScale {
  double bandwidth = 1;  // of bandwidth_gbs x bandwidth_efficiency
  double compute = 1;    // of every compute figure x compute_efficiency
  double overhead = 1;   // of step_overhead_ms and layer_overhead_us
};

// The rates a run sees on `profile` scaled by `scale` (one device).
DeviceRates scaled_rates(const HardwareProfile& profile, const ModelCost& cost,
                         const CalibrationScale& scale);

struct PredictedRun {
  double ttft_s = 0;
  double last_ttft_s = 0;
  double decode_s = 0;
  double wall_s = 0;
};
PredictedRun predict_run(const CalibrationRun& run, const DeviceRates& rates);

struct CalibrationFigure {
  std::string path;
  std::string figure;  // "TTFT", "last TTFT", "decode per token", "wall"
  double measured_s = 0;
  double before_s = 0;  // predicted from the profile as given
  double after_s = 0;   // predicted after the fit
};

struct Calibration {
  CalibrationScale scale;
  bool bandwidth_measured = false;
  bool compute_measured = false;
  bool overhead_measured = false;
  // Fewer figures than the parameters they need: holding the undetermined ones at the profile's
  // values could not reproduce the runs, so all three moved and are not told apart.
  bool underdetermined = false;
  std::vector<CalibrationFigure> figures;
  // The largest |after / measured - 1| over the figures. The cost model has three knobs; a
  // machine whose prefill and decode differ in ways it does not model (per-token work outside
  // the matmuls and attention, say) leaves some misfit however they are set.
  double worst_error() const;
};
// A misfit above this is reported: the profile then cannot reproduce the runs.
constexpr double kCalibrationMisfit = 0.05;
// Throws Error when the runs hold no measured figure.
Calibration calibrate(const std::vector<CalibrationRun>& runs, const HardwareProfile& profile);

// The profile with the fit applied: bandwidth_efficiency, compute_efficiency,
// step_overhead_ms and layer_overhead_us changed, sourced "calibrated" where the runs
// determined them.
HardwareProfile apply_calibration(const HardwareProfile& profile, const Calibration& c);

// `--check FILE`: each run replayed on `profile` as it stands (calibrated or not), beside what
// it measured; before_s and after_s both hold the prediction.
std::vector<CalibrationFigure> check_runs(const std::vector<CalibrationRun>& runs,
                                          const HardwareProfile& profile);

}  // namespace pagoda
