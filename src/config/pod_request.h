// src/config/pod_request.h: a Pod manifest's scheduling-relevant parts, and
// their translation into sched::PodRequest with HAMi's semantics.
//
// PodManifest is filled from YAML (pod_yaml.h) or, by the extender, from the
// JSON kube-scheduler sends. BuildPodRequest applies what HAMi's webhook and
// scheduler do (hami.md §1.4, §2.3, §2.4): resource names from the device
// config, gpumem x memoryFactor, gpumem-percentage, default GPU count /
// memory / cores, `gpucores: 100` for a whole-GPU request, cores > 100
// clamped; annotations nvidia.com/vgpu-mode, use/nouse-gputype,
// use/nouse-gpuuuid, hami.io/node-scheduler-policy and
// hami.io/gpu-scheduler-policy. Pure; thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "core/sched/device_config.h"
#include "core/sched/request.h"

namespace prism::config {

struct ContainerManifest {
  std::string name;
  bool init = false;
  std::map<std::string, std::string> requests;  // Resource name -> quantity text.
  std::map<std::string, std::string> limits;
};

struct PodManifest {
  std::string namespace_name = "default";
  std::string name;
  std::string uid;
  std::string node_name;  // spec.nodeName (running pods).
  std::map<std::string, std::string> annotations;
  std::map<std::string, std::string> labels;
  std::vector<ContainerManifest> containers;  // Init containers first.

  std::string Key() const { return namespace_name + "/" + name; }
};

// Annotation keys read from pods.
inline constexpr char kVgpuModeAnnotation[] = "nvidia.com/vgpu-mode";
inline constexpr char kUseGpuTypeAnnotation[] = "nvidia.com/use-gputype";
inline constexpr char kNoUseGpuTypeAnnotation[] = "nvidia.com/nouse-gputype";
inline constexpr char kUseGpuUuidAnnotation[] = "nvidia.com/use-gpuuuid";
inline constexpr char kNoUseGpuUuidAnnotation[] = "nvidia.com/nouse-gpuuuid";
inline constexpr char kNodePolicyAnnotation[] = "hami.io/node-scheduler-policy";
inline constexpr char kGpuPolicyAnnotation[] = "hami.io/gpu-scheduler-policy";

// InvalidArgument naming the container and resource (or annotation) for a
// malformed quantity, a negative or out-of-range value, an unknown mode.
absl::StatusOr<sched::PodRequest> BuildPodRequest(const PodManifest& pod,
                                                  const sched::DeviceConfig& config);

}  // namespace prism::config
