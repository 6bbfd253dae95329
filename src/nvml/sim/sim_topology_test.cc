#include "nvml/sim/sim_topology.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "nvml/sim/sim_state.h"

namespace prism::nvml::sim {
namespace {

using ::testing::HasSubstr;

std::string Gpus(int n) {
  std::string out = "gpus:\n";
  for (int i = 0; i < n; ++i) out += "  - {model: V100-SXM2-32GB, memory_mib: 32768}\n";
  return out;
}

TEST(SimTopologyTest, EveryMachineIsSymmetricAndRoundTrips) {
  for (const std::string& name : SimMachineNames()) {
    SCOPED_TRACE(name);
    size_t gpus = 0;
    for (size_t n : {2u, 4u, 8u}) {
      if (SimMachineTopology(name, n).ok()) gpus = n;
    }
    ASSERT_GT(gpus, 0u);
    auto state =
        ParseSimState(Gpus(static_cast<int>(gpus)) + "topology: {machine: " + name + "}\n");
    ASSERT_TRUE(state.ok()) << state.status();
    const SimTopology& t = state->topology;
    ASSERT_TRUE(t.configured());
    EXPECT_EQ(t.machine, name);
    for (size_t a = 0; a < gpus; ++a) {
      EXPECT_GE(t.numa[a], 0);
      EXPECT_FALSE(t.cpus[a].empty());
      for (size_t b = 0; b < gpus; ++b) EXPECT_EQ(t.pairs[a][b], t.pairs[b][a]) << a << "," << b;
    }
    const std::string text = SerializeSimState(*state);
    EXPECT_THAT(text, HasSubstr("machine: " + name));
    auto again = ParseSimState(text);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->topology, t);
  }
}

// NVIDIA/nccl#671 (a DGX-1V's NCCL topology dump) and the cube-mesh's six links per V100.
TEST(SimTopologyTest, Dgx1IsTheHybridCubeMesh) {
  auto t = SimMachineTopology("dgx1-v100", 8);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->pairs[0][1].nvlinks, 1);
  EXPECT_EQ(t->pairs[0][2].nvlinks, 1);
  EXPECT_EQ(t->pairs[0][3].nvlinks, 2);
  EXPECT_EQ(t->pairs[0][4].nvlinks, 2);
  EXPECT_EQ(t->pairs[1][5].nvlinks, 2);
  EXPECT_EQ(t->pairs[0][5].nvlinks, 0);
  for (int a = 0; a < 8; ++a) {
    int links = 0;
    for (int b = 0; b < 8; ++b) links += t->pairs[a][b].nvlinks;
    EXPECT_EQ(links, 6) << "GPU " << a;
  }
  EXPECT_EQ(t->pairs[0][1].pcie_level, 10);  // One PLX switch.
  EXPECT_EQ(t->pairs[0][5].pcie_level, 50);  // Across sockets.
  EXPECT_EQ(t->cpus[0], "0-19,40-59");
}

