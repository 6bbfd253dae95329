// Scoring policies and the extender-facing API (Filter, scores, Decide, ScheduleAmong).
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/sched/engine.h"
#include "core/sched/test_util.h"

namespace prism::sched {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace ::prism::sched::testing;  // NOLINT: test builders.

GpuSpec T4() { return Gpu("T4", GpuMode::kHamiCore, 16000); }

PodRequest WithPolicy(PodRequest p, std::string node_policy, std::string gpu_policy = "") {
  p.node_policy = std::move(node_policy);
  p.gpu_policy = std::move(gpu_policy);
  return p;
}

TEST(NodePolicyTest, BinpackFillsTheUsedNodeSpreadTheEmptyOne) {
  Engine engine = MakeEngine({Node("a", 16, 64, 1, T4()), Node("b", 16, 64, 1, T4())}, {});
  ASSERT_TRUE(engine.Place(WithPolicy(SharePod("first", 200), "binpack")).scheduled);
  EXPECT_EQ(engine.Schedule(WithPolicy(SharePod("x", 200), "binpack")).decision.node_name, "a");
  EXPECT_EQ(engine.Schedule(WithPolicy(SharePod("y", 200), "spread")).decision.node_name, "b");
}

TEST(NodePolicyTest, BinpackCountsCpuAndHostMemory) {
  Engine engine = MakeEngine({Node("a", 16, 64, 1, T4()), Node("b", 16, 64, 1, T4())}, {});
  PodRequest cpu_only;
  cpu_only.name = "cpu";
  ContainerRequest c;
  c.cpu_milli = 12000;
  c.memory_bytes = 32 * kGiB;
  cpu_only.containers.push_back(c);
  // Put the CPU-only pod on b explicitly.
  auto d = engine.Decide(cpu_only, engine.cluster().FindNode("b"));
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(engine.Apply("default/cpu", *d).ok());
  // Same GPU load everywhere; binpack follows the CPU/memory load.
  EXPECT_EQ(engine.Schedule(WithPolicy(SharePod("p", 300), "binpack")).decision.node_name, "b");
  EXPECT_EQ(engine.Schedule(WithPolicy(SharePod("q", 300), "spread")).decision.node_name, "a");
}

TEST(GpuPolicyTest, BinpackSharesAGpuSpreadTakesAnIdleOne) {
  Engine engine = MakeEngine({Node("n", 16, 64, 2, T4())}, {});
  ASSERT_TRUE(engine.Place(SharePod("first", 300)).scheduled);
  const int first_gpu =
      engine.cluster().FindPod("default/first")->decision.containers[0].devices[0].gpu;
  ScheduleResult binpack = engine.Schedule(WithPolicy(SharePod("b", 300), "binpack", "binpack"));
  EXPECT_EQ(binpack.decision.containers[0].devices[0].gpu, first_gpu);
  ScheduleResult spread = engine.Schedule(WithPolicy(SharePod("s", 300), "binpack", "spread"));
  EXPECT_NE(spread.decision.containers[0].devices[0].gpu, first_gpu);
}

TEST(FgdPolicyTest, AvoidsLeavingGpusTooSmallForTheWorkload) {
  // Target workload: half-GPU pods. GPU a has 0.7 free, GPU b 0.6 free; a
  // 0.2 pod on b would leave 0.4 (useless for halves), on a it leaves 0.5.
  Engine engine = MakeEngine({Node("a", 16, 64, 1, T4()), Node("b", 16, 64, 1, T4())}, {});
  auto put = [&engine](const std::string& name, int milli, const char* node) {
    auto d = engine.Decide(SharePod(name, milli), engine.cluster().FindNode(node));
    ASSERT_TRUE(d.ok());
    ASSERT_TRUE(engine.Apply("default/" + name, *d).ok());
  };
  put("a-load", 300, "a");
  put("b-load", 400, "b");
  engine.SetTargetWorkload(TargetWorkload::FromPods({SharePod("typical", 500)}));
  EXPECT_EQ(engine.Schedule(WithPolicy(SharePod("p", 200), "binpack")).decision.node_name, "b");
  EXPECT_EQ(engine.Schedule(WithPolicy(SharePod("p", 200), "fgd")).decision.node_name, "a");
  EXPECT_EQ(engine.Schedule(WithPolicy(SharePod("p", 200), "prism")).decision.node_name, "a");
  EXPECT_NEAR(engine.NodeFragmentation(engine.cluster().FindNode("a")), 0, 1e-9);
}

TEST(FgdPolicyTest, PrismKeepsGpusItsNodesCpuCanServe) {
  // Whole-GPU workload asking 4 CPUs a GPU. Node a has exactly that (16 CPUs, 4 GPUs), b
  // plenty. A 12-CPU pod on a leaves 3 free GPUs and CPU for one: FGD sees a node where the
  // typical pod still finds its CPU (no fragmentation either way, first fit: a); prism counts
  // the 2 GPUs that CPU cannot serve (b).
  const std::vector<NodeSpec> nodes = {Node("a", 16, 64, 4, T4()), Node("b", 64, 64, 4, T4())};
  const TargetWorkload workload = TargetWorkload::FromPods({SharePod("typical", 1000, 4000)});
  Engine engine = MakeEngine(nodes, {});
  engine.SetTargetWorkload(workload);
  const PodRequest cpu_heavy = SharePod("p", 1000, 12000);
  EXPECT_EQ(engine.Schedule(WithPolicy(cpu_heavy, "fgd")).decision.node_name, "a");
  EXPECT_EQ(engine.Schedule(WithPolicy(cpu_heavy, "prism")).decision.node_name, "b");
  // A pod asking the workload's CPU per GPU strands nothing: first fit.
  EXPECT_EQ(engine.Schedule(WithPolicy(SharePod("q", 1000, 4000), "prism")).decision.node_name,
            "a");
  EngineOptions without;
  without.policy.cpu_balance = 0;
  Engine plain = MakeEngine(nodes, {}, without);
  plain.SetTargetWorkload(workload);
  EXPECT_EQ(plain.Schedule(WithPolicy(cpu_heavy, "prism")).decision.node_name, "a");
}

TEST(FgdPolicyTest, PrismLeavesTheTypeRestrictedPodsTheirGpus) {
  // One pod in 50 of the workload may only use T4s (2 GPUs of the 4). FGD's own measure
  // barely sees it (the V100s it cannot use count as fragmented, 0.02 GPU a GPU: within one
  // quantized step, so first fit: a). Once the workload records how many GPUs of each type
  // there are, prism sees the T4s pressed harder than the V100s and a pod that may use any GPU
  // takes a V100 (b).
  GpuSpec v100 = Gpu("V100M32", GpuMode::kHamiCore, 32768);
  const std::vector<NodeSpec> nodes = {Node("a", 64, 64, 2, T4()), Node("b", 64, 64, 2, v100)};
  PodRequest t4_only = SharePod("t4", 1000);
  t4_only.use_types = {"T4"};
  std::vector<PodRequest> sample(49, SharePod("any", 1000));
  sample.push_back(t4_only);
  TargetWorkload workload = TargetWorkload::FromPods(sample, /*coverage=*/1.0);
  ASSERT_EQ(workload.shapes.size(), 2u);
  const PodRequest any = SharePod("p", 1000);
  Engine unrecorded = MakeEngine(nodes, {});
  unrecorded.SetTargetWorkload(workload);
  EXPECT_EQ(unrecorded.Schedule(WithPolicy(any, "prism")).decision.node_name, "a");
  Engine engine = MakeEngine(nodes, {});
  workload.gpus_by_type = engine.cluster().GpusByType();
  ASSERT_EQ(workload.gpus_by_type.size(), 2u);
  engine.SetTargetWorkload(workload);
  EXPECT_EQ(engine.Schedule(WithPolicy(any, "prism")).decision.node_name, "b");
  EXPECT_EQ(engine.Schedule(WithPolicy(any, "fgd")).decision.node_name, "a");
  // The restricted pod has one choice, as before.
  EXPECT_EQ(engine.Schedule(WithPolicy(t4_only, "prism")).decision.node_name, "a");
  EngineOptions without;
  without.policy.type_balance = 0;
  Engine plain = MakeEngine(nodes, {}, without);
  plain.SetTargetWorkload(workload);
  EXPECT_EQ(plain.Schedule(WithPolicy(any, "prism")).decision.node_name, "a");
}

TEST(FgdPolicyTest, PrismLeavesHolesTheWorkloadsSharesFill) {
  // A 650 on a (350 free), a 470 on b (530 free); the workload asks 650, 470, 320 and 230.
  // FGD puts a 230 into a's 350 (a hole fewer shapes can use), leaving 120 that no share
  // fills; the 320 then goes to b and the next 230 finds no room. With the complement term
  // the 230 goes to b (300 left: a 230 fills it), a keeps its 350 for the 320, and all fit.
  const std::vector<NodeSpec> nodes = {Node("a", 16, 64, 1, T4()), Node("b", 16, 64, 1, T4())};
  const TargetWorkload workload = TargetWorkload::FromPods(
      {SharePod("w1", 650), SharePod("w2", 470), SharePod("w3", 320), SharePod("w4", 230)},
      /*coverage=*/1.0);
  auto run = [&](double complement, std::vector<std::string>* where) {
    EngineOptions options;
    options.policy.complement = complement;
    Engine engine = MakeEngine(nodes, {}, options);
    engine.SetTargetWorkload(workload);
    for (const auto& [name, milli, node] : std::vector<std::tuple<std::string, int, std::string>>{
             {"l1", 650, "a"}, {"l2", 470, "b"}}) {
      auto d = engine.Decide(SharePod(name, milli), engine.cluster().FindNode(node));
      ASSERT_TRUE(d.ok());
      ASSERT_TRUE(engine.Apply("default/" + name, *d).ok());
    }
    int i = 0;
    for (int milli : {230, 320, 230}) {
      const ScheduleResult r = engine.Place(SharePod("p" + std::to_string(i++), milli));
      where->push_back(r.scheduled ? r.decision.node_name : "-");
    }
  };
  std::vector<std::string> fgd_like, complement;
  run(0, &fgd_like);
  run(8, &complement);
  EXPECT_THAT(fgd_like, ElementsAre("a", "b", "-"));
  EXPECT_THAT(complement, ElementsAre("b", "a", "b"));
}

TEST(FgdPolicyTest, PrismBreaksFragmentationTiesByFirstFitOrPacking) {
  // Whole-GPU workload, idle nodes: every placement of a whole-GPU pod is
  // fragmentation-neutral. By default prism then takes the first node by
  // name (a); with a packing weight it takes the busier node (c).
  Engine engine = MakeEngine(
      {Node("a", 16, 64, 2, T4()), Node("b", 16, 64, 2, T4()), Node("c", 16, 64, 2, T4())}, {});
  engine.SetTargetWorkload(TargetWorkload::FromPods({SharePod("typical", 1000)}));
  auto d = engine.Decide(SharePod("c-load", 1000), engine.cluster().FindNode("c"));
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(engine.Apply("default/c-load", *d).ok());
  EXPECT_EQ(engine.Schedule(WithPolicy(SharePod("p", 1000), "fgd")).decision.node_name, "a");
  EXPECT_EQ(engine.Schedule(WithPolicy(SharePod("p", 1000), "prism")).decision.node_name, "a");
  PolicyOptions packing;
  packing.pack_weight = 0.01;
  engine.SetPolicy(packing);
  EXPECT_EQ(engine.Schedule(WithPolicy(SharePod("p", 1000), "prism")).decision.node_name, "c");
}

TEST(FgdPolicyTest, PrismResolutionTreatsNearEqualChangesAsEqual) {
  // A 0.2 pod on a (0.7 free -> 0.5, fits the 0.5 workload: no change) or on
  // b (0.6 free -> 0.4: 0.4 GPU stranded). With a resolution coarser than
  // that, both count as equal and the first node wins; finer, a wins anyway. (Without the
  // complement term, which alone sends it to a: 0.5 is what the workload fills.)
  Engine engine = MakeEngine({Node("a", 16, 64, 1, T4()), Node("b", 16, 64, 1, T4())}, {});
  ASSERT_TRUE(engine.Apply("default/a-load", *engine.Decide(SharePod("a-load", 300), 0)).ok());
  ASSERT_TRUE(engine.Apply("default/b-load", *engine.Decide(SharePod("b-load", 400), 1)).ok());
  engine.SetTargetWorkload(TargetWorkload::FromPods({SharePod("typical", 500)}));
  PolicyOptions coarse;
  coarse.frag_resolution = 1.0;
  coarse.pack_weight = 0.01;  // Binpack decides within the bucket: b is fuller.
  coarse.complement = 0;
  engine.SetPolicy(coarse);
  EXPECT_EQ(engine.Schedule(SharePod("p", 200)).decision.node_name, "b");
  PolicyOptions fine;
  fine.frag_resolution = 0.05;
  fine.pack_weight = 0.01;
  fine.complement = 0;
  engine.SetPolicy(fine);
  EXPECT_EQ(engine.Schedule(SharePod("p", 200)).decision.node_name, "a");
}

TEST(FgdPolicyTest, QuantizedScoreIsThePapersSigmoid) {
  Engine engine = MakeEngine({Node("a", 16, 64, 1, T4())}, {});
  engine.SetTargetWorkload(TargetWorkload::FromPods({SharePod("typical", 500)}));
  PolicyOptions policy;
  policy.node = NodePolicy::kFgd;
  policy.fgd_quantize = true;
  engine.SetPolicy(policy);
  ScheduleResult r = engine.Schedule(SharePod("p", 200));
  ASSERT_TRUE(r.scheduled);
  // Free 1.0 -> 0.8: the half-GPU shape still fits, fragmentation stays 0:
  // int(100 * sigmoid(0)) = 50.
  EXPECT_EQ(r.decision.score, 50);
}

// Puts `pod` on node `node` whatever the policies would choose.
void PutOn(Engine& engine, const PodRequest& pod, const std::string& node) {
  auto d = engine.Decide(pod, engine.cluster().FindNode(node));
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(engine.Apply(pod.Key(), *d).ok());
}

TEST(PrismPolicyTest, CpuOnlyPodGoesToTheNodeWhoseGpusAreUsedUp) {
  // b's GPU is taken; a's is free. A CPU-only pod changes no node's
  // fragmentation, so FGD first-fits it onto a (where its CPU could later
  // strand a's GPU); prism puts it on b, where it strands nothing.
  Engine engine = MakeEngine({Node("a", 16, 64, 1, T4()), Node("b", 16, 64, 1, T4())}, {});
  PutOn(engine, SharePod("b-load", 1000), "b");
  engine.SetTargetWorkload(TargetWorkload::FromPods({SharePod("typical", 500)}));
  EXPECT_EQ(engine.Schedule(WithPolicy(CpuPod("c", 2000), "fgd")).decision.node_name, "a");
  EXPECT_EQ(engine.Schedule(CpuPod("c", 2000)).decision.node_name, "b");
  PolicyOptions first_fit;
  first_fit.cpu_pods_on_busy_gpus = false;
  engine.SetPolicy(first_fit);
  EXPECT_EQ(engine.Schedule(CpuPod("c", 2000)).decision.node_name, "a");
}

TEST(PrismPolicyTest, CpuOnlyPodTakesTheTightestCpuAmongNodesWithEqualFreeGpu) {
  // Every GPU is in use; the pod goes where the least CPU is left after it,
  // not to the first node by name; a node without GPUs counts as none free.
  Engine engine = MakeEngine({Node("a", 32, 64, 1, T4()), Node("b", 8, 64, 1, T4()),
                              Node("c", 16, 64, 1, T4()), Node("d", 12, 64, {})},
                             {});
  for (const std::string n : {"a", "b", "c"}) PutOn(engine, SharePod(n + "-load", 1000), n);
  engine.SetTargetWorkload(TargetWorkload::FromPods({SharePod("typical", 500)}));
  // b keeps 3 cores, d 8, c 11, a 27.
  EXPECT_EQ(engine.Schedule(CpuPod("p", 4000)).decision.node_name, "b");
  // Too big for b's 7 free cores: d (no GPU at all) keeps 4.5, c 7.5.
  EXPECT_EQ(engine.Schedule(CpuPod("q", 7500)).decision.node_name, "d");
  EXPECT_EQ(engine.ScheduleAmong(CpuPod("q", 7500), {0, 2}).decision.node_name, "c");
  // Less free GPU beats less CPU left: a node with a free share loses to a
  // node with none, however roomy.
  ASSERT_TRUE(engine.Release("default/c-load").ok());
  PutOn(engine, SharePod("c-half", 500), "c");
  EXPECT_EQ(engine.ScheduleAmong(CpuPod("q", 7500), {0, 2}).decision.node_name, "a");
}

TEST(PrismPolicyTest, SliceTakesTheGpuWithTheLowestExactFragmentationAmongEqualScores) {
  // Typical pods: 94 % ask for 600 milli, 6 % for 630. GPU 0 has 645 free,
  // GPU 1 640. A 30-milli slice leaves 615 or 610, both useless to the 630
  // pods: fragmentation grows by 36.9 or 36.6 milli, the same quantized score
  // (49). FGD takes the first GPU; prism the lower exact growth, GPU 1.
  Engine engine = MakeEngine({Node("n", 16, 64, 2, T4())}, {});
  ASSERT_TRUE(engine.Place(WithPolicy(SharePod("x", 355), "prism", "spread")).scheduled);
  ASSERT_TRUE(engine.Place(WithPolicy(SharePod("y", 360), "prism", "spread")).scheduled);
  ASSERT_EQ(engine.cluster().gpu_usage(1).memory_used_mib, 5760);  // y on GPU 1.
  std::vector<PodRequest> mix(94, SharePod("t", 600));
  for (int i = 0; i < 6; ++i) mix.push_back(SharePod("u", 630));
  engine.SetTargetWorkload(TargetWorkload::FromPods(mix));
  auto gpu_of = [](const ScheduleResult& r) {
    EXPECT_TRUE(r.scheduled);
    return r.scheduled ? r.decision.containers[0].devices[0].gpu : -1;
  };
  const ScheduleResult fgd = engine.Schedule(WithPolicy(SharePod("z", 30), "fgd"));
  const ScheduleResult prism = engine.Schedule(SharePod("z", 30));
  EXPECT_EQ(gpu_of(fgd), 0);
  EXPECT_EQ(gpu_of(prism), 1);
  EXPECT_EQ(fgd.decision.score, 49);
  EXPECT_EQ(prism.decision.score, 49);
  PolicyOptions index_order;
  index_order.exact_gpu_tiebreak = false;
  engine.SetPolicy(index_order);
  EXPECT_EQ(gpu_of(engine.Schedule(SharePod("z", 30))), 0);
}

TEST(BestFitPolicyTest, PicksTheTightestNode) {
  Engine engine = MakeEngine({Node("a", 16, 64, 1, T4()), Node("b", 8, 64, 1, T4())}, {});
  EXPECT_EQ(engine.Schedule(WithPolicy(SharePod("p", 500, 4000), "bestfit")).decision.node_name,
            "b");
}

TEST(DefaultPolicyTest, ConfigDefaultIsUsedWhenThePodNamesNone) {
  DeviceConfig config;
  config.default_node_policy = "spread";
  Engine engine = MakeEngine({Node("a", 16, 64, 1, T4()), Node("b", 16, 64, 1, T4())}, config);
  ASSERT_TRUE(engine.Place(SharePod("first", 200)).scheduled);
  EXPECT_EQ(engine.Schedule(SharePod("x", 200)).decision.node_name, "b");
  EXPECT_EQ(engine.Schedule(WithPolicy(SharePod("y", 200), "binpack")).decision.node_name, "a");
}

TEST(OnePoolTest, PicksTheKindThatFragmentsLess) {
  // Workload: 6000 MiB pods. The T4 has 10000 MiB free.
  Engine engine = MakeEngine(
      {Node("n", 32, 128,
            {Gpu("T4", GpuMode::kHamiCore, 16000), Gpu("H100-SXM5-80GB", GpuMode::kMig)})},
      {});
  auto d = engine.Decide(GpuPod("load", 1, 6000, 0, kModeHamiCore), 0);
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(engine.Apply("default/load", *d).ok());
  engine.SetTargetWorkload(TargetWorkload::FromPods({GpuPod("typical", 1, 6000)}));
  // 9000 MiB: a slice would strand the T4's last 1000 MiB; a 1g.10gb wastes
  // less (984 MiB of its own rounding).
  ScheduleResult mig = engine.Schedule(GpuPod("p", 1, 9000));
  ASSERT_TRUE(mig.scheduled);
  EXPECT_EQ(mig.decision.containers[0].devices[0].mode, GpuMode::kMig);
  EXPECT_EQ(mig.decision.containers[0].devices[0].profile_name, "1g.10gb");
  // 4000 MiB: the slice leaves 6000 MiB, exactly one more typical pod, while
  // a 1g.10gb would waste most of itself.
  ScheduleResult slice = engine.Schedule(GpuPod("q", 1, 4000));
  ASSERT_TRUE(slice.scheduled);
  EXPECT_EQ(slice.decision.containers[0].devices[0].mode, GpuMode::kHamiCore);
}

// --- Extender-facing API ---------------------------------------------------------

TEST(ExtenderApiTest, FilterGivesVerdictsAndReasonsPerNode) {
  Engine engine = MakeEngine(
      {Node("small", 2, 8, 1, T4()), Node("big", 32, 128, 2, T4()), Node("cpu-only", 64, 256, {})},
      {});
  PodRequest pod = SharePod("p", 500, 4000);
  auto verdicts = engine.Filter(pod, {0, 1, 2});
  ASSERT_TRUE(verdicts.ok());
  ASSERT_EQ(verdicts->size(), 3u);
  EXPECT_TRUE((*verdicts)[0].feasible);  // "big" sorts first.
  EXPECT_FALSE((*verdicts)[1].feasible);
  EXPECT_EQ((*verdicts)[1].failure.ToString(), "NodeInsufficientDevice");
  EXPECT_FALSE((*verdicts)[2].feasible);
  EXPECT_EQ((*verdicts)[2].failure.ToString(), "Insufficient cpu");
  EXPECT_THAT(Engine::NormalizedScores(*verdicts), ElementsAre(10, 0, 0));
  EXPECT_FALSE(engine.Filter(pod, {7}).ok());
  PodRequest bad = pod;
  bad.containers[0].gpu.count = -3;
  EXPECT_FALSE(engine.Filter(bad, {0}).ok());
}

TEST(ExtenderApiTest, NormalizedScoresSpanZeroToTen) {
  std::vector<NodeVerdict> v(4);
  v[0].feasible = true;
  v[0].score = -2;
  v[1].feasible = true;
  v[1].score = 0;
  v[2].feasible = true;
  v[2].score = -1;
  EXPECT_THAT(Engine::NormalizedScores(v), ElementsAre(0, 10, 5, 0));
}

TEST(ExtenderApiTest, ScheduleAmongRestrictsTheCandidates) {
  Engine engine = MakeEngine({Node("a", 16, 64, 1, T4()), Node("b", 16, 64, 1, T4())}, {});
  ScheduleResult r = engine.ScheduleAmong(SharePod("p", 500), {1});
  ASSERT_TRUE(r.scheduled);
  EXPECT_EQ(r.decision.node_name, "b");
  ScheduleResult none = engine.ScheduleAmong(SharePod("q", 500, 64000), {0, 1});
  EXPECT_FALSE(none.scheduled);
  EXPECT_EQ(none.Summary(), "0/2 nodes are available: 2 Insufficient cpu");
}

TEST(ExtenderApiTest, DecideExplainsANodeThatDoesNotFit) {
  Engine engine = MakeEngine({Node("a", 16, 64, 1, T4())}, {});
  auto d = engine.Decide(GpuPod("p", 1, 20000), 0);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("1/1 CardInsufficientMemory"));
  EXPECT_FALSE(engine.Decide(GpuPod("p", 1, 100), 5).ok());
}

