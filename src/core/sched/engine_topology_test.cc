// The engine on nodes whose GPU wiring is known (docs/topology.md, "Placement"): a multi-GPU
// container gets well-connected GPUs without losing packing, a pod that prefers interconnect
// picks the node that gives it, and a required tier or numa-bind refuses what misses it.
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "core/sched/engine.h"
#include "core/sched/test_util.h"
#include "core/topo/test_topologies.h"

namespace prism::sched {
namespace {

using namespace ::prism::sched::testing;  // NOLINT: test builders.
using ::prism::topo::testing::Dgx1;
using ::prism::topo::testing::HgxH100;
using ::prism::topo::testing::Pcie8;

NodeSpec EightGpus(const std::string& name, topo::NodeTopology topology) {
  NodeSpec n = Node(name, 96, 1024, 8, Gpu("V100-SXM2-32GB", GpuMode::kHamiCore, 32768));
  for (size_t g = 0; g < n.gpus.size(); ++g) n.gpus[g].uuid = name + "-gpu" + std::to_string(g);
  n.topology = std::move(topology);
  return n;
}

std::set<int> GpusOf(const Decision& d) {
  std::set<int> out;
  for (const ContainerAssignment& c : d.containers) {
    for (const DeviceAssignment& dev : c.devices) out.insert(dev.gpu_index);
  }
  return out;
}

// Whole GPUs: all of their memory and compute.
PodRequest Whole(const std::string& name, int gpus) { return GpuPod(name, gpus, 32768, 100); }

TEST(EngineTopologyTest, FourGpusOnADgx1TakeAnNvLinkQuad) {
  Engine engine = MakeEngine({EightGpus("dgx", Dgx1())}, DeviceConfig{});
  // Take GPU 1 first (a one-GPU pod): the next 4-GPU pod cannot have quad 0-3 whole.
  PodRequest one = Whole("one", 1);
  one.use_uuids = {"dgx-gpu1"};
  ScheduleResult r1 = engine.Place(one);
  ASSERT_TRUE(r1.scheduled) << r1.Summary();
  ScheduleResult r4 = engine.Place(Whole("four", 4));
  ASSERT_TRUE(r4.scheduled) << r4.Summary();
  EXPECT_EQ(GpusOf(r4.decision), (std::set<int>{4, 5, 6, 7}));
}

TEST(EngineTopologyTest, WithoutTopologyTheChoiceIsTheEnginesAsBefore) {
  Engine engine = MakeEngine({EightGpus("plain", {})}, DeviceConfig{});
  PodRequest one = Whole("one", 1);
  one.use_uuids = {"plain-gpu1"};
  ASSERT_TRUE(engine.Place(one).scheduled);
  ScheduleResult r4 = engine.Place(Whole("four", 4));
  ASSERT_TRUE(r4.scheduled) << r4.Summary();
  EXPECT_EQ(GpusOf(r4.decision), (std::set<int>{0, 2, 3, 4}));
}

TEST(EngineTopologyTest, OneGpuPodsLeaveTheIntactQuadAlone) {
  Engine engine = MakeEngine({EightGpus("dgx", Dgx1())}, DeviceConfig{});
  // Quad 4-7 has three GPUs taken; a one-GPU pod then takes its last GPU, not one of 0-3.
  for (const char* uuid : {"dgx-gpu4", "dgx-gpu5", "dgx-gpu6"}) {
    PodRequest p = Whole(uuid, 1);
    p.use_uuids = {uuid};
    ASSERT_TRUE(engine.Place(p).scheduled);
  }
  ScheduleResult r = engine.Place(Whole("next", 1));
  ASSERT_TRUE(r.scheduled) << r.Summary();
  EXPECT_EQ(GpusOf(r.decision), (std::set<int>{7}));
}

TEST(EngineTopologyTest, APodThatPrefersInterconnectPicksTheNodeThatGivesIt) {
  // "a-pcie" sorts first and ties otherwise: packing alone puts the pod there.
  const std::vector<NodeSpec> nodes = {EightGpus("a-pcie", Pcie8()), EightGpus("b-dgx", Dgx1())};
  EngineOptions blind;
  blind.policy.topology_weight = 0;
  Engine plain = MakeEngine(nodes, DeviceConfig{}, blind);
  ScheduleResult r = plain.Place(Whole("train", 4));
  ASSERT_TRUE(r.scheduled) << r.Summary();
  EXPECT_EQ(r.decision.node_name, "a-pcie");
  // Within the PCIe node it still takes one socket's four GPUs.
  EXPECT_EQ(GpusOf(r.decision), (std::set<int>{0, 1, 2, 3}));

  Engine engine = MakeEngine(nodes, DeviceConfig{});
  PodRequest train = Whole("train", 4);
  train.topology.preferred = true;
  r = engine.Place(train);
  ASSERT_TRUE(r.scheduled) << r.Summary();
  EXPECT_EQ(r.decision.node_name, "b-dgx");
  EXPECT_EQ(GpusOf(r.decision), (std::set<int>{0, 1, 2, 3}));
}

// The default node term (PolicyOptions::topology_weight): among nodes that pack alike the
// better-wired wins, without the pod asking; it never outweighs a clearly better packing, and a
// pod taking a whole node gains nothing from it.
TEST(EngineTopologyTest, MultiGpuPodsPreferTheBetterWiredOfNodesThatPackAlike) {
  const std::vector<NodeSpec> nodes = {EightGpus("a-pcie", Pcie8()), EightGpus("b-dgx", Dgx1())};
  Engine engine = MakeEngine(nodes, DeviceConfig{});
  ScheduleResult r = engine.Place(Whole("train", 4));
  ASSERT_TRUE(r.scheduled) << r.Summary();
  EXPECT_EQ(r.decision.node_name, "b-dgx");  // An NVLink quad (grade 7) over a PCIe one (3).
  EXPECT_EQ(GpusOf(r.decision), (std::set<int>{0, 1, 2, 3}));
  // A pair now: the DGX's other socket has NVLink pairs, the PCIe node bridged pairs (NV12,
  // grade 7 too) on an empty node: the engine's packing keeps it on the DGX.
  r = engine.Place(Whole("pair", 2));
  ASSERT_TRUE(r.scheduled) << r.Summary();
  EXPECT_EQ(r.decision.node_name, "b-dgx");

  // Packing first: an empty DGX does not draw a 4-GPU pod from a PCIe node it would fill, when
  // the workload to come (8-GPU pods) makes the difference in fragmentation.
  Engine packed = MakeEngine(nodes, DeviceConfig{});
  packed.SetTargetWorkload(TargetWorkload::FromPods({Whole("typical", 8)}));
  for (const char* uuid : {"a-pcie-gpu0", "a-pcie-gpu1", "a-pcie-gpu2", "a-pcie-gpu3"}) {
    PodRequest p = Whole(uuid, 1);
    p.use_uuids = {uuid};
    ASSERT_TRUE(packed.Place(p).scheduled);
  }
  r = packed.Place(Whole("fill", 4));
  ASSERT_TRUE(r.scheduled) << r.Summary();
  EXPECT_EQ(r.decision.node_name, "a-pcie");
  EXPECT_EQ(GpusOf(r.decision), (std::set<int>{4, 5, 6, 7}));

  // A pod taking all eight GPUs: no term (the machine type is not a set choice), unless asked.
  const std::vector<NodeSpec> two = {EightGpus("a-pcie", Pcie8()), EightGpus("b-hgx", HgxH100())};
  Engine whole = MakeEngine(two, DeviceConfig{});
  r = whole.Place(Whole("eight", 8));
  ASSERT_TRUE(r.scheduled) << r.Summary();
  EXPECT_EQ(r.decision.node_name, "a-pcie");
  EngineOptions with_whole;
  with_whole.policy.topology_whole_node = true;
  Engine whole_too = MakeEngine(two, DeviceConfig{}, with_whole);
  r = whole_too.Place(Whole("eight", 8));
  ASSERT_TRUE(r.scheduled) << r.Summary();
  EXPECT_EQ(r.decision.node_name, "b-hgx");
}

// PolicyOptions::topology_whole_weight: below 1 / 7 the whole-node term only breaks ties of the
// quantized fragmentation. A rare typical pod of 120 cores fits only the 128-core NVSwitch node,
// so taking the PCIe node frees that pod's share of fragmentation (one step): the tie-break
// leaves the NVSwitch node to it, the full term takes it anyway; with no such pod they tie.
TEST(EngineTopologyTest, AWholeNodeTieBreakLeavesTheOnlyNodeALargerPodFits) {
  NodeSpec hgx = EightGpus("b-hgx", HgxH100());
  hgx.cpu_milli = 128000;
  const std::vector<NodeSpec> two = {EightGpus("a-pcie", Pcie8()), hgx};
  PodRequest big = Whole("big", 8);
  big.containers[0].cpu_milli = 120000;
  std::vector<PodRequest> typical(149, Whole("typical", 8));
  typical.push_back(big);
  auto place = [&](double weight, bool with_big) {
    EngineOptions o;
    o.policy.topology_whole_node = true;
    o.policy.topology_whole_weight = weight;
    Engine engine = MakeEngine(two, DeviceConfig{}, o);
    engine.SetTargetWorkload(TargetWorkload::FromPods(
        with_big ? typical : std::vector<PodRequest>(150, Whole("typical", 8)), /*coverage=*/1));
    ScheduleResult r = engine.Place(Whole("eight", 8));
    EXPECT_TRUE(r.scheduled) << r.Summary();
    return r.decision.node_name;
  };
  EXPECT_EQ(place(1.0, true), "b-hgx");
  EXPECT_EQ(place(0.1, true), "a-pcie");
  EXPECT_EQ(place(0.1, false), "b-hgx");
}

// PolicyOptions::topology_harm: a one-GPU pod, of nodes that score alike (no workload to come:
// no fragmentation difference), goes where it breaks no idle NVLink pair.
TEST(EngineTopologyTest, OneGpuPodsGoWhereTheyBreakNoIdleNvLinkPair) {
  const std::vector<NodeSpec> nodes = {EightGpus("a-idle", Dgx1()), EightGpus("b-busy", Dgx1())};
  auto fill = [](Engine& engine) {
    for (int g = 0; g < 7; ++g) {  // b-busy keeps GPU 7 free; its NVLink peers are all busy.
      const std::string uuid = "b-busy-gpu" + std::to_string(g);
      PodRequest p = Whole(uuid, 1);
      p.use_uuids = {uuid};
      ASSERT_TRUE(engine.Place(p).scheduled);
    }
  };
  Engine engine = MakeEngine(nodes, DeviceConfig{});
  fill(engine);
  ScheduleResult r = engine.Place(Whole("one", 1));
  ASSERT_TRUE(r.scheduled) << r.Summary();
  EXPECT_EQ(r.decision.node_name, "b-busy");  // Any GPU of a-idle breaks an NVLink pair.
  EXPECT_EQ(GpusOf(r.decision), (std::set<int>{7}));

  EngineOptions no_harm;
  no_harm.policy.topology_harm = 0;
  Engine plain = MakeEngine(nodes, DeviceConfig{}, no_harm);
  fill(plain);
  r = plain.Place(Whole("one", 1));
  ASSERT_TRUE(r.scheduled) << r.Summary();
  EXPECT_EQ(r.decision.node_name, "a-idle");  // The tie goes to the first name.
}

TEST(EngineTopologyTest, ARequiredTierRefusesNodesThatCannotGiveIt) {
  Engine engine = MakeEngine({EightGpus("a-pcie", Pcie8()), EightGpus("b-blind", {})},
                             DeviceConfig{});
  PodRequest pod = Whole("train", 2);
  pod.topology.required = topo::Tier::kNvLink;
  ScheduleResult r = engine.Schedule(pod, /*explain=*/true);
  EXPECT_FALSE(r.scheduled);
  ASSERT_EQ(r.failures.size(), 2u);
  for (const auto& [node, failure] : r.failures) EXPECT_EQ(failure.ToString(), "8/8 TopologyNotFit");
  // A PCIe-switch pair is there.
  pod.topology.required = topo::Tier::kSwitch;
  r = engine.Place(pod);
  ASSERT_TRUE(r.scheduled) << r.Summary();
  EXPECT_EQ(r.decision.node_name, "a-pcie");
  EXPECT_EQ(GpusOf(r.decision), (std::set<int>{0, 1}));
}

TEST(EngineTopologyTest, NumaBindKeepsAContainerOnOneNumaNode) {
  Engine engine = MakeEngine({EightGpus("hgx", HgxH100())}, DeviceConfig{});
  for (const char* uuid : {"hgx-gpu0", "hgx-gpu1", "hgx-gpu2", "hgx-gpu4", "hgx-gpu5"}) {
    PodRequest p = Whole(uuid, 1);
    p.use_uuids = {uuid};
    ASSERT_TRUE(engine.Place(p).scheduled);
  }
  // Free: 3 (NUMA 0), 6 and 7 (NUMA 1). Three GPUs are free, but not on one NUMA node.
  PodRequest three = Whole("three", 3);
  three.topology.numa_bind = true;
  ScheduleResult r = engine.Schedule(three, /*explain=*/true);
  EXPECT_FALSE(r.scheduled);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].second.ToString(), "5/8 CardInsufficientMemory, 3/8 NumaNotFit");
  PodRequest bound = Whole("bound", 2);
  bound.topology.numa_bind = true;
  r = engine.Place(bound);
  ASSERT_TRUE(r.scheduled) << r.Summary();
  EXPECT_EQ(GpusOf(r.decision), (std::set<int>{6, 7}));
}

