// src/sim/wiring.h: GPU wiring of the simulated cluster and what `prism sim --topology`
// measures of multi-GPU placements (docs/topology.md, "Placement"; docs/results/topology.md).
//
// The trace names GPU models, not machines; WireCluster assumes one machine of
// nvml/sim/sim_topology.cc per model and GPU count (MachineFor; the reasons are in
// docs/results/topology.md) and gives each node the topology discovery would read from it
// (nvml::sim::AsDiscovered). The metrics judge every placed pod of two or more GPUs against
// what its node could have given at that moment, whichever policy placed it.
//
// Pure values; no I/O. Thread-compatible.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "core/topo/gpu_sets.h"
#include "core/topo/topology.h"
#include "sim/cluster.h"

namespace prism::sim {

// The simulated machine (nvml::sim::SimMachineNames) assumed for `gpus` GPUs of trace model
// `model`; "" for none (one GPU, or a count no machine has).
std::string_view MachineFor(std::string_view model, int gpus);

// Wires every node MachineFor names a machine for. Returns how many nodes were wired.
absl::StatusOr<int> WireCluster(Cluster* cluster);

// Per run: placed pods of two or more GPUs, by GPU count (index 2..8; index 0 sums them all,
// index 1 the counts above 8).
struct TopologyStats {
  static constexpr int kBuckets = 9;
  std::array<int64_t, kBuckets> placed{};
  // On a set of the best tier (topo::SetTier) the node's fitting GPUs offered at that moment.
  std::array<int64_t, kBuckets> best_tier{};
  // The pod's GPUs span more than one NUMA node (or one of them is unknown)...
  std::array<int64_t, kBuckets> numa_split{};
  // ...although the node's fitting GPUs held a set on one NUMA node.
  std::array<int64_t, kBuckets> numa_split_avoidable{};
  // On a set of the best tier any node offered at that moment (ClusterOffers::BestTier): this
  // judges the node choice too, where best_tier judges only the set within the chosen node.
  std::array<int64_t, kBuckets> best_any{};
  // Pods on nodes without a wiring (not judged; not in the counts above).
  int64_t unwired = 0;

  static int Bucket(int gpu_count) { return gpu_count <= 8 ? gpu_count : 1; }
  void Add(const TopologyStats& other);
};

// What a node could offer a pod of `count` GPUs: of `fitting` (positions), the best tier of a
// `count`-set and whether a `count`-set on one known NUMA node exists.
struct TopologyOffer {
  topo::Tier best = topo::Tier::kAny;
  bool one_numa = false;
};
TopologyOffer BestOffer(const topo::NodeTopology& topology, absl::Span<const int> fitting,
                        int count);

// The best tier any node could give a pod at the current state: among the wired nodes where
// the pod is feasible as ClusterState::Place checks it (an allowed model, its CPU and memory
// left, at least `gpu_count` software-shared GPUs with `gpu_milli` left), the best
// topo::SetTier of a `gpu_count`-set of the fitting GPUs; kAny when no wired node is feasible.
// Nodes wired alike with the same fitting GPUs share one answer (memoized), so a call costs a
// pass over the nodes. Thread-compatible; one per run.
class ClusterOffers {
 public:
  topo::Tier BestTier(const ClusterState& state, const PodRequest& pod);

 private:
  std::unordered_map<uint64_t, topo::Tier> memo_;  // (topology, count, fitting GPUs) -> tier.
};

// Counts one placed pod of `chosen.size()` >= 2 GPUs given what its node offered and the best
// tier any node offered (`cluster_best`, at least offer.best).
void RecordPlacement(const topo::NodeTopology& topology, const TopologyOffer& offer,
                     topo::Tier cluster_best, absl::Span<const int> chosen,
                     TopologyStats* stats);

// Whether `gpus` (positions) lie on one known NUMA node.
bool OneNumaNode(const topo::NodeTopology& topology, absl::Span<const int> gpus);

// Calls `visit` with every `k`-subset of `items` (ascending positions within `items`, in
// lexicographic order) until it returns false.
template <typename Visit>
void ForEachSubset(absl::Span<const int> items, int k, Visit&& visit) {
  const int n = static_cast<int>(items.size());
  if (k <= 0 || k > n) return;
  std::vector<int> index(k);
  std::vector<int> set(k);
  for (int i = 0; i < k; ++i) index[i] = i;
  while (true) {
    for (int i = 0; i < k; ++i) set[i] = items[index[i]];
    if (!visit(absl::Span<const int>(set))) return;
    int i = k - 1;
    while (i >= 0 && index[i] == n - k + i) --i;
    if (i < 0) return;
    ++index[i];
    for (int j = i + 1; j < k; ++j) index[j] = index[j - 1] + 1;
  }
}

}  // namespace prism::sim
