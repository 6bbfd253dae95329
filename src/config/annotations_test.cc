#include "config/annotations.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "config/device_config_yaml.h"
#include "core/sched/engine.h"
#include "core/sched/test_util.h"

namespace prism::config {
namespace {

using ::testing::HasSubstr;
using namespace ::prism::sched::testing;  // NOLINT: test builders.

TEST(AnnotationsTest, SeedDecisionInHamiLegacyGrammar) {
  const sched::DeviceConfig config = DefaultDeviceConfig();
  sched::GpuSpec gpu = Gpu("A100-PCIE-40GB", sched::GpuMode::kMig);
  gpu.uuid = "GPU-a100";
  sched::Engine engine = MakeEngine({Node("node-a", 32, 128, {gpu})}, config);
  sched::PodRequest pod = GpuPod("gpu-pod1", 2, 8000, 0, sched::kModeMig);
  sched::ScheduleResult r = engine.Schedule(pod);
  ASSERT_TRUE(r.scheduled);
  auto annotations = EncodeDecisionAnnotations(r.decision, engine.cluster());
  EXPECT_EQ(annotations["hami.io/vgpu-node"], "node-a");
  const std::string& devices = annotations["hami.io/vgpu-devices-allocated"];
  // Two 2g.10gb slots of geometry 1 (slots 1..3 are its 2g.10gb entries).
  EXPECT_THAT(devices, testing::MatchesRegex(
                           "GPU-a100\\[1-[123]\\],NVIDIA,10240,28:GPU-a100\\[1-[123]\\],NVIDIA,"
                           "10240,28:;"));
  EXPECT_EQ(annotations.count("hami.io/vgpu-mig-allocations"), 0u);
  // Round trip through either encoding.
  auto decoded = DecodeDecisionAnnotations(annotations, pod, engine.cluster());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_TRUE(engine.Apply("default/gpu-pod1", *decoded).ok());
  annotations.erase("prism.io/decision");
  sched::Engine fresh = MakeEngine({Node("node-a", 32, 128, {gpu})}, config);
  auto from_hami = DecodeDecisionAnnotations(annotations, pod, fresh.cluster());
  ASSERT_TRUE(from_hami.ok()) << from_hami.status();
  ASSERT_EQ(from_hami->mig.size(), 1u);  // The geometry still has to be applied.
  EXPECT_EQ(from_hami->mig[0].template_index, 1);
  EXPECT_TRUE(fresh.Apply("default/gpu-pod1", *from_hami).ok());
}

TEST(AnnotationsTest, PlacementModeUsesHamiV210Reservations) {
  sched::GpuSpec h100 = Gpu("H100-SXM5-80GB", sched::GpuMode::kMig);
  h100.uuid = "GPU-h100";
  sched::GpuSpec t4 = Gpu("T4", std::nullopt, 15360);
  t4.uuid = "GPU-t4";
  sched::Engine engine = MakeEngine({Node("n", 32, 128, {h100, t4})}, {});
  sched::PodRequest pod;
  pod.name = "p";
  sched::ContainerRequest init;
  init.name = "init";
  init.init = true;
  sched::ContainerRequest a;
  a.name = "a";
  a.gpu = {1, 20000, 0, 0};
  sched::ContainerRequest b;
  b.name = "b";
  b.gpu = {1, 3000, 0, 300};
  pod.containers = {init, a, b};
  pod.modes = sched::kModeAny;
  pod.use_types = {};
  sched::ScheduleResult r = engine.Schedule(pod);
  ASSERT_TRUE(r.scheduled) << r.Summary();
  auto annotations = EncodeDecisionAnnotations(r.decision, engine.cluster());
  const std::string devices = annotations["hami.io/vgpu-devices-allocated"];
  EXPECT_EQ(devices.front(), ';');  // The init container has no device.
  EXPECT_EQ(std::count(devices.begin(), devices.end(), ';'), 3);
  auto decoded = DecodeDecisionAnnotations(annotations, pod, engine.cluster());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->containers[1].devices.size(), 1u);
  if (annotations.count("hami.io/vgpu-mig-allocations")) {
    EXPECT_THAT(annotations["hami.io/vgpu-mig-allocations"], HasSubstr("\"containerIndex\":"));
  }
}

TEST(AnnotationsTest, MalformedAnnotationsAreErrors) {
  sched::Engine engine = MakeEngine({Node("n", 32, 128, 1, Gpu("T4", std::nullopt, 15360))}, {});
  sched::PodRequest pod = GpuPod("p", 1, 1000);
  EXPECT_EQ(DecodeDecisionAnnotations({}, pod, engine.cluster()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(
      DecodeDecisionAnnotations({{"prism.io/decision", "{not json"}}, pod, engine.cluster()).ok());
  EXPECT_FALSE(
      DecodeDecisionAnnotations({{"prism.io/decision", R"({"node":"zz"})"}}, pod, engine.cluster())
          .ok());
  EXPECT_FALSE(DecodeDecisionAnnotations(
                   {{"hami.io/vgpu-node", "n"}, {"hami.io/vgpu-devices-allocated", "x,y:;"}}, pod,
                   engine.cluster())
                   .ok());
  EXPECT_FALSE(
      DecodeDecisionAnnotations({{"hami.io/vgpu-node", "n"},
                                 {"hami.io/vgpu-devices-allocated", "GPU-nope,NVIDIA,1000,0:;"}},
                                pod, engine.cluster())
          .ok());
}

}  // namespace
}  // namespace prism::config