// A DRA claim's matchAttribute on resource.kubernetes.io/numaNode (GpuRequest::numa_match): as
// numa-bind, but per container and with the NUMA node known even for one GPU, because upstream's
// constraint refuses a device without the attribute.
TEST(EngineTopologyTest, NumaMatchNeedsAKnownNumaNodeEvenForOneGpu) {
  topo::NodeTopology partly = HgxH100();
  partly.numa_node[0] = topo::kNumaUnknown;
  Engine engine = MakeEngine({EightGpus("blind", {}), EightGpus("hgx", partly)}, DeviceConfig{});
  PodRequest one = Whole("one", 1);
  one.containers[0].gpu.numa_match = true;
  ScheduleResult r = engine.Schedule(one, /*explain=*/true);
  ASSERT_TRUE(r.scheduled) << r.Summary();
  EXPECT_EQ(r.decision.node_name, "hgx");  // "blind" sorts first but its NUMA nodes are unknown.
  EXPECT_NE(GpusOf(r.decision).count(0), 1u) << "GPU 0's NUMA node is unknown";
  // Without the constraint the pod may go anywhere, the blind node first.
  r = engine.Schedule(Whole("free", 1), /*explain=*/false);
  ASSERT_TRUE(r.scheduled);
  EXPECT_EQ(r.decision.node_name, "blind");
  // Four on one NUMA node: HGX's NUMA 1 (GPUs 4-7) has them, NUMA 0 lost GPU 0 to "unknown".
  PodRequest four = Whole("four", 4);
  four.containers[0].gpu.numa_match = true;
  r = engine.Place(four);
  ASSERT_TRUE(r.scheduled) << r.Summary();
  EXPECT_EQ(GpusOf(r.decision), (std::set<int>{4, 5, 6, 7}));
  // Now no four GPUs of one known NUMA node are free anywhere; the reason says NUMA.
  four.name = "four-more";
  r = engine.Schedule(four, /*explain=*/true);
  EXPECT_FALSE(r.scheduled);
  for (const auto& [node, failure] : r.failures) {
    EXPECT_NE(failure.ToString().find("NumaNotFit"), std::string::npos) << failure.ToString();
  }
  // The shape differs from the same pod without the constraint.
  EXPECT_NE(four.ShapeKey(), Whole("four", 4).ShapeKey());
}