TEST(ExtenderApiTest, ReleaseInPlacementModeDestroysTheInstance) {
  Engine engine = MakeEngine({Node("n", 16, 64, 1, Gpu("H100-SXM5-80GB", GpuMode::kMig))}, {});
  ScheduleResult r = engine.Place(GpuPod("p", 1, 30000, 0, kModeMig));
  ASSERT_TRUE(r.scheduled);
  EXPECT_EQ(r.decision.MigOperations(), 1);  // One create.
  EXPECT_EQ(engine.cluster().gpu_usage(0).instance_count, 1);
  ASSERT_TRUE(engine.Release("default/p").ok());
  EXPECT_EQ(engine.cluster().gpu_usage(0).instance_count, 0);
  EXPECT_FALSE(engine.cluster().gpu_usage(0).HasBusyInstance());
  EXPECT_EQ(engine.Release("default/p").code(), absl::StatusCode::kNotFound);
}

TEST(ExtenderApiTest, ApplyRejectsAStaleDecision) {
  Engine engine = MakeEngine({Node("n", 16, 64, 1, T4())}, {});
  ScheduleResult a = engine.Schedule(GpuPod("a", 1, 10000));
  ScheduleResult b = engine.Schedule(GpuPod("b", 1, 10000));
  ASSERT_TRUE(a.scheduled && b.scheduled);
  ASSERT_TRUE(engine.Apply("default/a", a.decision).ok());
  // Decided before a was applied: no longer fits.
  EXPECT_EQ(engine.Apply("default/b", b.decision).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace prism::sched
