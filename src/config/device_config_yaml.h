// src/config/device_config_yaml.h: reads HAMi's device-config.yaml (the
// `hami-scheduler-device` ConfigMap content) into sched::DeviceConfig.
//
// Accepts the file itself (top-level `nvidia:`), or a whole ConfigMap
// manifest whose `data` holds `device-config.yaml`. Besides HAMi's keys
// (../shared/reference/hami.md §4), Prism reads:
//   nvidia.nodeconfig[].gpus[]: {index, operatingmode}    a mode per GPU
//   nvidia.nodeconfig[].prismMigStrategy                  auto|template|placement
//   prism.migStrategy, prism.migMatchCores,
//   prism.defaultNodePolicy, prism.defaultGpuPolicy,
//   prism.migSharing[]: {models, profiles}                shareable MIG profiles (mig-slices.md)
// (docs/scheduling.md). Unknown keys are warnings; invalid values are
// errors naming the key. Thread-safe (no shared state).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "core/sched/device_config.h"

namespace prism::config {

struct ParsedDeviceConfig {
  sched::DeviceConfig config;
  std::vector<std::string> warnings;
};

absl::StatusOr<ParsedDeviceConfig> ParseDeviceConfigYaml(std::string_view text);

// HAMi v2.9.0's chart default (src/config/data/hami-device-config-v2.9.yaml),
// compiled into the binary.
std::string_view DefaultDeviceConfigYaml();
// The parsed default; never fails in a correct build.
sched::DeviceConfig DefaultDeviceConfig();

// "hami-core" / "mig"; "mps" and anything else are InvalidArgument naming `path`.
absl::StatusOr<sched::GpuMode> ParseGpuMode(std::string_view text, std::string_view path);

}  // namespace prism::config
