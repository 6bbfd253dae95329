// src/config/pod_request.h: a Pod manifest's scheduling-relevant parts, and
// their translation into sched::PodRequest with HAMi's semantics.
//
// PodManifest is filled from YAML files (pod_yaml.h) or from v1.Pod JSON, the API server's
// and kube-scheduler's (pod_json.h); both readers give equal manifests for the same pod.
// BuildPodRequest applies what HAMi's webhook and
// scheduler do (hami.md §1.4, §2.3, §2.4): resource names from the device
// config, gpumem x memoryFactor, gpumem-percentage, default GPU count /
// memory / cores, `gpucores: 100` for a whole-GPU request, cores > 100
// clamped; annotations nvidia.com/vgpu-mode, use/nouse-gputype,
// use/nouse-gpuuuid, hami.io/node-scheduler-policy and
// hami.io/gpu-scheduler-policy. Pure; thread-safe.
#pragma once

#include <cstdint>
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
  // An init container with `restartPolicy: Always` (a sidecar): it keeps running beside the app
  // containers, and the kubelet's PodResources API reports it (regular init containers it does
  // not; docs/device-plugin.md).
  bool restartable = false;
  std::map<std::string, std::string> requests;  // Resource name -> quantity text.
  std::map<std::string, std::string> limits;
  // Literal environment values (`env[].value`). Entries with `valueFrom` are resolved by the
  // kubelet from objects Prism does not read, so they are absent here, and a literal of the same
  // name before them is dropped (its value is not the one the container gets). A name listed
  // twice keeps its last value, as the kubelet does.
  std::map<std::string, std::string> env;

  friend bool operator==(const ContainerManifest&, const ContainerManifest&) = default;
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
  friend bool operator==(const PodManifest&, const PodManifest&) = default;
};

// Annotation keys read from pods.
inline constexpr char kVgpuModeAnnotation[] = "nvidia.com/vgpu-mode";
inline constexpr char kUseGpuTypeAnnotation[] = "nvidia.com/use-gputype";
inline constexpr char kNoUseGpuTypeAnnotation[] = "nvidia.com/nouse-gputype";
inline constexpr char kUseGpuUuidAnnotation[] = "nvidia.com/use-gpuuuid";
inline constexpr char kNoUseGpuUuidAnnotation[] = "nvidia.com/nouse-gpuuuid";
inline constexpr char kNodePolicyAnnotation[] = "hami.io/node-scheduler-policy";
inline constexpr char kGpuPolicyAnnotation[] = "hami.io/gpu-scheduler-policy";
inline constexpr char kNumaBindAnnotation[] = "nvidia.com/numa-bind";
// Prism's interconnect request: "preferred", "required" (= "required:nvlink") or
// "required:<tier>" with tier nvlink, pcie-switch or numa (docs/annotations.md).
inline constexpr char kGpuTopologyAnnotation[] = "prism.io/gpu-topology";
// "off": whole MIG instances only, where the device config's migSharing would let the pod share
// one; "on" (the default) lets it (docs/mig-slices.md).
inline constexpr char kMigSharingAnnotation[] = "prism.io/mig-sharing";

// InvalidArgument naming the container and resource (or annotation) for a
// malformed quantity, a negative or out-of-range value, an unknown mode.
absl::StatusOr<sched::PodRequest> BuildPodRequest(const PodManifest& pod,
                                                  const sched::DeviceConfig& config);

// The pod's interconnect request from nvidia.com/numa-bind and prism.io/gpu-topology into
// `topology` (BuildPodRequest calls it; HAMi's topology-aware policy is read with the GPU
// policy). InvalidArgument naming the annotation for a value it does not know.
absl::Status ReadTopologyAnnotations(const PodManifest& pod, sched::TopologyRequest* topology);

// How many of the extended resource `resource` (e.g. nvidia.com/gpu) `container` of `pod` asks
// for: its limit, else its request, else 0. Extended resources are whole numbers (the API server
// insists), so "1.5" or "500m" is InvalidArgument naming the pod, container and resource, as is
// a malformed quantity.
absl::StatusOr<int64_t> ExtendedResourceCount(const PodManifest& pod,
                                              const ContainerManifest& container,
                                              const std::string& resource);

}  // namespace prism::config
