// src/sim/yaml_input.h: Prism's cluster file and pod manifests as simulator input.
//
// The cluster file is `prism plan`'s (docs/scheduling.md, src/config/
// cluster_yaml.h); the pods are Kubernetes Pod manifests read with HAMi's
// semantics under a device config (src/config/pod_request.h). The simulator
// models one GPU model and one GPU mode per node, and one GPU request per pod:
//   - a node's GPUs must share their model and mode (mig: MIG GPUs of that
//     model; hami-core: software-shared GPUs); existing instances and running
//     pods of the file are ignored, with a warning;
//   - a pod's GPU request becomes `count` x a share in milli-GPU: the memory
//     share (gpumem-percentage, or gpumem MiB over the GPUs' memory, which must
//     then be the same on every GPU node) or else the compute share (gpucores);
//     use-gputype / nouse-gputype (case-insensitive substrings, as HAMi matches
//     them) become the list of the cluster's models the pod may use.
// Errors name the node, pod or container. Thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "core/sched/device_config.h"
#include "sim/cluster.h"
#include "sim/trace.h"

namespace prism::sim {

struct YamlCluster {
  Cluster cluster;
  // Memory of the GPUs (MiB) when every GPU node agrees, else 0.
  int64_t gpu_memory_mib = 0;
  std::vector<std::string> warnings;
};

absl::StatusOr<YamlCluster> ClusterFromYaml(std::string_view text,
                                            const sched::DeviceConfig& config);

// `where` names the source in errors. `models` are the cluster's GPU models
// (for type filters); `gpu_memory_mib` converts gpumem (MiB) requests to
// shares, 0 makes such requests an error.
absl::StatusOr<std::vector<TracePod>> PodsFromYaml(std::string_view text, std::string_view where,
                                                   const sched::DeviceConfig& config,
                                                   const std::vector<std::string>& models,
                                                   int64_t gpu_memory_mib);

}  // namespace prism::sim
