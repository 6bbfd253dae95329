#include "nvml/sim/sim_topology.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <functional>

#include "base/status_macros.h"
#include "base/strings.h"
#include "core/topo/topology.h"
#include "nvml/nvml_errors.h"
#include "nvml/sim/sim_state.h"

namespace prism::nvml::sim {
namespace {

// nvmlGpuTopologyLevel_t values (nvml_abi.h; not included here: the simulator speaks codes).
constexpr int kBoard = 0, kSingle = 10, kMultiple = 20, kHostBridge = 30, kNode = 40, kSystem = 50;

absl::Status Bad(std::string_view where, std::string_view what) {
  return absl::InvalidArgumentError(StrCat("simulated GPU file: ", where, ": ", what));
}

SimTopology Build(std::string_view name, size_t n, const std::vector<int>& numa,
                  const std::vector<std::string>& cpus,
                  const std::function<SimPair(size_t, size_t)>& pair) {
  SimTopology t;
  t.machine = std::string(name);
  t.numa = numa;
  t.cpus = cpus;
  t.pairs.assign(n, std::vector<SimPair>(n));
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      if (a != b) t.pairs[a][b] = pair(a, b);
    }
  }
  return t;
}

// DGX-1 with V100 (hybrid cube-mesh, 6 NVLinks per GPU): NVIDIA's DGX-1 whitepaper describes the
// cube with two NVLinks on some edges and diagonals on two faces; the counts per pair are those
// of NCCL's topology dump of a DGX-1V in NVIDIA/nccl#671 (GPU0: GPU1 1, GPU2 1, GPU3 2, GPU4 2;
// GPU1: GPU2 2, GPU3 1, GPU5 2), GPUs 4-7 mirroring 0-3. GPUs 0-1, 2-3, 4-5, 6-7 share a PLX
// PCIe switch; 0-3 hang off socket 0 (CPUs 0-19,40-59), 4-7 off socket 1.
constexpr int kDgx1Links[8][8] = {
    {0, 1, 1, 2, 2, 0, 0, 0}, {1, 0, 2, 1, 0, 2, 0, 0}, {1, 2, 0, 2, 0, 0, 1, 0},
    {2, 1, 2, 0, 0, 0, 0, 1}, {2, 0, 0, 0, 0, 1, 1, 2}, {0, 2, 0, 0, 1, 0, 2, 1},
    {0, 0, 1, 0, 1, 2, 0, 2}, {0, 0, 0, 1, 2, 1, 2, 0},
};

int PcieBySocket(size_t a, size_t b, size_t per_socket, int same_switch, int same_socket) {
  if (a / per_socket != b / per_socket) return kSystem;
  return a / 2 == b / 2 ? same_switch : same_socket;
}

struct Machine {
  std::string_view name;
  size_t gpus;
  std::function<SimTopology()> make;
};

