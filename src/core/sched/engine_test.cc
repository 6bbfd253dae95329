#include "core/sched/engine.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/sched/test_util.h"

namespace prism::sched {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace ::prism::sched::testing;  // NOLINT: test builders.

std::multiset<std::string> Profiles(const ContainerAssignment& c) {
  std::multiset<std::string> out;
  for (const DeviceAssignment& d : c.devices) out.insert(d.profile_name);
  return out;
}

// --- The seed's example (HAMi dynamic-MIG design) ----------------------------

TEST(TemplateModeTest, SeedExampleTakesGeometryOneAndTwoInstancesOfOneGpu) {
  Engine engine = MakeEngine({Node("a100", 32, 128, 1, Gpu("A100-PCIE-40GB", GpuMode::kMig))},
                             HamiDefaultConfig());
  PodRequest pod = GpuPod("gpu-pod1", 2, 8000, 0, kModeMig);
  ScheduleResult r = engine.Place(pod);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_TRUE(r.scheduled) << r.Summary();
  const Decision& d = r.decision;
  ASSERT_EQ(d.containers.size(), 1u);
  ASSERT_EQ(d.containers[0].devices.size(), 2u);
  EXPECT_THAT(Profiles(d.containers[0]), ElementsAre("2g.10gb", "2g.10gb"));
  for (const DeviceAssignment& dev : d.containers[0].devices) {
    EXPECT_EQ(dev.template_index, 1);  // {1g.5gb: 1, 2g.10gb: 3}.
    EXPECT_EQ(dev.memory_mib, 10240);  // Rounded up to the slot.
    EXPECT_EQ(dev.gpu_index, 0);
  }
  ASSERT_EQ(d.mig.size(), 1u);
  EXPECT_EQ(d.mig[0].template_index, 1);
  EXPECT_EQ(d.mig[0].create.size(), 4u);  // The whole geometry is realised.
  EXPECT_NE(d.containers[0].devices[0].start, d.containers[0].devices[1].start);
}

TEST(TemplateModeTest, SeedExampleWithoutModeAnnotationOnMigNode) {
  Engine engine = MakeEngine({Node("a100", 32, 128, 1, Gpu("A100-PCIE-40GB", GpuMode::kMig))},
                             HamiDefaultConfig());
  ScheduleResult r = engine.Place(GpuPod("gpu-pod1", 2, 8000));
  ASSERT_TRUE(r.scheduled) << r.Summary();
  EXPECT_THAT(Profiles(r.decision.containers[0]), ElementsAre("2g.10gb", "2g.10gb"));
}

TEST(TemplateModeTest, BusyGeometryIsFrozen) {
  Engine engine = MakeEngine({Node("a100", 32, 128, 1, Gpu("A100-PCIE-40GB", GpuMode::kMig))},
                             HamiDefaultConfig());
  ASSERT_TRUE(engine.Place(GpuPod("p1", 1, 8000, 0, kModeMig)).scheduled);
  // The GPU now runs geometry 1 with one 2g.10gb in use: a 15000 MiB pod
  // would need 3g.20gb (geometry 2), which the frozen geometry cannot give.
  ScheduleResult r = engine.Place(GpuPod("p2", 1, 15000, 0, kModeMig));
  EXPECT_FALSE(r.scheduled);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_THAT(r.failures[0].second.ToString(), HasSubstr("1/1 CardMigTopologyInfeasible"));
  // The free slots of the frozen geometry are still usable.
  ScheduleResult small = engine.Place(GpuPod("p3", 1, 4000, 0, kModeMig));
  ASSERT_TRUE(small.scheduled) << small.Summary();
  EXPECT_EQ(small.decision.containers[0].devices[0].profile_name, "1g.5gb");
  EXPECT_EQ(small.decision.containers[0].devices[0].template_index, 1);
  EXPECT_TRUE(small.decision.mig.empty());  // No reconfiguration.
}

TEST(TemplateModeTest, IdleGpuMayChangeGeometryAfterRelease) {
  Engine engine = MakeEngine({Node("a100", 32, 128, 1, Gpu("A100-PCIE-40GB", GpuMode::kMig))},
                             HamiDefaultConfig());
  ASSERT_TRUE(engine.Place(GpuPod("p1", 1, 8000, 0, kModeMig)).scheduled);
  ASSERT_TRUE(engine.Release("default/p1").ok());
  ScheduleResult r = engine.Place(GpuPod("p2", 1, 15000, 0, kModeMig));
  ASSERT_TRUE(r.scheduled) << r.Summary();
  EXPECT_EQ(r.decision.containers[0].devices[0].profile_name, "3g.20gb");
  ASSERT_EQ(r.decision.mig.size(), 1u);
  EXPECT_EQ(r.decision.mig[0].template_index, 2);
  EXPECT_EQ(r.decision.mig[0].destroy.size(), 4u);  // The idle geometry 1 goes.
}

// --- Placement mode ----------------------------------------------------------

TEST(PlacementModeTest, SeveralInstancesForOneContainer) {
  DeviceConfig config;  // No templates: placement mode.
  Engine engine =
      MakeEngine({Node("h100", 64, 256, 1, Gpu("H100-SXM5-80GB", GpuMode::kMig))}, config);
  ScheduleResult r = engine.Place(GpuPod("p", 3, 9000, 0, kModeMig));
  ASSERT_TRUE(r.scheduled) << r.Summary();
  ASSERT_EQ(r.decision.containers[0].devices.size(), 3u);
  std::set<int> starts;
  for (const DeviceAssignment& d : r.decision.containers[0].devices) {
    EXPECT_EQ(d.profile_name, "1g.10gb");
    EXPECT_EQ(d.template_index, -1);
    starts.insert(d.start);
  }
  EXPECT_EQ(starts.size(), 3u);
}

TEST(PlacementModeTest, SmallInstancesKeepSlotZeroFreeForLargeProfiles) {
  DeviceConfig config;
  Engine engine =
      MakeEngine({Node("a100", 64, 256, 1, Gpu("A100-SXM4-80GB", GpuMode::kMig))}, config);
  ScheduleResult r = engine.Place(GpuPod("small", 1, 9000, 0, kModeMig));
  ASSERT_TRUE(r.scheduled);
  EXPECT_GE(r.decision.containers[0].devices[0].start, 4);
  // A 4g (40 GB, 4 compute slices = 57 %) still fits at slot 0.
  ScheduleResult big = engine.Place(GpuPod("big", 1, 40000, 55, kModeMig));
  ASSERT_TRUE(big.scheduled) << big.Summary();
  EXPECT_EQ(big.decision.containers[0].devices[0].profile_name, "4g.40gb");
  EXPECT_EQ(big.decision.containers[0].devices[0].start, 0);
}

TEST(PlacementModeTest, NeverMovesInstancesInUse) {
  DeviceConfig config;
  GpuSpec gpu = Gpu("A100-SXM4-40GB", GpuMode::kMig);
  gpu.instances.push_back({"3g.20gb", 0, /*in_use=*/true});
  gpu.instances.push_back({"1g.5gb", 4, /*in_use=*/false});
  Engine engine = MakeEngine({Node("n", 64, 256, {gpu})}, config);
  // 4g needs slot 0, held by a busy 3g: impossible.
  ScheduleResult r = engine.Place(GpuPod("big", 1, 19000, 55, kModeMig));
  EXPECT_FALSE(r.scheduled);
  // A 3g.20gb fits at 4 by destroying the idle 1g.5gb there.
  ScheduleResult r2 = engine.Place(GpuPod("p3g", 1, 19000, 0, kModeMig));
  ASSERT_TRUE(r2.scheduled) << r2.Summary();
  const DeviceAssignment& d = r2.decision.containers[0].devices[0];
  EXPECT_EQ(d.profile_name, "3g.20gb");
  EXPECT_EQ(d.start, 4);
  ASSERT_EQ(r2.decision.mig.size(), 1u);
  EXPECT_EQ(r2.decision.mig[0].destroy.size(), 1u);
  // The busy instance is untouched.
  const GpuUsage& u = engine.cluster().gpu_usage(0);
  bool busy_kept = false;
  for (int i = 0; i < u.instance_count; ++i) {
    if (u.instances[i].start == 0 && u.instances[i].state == InstanceState::kInUse)
      busy_kept = true;
  }
  EXPECT_TRUE(busy_kept);
}

// --- Software slices ------------------------------------------------------------

TEST(SliceTest, MultiGpuContainerGetsDistinctGpus) {
  Engine engine = MakeEngine({Node("n", 64, 256, 4, Gpu("T4", std::nullopt, 15360))}, {});
  ScheduleResult r = engine.Place(GpuPod("p", 3, 2000, 20));
  ASSERT_TRUE(r.scheduled) << r.Summary();
  std::set<int> gpus;
  for (const DeviceAssignment& d : r.decision.containers[0].devices) {
    EXPECT_EQ(d.mode, GpuMode::kHamiCore);
    EXPECT_EQ(d.memory_mib, 2000);
    EXPECT_EQ(d.cores_permille, 200);
    gpus.insert(d.gpu);
  }
  EXPECT_EQ(gpus.size(), 3u);
  // Five GPUs for one container on a 4-GPU node: never.
  ScheduleResult too_many = engine.Place(GpuPod("q", 5, 100, 0));
  EXPECT_FALSE(too_many.scheduled);
}

TEST(SliceTest, ExclusiveGpuNeedsAnIdleGpuAndBlocksOthers) {
  Engine engine = MakeEngine({Node("n", 64, 256, 1, Gpu("T4", std::nullopt, 15360))}, {});
  ASSERT_TRUE(engine.Place(GpuPod("exclusive", 1, 15360, 100)).scheduled);
  ScheduleResult r = engine.Place(GpuPod("other", 1, 0, 0));
  EXPECT_FALSE(r.scheduled);
  ASSERT_TRUE(engine.Release("default/exclusive").ok());
  ASSERT_TRUE(engine.Place(GpuPod("small", 1, 1000, 0)).scheduled);
  ScheduleResult again = engine.Place(GpuPod("exclusive2", 1, 1000, 100));
  EXPECT_FALSE(again.scheduled);
  ASSERT_EQ(again.failures.size(), 1u);
  EXPECT_EQ(again.failures[0].second.ToString(), "1/1 ExclusiveDeviceAllocateConflict");
}

TEST(SliceTest, SplitCountLimitsTasksPerGpu) {
  DeviceConfig config;
  config.device_split_count = 2;
  Engine engine = MakeEngine({Node("n", 64, 256, 1, Gpu("T4", std::nullopt, 15360))}, config);
  ASSERT_TRUE(engine.Place(GpuPod("a", 1, 100, 1)).scheduled);
  ASSERT_TRUE(engine.Place(GpuPod("b", 1, 100, 1)).scheduled);
  ScheduleResult r = engine.Place(GpuPod("c", 1, 100, 1));
  EXPECT_FALSE(r.scheduled);
  EXPECT_EQ(r.failures[0].second.ToString(), "1/1 CardTimeSlicingExhausted");
}

TEST(SliceTest, ReasonsAreCountedPerGpu) {
  std::vector<GpuSpec> gpus = {Gpu("T4", std::nullopt, 15360), Gpu("T4", std::nullopt, 15360),
                               Gpu("T4", std::nullopt, 15360), Gpu("V100", std::nullopt, 32768)};
  Engine engine = MakeEngine({Node("n", 64, 256, gpus)}, {});
  PodRequest pod = GpuPod("p", 1, 20000, 0);
  ScheduleResult r = engine.Place(pod);
  ASSERT_TRUE(r.scheduled);
  EXPECT_EQ(r.decision.containers[0].devices[0].gpu_index, 3);
  pod.name = "q";
  pod.nouse_types = {"v100"};
  ScheduleResult q = engine.Place(pod);
  EXPECT_FALSE(q.scheduled);
  EXPECT_EQ(q.failures[0].second.ToString(), "1/4 CardTypeMismatch, 3/4 CardInsufficientMemory");
  EXPECT_EQ(q.Summary(), "0/1 nodes are available: 1 CardInsufficientMemory");
}

TEST(SliceTest, PercentageRequestsScaleWithEachGpu) {
  std::vector<GpuSpec> gpus = {Gpu("T4", std::nullopt, 16000), Gpu("V100", std::nullopt, 32000)};
  Engine engine = MakeEngine({Node("n", 64, 256, gpus)}, {});
  PodRequest pod = GpuPod("p", 2, 0, 0);
  pod.containers[0].gpu.memory_permille = 250;
  ScheduleResult r = engine.Place(pod);
  ASSERT_TRUE(r.scheduled);
  std::set<int64_t> memory;
  for (const auto& d : r.decision.containers[0].devices) memory.insert(d.memory_mib);
  EXPECT_EQ(memory, (std::set<int64_t>{4000, 8000}));
}

TEST(SliceTest, TypeAndUuidFilters) {
  std::vector<GpuSpec> gpus = {Gpu("NVIDIA T4", std::nullopt, 16000),
                               Gpu("NVIDIA V100-SXM2-32GB", std::nullopt, 32000)};
  gpus[0].uuid = "GPU-t4";
  gpus[1].uuid = "GPU-v100";
  Engine engine = MakeEngine({Node("n", 64, 256, gpus)}, {});
  PodRequest pod = GpuPod("p", 1, 1000, 0);
  pod.use_types = {"v100"};
  ScheduleResult r = engine.Place(pod);
  ASSERT_TRUE(r.scheduled);
  EXPECT_EQ(r.decision.containers[0].devices[0].uuid, "GPU-v100");
  PodRequest by_uuid = GpuPod("q", 1, 1000, 0);
  by_uuid.use_uuids = {"GPU-t4"};
  ScheduleResult q = engine.Place(by_uuid);
  ASSERT_TRUE(q.scheduled);
  EXPECT_EQ(q.decision.containers[0].devices[0].uuid, "GPU-t4");
  PodRequest excluded = GpuPod("x", 1, 1000, 0);
  excluded.nouse_uuids = {"GPU-t4", "GPU-v100"};
  ScheduleResult x = engine.Place(excluded);
  EXPECT_FALSE(x.scheduled);
  EXPECT_EQ(x.failures[0].second.ToString(), "2/2 CardUuidMismatch");
}

// --- Node resources --------------------------------------------------------------

TEST(NodeFitTest, CpuAndMemoryMustFit) {
  Engine engine = MakeEngine({Node("small", 4, 8, 1, Gpu("T4", std::nullopt, 16000)),
                              Node("big", 64, 256, 1, Gpu("T4", std::nullopt, 16000))},
                             {});
  PodRequest pod = GpuPod("p", 1, 1000, 0);
  pod.containers[0].cpu_milli = 8000;
  ScheduleResult r = engine.Place(pod);
  ASSERT_TRUE(r.scheduled);
  EXPECT_EQ(r.decision.node_name, "big");
  PodRequest huge = GpuPod("huge", 1, 1000, 0);
  huge.containers[0].memory_bytes = 512 * kGiB;
  ScheduleResult h = engine.Place(huge);
  EXPECT_FALSE(h.scheduled);
  EXPECT_EQ(h.Summary(), "0/2 nodes are available: 2 Insufficient memory");
}

TEST(NodeFitTest, InitContainersCountAtPeakNotSum) {
  Engine engine = MakeEngine({Node("n", 8, 16, 1, Gpu("T4", std::nullopt, 16000))}, {});
  PodRequest pod;
  pod.name = "p";
  ContainerRequest init;
  init.name = "init";
  init.init = true;
  init.cpu_milli = 6000;
  init.memory_bytes = 4 * kGiB;
  init.gpu = {1, 12000, 0, 0};
  ContainerRequest main;
  main.name = "main";
  main.cpu_milli = 5000;
  main.memory_bytes = 4 * kGiB;
  main.gpu = {1, 10000, 0, 0};
  pod.containers = {init, main};
  ScheduleResult r = engine.Place(pod);
  ASSERT_TRUE(r.scheduled) << r.Summary();  // 6 + 5 CPUs > 8, but the peak is 6.
  EXPECT_EQ(r.decision.cpu_milli, 6000);
  const GpuUsage& u = engine.cluster().gpu_usage(0);
  EXPECT_EQ(u.memory_used_mib, 12000);  // max(12000, 10000), not 22000.
  EXPECT_EQ(u.tasks, 1);
}

TEST(NodeFitTest, InitContainerReusesThePodsMigInstance) {
  DeviceConfig config;
  Engine engine = MakeEngine({Node("n", 8, 16, 1, Gpu("A100-SXM4-40GB", GpuMode::kMig))}, config);
  PodRequest pod;
  pod.name = "p";
  ContainerRequest init;
  init.name = "init";
  init.init = true;
  init.gpu = {1, 4000, 0, 0};
  ContainerRequest main;
  main.name = "main";
  main.gpu = {1, 19000, 0, 0};
  pod.containers = {init, main};
  ScheduleResult r = engine.Place(pod);
  ASSERT_TRUE(r.scheduled) << r.Summary();
  ASSERT_EQ(r.decision.containers[0].devices.size(), 1u);
  EXPECT_EQ(r.decision.containers[0].devices[0].profile_name, "3g.20gb");
  EXPECT_EQ(r.decision.containers[0].devices[0].start, r.decision.containers[1].devices[0].start);
  EXPECT_EQ(engine.cluster().gpu_usage(0).tasks, 1);
}

// --- One pool ---------------------------------------------------------------------

TEST(OnePoolTest, VgpuModeRestrictsTheKindOfGpu) {
  Engine engine = MakeEngine(
      {Node("n", 64, 256, {Gpu("T4", std::nullopt, 16000), Gpu("A100-SXM4-40GB", GpuMode::kMig)})},
      {});
  ScheduleResult mig = engine.Place(GpuPod("m", 1, 4000, 0, kModeMig));
  ASSERT_TRUE(mig.scheduled);
  EXPECT_EQ(mig.decision.containers[0].devices[0].mode, GpuMode::kMig);
  ScheduleResult slice = engine.Place(GpuPod("s", 1, 4000, 0, kModeHamiCore));
  ASSERT_TRUE(slice.scheduled);
  EXPECT_EQ(slice.decision.containers[0].devices[0].mode, GpuMode::kHamiCore);
  ScheduleResult any = engine.Place(GpuPod("a", 1, 4000, 0));
  EXPECT_TRUE(any.scheduled);
}

TEST(OnePoolTest, FallsBackToTheOtherKindWhenOneIsFull) {
  Engine engine = MakeEngine(
      {Node("n", 64, 256, {Gpu("T4", std::nullopt, 16000), Gpu("A100-SXM4-40GB", GpuMode::kMig)})},
      {});
  ASSERT_TRUE(engine.Place(GpuPod("t4", 1, 16000, 100, kModeHamiCore)).scheduled);
  ScheduleResult r = engine.Place(GpuPod("any", 1, 4000, 0));
  ASSERT_TRUE(r.scheduled);
  EXPECT_EQ(r.decision.containers[0].devices[0].mode, GpuMode::kMig);
}

// --- Bad input ------------------------------------------------------------------------

TEST(ValidateTest, RejectsAbsurdRequests) {
  Engine engine = MakeEngine({Node("n", 64, 256, 1, Gpu("T4", std::nullopt, 16000))}, {});
  PodRequest pod = GpuPod("p", 1, 1000, 0);
  pod.containers[0].gpu.count = -1;
  EXPECT_THAT(std::string(engine.Schedule(pod).status.message()), HasSubstr("GPU count"));
  pod = GpuPod("p", 1, -5, 0);
  EXPECT_FALSE(engine.Schedule(pod).status.ok());
  pod = GpuPod("p", 1, 100, 0);
  pod.containers[0].gpu.cores_permille = 1500;
  EXPECT_FALSE(engine.Schedule(pod).status.ok());
  pod = GpuPod("p", 1, 100, 0);
  pod.node_policy = "magic";
  EXPECT_THAT(std::string(engine.Schedule(pod).status.message()), HasSubstr("magic"));
  PodRequest empty;
  EXPECT_FALSE(engine.Schedule(empty).status.ok());
}

// Issue 11, item 3: a software-slice pod elsewhere in the cluster made the MIG pod's grant grow
// from 2g.10gb (geometry 1) to 3g.20gb (geometry 2): its shape entered the target workload, and
// the geometry was chosen by fragmentation before the grant.
TEST(TemplateModeTest, GrantDoesNotGrowWithOtherPodsShapes) {
  auto place_mig_pod = [](bool with_slice_pod) {
    Engine engine = MakeEngine({Node("a100-node", 32, 128, 1, Gpu("A100-PCIE-40GB", GpuMode::kMig)),
                                Node("t4-node", 32, 128, 1, Gpu("Tesla T4", GpuMode::kHamiCore, 15360))},
                               HamiDefaultConfig());
    const PodRequest slice = GpuPod("slice", 1, 4000, 30, kModeHamiCore);
    const PodRequest mig = GpuPod("mig", 1, 8000, 0, kModeMig);
    std::vector<PodRequest> pods = {mig};
    if (with_slice_pod) pods.insert(pods.begin(), slice);
    engine.SetTargetWorkload(TargetWorkload::FromPods(pods));
    if (with_slice_pod) {
      EXPECT_TRUE(engine.Place(slice).scheduled);
    }
    return engine.Place(mig);
  };
  for (bool with_slice_pod : {false, true}) {
    SCOPED_TRACE(with_slice_pod ? "with the slice pod" : "alone");
    ScheduleResult r = place_mig_pod(with_slice_pod);
    ASSERT_TRUE(r.scheduled) << r.Summary();
    EXPECT_EQ(r.decision.containers[0].devices[0].profile_name, "2g.10gb");
    EXPECT_EQ(r.decision.containers[0].devices[0].template_index, 1);
  }
}

TEST(TemplateModeTest, IdleInstancesAreReusedRatherThanRecarvedForTheSameGrant) {
  Engine engine = MakeEngine({Node("a100", 32, 128, 1, Gpu("A100-PCIE-40GB", GpuMode::kMig))},
                             HamiDefaultConfig());
  // Every shape of the workload would rather see another geometry; the grant is the same.
  engine.SetTargetWorkload(TargetWorkload::FromPods(
      {GpuPod("w1", 1, 4000, 0, kModeMig), GpuPod("w2", 1, 4000, 0, kModeMig),
       GpuPod("w3", 1, 8000, 0, kModeMig)}));
  ASSERT_TRUE(engine.Place(GpuPod("p1", 1, 8000, 0, kModeMig)).scheduled);
  ASSERT_TRUE(engine.Release("default/p1").ok());
  ScheduleResult r = engine.Place(GpuPod("p2", 1, 8000, 0, kModeMig));
  ASSERT_TRUE(r.scheduled) << r.Summary();
  EXPECT_EQ(r.decision.containers[0].devices[0].profile_name, "2g.10gb");
  EXPECT_TRUE(r.decision.mig.empty()) << "an idle 2g.10gb was there to take";
}

// Issue 11, item 1: a static node's layout belongs to the MIG manager. The engine offers its
// idle instances as they are and never plans a create or destroy there.
TEST(FixedLayoutTest, StaticGpuOffersOnlyItsIdleInstances) {
  for (const DeviceConfig& config : {HamiDefaultConfig(), DeviceConfig{}}) {
    GpuSpec gpu = Gpu("A100-PCIE-40GB", GpuMode::kMig);
    gpu.mig_layout_fixed = true;
    gpu.instances = {{"3g.20gb", 4, false}, {"1g.5gb", 0, false}};
    Engine engine = MakeEngine({Node("static", 32, 128, 1, gpu)}, config);
    SCOPED_TRACE(engine.cluster().gpu(0).template_mode ? "template mode" : "placement mode");
    ScheduleResult small = engine.Place(GpuPod("small", 1, 4000, 0, kModeMig));
    ASSERT_TRUE(small.scheduled) << small.Summary();
    EXPECT_EQ(small.decision.containers[0].devices[0].profile_name, "1g.5gb");
    EXPECT_TRUE(small.decision.mig.empty());
    // 9000 MiB: a new 2g.10gb would be smaller, but only the idle 3g.20gb exists.
    ScheduleResult mid = engine.Place(GpuPod("mid", 1, 9000, 0, kModeMig));
    ASSERT_TRUE(mid.scheduled) << mid.Summary();
    EXPECT_EQ(mid.decision.containers[0].devices[0].profile_name, "3g.20gb");
    EXPECT_TRUE(mid.decision.mig.empty());
    // Nothing left that fits: refused, although an empty GPU slot exists.
    EXPECT_FALSE(engine.Place(GpuPod("more", 1, 4000, 0, kModeMig)).scheduled);
    // A released instance stays (it is the MIG manager's), and is offered again.
    ASSERT_TRUE(engine.Release("default/mid").ok());
    EXPECT_EQ(engine.cluster().gpu_usage(0).instance_count, 2);
    ScheduleResult again = engine.Place(GpuPod("again", 1, 15000, 0, kModeMig));
    ASSERT_TRUE(again.scheduled) << again.Summary();
    EXPECT_TRUE(again.decision.mig.empty());
  }
}

TEST(FixedLayoutTest, ADecisionThatChangesAStaticLayoutIsRefused) {
  GpuSpec dynamic = Gpu("A100-PCIE-40GB", GpuMode::kMig);
  Engine planner = MakeEngine({Node("n", 32, 128, 1, dynamic)}, DeviceConfig{});
  ScheduleResult r = planner.Place(GpuPod("p", 1, 4000, 0, kModeMig));
  ASSERT_TRUE(r.scheduled);
  ASSERT_FALSE(r.decision.mig.empty());
  GpuSpec fixed = dynamic;
  fixed.mig_layout_fixed = true;
  Engine engine = MakeEngine({Node("n", 32, 128, 1, fixed)}, DeviceConfig{});
  absl::Status applied = engine.Apply("default/p", r.decision);
  EXPECT_EQ(applied.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(applied.message(), HasSubstr("static"));
}

}  // namespace
}  // namespace prism::sched
