#include "sim/wiring.h"

#include <deque>

#include "gtest/gtest.h"

#include "sim/policy.h"
#include "sim/simulator.h"
#include "sim/test_util.h"
#include "sim/topology_report.h"

namespace prism::sim {
namespace {

using testing::Pod;

// Nodes of the given models and GPU counts.
Cluster ModelCluster(const std::vector<std::pair<std::string, int>>& nodes) {
  std::vector<TraceNode> trace;
  for (size_t i = 0; i < nodes.size(); ++i) {
    trace.push_back(TraceNode{"node-" + std::to_string(i), 64000, 262144, nodes[i].second,
                              nodes[i].first});
  }
  auto c = Cluster::FromTrace(trace);
  EXPECT_TRUE(c.ok()) << c.status();
  return *std::move(c);
}

// Places each pod on the next scripted node and GPUs.
class ScriptedPolicy : public Policy {
 public:
  explicit ScriptedPolicy(std::deque<Placement> script) : script_(std::move(script)) {}
  std::string_view name() const override { return "scripted"; }
  std::optional<Placement> Place(const ClusterState&, const PodRequest&) override {
    if (script_.empty()) return std::nullopt;
    Placement p = script_.front();
    script_.pop_front();
    return p;
  }

 private:
  std::deque<Placement> script_;
};

Workload Pods(const Cluster& cluster, std::vector<PodRequest> pods) {
  Workload w;
  w.trace_pods = pods;
  w.pods = std::move(pods);
  for (int i = 0; i < cluster.node_count(); ++i) w.node_rank.push_back(i);
  return w;
}

TEST(WiringTest, MachinesByModelAndGpuCount) {
  EXPECT_EQ(MachineFor("V100M16", 8), "dgx1-v100");
  EXPECT_EQ(MachineFor("V100M32", 8), "dgx1-v100");
  EXPECT_EQ(MachineFor("G2", 8), "pcie-8gpu-nvlink-pairs");
  EXPECT_EQ(MachineFor("G3", 8), "hgx-a100-8");
  EXPECT_EQ(MachineFor("T4", 4), "pcie-4gpu");
  EXPECT_EQ(MachineFor("P100", 2), "pcie-2gpu");
  EXPECT_EQ(MachineFor("A10", 1), "");
  Cluster c = ModelCluster({{"V100M16", 8}, {"T4", 4}, {"A10", 1}, {"G2", 8}, {"V100M32", 8}});
  EXPECT_FALSE(c.wired());
  auto wired = WireCluster(&c);
  ASSERT_TRUE(wired.ok()) << wired.status();
  EXPECT_EQ(*wired, 4);
  ASSERT_NE(c.topology(0), nullptr);
  EXPECT_EQ(c.topology(2), nullptr);
  EXPECT_EQ(c.topology(0), c.topology(4));  // One copy per machine.
  EXPECT_EQ(topo::FormatLink(c.topology(0)->Link(0, 3)), "NV2");
  EXPECT_EQ(topo::FormatLink(c.topology(1)->Link(0, 1)), "PIX");
  EXPECT_EQ(topo::FormatLink(c.topology(1)->Link(0, 2)), "PHB");
}

TEST(WiringTest, TopologyOfTheWrongSizeIsRefused) {
  Cluster c = ModelCluster({{"T4", 4}, {"T4", 2}});
  auto dgx = WireCluster(&c);
  ASSERT_TRUE(dgx.ok());
  const topo::NodeTopology four = *c.topology(0);
  EXPECT_FALSE(c.SetNodeTopology(1, four).ok());
}

TEST(WiringTest, BestOfferIsTheBestSetAmongFittingGpus) {
  Cluster c = ModelCluster({{"T4", 4}});
  ASSERT_TRUE(WireCluster(&c).ok());
  const topo::NodeTopology& t = *c.topology(0);
  EXPECT_EQ(BestOffer(t, {0, 1, 2, 3}, 2).best, topo::Tier::kSwitch);  // A PIX pair.
  EXPECT_EQ(BestOffer(t, {0, 2, 3}, 2).best, topo::Tier::kSwitch);     // 2-3.
  EXPECT_EQ(BestOffer(t, {0, 2}, 2).best, topo::Tier::kNuma);          // Only PHB left.
  EXPECT_TRUE(BestOffer(t, {0, 2}, 2).one_numa);
}

// The metric end to end on a tiny wired cluster: a 4-GPU PCIe box and a DGX-1.
TEST(WiringTest, SimulatorJudgesEachMultiGpuPodAgainstWhatItsNodeOffered) {
  Cluster c = ModelCluster({{"T4", 4}, {"V100M16", 8}});
  ASSERT_TRUE(WireCluster(&c).ok());
  std::vector<PodRequest> pods = {
      Pod("one", 1, 1000),        // GPU 1 of the PCIe box.
      Pod("pair-bad", 2, 1000),   // 0+2 (PHB) while 2+3 (PIX) was free: not the best tier.
      Pod("dgx-pair", 2, 1000),   // DGX 0+4: NV2, the best tier, but across sockets though
                                  // an NVLink pair on one socket was free.
      Pod("dgx-quad", 4, 1000),   // DGX 1,2,3,5: every free quad spans the sockets (SYS):
                                  // the best tier left, split unavoidably.
      Pod("dgx-pair2", 2, 1000),  // DGX 6+7: NV2, one socket: best.
      Pod("share", 2, 500),       // Nowhere left with two GPUs: fails, not counted.
  };
  for (PodRequest& p : pods) p.model_mask = ~0ull;
  Workload w = Pods(c, pods);
  ScriptedPolicy policy({Placement{0, {1}, {}}, Placement{0, {0, 2}, {}}, Placement{1, {0, 4}, {}},
                         Placement{1, {1, 2, 3, 5}, {}}, Placement{1, {6, 7}, {}}});
  RunOptions options;
  options.topology_metrics = true;
  auto r = Simulate(c, w, policy, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->placed, 5);
  EXPECT_EQ(r->rejected_placements, 0);
  const TopologyStats& t = r->topology;
  EXPECT_EQ(t.placed[0], 4);
  EXPECT_EQ(t.placed[2], 3);
  EXPECT_EQ(t.placed[4], 1);
  EXPECT_EQ(t.best_tier[2], 2);  // dgx-pair, dgx-pair2.
  EXPECT_EQ(t.best_tier[4], 1);
  EXPECT_EQ(t.numa_split[0], 2);            // dgx-pair, dgx-quad.
  EXPECT_EQ(t.numa_split_avoidable[0], 1);  // dgx-pair: a one-socket pair was free.
  // Against any node: pair-bad had DGX NVLink pairs free (dgx-pair, dgx-pair2 had NVLink).
  EXPECT_EQ(t.best_any[2], 2);
  EXPECT_EQ(t.best_any[4], 1);
  EXPECT_EQ(t.unwired, 0);

  // Without the option nothing is counted.
  ScriptedPolicy again({Placement{0, {1}, {}}, Placement{0, {0, 2}, {}}});
  auto plain = Simulate(c, Pods(c, {pods[0], pods[1]}), again, {});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->topology.placed[0], 0);

