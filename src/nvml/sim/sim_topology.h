// src/nvml/sim/sim_topology.h: how simulated GPUs are wired, after real machines.
//
// A state file's `topology:` names a machine (`machine: dgx1-v100`) or spells the wiring out as
// `nvidia-smi topo -m` prints it (docs/nvml-simulator.md, "Topology"). The NVML topology calls
// (sim_state.h: GetNumaNode, GetNvLinks, ...) answer from it; without a `topology:` they answer
// NOT_SUPPORTED, as a driver that cannot say. The wiring may be inconsistent on purpose (a pair
// whose two directions disagree, a NUMA node of -1): that is how tests show discovery copes with
// a driver's bad data.
//
// The machines (sources in sim_topology.cc and docs/nvml-simulator.md): DGX-1 V100 (hybrid
// cube-mesh), HGX A100 and HGX H100 8-GPU (NVSwitch), an 8-GPU two-socket PCIe server with NVLink
// bridge pairs, 4- and 2-GPU PCIe boxes. They set the wiring only; the GPUs stay whatever models
// `gpus:` lists. Immutable values; thread-compatible.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "core/topo/topology.h"

namespace YAML {
class Node;
class Emitter;
}  // namespace YAML

namespace prism::nvml::sim {

struct SimPair {
  int nvlinks = 0;      // Direct NVLinks from this GPU to the other.
  int nvswitch = 0;     // > 0: the pair reaches each other through NVSwitch ("NVS<n>").
  int pcie_level = 50;  // nvmlGpuTopologyLevel_t; -1: the driver does not say (NOT_SUPPORTED).
  friend bool operator==(const SimPair&, const SimPair&) = default;
};

struct SimTopology {
  std::string machine;                      // The machine it came from; "" when spelled out.
  std::vector<int> numa;                    // Per GPU; -1: the driver reports none.
  std::vector<std::string> cpus;            // Per GPU CPU list; "": not reported.
  std::vector<std::vector<SimPair>> pairs;  // [from][to]; [a][a] unused.
  bool configured() const { return !pairs.empty(); }
  // NVLinks from `gpu` to NVSwitches: the largest NVS<n> of its row.
  int SwitchLinks(int gpu) const;
  friend bool operator==(const SimTopology&, const SimTopology&) = default;
};

// The machines `machine:` accepts, and one by name for `gpu_count` GPUs (InvalidArgument naming
// the machine and its GPU count when it has a different number).
const std::vector<std::string>& SimMachineNames();
absl::StatusOr<SimTopology> SimMachineTopology(std::string_view machine, size_t gpu_count);

// Parses the `topology:` mapping for `gpu_count` GPUs; InvalidArgument naming the key.
absl::StatusOr<SimTopology> ParseSimTopology(const YAML::Node& node, size_t gpu_count);
// Writes it back: `machine:` (with the `numa`/`cpus` that differ from the machine's) when the
// wiring is the machine's, else spelled out.
void EmitSimTopology(YAML::Emitter& out, const SimTopology& topology);

// What topology discovery (nvml/topology.h, DiscoverTopology) reads from simulated GPUs wired as
// `topology` (the topology test checks the two agree for every machine): for tools that model a
// node without simulating NVML (`prism plan`'s cluster files). A pair whose two directions
// disagree is unknown, with a line in `unknown`.
topo::NodeTopology AsDiscovered(const SimTopology& topology);

// The fake bus ID of the NVSwitch a GPU's switch links end at.
inline constexpr std::string_view kSimNvSwitchBusId = "00000000:C1:00.0";

}  // namespace prism::nvml::sim
