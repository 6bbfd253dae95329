// src/config/cluster_yaml.h: the cluster file of `prism plan` (and of the
// simulator's YAML input): nodes with CPU, memory and GPUs, existing MIG
// instances, and pods already running. Format: docs/scheduling.md.
// Unknown keys are warnings; invalid values are errors naming the key.
// Thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "config/pod_request.h"
#include "core/sched/cluster.h"

namespace prism::config {

struct ClusterFile {
  std::vector<sched::NodeSpec> nodes;
  std::vector<PodManifest> running;  // Each with spec.nodeName.
  std::vector<std::string> warnings;
};

absl::StatusOr<ClusterFile> ParseClusterYaml(std::string_view text);

}  // namespace prism::config