TEST(SimTopologyTest, AMatrixSpellsTheWiringOutAndMayDisagreeWithItself) {
  auto state = ParseSimState(Gpus(3) +
                             "topology:\n"
                             "  numa: [0, 0, -1]\n"
                             "  cpus: ['0-7', '', '8-15']\n"
                             "  matrix:\n"
                             "    - X NV2 SYS\n"
                             "    - NV1 X ?\n"
                             "    - SYS PIX X\n");
  ASSERT_TRUE(state.ok()) << state.status();
  const SimTopology& t = state->topology;
  EXPECT_EQ(t.machine, "");
  EXPECT_EQ(t.pairs[0][1].nvlinks, 2);
  EXPECT_EQ(t.pairs[1][0].nvlinks, 1);  // A driver's bad data, kept.
  EXPECT_EQ(t.pairs[0][1].pcie_level, 40);
  EXPECT_EQ(t.pairs[1][2].pcie_level, -1);
  EXPECT_EQ(t.pairs[2][1].pcie_level, 10);
  EXPECT_EQ(t.numa[2], -1);
  auto again = ParseSimState(SerializeSimState(*state));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->topology, t);
  // A machine with overrides is written back as the machine and the overrides; a changed wiring
  // is spelled out.
  auto changed =
      ParseSimState(Gpus(8) + "topology: {machine: dgx1-v100, numa: [0, 0, 0, 0, 1, 1, 1, -1]}\n");
  ASSERT_TRUE(changed.ok()) << changed.status();
  std::string text = SerializeSimState(*changed);
  EXPECT_THAT(text, HasSubstr("machine: dgx1-v100"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("matrix")));
  EXPECT_EQ(ParseSimState(text)->topology, changed->topology);
  changed->topology.pairs[0][1].nvlinks = 3;
  text = SerializeSimState(*changed);
  EXPECT_THAT(text, HasSubstr("matrix"));
  EXPECT_EQ(ParseSimState(text)->topology.pairs[0][1].nvlinks, 3);
}

TEST(SimTopologyTest, MistakesAreNamed) {
  struct Case {
    std::string yaml;
    std::string error;
  } cases[] = {
      {Gpus(2) + "topology: {machine: dgx1-v100}\n", "dgx1-v100 has 8 GPUs"},
      {Gpus(2) + "topology: {machine: dgx-9}\n", "unknown machine 'dgx-9'"},
      {Gpus(2) + "topology: {numa: [0, 0]}\n", "needs 'machine'"},
      {Gpus(2) + "topology: {matrix: ['X NV2']}\n", "one row per GPU"},
      {Gpus(2) + "topology: {matrix: ['X NV2', 'NV2']}\n", "matrix[1] has 1 cells"},
      {Gpus(2) + "topology: {matrix: ['NV2 X', 'NV2 X']}\n", "matrix[0][0] must be X"},
      {Gpus(2) + "topology: {matrix: ['X NV99', 'NV2 X']}\n", "matrix[0][1]"},
      {Gpus(2) + "topology: {matrix: ['X FOO', 'FOO X']}\n", "unknown link FOO"},
      {Gpus(2) + "topology: {machine: pcie-2gpu, numa: [0, 5000]}\n", "numa[1] is 5000"},
      {Gpus(2) + "topology: {machine: pcie-2gpu, cpus: ['0-3', '9-1']}\n", "cpus[1]"},
      {Gpus(2) + "topology: {machine: pcie-2gpu, links: 3}\n", "unknown key 'links'"},
  };
  for (const Case& c : cases) {
    auto state = ParseSimState(c.yaml);
    ASSERT_FALSE(state.ok()) << c.yaml;
    EXPECT_THAT(std::string(state.status().message()), HasSubstr(c.error)) << c.yaml;
  }
}

TEST(SimTopologyTest, CallsAnswerFromTheWiringOrNotSupported) {
  auto bare = ParseSimState(Gpus(2));
  ASSERT_TRUE(bare.ok());
  int node = 0;
  EXPECT_EQ(GetNumaNode(*bare, 0, &node), 3);  // NOT_SUPPORTED without a topology.
  auto hgx = ParseSimState(Gpus(8) + "topology: {machine: hgx-h100-8}\n");
  ASSERT_TRUE(hgx.ok());
  std::vector<SimNvLink> links;
  ASSERT_EQ(GetNvLinks(*hgx, 3, &links), 0);
  ASSERT_EQ(links.size(), 18u);
  EXPECT_TRUE(links[0].to_switch);
  bool ok = false;
  ASSERT_EQ(GetNvLinkP2P(*hgx, 0, 7, &ok), 0);
  EXPECT_TRUE(ok);
  int level = 0;
  ASSERT_EQ(GetCommonAncestor(*hgx, 0, 7, &level), 0);
  EXPECT_EQ(level, 50);
}

}  // namespace
}  // namespace prism::nvml::sim
