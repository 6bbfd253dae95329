// src/sim/pattern_packing.h: an offline packing close to the ceiling.
//
// The lower side of the ceiling (ceiling.h): a feasible placement of a subset
// of the arrived pods, found offline (it sees them all at once and may skip
// any), so the optimum lies between it and the LP bound. Column generation over
// exact per-node patterns (node_patterns.h): a restricted master LP (COIN-OR
// CLP) chooses how many nodes of each group carry each pattern, with at most
// the arrived pods of each class and the group's nodes; new patterns are priced
// by BestNodePattern against its duals. The master over the patterns generated
// is then solved as an integer program (COIN-OR CBC, mip_solver.h, a node
// budget), started from the better of the LP's solution rounded down and the
// greedy packing (offline_packing.h; on MIG GPUs mig_completion.h from nothing),
// whose node contents are patterns too.
// Pods left out are then inserted greedily (best fit; on MIG GPUs mig_completion.h),
// and the result is re-checked from scratch by CheckPacking (packing_check.h),
// which shares no code with the packer. Deterministic: no clock, no threads.
#pragma once

#include <span>

#include "absl/status/statusor.h"

#include "sim/ceiling.h"
#include "sim/cluster.h"
#include "sim/offline_packing.h"

namespace prism::sim {

struct PatternPackingOptions {
  MigMapping mig_mapping = MigMapping::kMemory;
  // Column generation rounds (each prices one pattern per node group).
  int max_rounds = 60;
  // CPU resolution of the pricing program (node_patterns.h). 32 and 40 nodes: the
  // same mean on seeds 42-51 as 64 and 100, at 40 % of the time (docs/results/ceiling.md).
  int cpu_units = 32;
  // Branch-and-bound nodes of the integer program.
  int max_nodes = 40;
};

struct PatternPackingStats {
  int rounds = 0;
  int patterns = 0;
  double lp_gpus = 0;   // The restricted master LP's optimum (GPUs).
  double mip_gpus = 0;  // The integer program's (GPUs), before the greedy insertion.
  int mip_nodes = 0;
  bool mip_optimal = false;
};

// `guide`: ComputeCeiling's result for the same pods, or nullptr; it guides the
// greedy packing the integer program starts from (PackOffline), so the result is
// never below PackOffline(cluster, pods, guide). Errors: Internal if a solver
// fails or the checker rejects the result (a bug).
absl::StatusOr<OfflinePacking> PackWithPatterns(const Cluster& cluster,
                                                std::span<const PodRequest> pods,
                                                const CeilingBound* guide = nullptr,
                                                const PatternPackingOptions& options = {},
                                                PatternPackingStats* stats = nullptr);

}  // namespace prism::sim
