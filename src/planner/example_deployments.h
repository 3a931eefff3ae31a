// `pagoda estimate --table`: the seed's five deployment rows, each estimated for the same
// workload and service level, with a note wherever the seed's figure is not what the
// arithmetic gives.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "planner/deployment.h"

namespace pagoda {

struct ExampleDeployment {
  std::string deployment;  // as the seed words it
  std::string preset;
  std::string weights_type;
  std::string kv_type = "f16";
  std::string hardware;
  int num_devices = 1;
  std::string claimed_figure;  // what the seed claims; empty when it gives no figure
  double claimed_qps_low = 0;
  double claimed_qps_high = 0;
  double claimed_usd_per_month = 0;
};
const std::vector<ExampleDeployment>& example_deployment_rows();

struct ExampleDeploymentResult {
  ExampleDeployment row;
  ModelCost cost;
  Deployment deployment;
  std::vector<std::string> notes;
};

struct ExampleDeploymentOptions {
  DeploymentOptions deployment;  // workload, service level, engine limits (devices per row)
  // The machine it runs on (probed, maybe calibrated): the CPU row's note scales its figures.
  std::optional<HardwareProfile> this_machine;
};
std::vector<ExampleDeploymentResult> estimate_example_deployments(const ExampleDeploymentOptions& options);

}  // namespace pagoda
