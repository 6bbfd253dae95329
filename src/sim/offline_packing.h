// src/sim/offline_packing.h: a placement of the arrived pods that sees them all at once.
//
// The lower side of the ceiling (ceiling.h): the best of four best-fit packings,
// with and without the LP's solution as a guide, pods taken largest request
// first (total GPU, then per-GPU share, then CPU) or in arrival order (which
// mixes CPU-heavy and GPU-heavy pods, as online policies see them). A share goes
// to the GPU with the least room that still fits it (on a node with CPU and
// memory for the pod); whole GPUs, and shares no partly used GPU takes, go to the
// node with the most CPU left per free GPU that has enough idle ones, so that CPU
// does not run out first. With the LP's solution (`guide`), a pod first tries the
// node groups where the LP still has room for its class, and the pods of a class
// beyond what the LP places wait until every other pod had its turn. Pods that
// fit nowhere are skipped, as an offline packer may; CPU-only pods too (they
// allocate no GPU). Every placement is applied through ClusterState, so the
// result is feasible by the simulator's own rules. Software-shared GPUs only
// (MIG nodes are left empty).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "sim/ceiling.h"
#include "sim/cluster.h"

namespace prism::sim {

struct OfflinePacking {
  int64_t gpu_milli = 0;  // GPU requested by the pods placed.
  int64_t placed = 0;
  // (index into the pods given, where it went), in the order placed.
  std::vector<std::pair<size_t, Placement>> placements;
};

// `guide`: ComputeCeiling's result for the same cluster and pods, or nullptr
// (plain best-fit decreasing).
OfflinePacking PackOffline(const Cluster& cluster, std::span<const PodRequest> pods,
                           const CeilingBound* guide = nullptr);

// Plain best-fit decreasing of the pods `start` leaves out, on top of `start`'s
// placements (kept as they are; REQUIRES: feasible, software-shared GPUs): the
// pattern packing's last step.
OfflinePacking CompletePacking(const Cluster& cluster, std::span<const PodRequest> pods,
                               const OfflinePacking& start);

}  // namespace prism::sim
