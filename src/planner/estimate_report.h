// Text and JSON of `pagoda estimate`'s deployment sections: the hardware figures with their
// sources, the per-device fit, the speed at each batch size, capacity and cost, and a
// calibration's fit.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "planner/calibrate.h"
#include "planner/deployment.h"

namespace pagoda {

using EstimateJson = nlohmann::ordered_json;

std::string hardware_text(const HardwareProfile& profile, int num_devices,
                          const std::string& compute_type);
EstimateJson hardware_json(const HardwareProfile& profile, int num_devices,
                           const DeviceRates& rates);

std::string deployment_text(const Deployment& d, const DeploymentOptions& o,
                            const std::string& workload);
EstimateJson deployment_json(const Deployment& d, const DeploymentOptions& o);

std::string calibration_text(const Calibration& c, const HardwareProfile& calibrated);
EstimateJson calibration_json(const Calibration& c, const HardwareProfile& calibrated);

std::string checks_text(const std::vector<CalibrationFigure>& figures);
EstimateJson checks_json(const std::vector<CalibrationFigure>& figures);

// printf into a std::string.
std::string strf(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace pagoda
