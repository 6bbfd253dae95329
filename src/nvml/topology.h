// src/nvml/topology.h: discovers how a node's GPUs connect, through any Nvml backend.
//
// Per GPU its NUMA node and CPU affinity; per GPU pair the link tier (core/topo/topology.h):
// NVLink count, direct or through NVSwitch, else the PCIe path. Discovery never fails: whatever a
// call does not answer (NOT_SUPPORTED, FUNCTION_NOT_FOUND, a missing entry point) or answers
// inconsistently (the two directions of a pair disagree, a NUMA node of -1) is unknown, with a
// line in `unknown` saying why. docs/topology.md describes the rules.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/topo/topology.h"
#include "nvml/nvml.h"

namespace prism::nvml {

// At most this many lines in NodeTopology::unknown (the last says how many were left out), each
// at most kMaxTopologyUnknownLineBytes (longer ones are cut, ending in "...").
inline constexpr size_t kMaxTopologyUnknownLines = 16;
inline constexpr size_t kMaxTopologyUnknownLineBytes = 512;

// `gpus` as ListGpus returned them (their positions are the topology's). Empty when not one fact
// could be learned (a backend without topology support): the same as "all unknown", and what
// lets an inventory without topology stay as it was.
topo::NodeTopology DiscoverTopology(Nvml& nvml, const std::vector<GpuInfo>& gpus);

// A PCI bus id as sysfs and Kubernetes' standard attribute `resource.kubernetes.io/pciBusID` write
// it, "0000:07:00.0" (lower case, a 4-digit domain), from NVML's "00000000:07:00.0". Empty when
// the result is not of that form (BDF: 4:2:2.1 hex digits).
std::string PciBusIdSysfsForm(std::string_view nvml_bus_id);

}  // namespace prism::nvml
