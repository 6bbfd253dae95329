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

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

#include "core/mig/layout.h"
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

// The node patterns one PackWithPatterns call's LP used, by pod request (not
// class index), for the next call on the same cluster: columns of its master from
// the start, so that its column generation needs fewer rounds (prism sim packs a
// seed's points in increasing order: 20-50 rounds at 100-130 % become 6-25). A
// pattern holds for any pods (the master's rows keep to the pods arrived), so a
// carry changes the columns the packing sees, never its validity.
struct PatternCarry {
  struct Item {
    int gpu_count = 0, gpu_milli = 0;
    int64_t cpu = 0, memory = 0;
    uint64_t model_mask = 0;
    std::vector<int> gpus;
    std::vector<mig::Instance> instances;
  };
  struct Pattern {
    int group = -1;  // GroupNodesForPacking's index.
    std::vector<Item> items;
  };
  std::vector<Pattern> patterns;
};

// `carry`: read first (its patterns become columns), then replaced by this
// call's; nullptr for none.
// `guide`: ComputeCeiling's result for the same pods, or nullptr; it guides the
// greedy packing the integer program starts from (PackOffline), so the result is
// never below PackOffline(cluster, pods, guide). Errors: Internal if a solver
// fails or the checker rejects the result (a bug).
absl::StatusOr<OfflinePacking> PackWithPatterns(const Cluster& cluster,
                                                std::span<const PodRequest> pods,
                                                const CeilingBound* guide = nullptr,
                                                const PatternPackingOptions& options = {},
                                                PatternPackingStats* stats = nullptr,
                                                PatternCarry* carry = nullptr);

}  // namespace prism::sim
