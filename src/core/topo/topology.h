// src/core/topo/topology.h: how a node's GPUs are wired to each other and to the CPUs.
//
// The value the node agent discovers (nvml/topology.h, from NVML or the simulator), publishes in
// its inventory annotation (deviceplugin/inventory.h, docs/topology.md) and the scheduler decodes:
// per GPU its NUMA node and CPU affinity, per GPU pair the link tier. Anything discovery could not
// learn is "unknown" (numa -1, tier kUnknown) with a reason in `unknown`, never an error: a node
// whose driver cannot say how its GPUs connect is still a node.
//
// Pure values and text conversions; no I/O. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace prism::topo {

// How two GPUs reach each other. The PCIe tiers are NVML's nvmlGpuTopologyLevel_t (the closest
// common ancestor on the PCIe tree), spelled as `nvidia-smi topo -m` spells them.
enum class LinkTier : uint8_t {
  kUnknown = 0,  // "?": discovery could not say (a call unsupported, answers that disagree).
  kSystem,       // "SYS": PCIe and the interconnect between CPU sockets (QPI/UPI, xGMI).
  kNode,         // "NODE": one NUMA node, through more than one PCIe host bridge.
  kHostBridge,   // "PHB": one PCIe host bridge (typically the CPU).
  kMultiSwitch,  // "PXB": several PCIe switches, no host bridge.
  kSwitch,       // "PIX": one PCIe switch.
  kBoard,        // "BRD": one board (NVML_TOPOLOGY_INTERNAL: two GPUs on one card).
  kNvLink,       // "NV<n>": n direct NVLinks between the two.
  kNvSwitch,     // "NVS<n>": through NVSwitch; n = the fewer of the two GPUs' switch links.
};

// NVML_NVLINK_MAX_LINKS: no GPU has more NVLinks (bounds decoded counts).
inline constexpr int kMaxNvLinks = 36;
// NUMA node IDs accepted (Linux's MAX_NUMNODES is at most 1 << 10).
inline constexpr int kMaxNumaNode = 1023;
// A CPU list ("0-19,40-59") is at most this long when decoded.
inline constexpr size_t kMaxCpuListBytes = 2048;
inline constexpr int kNumaUnknown = -1;

struct GpuLink {
  LinkTier tier = LinkTier::kUnknown;
  int nvlinks = 0;  // kNvLink, kNvSwitch: the link count (1..kMaxNvLinks); else 0.
  bool nvlink() const { return tier == LinkTier::kNvLink || tier == LinkTier::kNvSwitch; }
  friend bool operator==(const GpuLink&, const GpuLink&) = default;
};

// "NV2", "NVS18", "PIX", "PXB", "PHB", "NODE", "SYS", "BRD", "?".
std::string FormatLink(const GpuLink& link);
// The inverse. A token of the right shape that this build does not know (a newer agent's tier)
// reads as kUnknown, so that a version skew costs the topology of that pair, not the node;
// InvalidArgument for anything else (bad shape, NVLink count out of 1..kMaxNvLinks).
absl::StatusOr<GpuLink> ParseLink(std::string_view token);

// Orders links for placement: > 0 when `a` is the better connection. Every NVLink (direct or
// through NVSwitch) beats every PCIe path; NVLinks compare by count, then NVSwitch over direct;
// PCIe paths by how close the common ancestor is; unknown is worst.
int CompareLinks(const GpuLink& a, const GpuLink& b);
// CompareLinks' order as one number: greater is the better connection.
int LinkRank(const GpuLink& link);

struct NodeTopology {
  // By GPU position (the inventory's GPU order, which is NVML index order). Empty vectors: no
  // topology at all (an inventory from an agent that predates discovery).
  std::vector<int> numa_node;             // kNumaUnknown when unknown.
  std::vector<std::string> cpu_affinity;  // CPU list ("0-19,40-59"); "" when unknown.
  // links[a][b], symmetric; links[a][a] is unused (kUnknown).
  std::vector<std::vector<GpuLink>> links;
  // What discovery could not learn and why, one line each (bounded on the wire).
  std::vector<std::string> unknown;

  bool empty() const { return numa_node.empty() && links.empty(); }
  int NumaNode(int gpu) const;       // kNumaUnknown out of range.
  GpuLink Link(int a, int b) const;  // kUnknown out of range or for a == b.
  friend bool operator==(const NodeTopology&, const NodeTopology&) = default;
};

// A CPU list as the kernel writes one (cpulist format: "0-3,8,10-11"), from a bit mask of
// 64-bit words (word i holds CPUs 64i..64i+63, as nvmlDeviceGetCpuAffinity fills it). "" for an
// empty mask.
std::string CpuListFromMask(const std::vector<uint64_t>& words);
// Checks a CPU list: ascending ranges of CPU numbers below 1 << 16, at most kMaxCpuListBytes.
absl::Status ValidateCpuList(std::string_view list);

}  // namespace prism::topo
