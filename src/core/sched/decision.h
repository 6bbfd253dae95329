// src/core/sched/decision.h: a placement decision and the reasons a pod did
// not fit.
//
// Pure value types. src/config/annotations.h encodes a Decision into pod
// annotations (docs/annotations.md). Thread-compatible.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/sched/request.h"

namespace prism::sched {

// One device granted to a container.
struct DeviceAssignment {
  int32_t gpu = -1;        // Cluster-wide GPU id (ClusterState::gpu()).
  int32_t gpu_index = -1;  // Index of the GPU on its node.
  std::string uuid;
  GpuMode mode = GpuMode::kHamiCore;
  int64_t memory_mib = 0;      // Granted memory (a MIG instance grants its profile's).
  int32_t cores_permille = 0;  // Granted compute share.
  // MIG only.
  int32_t profile = -1;         // Index into the GPU model's profiles.
  std::string profile_name;     // e.g. "2g.10gb".
  int32_t start = -1;           // Placement start (memory slices).
  int32_t size = 0;             // Placement size (memory slices).
  int32_t template_index = -1;  // Geometry in template mode, -1 in placement mode.
  int32_t template_slot = -1;   // Slot of that geometry (HAMi's flattened order).
  // A software slice of a shared instance (docs/mig-slices.md): memory_mib and cores_permille
  // are the slice's, profile and start name the instance.
  bool shared = false;

  bool IsMig() const { return mode == GpuMode::kMig; }
};

struct ContainerAssignment {
  std::string name;
  bool init = false;
  std::vector<DeviceAssignment> devices;  // Empty for a container without GPUs.
};

// A MIG instance by profile and place.
struct MigPlacement {
  int32_t profile = -1;
  int32_t start = -1;
  friend bool operator==(const MigPlacement&, const MigPlacement&) = default;
};

// Instances to destroy and create on one GPU before the pod can start.
struct MigReconfiguration {
  int32_t gpu = -1;
  int32_t gpu_index = -1;
  // Template mode: the geometry applied to the (idle) GPU; -1 in placement mode.
  int32_t template_index = -1;
  std::vector<MigPlacement> destroy;  // Never an instance in use.
  std::vector<MigPlacement> create;
};

struct Decision {
  int32_t node = -1;
  std::string node_name;
  double score = 0;       // The policy's score (higher is better); comparable within one pod.
  int64_t cpu_milli = 0;  // Effective pod request charged to the node.
  int64_t memory_bytes = 0;
  // In PodRequest::containers order (init containers first).
  std::vector<ContainerAssignment> containers;
  std::vector<MigReconfiguration> mig;

  // GPU-instance create + destroy operations this decision needs.
  int MigOperations() const;
};

// Why a node or GPU was rejected. GPU reasons keep HAMi's names
// (pkg/device/common/common.go) so users can search for them.
enum class Reason : uint8_t {
  kNodeInsufficientCpu,
  kNodeInsufficientMemory,
  kNodeInsufficientDevice,  // Fewer usable GPUs than one container asks for.
  kCardNotHealth,
  kCardTypeMismatch,  // use/nouse-gputype or vgpu-mode.
  kCardUuidMismatch,
  kCardTimeSlicingExhausted,
  kExclusiveDeviceAllocateConflict,
  kCardInsufficientMemory,
  kCardInsufficientCore,
  kCardComputeUnitsExhausted,
  kCardMigTopologyInfeasible,
  kAllocatedCardsInsufficientRequest,
  kNumaNotFit,      // numa-bind: the GPUs that fit are on different (or unknown) NUMA nodes.
  kTopologyNotFit,  // No set of the GPUs that fit meets the pod's required interconnect.
  kCount,
};
inline constexpr int kReasonCount = static_cast<int>(Reason::kCount);
std::string_view ReasonName(Reason reason);

// Why one node cannot take a pod: either a node-level reason, or per-GPU
// reasons counted over the node's GPUs ("3/4 CardInsufficientMemory").
struct NodeFailure {
  bool node_level = false;
  Reason node_reason = Reason::kNodeInsufficientCpu;
  int32_t gpus = 0;                                // GPUs on the node.
  std::array<int16_t, kReasonCount> gpu_counts{};  // GPUs rejected per reason.
  bool too_few_cards = false;  // Every GPU was checked, but fewer than needed fit.

  // HAMi style: "3/4 CardInsufficientMemory, 1/4 CardUuidMismatch", or
  // "Insufficient cpu" for a node-level reason.
  std::string ToString() const;
  // The most frequent reason (node-level first), for cluster-wide summaries.
  Reason Main() const;

  // Nodes that fail alike are told apart from others without formatting their reasons.
  friend bool operator==(const NodeFailure&, const NodeFailure&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const NodeFailure& f) {
    return H::combine(std::move(h), f.node_level, f.node_reason, f.gpus, f.gpu_counts,
                      f.too_few_cards);
  }
};

}  // namespace prism::sched
