// Topology discovery through both NVML front ends: SimNvml, and the production DlNvml over the
// fake libnvidia-ml.so.1 (the real dlopen path: symbols, enums, link walking, sysfs fallback).
#include "nvml/topology.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "nvml/dl_nvml.h"
#include "nvml/sim/sim_topology.h"
#include "nvml/sim_nvml.h"

namespace prism::nvml {
namespace {

using ::testing::HasSubstr;
using topo::GpuLink;
using topo::LinkTier;
namespace fs = std::filesystem;

std::string BinaryDir() {
  const char* dir = std::getenv("PRISM_BINARY_DIR");
  return dir != nullptr ? dir : PRISM_TEST_BINARY_DIR;
}

std::string Gpus(int n) {
  std::string out = "gpus:\n";
  for (int i = 0; i < n; ++i) out += "  - {model: A100-SXM4-40GB}\n";
  return out;
}

enum class Backend { kSim, kDlFake };

class TopologyDiscoveryTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "prism-topo-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
    state_path_ = dir_ + "/gpus.yaml";
    ::setenv("PRISM_FAKE_NVML_STATE", state_path_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("PRISM_FAKE_NVML_STATE");
    fs::remove_all(dir_);
  }

  // Opens the backend over `yaml`; `library` picks a fake driver variant.
  void Open(const std::string& yaml, const std::string& library = "fake-nvml") {
    std::ofstream(state_path_) << yaml;
    nvml_.reset();  // Its nvmlShutdown must come before the next nvmlInit.
    if (GetParam() == Backend::kSim) {
      nvml_ = std::make_unique<SimNvml>(state_path_);
      return;
    }
    auto dl = DlNvml::Open(BinaryDir() + "/" + library + "/libnvidia-ml.so.1");
    ASSERT_TRUE(dl.ok()) << dl.status();
    // No sysfs: the NUMA node comes from nvmlDeviceGetNumaNodeId (the fake bus IDs could name
    // real devices of the machine running the test).
    (*dl)->set_sysfs_root_for_test(dir_ + "/no-sysfs");
    nvml_ = std::move(*dl);
  }

  topo::NodeTopology Discover() {
    auto gpus = nvml_->ListGpus();
    EXPECT_TRUE(gpus.ok()) << gpus.status();
    return DiscoverTopology(*nvml_, gpus.ok() ? *gpus : std::vector<GpuInfo>{});
  }

