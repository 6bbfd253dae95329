// src/sim/waste.h: where the unallocated GPU of a run is, at a point of its curve.
//
// Every free milli-GPU of the cluster falls in exactly one category, decided per
// node against the shapes of the trace's GPU pods (count, share, CPU, memory,
// GPU models: the mix the workload draws from):
//   - too small: no shape's GPU request fits the node's free GPUs at all (the
//     GPU-share fragmentation FGD measures), split by each GPU's free size;
//   - stranded by CPU: some shape's GPUs fit, but none of those shapes has the
//     CPU it needs left on the node; stranded by memory: CPU is there, memory not;
//   - usable: some shape fits whole (free capacity the run simply did not fill),
//     split into idle GPUs and partly used ones.
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
  // Too small for any shape, by each GPU's free milli: [1, 250), [250, 500), [500, 1000].
  std::array<int64_t, 3> too_small_milli{};
  int64_t cpu_stranded_milli = 0;
  int64_t memory_stranded_milli = 0;
  int64_t usable_idle_milli = 0;     // Whole idle GPUs some shape can still use.
  int64_t usable_partial_milli = 0;  // Partly used GPUs some shape can still use.
  std::vector<FailedShape> failed;   // Most GPU first.
};

// Bucket boundaries of too_small_milli, for labels.
inline constexpr std::array<int, 2> kHoleBounds = {250, 500};

// The breakdown of `state` for the pods `shapes` describes. `failed`: the pods
// that failed so far. Software-shared GPUs only (MIG GPUs count as usable).
WasteBreakdown ComputeWaste(const ClusterState& state, std::span<const PodRequest> shapes,
                            std::span<const PodRequest* const> failed, int arrived_pct);

}  // namespace prism::sim
