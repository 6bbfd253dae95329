// src/sim/node_patterns.h: what one node can hold, for the offline pattern packing.
//
// A *node pattern* is a multiset of pod classes (pods with the same request)
// with the GPUs each takes on one node of a node group: feasible exactly, by
// the node's CPU and memory, at most 1000 milli-GPU per software-shared GPU,
// distinct GPUs for a multi-GPU pod, the GPU model; on MIG GPUs each pod in its
// own instance of a profile that serves its share, the instances of a GPU a
// subset of one of the catalog's maximal legal layouts
// (mig::EnumerateMaximalLayouts), so legal with the same starts.
//
// BestNodePattern prices patterns for column generation: the pattern with the
// highest total of per-class values. It is a dynamic program over (GPUs, CPU)
// with CPU counted in units of 1/cpu_units of the node's, each pod's rounded up,
// so every pattern it returns fits (memory, not in the program, is checked and
// repaired afterwards); the rounding may miss the very best pattern, which only
// costs the packing, never its feasibility. Pure; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/mig/layout.h"
#include "sim/cluster.h"

namespace prism::sim {

struct PackClass {
  int gpu_count = 0;
  int gpu_milli = 0;
  int64_t cpu = 0;
  int64_t memory = 0;
  uint64_t model_mask = 0;
  std::vector<size_t> pods;  // Indices of its pods, in arrival order.

  // GPUs (not milli) a pod of the class allocates.
  double gpus() const { return static_cast<double>(gpu_count) * gpu_milli / kMilliPerGpu; }
};

struct PackGroup {
  int model = -1;
  const mig::GpuModel* mig_model = nullptr;
  int gpus_per_node = 0;
  int64_t cpu_per_node = 0;
  int64_t memory_per_node = 0;
  std::vector<int> nodes;  // In cluster order.
};

struct PatternItem {
  int pod_class = -1;
  std::vector<int> gpus;               // GPU indices within the node, distinct.
  std::vector<mig::Instance> instances;  // MIG: the instance on each of `gpus`.
};

struct NodePattern {
  std::vector<PatternItem> items;

  // Pods per class (size `classes`).
  std::vector<int> Counts(size_t classes) const;
  // A canonical text: equal for patterns with the same items.
  std::string Key() const;
};

// Nodes and pods grouped as the pattern packing and the ceiling (ceiling.h) see
// them, in order of first appearance: groups by (model, MIG geometry, GPUs, CPU,
// memory), nodes without GPUs left out; classes by request, CPU-only pods and
// shares outside 1..1000 milli-GPU per GPU (which no PodRequest has) left out.
// `node_group` / `pod_class` (optional for nodes): each one's index, or -1.
std::vector<PackGroup> GroupNodesForPacking(const Cluster& cluster,
                                            std::vector<int>* node_group = nullptr);
std::vector<PackClass> ClassifyPodsForPacking(std::span<const PodRequest> pods,
                                              std::vector<int>* pod_class);

// Whether a pod of class `c` could run on an empty node of group `g`.
bool ClassFitsNode(const PackClass& c, const PackGroup& g, MigMapping mapping);

// A pattern of `group` with the highest sum(values[class]) over its pods that
// the program finds (pods beyond a class's supply, or beyond the node's
// memory, are dropped from it, lowest value first); nullopt if it has no
// positive value. Classes with values <= 0 are never used.
std::optional<NodePattern> BestNodePattern(const PackGroup& group,
                                           const std::vector<PackClass>& classes,
                                           const std::vector<double>& values,
                                           MigMapping mapping, int cpu_units = 128);

}  // namespace prism::sim
