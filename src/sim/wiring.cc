#include "sim/wiring.h"

#include <algorithm>
#include <map>
#include <span>

#include "base/status_macros.h"
#include "base/strings.h"
#include "nvml/sim/sim_topology.h"

namespace prism::sim {

std::string_view MachineFor(std::string_view model, int gpus) {
  // docs/results/topology.md, "Wiring assumed per trace model", says why.
  switch (gpus) {
    case 8:
      if (model == "V100M16" || model == "V100M32") return "dgx1-v100";
      if (model == "G3") return "hgx-a100-8";
      return "pcie-8gpu-nvlink-pairs";  // G2 and any other 8-GPU model.
    case 4:
      return "pcie-4gpu";
    case 2:
      return "pcie-2gpu";
    default:
      return "";
  }
}

absl::StatusOr<int> WireCluster(Cluster* cluster) {
  std::map<std::string, topo::NodeTopology, std::less<>> made;
  int wired = 0;
  for (int i = 0; i < cluster->node_count(); ++i) {
    const NodeSpec& node = cluster->node(i);
    if (node.model < 0) continue;
    const std::string_view machine = MachineFor(cluster->models()[node.model], node.gpu_count);
    if (machine.empty()) continue;
    auto it = made.find(machine);
    if (it == made.end()) {
      ASSIGN_OR_RETURN(nvml::sim::SimTopology sim,
                       nvml::sim::SimMachineTopology(machine, static_cast<size_t>(node.gpu_count)));
      it = made.emplace(std::string(machine), nvml::sim::AsDiscovered(sim)).first;
    }
    RETURN_IF_ERROR(cluster->SetNodeTopology(i, it->second));
    ++wired;
  }
  return wired;
}

void TopologyStats::Add(const TopologyStats& other) {
  for (int b = 0; b < kBuckets; ++b) {
    placed[b] += other.placed[b];
    best_tier[b] += other.best_tier[b];
    numa_split[b] += other.numa_split[b];
    numa_split_avoidable[b] += other.numa_split_avoidable[b];
    best_any[b] += other.best_any[b];
  }
  unwired += other.unwired;
}

bool OneNumaNode(const topo::NodeTopology& topology, absl::Span<const int> gpus) {
  if (gpus.empty()) return true;
  const int first = topology.NumaNode(gpus[0]);
  if (first == topo::kNumaUnknown) return false;
  for (int g : gpus) {
    if (topology.NumaNode(g) != first) return false;
  }
  return true;
}

TopologyOffer BestOffer(const topo::NodeTopology& topology, absl::Span<const int> fitting,
                        int count) {
  TopologyOffer offer;
  ForEachSubset(fitting, count, [&](absl::Span<const int> set) {
    const topo::Tier tier = topo::SetTier(topology, set);
    if (tier > offer.best) offer.best = tier;
    offer.one_numa |= OneNumaNode(topology, set);
    // Nothing beats NVLink on one NUMA node.
    return !(offer.best == topo::Tier::kNvLink && offer.one_numa);
  });
  return offer;
}

topo::Tier ClusterOffers::BestTier(const ClusterState& state, const PodRequest& pod) {
  const Cluster& cluster = state.cluster();
  topo::Tier best = topo::Tier::kAny;
  std::vector<int> fitting;
  for (int i = 0; i < cluster.node_count() && best < topo::Tier::kNvLink; ++i) {
    const NodeSpec& node = cluster.node(i);
    if (node.topology < 0 || node.gpu_count < pod.gpu_count || !state.ModelAllowed(i, pod) ||
        !state.CpuMemoryFit(i, pod) ||
        state.gpu_left_total(i) < int64_t{pod.gpu_count} * pod.gpu_milli) {
      continue;
    }
    fitting.clear();
    uint64_t mask = 0;
    std::span<const int> left = state.gpu_left(i);
    for (int g = 0; g < static_cast<int>(left.size()); ++g) {
      if (left[g] < pod.gpu_milli) continue;
      fitting.push_back(g);
      if (g < 32) mask |= uint64_t{1} << g;
    }
    if (static_cast<int>(fitting.size()) < pod.gpu_count) continue;
    // Key: 32 bits of fitting GPUs, 8 of count, the rest the wiring (nodes of more than 32 GPUs
    // or counts past 255 are not memoized).
    const bool memoize = node.gpu_count <= 32 && pod.gpu_count < 256;
    const uint64_t key = mask | uint64_t(pod.gpu_count) << 32 | uint64_t(node.topology) << 40;
    topo::Tier tier;
    auto it = memoize ? memo_.find(key) : memo_.end();
    if (it != memo_.end()) {
      tier = it->second;
    } else {
      tier = BestOffer(*cluster.topology(i), fitting, pod.gpu_count).best;
      if (memoize) memo_.emplace(key, tier);
    }
    best = std::max(best, tier);
  }
  return best;
}

void RecordPlacement(const topo::NodeTopology& topology, const TopologyOffer& offer,
                     topo::Tier cluster_best, absl::Span<const int> chosen,
                     TopologyStats* stats) {
  const int bucket = TopologyStats::Bucket(static_cast<int>(chosen.size()));
  const topo::Tier tier = topo::SetTier(topology, chosen);
  const bool best = tier >= offer.best;
  const bool best_any = tier >= cluster_best;
  const bool split = !OneNumaNode(topology, chosen);
  for (int b : {0, bucket}) {
    ++stats->placed[b];
    stats->best_tier[b] += best;
    stats->numa_split[b] += split;
    stats->numa_split_avoidable[b] += split && offer.one_numa;
    stats->best_any[b] += best_any;
  }
}

}  // namespace prism::sim
