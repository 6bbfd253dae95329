#include "nvml/topology.h"

#include <algorithm>
#include <string>

#include "base/strings.h"

namespace prism::nvml {
namespace {

// Collects the reasons, bounded.
class Unknowns {
 public:
  void Add(std::string line) {
    if (line.size() > kMaxTopologyUnknownLineBytes) {
      line.resize(kMaxTopologyUnknownLineBytes - 3);
      // Cut at a UTF-8 character boundary: the line is published as JSON text.
      while (!line.empty() && (static_cast<unsigned char>(line.back()) & 0xC0) == 0x80) {
        line.pop_back();
      }
      if (!line.empty() && (static_cast<unsigned char>(line.back()) & 0x80) != 0) line.pop_back();
      line += "...";
    }
    if (lines_.size() + 1 < kMaxTopologyUnknownLines) {
      lines_.push_back(std::move(line));
    } else {
      ++left_out_;
    }
  }
  std::vector<std::string> Take() {
    if (left_out_ > 0) lines_.push_back(StrCat("... and ", left_out_, " more"));
    return std::move(lines_);
  }

 private:
  std::vector<std::string> lines_;
  int left_out_ = 0;
};

topo::LinkTier TierOf(PcieLevel level) {
  switch (level) {
    case PcieLevel::kInternal:
      return topo::LinkTier::kBoard;
    case PcieLevel::kSingle:
      return topo::LinkTier::kSwitch;
    case PcieLevel::kMultiple:
      return topo::LinkTier::kMultiSwitch;
    case PcieLevel::kHostBridge:
      return topo::LinkTier::kHostBridge;
    case PcieLevel::kNode:
      return topo::LinkTier::kNode;
    case PcieLevel::kSystem:
      return topo::LinkTier::kSystem;
  }
  return topo::LinkTier::kUnknown;
}

// What one GPU's NVLinks reach: links per peer GPU, links to NVSwitches.
struct NvLinkEnds {
  bool known = false;
  std::vector<int> to_gpu;  // By GPU position.
  int to_switch = 0;
};

}  // namespace

topo::NodeTopology DiscoverTopology(Nvml& nvml, const std::vector<GpuInfo>& gpus) {
  const size_t n = gpus.size();
  topo::NodeTopology t;
  Unknowns unknown;
  bool any_known = false;
  t.numa_node.assign(n, topo::kNumaUnknown);
  t.cpu_affinity.assign(n, "");
  for (size_t i = 0; i < n; ++i) {
    const int gpu = gpus[i].index;
    absl::StatusOr<int> numa = nvml.NumaNode(gpu);
    if (!numa.ok()) {
      unknown.Add(StrCat("GPU ", gpu, " NUMA node: ", numa.status().message()));
    } else if (*numa < 0 || *numa > topo::kMaxNumaNode) {
      unknown.Add(StrCat("GPU ", gpu, " NUMA node: the machine reports ", *numa));
    } else {
      t.numa_node[i] = *numa;
      any_known = true;
    }
    absl::StatusOr<std::string> cpus = nvml.CpuAffinity(gpu);
    if (!cpus.ok()) {
      unknown.Add(StrCat("GPU ", gpu, " CPU affinity: ", cpus.status().message()));
    } else if (cpus->empty() || !topo::ValidateCpuList(*cpus).ok()) {
      unknown.Add(StrCat("GPU ", gpu, " CPU affinity: the driver reports ", QuoteBounded(*cpus)));
    } else {
      t.cpu_affinity[i] = *cpus;
      any_known = true;
    }
  }

  std::vector<NvLinkEnds> ends(n);
  for (size_t i = 0; i < n; ++i) {
    absl::StatusOr<std::vector<NvLinkRemote>> links = nvml.ActiveNvLinks(gpus[i].index);
    if (!links.ok()) {
      unknown.Add(StrCat("GPU ", gpus[i].index, " NVLinks: ", links.status().message()));
      continue;
    }
    ends[i].known = true;
    ends[i].to_gpu.assign(n, 0);
    for (const NvLinkRemote& r : *links) {
      if (r.peer == NvLinkPeer::kSwitch) {
        ++ends[i].to_switch;
        continue;
      }
      bool to_gpu = false;
      for (size_t j = 0; j < n; ++j) {
        if (j != i && EqualsIgnoreAsciiCase(r.pci_bus_id, gpus[j].pci_bus_id)) {
          ++ends[i].to_gpu[j];
          to_gpu = true;
        }
      }
      // A remote of unknown type that is none of the node's GPUs is taken for an NVSwitch the
      // driver does not show (as NCCL does, NVIDIA/nccl#1182): it only counts for a pair whose
      // P2P over NVLink works. Anything else (an NPU, a GPU NVML does not list) links no pair.
      if (!to_gpu && r.peer == NvLinkPeer::kUnknown) ++ends[i].to_switch;
    }
  }

  t.links.assign(n, std::vector<topo::GpuLink>(n));
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      const std::string pair = StrCat("GPUs ", gpus[a].index, "-", gpus[b].index);
      topo::GpuLink link;
      // NVLink first: when NVML cannot say whether two GPUs have one, any PCIe tier could
      // understate the pair, so the pair stays unknown.
      bool nvlink_known = false;
      if (ends[a].known && ends[b].known) {
        const int ab = ends[a].to_gpu[b];
        const int ba = ends[b].to_gpu[a];
        if (ab != ba) {
          unknown.Add(
              StrCat(pair, ": NVLink counts disagree (", ab, " one way, ", ba, " the other)"));
        } else if (ab > 0) {
          link = {topo::LinkTier::kNvLink, std::min(ab, topo::kMaxNvLinks)};
          nvlink_known = true;
        } else if (ends[a].to_switch > 0 && ends[b].to_switch > 0) {
          absl::StatusOr<bool> ab_p2p = nvml.NvLinkP2P(gpus[a].index, gpus[b].index);
          absl::StatusOr<bool> ba_p2p = nvml.NvLinkP2P(gpus[b].index, gpus[a].index);
          if (!ab_p2p.ok() || !ba_p2p.ok()) {
            unknown.Add(StrCat(pair, ": NVSwitch P2P status: ",
                               (!ab_p2p.ok() ? ab_p2p : ba_p2p).status().message()));
          } else if (*ab_p2p != *ba_p2p) {
            unknown.Add(StrCat(pair, ": NVSwitch P2P status disagrees between directions"));
          } else {
            nvlink_known = true;
            if (*ab_p2p) {
              link = {topo::LinkTier::kNvSwitch,
                      std::min({ends[a].to_switch, ends[b].to_switch, topo::kMaxNvLinks})};
            }
          }
        } else {
          nvlink_known = true;  // No NVLink between them: the PCIe path decides.
        }
      }
      if (nvlink_known && !link.nvlink()) {
        absl::StatusOr<PcieLevel> ab = nvml.PcieCommonAncestor(gpus[a].index, gpus[b].index);
        absl::StatusOr<PcieLevel> ba = nvml.PcieCommonAncestor(gpus[b].index, gpus[a].index);
        if (!ab.ok() || !ba.ok()) {
          unknown.Add(StrCat(pair, ": PCIe path: ", (!ab.ok() ? ab : ba).status().message()));
        } else if (*ab != *ba) {
          unknown.Add(StrCat(pair, ": PCIe path disagrees between directions (",
                             static_cast<int>(*ab), " vs ", static_cast<int>(*ba), ")"));
        } else {
          link = {TierOf(*ab), 0};
        }
      }
      if (link.tier != topo::LinkTier::kUnknown) any_known = true;
      t.links[a][b] = link;
      t.links[b][a] = link;
    }
  }
  if (!any_known) return topo::NodeTopology{};
  t.unknown = unknown.Take();
  return t;
}

std::string PciBusIdSysfsForm(std::string_view nvml_bus_id) {
  const size_t colon = nvml_bus_id.find(':');
  if (colon == std::string_view::npos) return "";
  std::string_view domain = nvml_bus_id.substr(0, colon);
  while (domain.size() > 4 && domain[0] == '0') domain.remove_prefix(1);
  std::string out = AsciiLower(StrCat(domain, nvml_bus_id.substr(colon)));
  // dddd:bb:dd.f, as upstream's deviceattribute package checks it (bdfRegexp in pci.go).
  static constexpr std::string_view kShape = "xxxx:xx:xx.x";
  if (out.size() != kShape.size()) return "";
  for (size_t i = 0; i < out.size(); ++i) {
    const char c = out[i];
    const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    if (kShape[i] == 'x' ? !hex : c != kShape[i]) return "";
  }
  return out;
}

}  // namespace prism::nvml
