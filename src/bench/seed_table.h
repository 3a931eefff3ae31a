// `pagoda estimate --table`: the seed's five deployment rows, each estimated for the same
// workload and service level, with a note wherever the seed's figure is not what the
// arithmetic gives.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/deployment.h"

namespace pagoda {

struct SeedRow {
  std::string deployment;  // as the seed words it
  std::string preset;
  std::string weights_type;
  std::string kv_type = "f16";
  std::string hardware;
  int num_devices = 1;
  std::string seed_figure;  // what the seed claims; empty when it gives no figure
  double seed_qps_low = 0;
  double seed_qps_high = 0;
  double seed_usd_per_month = 0;
};
const std::vector<SeedRow>& seed_rows();

struct SeedRowResult {
  SeedRow row;
  ModelCost cost;
  Deployment deployment;
  std::vector<std::string> notes;
};

struct SeedTableOptions {
  DeploymentOptions deployment;  // workload, service level, engine limits (devices per row)
  // The machine it runs on (probed, maybe calibrated): the CPU row's note scales its figures.
  std::optional<HardwareProfile> this_machine;
};
std::vector<SeedRowResult> seed_table(const SeedTableOptions& options);

}  // namespace pagoda
