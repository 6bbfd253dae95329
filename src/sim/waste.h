// src/sim/waste.h: where the unallocated GPU of a run is, at a point of its curve.
//
// Every free milli-GPU of the cluster falls in exactly one category:
//   - stranded by CPU: on a node where some GPU pod shape of the trace (count,
//     share, CPU, memory, GPU models: the mix the workload draws from) finds its
//     GPUs, but none of those shapes has the CPU it needs left; stranded by
//     memory: CPU is there, memory is not;
//   - otherwise a hole, by the free share of its GPU: under 0.25, 0.25 to 0.5,
//     0.5 and more of a partly used GPU, or a whole idle GPU.
// And the pods that failed up to the point, by shape ("1x810": one GPU, 0.81 of it).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sim/cluster.h"

namespace prism::sim {

struct FailedShape {
  std::string shape;  // "<GPUs>x<milli>", "cpu-only" for pods without GPUs.
  int64_t pods = 0;
  int64_t gpu_milli = 0;
};

struct WasteBreakdown {
  int arrived_pct = 0;
  int64_t capacity_milli = 0;
  int64_t unallocated_milli = 0;  // Capacity minus the GPU of the pods placed.
  // Holes by each GPU's free milli: [1, 250), [250, 500), [500, 1000) of partly used
  // GPUs, whole idle GPUs.
  std::array<int64_t, 4> holes_milli{};
  int64_t cpu_stranded_milli = 0;
  int64_t memory_stranded_milli = 0;
  std::vector<FailedShape> failed;  // Most GPU first.
};

// Bucket boundaries of holes_milli (partly used GPUs).
inline constexpr std::array<int, 2> kHoleBounds = {250, 500};

// The breakdown of `state` for the pods `shapes` describes. `failed`: the pods
// that failed so far. MIG GPUs are not broken down (their free capacity counts as
// idle GPUs).
WasteBreakdown ComputeWaste(const ClusterState& state, std::span<const PodRequest> shapes,
                            std::span<const PodRequest* const> failed, int arrived_pct);

}  // namespace prism::sim