const std::vector<Machine>& Machines() {
  static const std::vector<Machine>* machines = new std::vector<Machine>{
      {"dgx1-v100", 8,
       [] {
         return Build(
             "dgx1-v100", 8, {0, 0, 0, 0, 1, 1, 1, 1},
             {"0-19,40-59", "0-19,40-59", "0-19,40-59", "0-19,40-59", "20-39,60-79", "20-39,60-79",
              "20-39,60-79", "20-39,60-79"},
             [](size_t a, size_t b) {
               return SimPair{kDgx1Links[a][b], 0, PcieBySocket(a, b, 4, kSingle, kHostBridge)};
             });
       }},
      // DGX A100 (NVIDIA/nccl#1505, `nvidia-smi topo -m`): every pair NV12 through six
      // NVSwitches; AMD Rome in NPS4, so GPU pairs sit on NUMA nodes 3, 1, 7, 5.
      {"hgx-a100-8", 8,
       [] {
         return Build("hgx-a100-8", 8, {3, 3, 1, 1, 7, 7, 5, 5},
                      {"48-63,176-191", "48-63,176-191", "16-31,144-159", "16-31,144-159",
                       "112-127,240-255", "112-127,240-255", "80-95,208-223", "80-95,208-223"},
                      [](size_t a, size_t b) {
                        return SimPair{0, 12, a / 2 == b / 2 ? kMultiple : kSystem};
                      });
       }},
      // DGX H100 (`nvidia-smi topo -m` as published for it): every pair NV18 through four
      // NVSwitches; GPUs 0-3 on NUMA node 0 (CPUs 0-51), 4-7 on node 1 (52-103).
      {"hgx-h100-8", 8,
       [] {
         return Build("hgx-h100-8", 8, {0, 0, 0, 0, 1, 1, 1, 1},
                      {"0-51", "0-51", "0-51", "0-51", "52-103", "52-103", "52-103", "52-103"},
                      [](size_t a, size_t b) {
                        return SimPair{0, 18, PcieBySocket(a, b, 4, kNode, kNode)};
                      });
       }},
      // A two-socket 8-GPU PCIe server: per socket two PCIe switches of two GPUs, each switch's
      // GPUs joined by an NVLink bridge (A100 PCIe: three bridges, 12 links).
      {"pcie-8gpu-nvlink-pairs", 8,
       [] {
         return Build(
             "pcie-8gpu-nvlink-pairs", 8, {0, 0, 0, 0, 1, 1, 1, 1},
             {"0-31,64-95", "0-31,64-95", "0-31,64-95", "0-31,64-95", "32-63,96-127",
              "32-63,96-127", "32-63,96-127", "32-63,96-127"},
             [](size_t a, size_t b) {
               return SimPair{a / 2 == b / 2 ? 12 : 0, 0, PcieBySocket(a, b, 4, kSingle, kNode)};
             });
       }},
      // One socket, two PCIe switches of two GPUs on different root ports.
      {"pcie-4gpu", 4,
       [] {
         return Build("pcie-4gpu", 4, {0, 0, 0, 0}, {"0-31", "0-31", "0-31", "0-31"},
                      [](size_t a, size_t b) {
                        return SimPair{0, 0, a / 2 == b / 2 ? kSingle : kHostBridge};
                      });
       }},
      // A workstation: two GPUs on the CPU's root ports.
      {"pcie-2gpu", 2,
       [] {
         return Build("pcie-2gpu", 2, {0, 0}, {"0-63", "0-63"}, [](size_t, size_t) {
           return SimPair{0, 0, kHostBridge};
         });
       }},
  };
  return *machines;
}

// nvmlGpuTopologyLevel_t <-> the PCIe tiers (-1: "?", NOT_SUPPORTED).
constexpr std::pair<int, topo::LinkTier> kLevels[] = {
    {kBoard, topo::LinkTier::kBoard},
    {kSingle, topo::LinkTier::kSwitch},
    {kMultiple, topo::LinkTier::kMultiSwitch},
    {kHostBridge, topo::LinkTier::kHostBridge},
    {kNode, topo::LinkTier::kNode},
    {kSystem, topo::LinkTier::kSystem},
    {-1, topo::LinkTier::kUnknown},
};

std::string Token(const SimPair& p) {
  if (p.nvswitch > 0) return topo::FormatLink({topo::LinkTier::kNvSwitch, p.nvswitch});
  if (p.nvlinks > 0) return topo::FormatLink({topo::LinkTier::kNvLink, p.nvlinks});
  for (const auto& [level, tier] : kLevels) {
    if (level == p.pcie_level) return topo::FormatLink({tier, 0});
  }
  return "?";
}

// The PCIe level an NVLink cell implies (the matrix shows only the NVLink): one NUMA node or not.
int NvLinkPcieLevel(const std::vector<int>& numa, size_t a, size_t b) {
  return numa[a] >= 0 && numa[a] == numa[b] ? kNode : kSystem;
}

}  // namespace

