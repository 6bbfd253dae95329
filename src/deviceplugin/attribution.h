// src/deviceplugin/attribution.h: which pod and container an allocation serves.
//
// The kubelet's Allocate names only device IDs. After answering, the agent joins its allocations
// with the kubelet's own record, PodResources List (docs/allocation-protocol.md, "Resolve"). This
// is the pure part of that join. Facts it relies on (kubelet devicemanager, podresources v1):
//   - the kubelet admits one pod at a time and allocates its containers in order, init
//     containers first; so one pod's allocations are consecutive in the agent's sequence;
//   - List reports app and restartable-init (sidecar) containers with their device IDs, but not
//     regular init containers;
//   - an init container's devices are reused by the pod's later containers, so a later GPU
//     container's IDs intersect every earlier init container's.
// Rules:
//   1. A reported container takes the latest allocation whose IDs equal its IDs, unless it
//      already holds one with those IDs (then a newer equal one belongs to another pod that the
//      API has not yet shown replacing it).
//   2. A pod's regular GPU init containers take, in order, the allocations immediately before
//      its first rule-1 allocation (consecutive sequence numbers, IDs intersecting the pod's),
//      once there are as many as it has such init containers.
//   3. A pod with GPU init containers and no reported GPU container (so rule 2 has no anchor)
//      takes the latest consecutive run of unmatched allocations of the right length, but only
//      when it is the only such pod waiting and the run is older than `init_only_min_age_ms`
//      (younger ones may belong to a pod the kubelet has not recorded yet).
// Pods that are not live (terminal, deleting, unknown to the API) take nothing. An allocation
// that no rule attributes stays pending; the caller retries and eventually fails it. Pure.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace prism::deviceplugin {

struct AllocationView {
  std::string id;
  uint64_t seq = 0;  // Consecutive over all allocations of this agent.
  std::vector<std::string> device_ids;
  int64_t age_ms = 0;  // Since Allocate answered.
  // Set once attributed.
  std::string pod_key;  // "namespace/name".
  std::string container;
  bool Attributed() const { return !pod_key.empty(); }
};

struct ReportedContainer {
  std::string name;
  std::vector<std::string> device_ids;  // Of Prism's resource.
};

struct ReportedPod {
  std::string key;  // "namespace/name".
  std::vector<ReportedContainer> containers;
};

// What the API says about a pod (the agent's informer).
struct PodView {
  std::string key;
  bool live = false;
  // Regular (non-restartable) init containers that request Prism's resource, in spec order.
  std::vector<std::string> gpu_init_containers;
  // Whether any app or sidecar container requests the resource.
  bool has_reported_gpu_container = false;
};

struct Attribution {
  std::string allocation_id;
  std::string pod_key;
  std::string container;
  friend bool operator==(const Attribution&, const Attribution&) = default;
};

// Attributions for allocations in `allocations` (sorted by seq; attributed ones give context)
// that can be made now. `pods` holds every pod the API knows on this node.
struct AttributeOptions {
  int64_t init_only_min_age_ms = 2000;
};

std::vector<Attribution> Attribute(const std::vector<AllocationView>& allocations,
                                   const std::vector<ReportedPod>& reported,
                                   const std::vector<PodView>& pods,
                                   const AttributeOptions& options = {});

}  // namespace prism::deviceplugin