  Series s{"tiny", "scripted", {*r}};
  const std::string table = FormatTopologyTable({s}, {100});
  EXPECT_NE(table.find("best-4"), std::string::npos) << table;
  EXPECT_NE(table.find("best-any"), std::string::npos) << table;
  EXPECT_NE(FormatTopologyCsv({s}).find("tiny,scripted,0,2,3,2,1,1,2"), std::string::npos)
      << FormatTopologyCsv({s});
}

// The cross-node measure: a pod on the best pair of a PCIe-only node is on its node's best tier
// but not on the best any node offered while a DGX-1 had an NVLink pair free for it; a DGX the
// pod could not use (its model, its CPU) does not count.
TEST(WiringTest, BestAnyJudgesTheNodeChoiceAgainstEveryFeasibleNode) {
  Cluster c = ModelCluster({{"T4", 4}, {"V100M16", 8}});
  ASSERT_TRUE(WireCluster(&c).ok());
  ClusterState state(&c);
  ClusterOffers offers;
  PodRequest pair = Pod("pair", 2, 1000);
  pair.model_mask = ~0ull;
  EXPECT_EQ(offers.BestTier(state, pair), topo::Tier::kNvLink);
  PodRequest t4_only = pair;
  t4_only.model_mask = c.ModelMask("T4");
  EXPECT_EQ(offers.BestTier(state, t4_only), topo::Tier::kSwitch);  // A PIX pair.
  PodRequest big_cpu = pair;
  big_cpu.milli_cpu = 64001;  // Fits no node.
  EXPECT_EQ(offers.BestTier(state, big_cpu), topo::Tier::kAny);
  PodRequest eight = Pod("eight", 8, 1000);
  eight.model_mask = ~0ull;
  EXPECT_EQ(offers.BestTier(state, eight), topo::Tier::kAny);  // The whole DGX spans sockets.

  // A pod taking most of the DGX's CPU leaves the pair only the PCIe box.
  PodRequest hog = Pod("hog", 0, 0, 63500);
  ASSERT_TRUE(state.Place(hog, Placement{1, {}, {}}).ok());
  EXPECT_EQ(offers.BestTier(state, pair), topo::Tier::kSwitch);

  // End to end. pair: PCIe box 2+3 (PIX, its node's best) while the DGX had NVLink pairs free:
  // best, not best-any. t4_only: PCIe box 0+1: best and best-any (only T4 nodes allowed).
  ScriptedPolicy policy({Placement{0, {2, 3}, {}}, Placement{0, {0, 1}, {}}});
  RunOptions options;
  options.topology_metrics = true;
  auto r = Simulate(c, Pods(c, {pair, t4_only}), policy, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->placed, 2);
  const TopologyStats& t = r->topology;
  EXPECT_EQ(t.placed[2], 2);
  EXPECT_EQ(t.best_tier[2], 2);
  EXPECT_EQ(t.best_any[2], 1);
}

}  // namespace
}  // namespace prism::sim
