// src/core/topo/gpu_sets.h: choosing which of a node's GPUs a multi-GPU container gets, by how they
// are wired (docs/topology.md, "Placement").
//
// The engine ranks a node's GPUs by fragmentation (its GPU policy); this module picks among the
// sets that ranking allows: by default only among sets the ranking finds equally good (so that
// topology never costs packing), with `topology_first` among all of them (the pod asked for its
// interconnect first). Among equals it keeps the node's idle, well-connected GPUs together for
// the next large pod ("harm": the link score from the chosen GPUs to the idle ones left).
//
// Pure values; no I/O. Thread-compatible.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "core/topo/topology.h"

namespace prism::topo {

// The least interconnect a pod may ask of every pair of its container's GPUs.
enum class Tier : uint8_t {
  kAny = 0,
  kNuma,    // "numa": within one NUMA node (NODE, PHB, PXB, PIX, BRD) or NVLink.
  kSwitch,  // "pcie-switch": under PCIe switches without the host bridge (PXB, PIX, BRD) or NVLink.
  kNvLink,  // "nvlink": NVLink, direct or through NVSwitch.
};
std::string_view TierName(Tier tier);  // "any", "numa", "pcie-switch", "nvlink".
absl::StatusOr<Tier> ParseTier(std::string_view name);

bool MeetsTier(const GpuLink& link, Tier tier);
// HAMi's pairwise link score (pkg/device/nvidia/links.go): NVLink 100 per link, same board 60,
// one PCIe switch 50, several switches 40, host bridge 30, one NUMA node 20, across sockets 10,
// unknown 0.
int LinkScore(const GpuLink& link);
// The best tier every pair of `gpus` meets (kNvLink for fewer than two GPUs).
Tier SetTier(const NodeTopology& topology, absl::Span<const int> gpus);

struct SetRequest {
  int count = 0;
  // Positions (in NodeTopology order) that may take the container, best first by the engine.
  std::vector<int> candidates;
  // Per candidate, non-decreasing: candidates with equal values are equally good to the engine.
  std::vector<int> pref_class;
  // Per GPU of the node: nothing is on it (an idle GPU a later large pod could take whole).
  std::vector<bool> idle;
  bool topology_first = false;
  Tier required = Tier::kAny;
  bool same_numa = false;  // nvidia.com/numa-bind: every GPU on one known NUMA node.
};

// At most this many sets are compared exhaustively; beyond (C(16, 8) = 12,870 would be the worst
// case on a 16-GPU node), sets are grown greedily from at most kGreedySeeds starts (the first
// candidate on each NUMA node, then the engine's next ones), so that a node of many GPUs and a
// pod asking many costs a bounded search.
inline constexpr int64_t kMaxSetsEnumerated = 4096;
inline constexpr int kGreedySeeds = 16;

// `count` positions from `candidates` (in the engine's order), or an empty vector when no set
// meets `required` and `same_numa`. With an empty topology the engine's first `count` (when they
// meet the request).
std::vector<int> ChooseGpuSet(const NodeTopology& topology, const SetRequest& request);

}  // namespace prism::topo
