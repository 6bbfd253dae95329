// src/sim/ceiling.h: how much GPU any placement of the arrived pods can allocate.
//
// The simulator's metric is the GPU requested by the pods placed. For the pods
// arrived at a point of the curve, ComputeCeiling gives an upper bound on it
// that no policy, online or offline, can beat, and PackOffline a placement
// (offline: it sees all pods at once and may skip any) that comes close to it.
// Together they bracket what is physically possible, so a policy's result can
// be read as a share of the achievable.
//
// The bound is the optimum of a linear program (docs/simulator.md, "Ceiling"):
// nodes of one kind (GPU model, GPUs per node, CPU, memory, MIG geometry) are
// grouped; each GPU of a group carries a *pattern*, a multiset of slots that
// fit on one GPU (shares summing to at most 1000 milli-GPU, or the instance
// profiles of a legal MIG layout); a pod of a class (same request) may take a
// slot it fits, on a group with its GPU model, enough GPUs per node, and room
// for its CPU and memory on one node. The pods a group takes may use no more
// CPU and memory than its nodes have together. Every real placement is a
// solution of this LP, so its optimum is an upper bound. Patterns are
// generated on demand (column generation: an integer knapsack over the slot
// duals prices them); MIG patterns are the catalog's maximal layouts. The
// bound reported is the Lagrangian (Farley) bound, valid even if generation
// stops early. CPU-only pods are left out: they allocate no GPU.
//
// Pure computations; thread-compatible (callers may run one per thread).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

#include "sim/cluster.h"

namespace prism::sim {

struct CeilingOptions {
  MigMapping mig_mapping = MigMapping::kMemory;
  // Column generation stops after this many rounds (the bound stays valid).
  int max_rounds = 500;
};

struct CeilingBound {
  int64_t arrived_gpu_milli = 0;  // GPU request of the pods considered.
  // No placement of any subset of the pods allocates more (milli-GPU).
  int64_t bound_gpu_milli = 0;
  double lp_objective_milli = 0;  // The LP's optimum over the patterns generated.
  int rounds = 0;                 // Column generation rounds.
  int patterns = 0;               // Pattern columns in the final LP.
  int pod_classes = 0;
  int node_groups = 0;
  // The LP's solution, which guides PackOffline: the node group of every node
  // (-1 without GPUs), the class of every pod given (-1 for CPU-only pods), and
  // how many pods of each class the LP puts on each group.
  std::vector<int> node_group;
  std::vector<int> pod_class;
  std::vector<std::vector<double>> class_group_pods;
};

// Errors: Internal if the LP solver fails.
absl::StatusOr<CeilingBound> ComputeCeiling(const Cluster& cluster,
                                            std::span<const PodRequest> pods,
                                            const CeilingOptions& options = {});

// The pods arrived when the demand reaches `arrived_pct`: the longest prefix of
// `pods` whose GPU request is at most `arrived_pct` % of the GPU capacity. (The
// curve's value at x is a mean over the prefixes whose request rounds to x, a
// window centred here; docs/simulator.md, "Ceiling".)
size_t PodsArrivedAt(const Cluster& cluster, std::span<const PodRequest> pods, int arrived_pct);

// An upper bound on the simulator's curve at `arrived_pct` (simulator.h: the mean
// allocation over the prefixes whose GPU request rounds to it, or to x-1..x+1 if
// none does), for any policy, in % of capacity. The curve's prefixes are split
// into `segments` runs of consecutive prefixes; each prefix's allocation is at
// most the bound of its run's longest prefix (more pods never lower the bound),
// so the count-weighted mean of those bounds bounds the curve's mean. More
// segments: tighter and costlier (one LP each). NaN if no prefix samples the point.
// Errors: ComputeCeiling's.
absl::StatusOr<double> CurveCeilingPct(const Cluster& cluster, std::span<const PodRequest> pods,
                                       int arrived_pct, int segments,
                                       const CeilingOptions& options = {});

}  // namespace prism::sim
