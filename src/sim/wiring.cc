#include "sim/wiring.h"

#include <map>

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

void RecordPlacement(const topo::NodeTopology& topology, const TopologyOffer& offer,
                     absl::Span<const int> chosen, TopologyStats* stats) {
  const int bucket = TopologyStats::Bucket(static_cast<int>(chosen.size()));
  const bool best = topo::SetTier(topology, chosen) >= offer.best;
  const bool split = !OneNumaNode(topology, chosen);
  for (int b : {0, bucket}) {
    ++stats->placed[b];
    stats->best_tier[b] += best;
    stats->numa_split[b] += split;
    stats->numa_split_avoidable[b] += split && offer.one_numa;
  }
}

}  // namespace prism::sim
