// src/nvml/open_nvml.h: choosing the NVML backend.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

#include "nvml/nvml.h"

namespace prism::nvml {

// Opens the backend named by `spec`:
//   "" or "nvml"    the driver's libnvidia-ml.so.1 (DlNvml);
//   "nvml:<path>"   a specific NVML library (DlNvml);
//   "sim:<file>"    simulated GPUs kept in a YAML file (SimNvml).
// InvalidArgument for any other spec.
absl::StatusOr<std::unique_ptr<Nvml>> OpenNvml(std::string_view spec);

// OpenNvml($PRISM_NVML).
absl::StatusOr<std::unique_ptr<Nvml>> OpenNvmlFromEnv();

// The line a long-running component logs at start when `nvml` is simulated ("" when it is not):
// whatever it reports or creates is not on a real GPU.
std::string SimulatedGpusWarning(const Nvml& nvml);

}  // namespace prism::nvml
