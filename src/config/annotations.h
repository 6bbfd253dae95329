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

#include <map>
#include <string>

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

// The decision as JSON (the value of prism.io/decision; also `prism plan`'s output).
nlohmann::json DecisionToJson(const sched::Decision& decision, const sched::ClusterState& state);

// Every annotation above.
std::map<std::string, std::string> EncodeDecisionAnnotations(const sched::Decision& decision,
                                                             const sched::ClusterState& state);

// Rebuilds the decision of a placed pod from its annotations, against
// `state` (GPUs by UUID, profiles by name). MIG instances the decision needs
// but `state` lacks become reconfigurations. NotFound when the pod carries no
// decision; InvalidArgument naming the problem for a malformed one.
absl::StatusOr<sched::Decision> DecodeDecisionAnnotations(
    const std::map<std::string, std::string>& annotations, const sched::PodRequest& pod,
    const sched::ClusterState& state);

}  // namespace prism::config