topo::NodeTopology AsDiscovered(const SimTopology& t) {
  topo::NodeTopology out;
  const size_t n = t.pairs.size();
  if (n == 0) return out;
  out.numa_node = t.numa;
  out.numa_node.resize(n, topo::kNumaUnknown);
  out.cpu_affinity = t.cpus;
  out.cpu_affinity.resize(n);
  out.links.assign(n, std::vector<topo::GpuLink>(n));
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      const std::string ab = Token(t.pairs[a][b]);
      if (ab != Token(t.pairs[b][a])) {
        out.unknown.push_back(StrCat("GPUs ", a, " and ", b, " disagree (", ab, " vs ",
                                     Token(t.pairs[b][a]), ")"));
        continue;
      }
      absl::StatusOr<topo::GpuLink> link = topo::ParseLink(ab);
      if (link.ok()) out.links[a][b] = out.links[b][a] = *link;
    }
  }
  return out;
}

int SimTopology::SwitchLinks(int gpu) const {
  if (gpu < 0 || static_cast<size_t>(gpu) >= pairs.size()) return 0;
  int most = 0;
  for (const SimPair& p : pairs[gpu]) most = std::max(most, p.nvswitch);
  return most;
}

const std::vector<std::string>& SimMachineNames() {
  static const std::vector<std::string>* names = [] {
    auto* out = new std::vector<std::string>;
    for (const Machine& m : Machines()) out->push_back(std::string(m.name));
    return out;
  }();
  return *names;
}

absl::StatusOr<SimTopology> SimMachineTopology(std::string_view machine, size_t gpu_count) {
  for (const Machine& m : Machines()) {
    if (m.name != machine) continue;
    if (m.gpus != gpu_count) {
      return absl::InvalidArgumentError(
          StrCat("machine ", machine, " has ", m.gpus, " GPUs; the file lists ", gpu_count));
    }
    return m.make();
  }
  return absl::InvalidArgumentError(
      StrCat("unknown machine '", machine, "' (known: ", StrJoin(SimMachineNames(), ", "), ")"));
}

