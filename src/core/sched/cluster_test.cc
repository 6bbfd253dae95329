#include "core/sched/cluster.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/sched/engine.h"
#include "core/sched/test_util.h"

namespace prism::sched {
namespace {

using ::testing::HasSubstr;
using namespace ::prism::sched::testing;  // NOLINT: test builders.

TEST(ClusterStateTest, NodesAreOrderedByName) {
  auto state = ClusterState::Build({Node("b", 1, 1, {}), Node("a", 1, 1, {})}, {});
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->node(0).name, "a");
  EXPECT_EQ(state->FindNode("b"), 1);
  EXPECT_EQ(state->FindNode("c"), -1);
}

TEST(ClusterStateTest, RejectsUnknownMemoryAndNonMigModelsInMigMode) {
  auto unknown = ClusterState::Build({Node("n", 1, 1, 1, Gpu("G2"))}, {});
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("memory of model 'G2'"));
  auto mig = ClusterState::Build({Node("n", 1, 1, 1, Gpu("T4", GpuMode::kMig, 16000))}, {});
  EXPECT_THAT(std::string(mig.status().message()), HasSubstr("not a MIG-capable"));
}

TEST(ClusterStateTest, NodeConfigSetsModePerNodeAndPerGpu) {
  DeviceConfig config;
  NodeDeviceConfig nc;
  nc.name = "n";
  nc.mode = GpuMode::kMig;
  nc.gpus.push_back({1, GpuMode::kHamiCore});
  config.node_configs.push_back(nc);
  auto state = ClusterState::Build({Node("n", 1, 1, 2, Gpu("A100-SXM4-40GB"))}, config);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->gpu(0).mode, GpuMode::kMig);
  EXPECT_EQ(state->gpu(1).mode, GpuMode::kHamiCore);
}

TEST(ClusterStateTest, ExistingInstancesAreValidatedAndMatchedToGeometry) {
  GpuSpec gpu = Gpu("A100-PCIE-40GB", GpuMode::kMig);
  gpu.instances = {{"3g.20gb", 0, true}, {"3g.20gb", 4, false}};
  auto state = ClusterState::Build({Node("n", 1, 1, {gpu})}, HamiDefaultConfig());
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->gpu_usage(0).template_index, 2);
  EXPECT_TRUE(state->gpu_usage(0).HasBusyInstance());

  GpuSpec bad = Gpu("A100-PCIE-40GB", GpuMode::kMig);
  bad.instances = {{"3g.20gb", 0, true}, {"2g.10gb", 2, false}};
  auto illegal = ClusterState::Build({Node("n", 1, 1, {bad})}, HamiDefaultConfig());
  EXPECT_THAT(std::string(illegal.status().message()), HasSubstr("overlaps"));
}

TEST(ClusterStateTest, BadGeometryInConfigNamesTheKey) {
  DeviceConfig config;
  config.known_mig_geometries.push_back({{"A100-PCIE-40GB"}, {{{"9g.90gb", 0, 0, 1}}}});
  auto state =
      ClusterState::Build({Node("n", 1, 1, 1, Gpu("A100-PCIE-40GB", GpuMode::kMig))}, config);
  EXPECT_THAT(std::string(state.status().message()),
              HasSubstr("knownMigGeometries[0].allowedGeometries[0]"));
}

TEST(ClusterStateTest, ApplyChecksCapacityAndReleaseRestores) {
  auto state = ClusterState::Build({Node("n", 4, 8, 1, Gpu("T4", std::nullopt, 16000))}, {});
  ASSERT_TRUE(state.ok());
  Decision d;
  d.node = 0;
  d.cpu_milli = 2000;
  d.memory_bytes = kGiB;
  ContainerAssignment c;
  c.name = "main";
  DeviceAssignment dev;
  dev.gpu = 0;
  dev.memory_mib = 10000;
  dev.cores_permille = 500;
  c.devices.push_back(dev);
  d.containers.push_back(c);
  ASSERT_TRUE(state->Apply("a", d).ok());
  EXPECT_EQ(state->Apply("a", d).code(), absl::StatusCode::kAlreadyExists);
  absl::Status over = state->Apply("b", d);  // 20000 MiB > 16000.
  EXPECT_EQ(over.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(state->gpu_usage(0).memory_used_mib, 10000);  // Untouched by the failure.
  ASSERT_TRUE(state->Release("a").ok());
  EXPECT_EQ(state->gpu_usage(0).memory_used_mib, 0);
  EXPECT_EQ(state->node_usage(0).cpu_used, 0);
  EXPECT_EQ(state->Release("a").code(), absl::StatusCode::kNotFound);
}


TEST(ClusterStateTest, RestoreNodePutsUsageAndPodsBackExactly) {
  // A placement-mode MIG GPU: a release destroys the instance, so re-applying the old decision
  // could not put it back; the snapshot does.
  Engine engine = MakeEngine({Node("m", 64, 256, 1, Gpu("A100-SXM4-80GB", GpuMode::kMig)),
                              Node("t", 8, 32, 1, Gpu("T4", std::nullopt, 15360))},
                             {});
  ASSERT_TRUE(engine.Place(GpuPod("a", 1, 9000, 0, kModeMig)).scheduled);
  ASSERT_TRUE(engine.Place(GpuPod("b", 1, 9000, 0, kModeMig)).scheduled);
  const ClusterState before = engine.cluster();
  const ClusterState::NodeSnapshot snap = engine.SaveNode(0);
  ASSERT_EQ(snap.pods.size(), 2u);
  ASSERT_TRUE(engine.Release("default/a").ok());
  ASSERT_TRUE(engine.Place(GpuPod("c", 1, 40000, 40, kModeMig)).scheduled);
  ASSERT_TRUE(engine.RestoreNode(snap).ok());
  EXPECT_EQ(engine.cluster().PodKeys(), before.PodKeys());
  EXPECT_EQ(engine.cluster().gpu_usage(0), before.gpu_usage(0));
  EXPECT_EQ(engine.cluster().node_usage(0).cpu_used, before.node_usage(0).cpu_used);
  EXPECT_GT(engine.cluster().node_usage(0).version, before.node_usage(0).version);
  EXPECT_TRUE(engine.Release("default/a").ok());  // The ledger is whole again.

  ClusterState::NodeSnapshot bad = snap;
  bad.node = 9;
  EXPECT_EQ(engine.RestoreNode(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = snap;
  bad.gpus.push_back({});
  EXPECT_EQ(engine.RestoreNode(bad).code(), absl::StatusCode::kInvalidArgument);
  // A snapshot pod now charged on another node: refused, nothing changed.
  ASSERT_TRUE(engine.Release("default/b").ok());
  PodRequest b = GpuPod("b", 1, 4000);
  ASSERT_TRUE(engine.Place(b).scheduled);
  ASSERT_EQ(engine.cluster().FindPod("default/b")->node, 1);
  EXPECT_THAT(std::string(engine.RestoreNode(snap).message()), HasSubstr("another node"));
  EXPECT_EQ(engine.cluster().FindPod("default/b")->node, 1);
}

}  // namespace
}  // namespace prism::sched