TEST(EngineTopologyTest, AMultiInstanceContainerStaysOnWellConnectedGpus) {
  // Eight H100s in MIG placement mode, wired as a DGX-1. Free: 1, 4 and 5; GPU 1 is NVLinked to
  // 5 (NV2) but not to 4 (SYS), which an index-ordered choice would take.
  NodeSpec node = Node("mig", 96, 1024, 8, Gpu("H100-SXM5-80GB", GpuMode::kMig));
  for (size_t g = 0; g < node.gpus.size(); ++g) node.gpus[g].uuid = "mig-gpu" + std::to_string(g);
  for (int g : {0, 2, 3, 6, 7}) node.gpus[g].instances.push_back({"7g.80gb", 0, true});
  node.topology = Dgx1();
  Engine engine = MakeEngine({node}, DeviceConfig{});
  // Four 3g.40gb: two GPUs' worth. The first two land on one GPU; the other two on the GPU best
  // linked to it.
  PodRequest pod = GpuPod("four", 4, 40000, 0, kModeMig);
  ScheduleResult r = engine.Place(pod);
  ASSERT_TRUE(r.scheduled) << r.Summary();
  const std::set<int> gpus = GpusOf(r.decision);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus, (std::set<int>{1, 5}));
}

TEST(EngineTopologyTest, NodesWiredDifferentlyAreNotTwins) {
  auto state = ClusterState::Build(
      {EightGpus("a", Dgx1()), EightGpus("b", Dgx1()), EightGpus("c", Pcie8()),
       EightGpus("d", {})},
      DeviceConfig{});
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_TRUE(state->SameNodeState(state->FindNode("a"), state->FindNode("b")));
  EXPECT_FALSE(state->SameNodeState(state->FindNode("a"), state->FindNode("c")));
  EXPECT_FALSE(state->SameNodeState(state->FindNode("a"), state->FindNode("d")));
  EXPECT_EQ(state->topology(state->FindNode("a")), state->topology(state->FindNode("b")));
  EXPECT_EQ(state->topology(state->FindNode("d")), nullptr);
}

TEST(EngineTopologyTest, ATopologyOfTheWrongSizeIsAnErrorNamingTheNode) {
  NodeSpec n = EightGpus("short", Dgx1());
  n.gpus.pop_back();
  auto state = ClusterState::Build({n}, DeviceConfig{});
  ASSERT_FALSE(state.ok());
  EXPECT_NE(state.status().message().find("short"), std::string_view::npos) << state.status();
}

}  // namespace
}  // namespace prism::sched