absl::StatusOr<SimTopology> ParseSimTopology(const YAML::Node& node, size_t gpu_count) {
  constexpr std::string_view kWhere = "topology";
  if (!node.IsMap()) return Bad(kWhere, "expected a mapping (machine:, or numa: and matrix:)");
  for (const auto& kv : node) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    if (key != "machine" && key != "numa" && key != "cpus" && key != "matrix") {
      return Bad(kWhere, StrCat("unknown key '", key, "' (allowed: machine, numa, cpus, matrix)"));
    }
  }
  SimTopology t;
  if (const YAML::Node m = node["machine"]) {
    if (!m.IsScalar()) return Bad(kWhere, "'machine' must be a name");
    absl::StatusOr<SimTopology> preset = SimMachineTopology(m.Scalar(), gpu_count);
    if (!preset.ok()) return Bad(kWhere, ToStd(preset.status().message()));
    t = *std::move(preset);
  } else {
    t.numa.assign(gpu_count, -1);
    t.cpus.assign(gpu_count, "");
  }
  if (const YAML::Node numa = node["numa"]) {
    if (!numa.IsSequence() || numa.size() != gpu_count) {
      return Bad(kWhere, StrCat("'numa' must list one NUMA node per GPU (", gpu_count, ")"));
    }
    for (size_t i = 0; i < gpu_count; ++i) {
      int value = 0;
      try {
        value = numa[i].as<int>();
      } catch (const YAML::Exception&) {
        return Bad(kWhere, StrCat("numa[", i, "] is not a number"));
      }
      if (value < -1 || value > topo::kMaxNumaNode) {
        return Bad(kWhere,
                   StrCat("numa[", i, "] is ", value, "; -1 (none) to ", topo::kMaxNumaNode));
      }
      t.numa[i] = value;
    }
  }
  if (const YAML::Node cpus = node["cpus"]) {
    if (!cpus.IsSequence() || cpus.size() != gpu_count) {
      return Bad(kWhere, StrCat("'cpus' must list one CPU list per GPU (", gpu_count, ")"));
    }
    for (size_t i = 0; i < gpu_count; ++i) {
      const std::string list = cpus[i].IsScalar() ? cpus[i].Scalar() : "?";
      if (!list.empty() && !topo::ValidateCpuList(list).ok()) {
        return Bad(kWhere, StrCat("cpus[", i, "]: ", ToStd(topo::ValidateCpuList(list).message())));
      }
      t.cpus[i] = list;
    }
  }
  if (const YAML::Node matrix = node["matrix"]) {
    if (!matrix.IsSequence() || matrix.size() != gpu_count) {
      return Bad(kWhere, StrCat("'matrix' must have one row per GPU (", gpu_count, ")"));
    }
    t.machine.clear();
    t.pairs.assign(gpu_count, std::vector<SimPair>(gpu_count));
    for (size_t a = 0; a < gpu_count; ++a) {
      const std::string row = matrix[a].IsScalar() ? matrix[a].Scalar() : "";
      const std::vector<std::string_view> cells = StrSplit(row, ' ', /*skip_empty=*/true);
      if (cells.size() != gpu_count) {
        return Bad(kWhere, StrCat("matrix[", a, "] has ", cells.size(), " cells, expected ",
                                  gpu_count, " (e.g. \"X NV2 SYS\")"));
      }
      for (size_t b = 0; b < gpu_count; ++b) {
        const std::string where = StrCat("matrix[", a, "][", b, "]");
        if (a == b) {
          if (cells[b] != "X") return Bad(kWhere, StrCat(where, " must be X"));
          continue;
        }
        absl::StatusOr<topo::GpuLink> link = topo::ParseLink(cells[b]);
        if (!link.ok()) return Bad(kWhere, StrCat(where, ": ", link.status().message()));
        SimPair& p = t.pairs[a][b];
        if (link->tier == topo::LinkTier::kNvLink) {
          p = {link->nvlinks, 0, NvLinkPcieLevel(t.numa, a, b)};
        } else if (link->tier == topo::LinkTier::kNvSwitch) {
          p = {0, link->nvlinks, NvLinkPcieLevel(t.numa, a, b)};
        } else if (link->tier == topo::LinkTier::kUnknown && cells[b] != "?") {
          return Bad(kWhere, StrCat(where, ": unknown link ", cells[b]));
        } else {
          for (const auto& [level, tier] : kLevels) {
            if (tier == link->tier) p.pcie_level = level;
          }
        }
      }
    }
  }
  if (!t.configured()) {
    return Bad(kWhere,
               StrCat("needs 'machine' (", StrJoin(SimMachineNames(), ", "), ") or 'matrix'"));
  }
  return t;
}

void EmitSimTopology(YAML::Emitter& out, const SimTopology& t) {
  out << YAML::BeginMap;
  if (!t.machine.empty()) {
    // The machine with its `numa`/`cpus` overrides, as it was read (a matrix would re-derive
    // the PCIe level of NVLink pairs and change them).
    absl::StatusOr<SimTopology> preset = SimMachineTopology(t.machine, t.pairs.size());
    if (preset.ok() && preset->pairs == t.pairs) {
      out << YAML::Key << "machine" << YAML::Value << t.machine;
      if (preset->numa != t.numa) out << YAML::Key << "numa" << YAML::Value << YAML::Flow << t.numa;
      if (preset->cpus != t.cpus) out << YAML::Key << "cpus" << YAML::Value << YAML::Flow << t.cpus;
      out << YAML::EndMap;
      return;
    }
  }
  out << YAML::Key << "numa" << YAML::Value << YAML::Flow << t.numa;
  if (std::any_of(t.cpus.begin(), t.cpus.end(), [](const std::string& c) { return !c.empty(); })) {
    out << YAML::Key << "cpus" << YAML::Value << YAML::Flow << t.cpus;
  }
  out << YAML::Key << "matrix" << YAML::Value << YAML::BeginSeq;
  for (size_t a = 0; a < t.pairs.size(); ++a) {
    std::vector<std::string> cells;
    for (size_t b = 0; b < t.pairs.size(); ++b)
      cells.push_back(a == b ? "X" : Token(t.pairs[a][b]));
    out << StrJoin(cells, " ");
  }
  out << YAML::EndSeq << YAML::EndMap;
}

