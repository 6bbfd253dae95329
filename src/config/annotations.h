// src/config/annotations.h: a placement decision as pod annotations, and back.
//
// Written (docs/annotations.md, "Scheduling decision"):
//   hami.io/vgpu-node                   node name (HAMi)
//   hami.io/vgpu-devices-allocated      HAMi grammar: containers ';', devices ':',
//   hami.io/vgpu-devices-to-allocate    device "UUID,NVIDIA,MEM_MiB,CORES%"; a
//                                       template-mode MIG device is "UUID[t-s]"
//                                       (HAMi <= v2.9: geometry t, slot s)
//   hami.io/vgpu-mig-allocations        HAMi v2.10 JSON, placement-mode MIG devices
//   prism.io/decision                 Prism's complete decision (JSON, below)
// Decoding prefers prism.io/decision and falls back to the HAMi keys, so
// state can be rebuilt from pods placed by Prism or by HAMi.
// Thread-safe; the state is only read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

#include "core/sched/cluster.h"
#include "core/sched/decision.h"
#include "core/sched/request.h"

namespace prism::config {

inline constexpr char kHamiNodeAnnotation[] = "hami.io/vgpu-node";
inline constexpr char kHamiDevicesAllocatedAnnotation[] = "hami.io/vgpu-devices-allocated";
inline constexpr char kHamiDevicesToAllocateAnnotation[] = "hami.io/vgpu-devices-to-allocate";
inline constexpr char kHamiMigAllocationsAnnotation[] = "hami.io/vgpu-mig-allocations";
inline constexpr char kPrismDecisionAnnotation[] = "prism.io/decision";

// prism.io/decision as written, before it is resolved against a cluster: every field checked for
// type and range (docs/annotations.md). The one reader of the annotation: the extender, the node
// agent and `prism plan` all go through it.
struct DecisionDeviceRecord {
  std::string uuid;
  int32_t index = -1;  // -1: absent.
  sched::GpuMode mode = sched::GpuMode::kHamiCore;
  int64_t memory_mib = 0;
  int32_t cores_permille = 0;
  // MIG devices only.
  std::string profile;
  int32_t start = -1;
  int32_t template_index = -1;
  int32_t template_slot = -1;
  bool shared = false;  // A slice of a shared instance (docs/mig-slices.md).
};
struct DecisionContainerRecord {
  std::string name;
  bool init = false;
  std::vector<DecisionDeviceRecord> devices;
};
struct DecisionRecord {
  std::string node;
  std::vector<DecisionContainerRecord> containers;
};

// Bounds a decision must respect (far above what a real decision holds).
inline constexpr size_t kMaxDecisionBytes = 256 * 1024;  // The API server's annotation limit.
inline constexpr size_t kMaxDecisionContainers = 256;
inline constexpr size_t kMaxDecisionDevicesPerContainer = 256;

// Parses the value of prism.io/decision. InvalidArgument naming the field
// ("prism.io/decision: containers[0].devices[0].mode: expected a string, got number"); never
// throws.
absl::StatusOr<DecisionRecord> ParseDecisionRecord(std::string_view text);

// The decision as JSON (the value of prism.io/decision; also `prism plan`'s output).
nlohmann::json DecisionToJson(const sched::Decision& decision, const sched::ClusterState& state);

// Every annotation above.
std::map<std::string, std::string> EncodeDecisionAnnotations(const sched::Decision& decision,
                                                             const sched::ClusterState& state);

// Whether `decision` grants `pod` only what it requests: per container exactly the GPU count it
// asks for, in a mode it allows, and for a slice at most the memory and compute share the
// request entails. A pod's annotations can be written by whoever may edit the pod, so a decision
// that grants more (or grants anything to a pod that asks for no GPU) is a problem to report,
// never capacity to charge (docs/security.md). A MIG device is charged as its instance: the
// engine may pick any instance that serves the request, so its size is not bounded here.
absl::Status CheckDecisionWithinRequest(const sched::Decision& decision,
                                        const sched::PodRequest& pod,
                                        const sched::ClusterState& state);

// Rebuilds the decision of a placed pod from its annotations, against
// `state` (GPUs by UUID, profiles by name). MIG instances the decision needs
// but `state` lacks become reconfigurations. NotFound when the pod carries no
// decision; InvalidArgument naming the problem for a malformed one, or for one that grants more
// than the pod requests (CheckDecisionWithinRequest).
absl::StatusOr<sched::Decision> DecodeDecisionAnnotations(
    const std::map<std::string, std::string>& annotations, const sched::PodRequest& pod,
    const sched::ClusterState& state);

}  // namespace prism::config
