// The engine's MIG node terms (engine_mig.cc): PolicyOptions::mig_idle_gpu sends a MIG pod to
// the node that keeps the fewest idle GPUs when nodes otherwise score alike (issue 35).
#include "gtest/gtest.h"

#include "core/sched/test_util.h"

namespace prism::sched {
namespace {

using testing::Gpu;
using testing::GpuPod;
using testing::MakeEngine;
using testing::Node;

constexpr int64_t kWholeA100 = 70000;  // MiB: only a 7g.80gb holds it on an A100-SXM4-80GB.

// Two nodes of two A100-80GB MIG GPUs: "a" (index 0, wins ties) idle, "b" with GPU 0 held by an
// instance in use.
Engine TwoNodes(int32_t mig_idle_gpu) {
  GpuSpec idle = Gpu("A100-SXM4-80GB", GpuMode::kMig);
  GpuSpec held = idle;
  held.instances = {{"7g.80gb", 0, true}};
  EngineOptions options;
  options.policy.mig_idle_gpu = mig_idle_gpu;
  return MakeEngine({Node("a", 64, 256, {idle, idle}), Node("b", 64, 256, {held, idle})},
                    DeviceConfig{}, options);
}

// A whole-GPU pod then a two-GPU pod: with the term the first takes b's last idle GPU and a stays
// whole for the second; without it the first splits a (the lower index) and the second fits
// nowhere, though the cluster had room for both.
TEST(MigIdleGpuTest, KeepsAnIdleNodeWholeForAMultiGpuPod) {
  // 50 milli per idle GPU: more than one step of the quantized score near a zero change (the
  // default 5 tips only changes close to a step, docs/scheduling.md#dynamic-mig).
  Engine engine = TwoNodes(/*mig_idle_gpu=*/50);
  const ScheduleResult one = engine.Place(GpuPod("one", 1, kWholeA100, 0, kModeMig));
  ASSERT_TRUE(one.scheduled) << one.Summary();
  EXPECT_EQ(one.decision.node_name, "b");
  const ScheduleResult two = engine.Place(GpuPod("two", 2, kWholeA100, 0, kModeMig));
  ASSERT_TRUE(two.scheduled) << two.Summary();
  EXPECT_EQ(two.decision.node_name, "a");
}

TEST(MigIdleGpuTest, WithoutTheTermTheSecondPodFails) {
  Engine engine = TwoNodes(/*mig_idle_gpu=*/0);
  const ScheduleResult one = engine.Place(GpuPod("one", 1, kWholeA100, 0, kModeMig));
  ASSERT_TRUE(one.scheduled) << one.Summary();
  EXPECT_EQ(one.decision.node_name, "a");
  EXPECT_FALSE(engine.Place(GpuPod("two", 2, kWholeA100, 0, kModeMig)).scheduled);
}

}  // namespace
}  // namespace prism::sched