// ---- NVML operations (declared in sim_state.h) -------------------------------------------------

namespace {

bool Valid(const SimState& state, int gpu) {
  return gpu >= 0 && static_cast<size_t>(gpu) < state.gpus.size();
}

}  // namespace

int GetNumaNode(SimState& state, int gpu, int* node) {
  if (!Valid(state, gpu)) return kNvmlErrorInvalidArgument;
  if (int rc = CheckFault(state, "NumaNode"); rc != kNvmlSuccess) return rc;
  if (!state.topology.configured()) return kNvmlErrorNotSupported;
  *node = state.topology.numa[gpu];
  return kNvmlSuccess;
}

int GetCpuAffinity(SimState& state, int gpu, std::string* cpus) {
  if (!Valid(state, gpu)) return kNvmlErrorInvalidArgument;
  if (int rc = CheckFault(state, "CpuAffinity"); rc != kNvmlSuccess) return rc;
  if (!state.topology.configured() || state.topology.cpus[gpu].empty()) {
    return kNvmlErrorNotSupported;
  }
  *cpus = state.topology.cpus[gpu];
  return kNvmlSuccess;
}

std::vector<SimNvLink> NvLinksOf(const SimState& state, int gpu) {
  std::vector<SimNvLink> links;
  const SimTopology& t = state.topology;
  if (!Valid(state, gpu) || !t.configured()) return links;
  for (size_t b = 0; b < t.pairs.size(); ++b) {
    if (static_cast<int>(b) == gpu) continue;
    for (int k = 0; k < t.pairs[gpu][b].nvlinks; ++k) {
      links.push_back(SimNvLink{state.gpus[b].pci_bus_id, false});
    }
  }
  for (int k = 0; k < t.SwitchLinks(gpu); ++k) {
    links.push_back(SimNvLink{std::string(kSimNvSwitchBusId), true});
  }
  return links;
}

int GetNvLinks(SimState& state, int gpu, std::vector<SimNvLink>* links) {
  if (!Valid(state, gpu)) return kNvmlErrorInvalidArgument;
  if (int rc = CheckFault(state, "NvLinks"); rc != kNvmlSuccess) return rc;
  if (!state.topology.configured()) return kNvmlErrorNotSupported;
  *links = NvLinksOf(state, gpu);
  return kNvmlSuccess;
}

int GetNvLinkP2P(SimState& state, int gpu_a, int gpu_b, bool* ok) {
  if (!Valid(state, gpu_a) || !Valid(state, gpu_b)) return kNvmlErrorInvalidArgument;
  if (int rc = CheckFault(state, "P2PStatus"); rc != kNvmlSuccess) return rc;
  if (!state.topology.configured()) return kNvmlErrorNotSupported;
  const SimPair& p = state.topology.pairs[gpu_a][gpu_b];
  *ok = gpu_a != gpu_b && (p.nvlinks > 0 || p.nvswitch > 0);
  return kNvmlSuccess;
}

int GetCommonAncestor(SimState& state, int gpu_a, int gpu_b, int* level) {
  if (!Valid(state, gpu_a) || !Valid(state, gpu_b)) return kNvmlErrorInvalidArgument;
  if (int rc = CheckFault(state, "CommonAncestor"); rc != kNvmlSuccess) return rc;
  if (!state.topology.configured()) return kNvmlErrorNotSupported;
  if (gpu_a == gpu_b) {
    *level = kBoard;
    return kNvmlSuccess;
  }
  const int l = state.topology.pairs[gpu_a][gpu_b].pcie_level;
  if (l < 0) return kNvmlErrorNotSupported;
  *level = l;
  return kNvmlSuccess;
}

}  // namespace prism::nvml::sim