  std::string dir_;
  std::string state_path_;
  std::unique_ptr<Nvml> nvml_;
};

TEST_P(TopologyDiscoveryTest, Dgx1V100) {
  Open(Gpus(8) + "topology: {machine: dgx1-v100}\n");
  const topo::NodeTopology t = Discover();
  EXPECT_EQ(t.numa_node, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(t.cpu_affinity[0], "0-19,40-59");
  EXPECT_EQ(t.cpu_affinity[7], "20-39,60-79");
  EXPECT_EQ(t.Link(0, 1), (GpuLink{LinkTier::kNvLink, 1}));
  EXPECT_EQ(t.Link(0, 3), (GpuLink{LinkTier::kNvLink, 2}));
  EXPECT_EQ(t.Link(4, 0), (GpuLink{LinkTier::kNvLink, 2}));
  EXPECT_EQ(t.Link(0, 5), (GpuLink{LinkTier::kSystem, 0}));
  EXPECT_TRUE(t.unknown.empty()) << t.unknown.front();
}

TEST_P(TopologyDiscoveryTest, HgxNvSwitch) {
  Open(Gpus(8) + "topology: {machine: hgx-h100-8}\n");
  const topo::NodeTopology t = Discover();
  for (int a = 0; a < 8; ++a) {
    for (int b = 0; b < 8; ++b) {
      if (a == b) continue;
      EXPECT_EQ(t.Link(a, b), (GpuLink{LinkTier::kNvSwitch, 18})) << a << "-" << b;
    }
  }
  EXPECT_EQ(t.NumaNode(5), 1);
  EXPECT_TRUE(t.unknown.empty());
}

TEST_P(TopologyDiscoveryTest, PcieServerWithBridgePairs) {
  Open(Gpus(8) + "topology: {machine: pcie-8gpu-nvlink-pairs}\n");
  const topo::NodeTopology t = Discover();
  EXPECT_EQ(t.Link(0, 1), (GpuLink{LinkTier::kNvLink, 12}));
  EXPECT_EQ(t.Link(0, 2), (GpuLink{LinkTier::kNode, 0}));
  EXPECT_EQ(t.Link(3, 4), (GpuLink{LinkTier::kSystem, 0}));
  Open(Gpus(4) + "topology: {machine: pcie-4gpu}\n");
  const topo::NodeTopology four = Discover();
  EXPECT_EQ(four.Link(0, 1), (GpuLink{LinkTier::kSwitch, 0}));
  EXPECT_EQ(four.Link(1, 2), (GpuLink{LinkTier::kHostBridge, 0}));
}

// sim::AsDiscovered (what `prism plan` models a machine with) is what discovery reads from it.
TEST_P(TopologyDiscoveryTest, AsDiscoveredAgreesWithDiscoveryOnEveryMachine) {
  for (const std::string& machine : sim::SimMachineNames()) {
    for (int gpus : {2, 4, 8}) {
      absl::StatusOr<sim::SimTopology> wiring = sim::SimMachineTopology(machine, gpus);
      if (!wiring.ok()) continue;  // The machine has another GPU count.
      Open(Gpus(gpus) + "topology: {machine: " + machine + "}\n");
      topo::NodeTopology discovered = Discover();
      discovered.unknown.clear();
      EXPECT_EQ(sim::AsDiscovered(*wiring), discovered) << machine;
    }
  }
}

// A backend or driver that says nothing gives no topology (and the inventory stays as before).
TEST_P(TopologyDiscoveryTest, NoTopologyIsEmpty) {
  Open(Gpus(2));
  EXPECT_TRUE(Discover().empty());
}

// Bad data never fails the node: a pair whose directions disagree, a NUMA node of -1, a CPU list
// the driver does not give and a pair it cannot place are unknown, each with its reason.
TEST_P(TopologyDiscoveryTest, BadDataIsUnknownWithAReason) {
  Open(Gpus(3) +
       "topology:\n"
       "  numa: [0, -1, 1]\n"
       "  cpus: ['0-7', '', '8-15']\n"
       "  matrix:\n"
       "    - X NV2 SYS\n"
       "    - NV1 X ?\n"
       "    - SYS PXB X\n");
  const topo::NodeTopology t = Discover();
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(t.numa_node, (std::vector<int>{0, -1, 1}));
  EXPECT_EQ(t.cpu_affinity, (std::vector<std::string>{"0-7", "", "8-15"}));
  EXPECT_EQ(t.Link(0, 1).tier, LinkTier::kUnknown);
  EXPECT_EQ(t.Link(1, 2).tier, LinkTier::kUnknown);
  EXPECT_EQ(t.Link(0, 2), (GpuLink{LinkTier::kSystem, 0}));
  const std::string all = ::testing::PrintToString(t.unknown);
  EXPECT_THAT(all, HasSubstr("GPU 1 NUMA node"));
  EXPECT_THAT(all, HasSubstr("GPU 1 CPU affinity"));
  EXPECT_THAT(all, HasSubstr("GPUs 0-1: NVLink counts disagree (2 one way, 1 the other)"));
  EXPECT_THAT(all, HasSubstr("GPUs 1-2: PCIe path"));
}

// NOT_SUPPORTED and FUNCTION_NOT_FOUND (an old driver) from single calls.
TEST_P(TopologyDiscoveryTest, UnsupportedCallsLeaveTheRestKnown) {
  Open(Gpus(4) +
       "topology: {machine: pcie-4gpu}\n"
       "faults:\n"
       "  - {call: NumaNode, error: NOT_SUPPORTED, count: 1}\n"
       "  - {call: NvLinks, skip: 3, error: FUNCTION_NOT_FOUND, count: 1}\n"
       "  - {call: CommonAncestor, error: NOT_SUPPORTED, count: 1}\n");
  const topo::NodeTopology t = Discover();
  EXPECT_EQ(t.NumaNode(0), topo::kNumaUnknown);
  EXPECT_EQ(t.NumaNode(1), 0);
  // GPU 3's NVLinks are unknown: every pair with it is.
  EXPECT_EQ(t.Link(0, 3).tier, LinkTier::kUnknown);
  EXPECT_EQ(t.Link(2, 3).tier, LinkTier::kUnknown);
  // The first PCIe query (0-1) failed.
  EXPECT_EQ(t.Link(0, 1).tier, LinkTier::kUnknown);
  EXPECT_EQ(t.Link(0, 2), (GpuLink{LinkTier::kHostBridge, 0}));
  const std::string all = ::testing::PrintToString(t.unknown);
  EXPECT_THAT(all, HasSubstr("GPU 3 NVLinks"));
  EXPECT_THAT(all, HasSubstr("FUNCTION_NOT_FOUND"));
}

INSTANTIATE_TEST_SUITE_P(Backends, TopologyDiscoveryTest,
                         ::testing::Values(Backend::kSim, Backend::kDlFake),
                         [](const ::testing::TestParamInfo<Backend>& p) {
                           return p.param == Backend::kSim ? "Sim" : "DlFake";
                         });

class DlTopologyTest : public TopologyDiscoveryTest {};

// A driver without the topology entry points (symbols missing): the node is fine, topology empty.
TEST_P(DlTopologyTest, ADriverWithoutTheCallsGivesNoTopology) {
  Open(Gpus(2) + "topology: {machine: pcie-2gpu}\n", "fake-nvml-notopo");
  EXPECT_TRUE(Discover().empty());
  auto numa = nvml_->NumaNode(0);
  EXPECT_EQ(numa.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(numa.status().message()), HasSubstr("nvmlDeviceGetNumaNodeId"));
}

// The PCI device's sysfs numa_node comes first (the CPUs' node the kubelet aligns with); -1
// there and no NVML answer is "none".
TEST_P(DlTopologyTest, SysfsNumaNodeComesFirst) {
  Open(Gpus(2) + "topology: {machine: pcie-2gpu}\n");
  auto* dl = static_cast<DlNvml*>(nvml_.get());
  const std::string root = dir_ + "/sys";
  fs::create_directories(root + "/bus/pci/devices/0000:07:00.0");
  fs::create_directories(root + "/bus/pci/devices/0000:0f:00.0");
  std::ofstream(root + "/bus/pci/devices/0000:07:00.0/numa_node") << "1\n";
  std::ofstream(root + "/bus/pci/devices/0000:0f:00.0/numa_node") << "garbage\n";
  dl->set_sysfs_root_for_test(root);
  EXPECT_EQ(*nvml_->NumaNode(0), 1);
  EXPECT_EQ(*nvml_->NumaNode(1), 0);  // Unreadable sysfs: NVML's answer.
  Open(Gpus(2) + "topology: {machine: pcie-2gpu}\n", "fake-nvml-notopo");
  dl = static_cast<DlNvml*>(nvml_.get());
  std::ofstream(root + "/bus/pci/devices/0000:07:00.0/numa_node") << "-1\n";
  dl->set_sysfs_root_for_test(root);
  EXPECT_EQ(*nvml_->NumaNode(0), -1);
  EXPECT_FALSE(nvml_->NumaNode(1).ok());
}

// A driver that does not say what is at the end of a link (no nvmlDeviceGetNvLinkRemoteDeviceType,
// or a VM): a remote that is none of the node's GPUs is taken for an NVSwitch, and counts only
// where P2P over NVLink works.
class UntypedLinksNvml : public SimNvml {
 public:
  using SimNvml::SimNvml;
  absl::StatusOr<std::vector<NvLinkRemote>> ActiveNvLinks(int gpu) override {
    absl::StatusOr<std::vector<NvLinkRemote>> links = SimNvml::ActiveNvLinks(gpu);
    if (links.ok()) {
      for (NvLinkRemote& r : *links) r.peer = NvLinkPeer::kUnknown;
    }
    return links;
  }
  absl::StatusOr<bool> NvLinkP2P(int gpu_a, int gpu_b) override {
    if (!p2p_) return false;
    return SimNvml::NvLinkP2P(gpu_a, gpu_b);
  }
  bool p2p_ = true;
};

TEST(TopologyDiscoveryRulesTest, UntypedRemotesThatAreNoGpuAreInvisibleSwitches) {
  const std::string dir = (fs::temp_directory_path() / "prism-topo-untyped").string();
  fs::create_directories(dir);
  std::ofstream(dir + "/gpus.yaml") << Gpus(8) << "topology: {machine: hgx-a100-8}\n";
  UntypedLinksNvml nvml(dir + "/gpus.yaml");
  auto gpus = nvml.ListGpus();
  ASSERT_TRUE(gpus.ok());
  topo::NodeTopology t = DiscoverTopology(nvml, *gpus);
  EXPECT_EQ(t.Link(0, 7), (GpuLink{LinkTier::kNvSwitch, 12}));
  nvml.p2p_ = false;  // A Fabric Manager partition: no NVLink between them after all.
  t = DiscoverTopology(nvml, *gpus);
  EXPECT_EQ(t.Link(0, 7), (GpuLink{LinkTier::kSystem, 0}));
  EXPECT_EQ(t.Link(0, 1), (GpuLink{LinkTier::kMultiSwitch, 0}));
  // Direct links of unknown type still name their GPU.
  std::ofstream(dir + "/gpus.yaml") << Gpus(8) << "topology: {machine: dgx1-v100}\n";
  t = DiscoverTopology(nvml, *gpus);
  EXPECT_EQ(t.Link(0, 3), (GpuLink{LinkTier::kNvLink, 2}));
  fs::remove_all(dir);
}

// Reasons are bounded: lines cut at a character boundary, at most kMaxTopologyUnknownLines.
class VerboseNvml : public SimNvml {
 public:
  using SimNvml::SimNvml;
  absl::StatusOr<int> NumaNode(int) override {
    std::string message;
    for (int i = 0; i < 400; ++i) message += "\xc3\xa9";  // "é" x 400: 800 bytes.
    return absl::UnimplementedError(message);
  }
};

TEST(TopologyDiscoveryRulesTest, ReasonsAreBounded) {
  const std::string dir = (fs::temp_directory_path() / "prism-topo-verbose").string();
  fs::create_directories(dir);
  std::ofstream(dir + "/gpus.yaml") << Gpus(8)
                                    << "topology: {machine: dgx1-v100, cpus: ['', '', '', '', "
                                       "'', '', '', '']}\n";
  VerboseNvml nvml(dir + "/gpus.yaml");
  auto gpus = nvml.ListGpus();
  ASSERT_TRUE(gpus.ok());
  const topo::NodeTopology t = DiscoverTopology(nvml, *gpus);
  ASSERT_EQ(t.unknown.size(), kMaxTopologyUnknownLines);
  EXPECT_EQ(t.unknown.back(), "... and 1 more");  // 8 NUMA + 8 CPU lines.
  for (const std::string& line : t.unknown) EXPECT_LE(line.size(), kMaxTopologyUnknownLineBytes);
  const std::string& cut = t.unknown.front();
  EXPECT_EQ(cut.substr(cut.size() - 3), "...");
  EXPECT_NE(static_cast<unsigned char>(cut[cut.size() - 4]), 0xc3);  // No half character.
  EXPECT_EQ(t.Link(0, 3), (GpuLink{LinkTier::kNvLink, 2}));          // The rest is still known.
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Dl, DlTopologyTest, ::testing::Values(Backend::kDlFake),
                         [](const auto&) { return "DlFake"; });

}  // namespace
}  // namespace prism::nvml
