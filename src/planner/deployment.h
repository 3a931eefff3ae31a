// The deployment question for one model on one hardware profile: how much fits on each
// device, how fast a step runs at each batch size, the largest request rate that meets a
// latency service level for a workload, and what a token and a month cost. `pagoda estimate`
// prints it; --table asks it for each of the seed's five deployments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "planner/hardware.h"
#include "planner/roofline.h"
#include "planner/serving_sim.h"

namespace pagoda {

inline constexpr double kHoursPerMonth = 730;  // 365 x 24 / 12
// A batch size that adds less than this share of decode throughput ends the speed table.
inline constexpr double kBatchGain = 0.05;

struct DeploymentOptions {
  int num_devices = 1;
  uint64_t seq_len = 0;  // tokens a sequence holds for the fit; 0: the longest request
  std::vector<std::pair<int64_t, int64_t>> lengths;  // the workload: (prompt, output) each
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;
  std::optional<uint64_t> overhead_bytes;  // nullopt: default_overhead_bytes
  ServiceLevel slo;
  std::optional<double> target_qps;
  bool capacity = true;  // false: only the fit and the speed table
};

struct Deployment {
  HardwareProfile profile;
  int num_devices = 1;
  DeviceRates rates;
  DeviceMemory memory;
  uint64_t seq_len = 0;
  // The most sequences a step runs: --max-seqs, or fewer for a hybrid model, which runs no
  // more than it has recurrent-state slots for (memory.state_slots).
  int64_t max_num_seqs = 0;
  double mean_prompt_len = 0;
  double mean_output_len = 0;
  // At the mean prompt and output lengths: batch sizes 1, 2, 4, ... up to the largest that
  // fits and that a step holds (max_num_seqs), ending early at the first whose decode throughput
  // is less than kBatchGain above the row before (past it a larger batch only adds latency).
  std::vector<BatchPoint> batches;
  // Why the table ends: "throughput" (it stopped growing), "max_num_seqs" or "memory".
  const char* batches_end = "";
  std::optional<CapacityResult> capacity;  // when it fits and capacity was asked
  CostFigures cost;                        // at capacity->max_qps
  CostFigures saturated_cost;              // at capacity->saturated_qps, whatever the latency
  double usd_per_month = 0;                // one replica, all the time
  // For target_qps: replicas of num_devices devices, and their month.
  int64_t target_replicas = 0;
  double target_usd_per_month = 0;
};

// Throws Error for an empty workload, or several devices on a profile without a link.
Deployment estimate_deployment(const ModelCost& cost, const HardwareProfile& profile,
                               const DeploymentOptions& options);

}  // namespace pagoda
