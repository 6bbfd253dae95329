#include "core/sched/policy.h"

#include "gtest/gtest.h"

namespace prism::sched {
namespace {

TEST(PolicyTest, ParsesNodePolicies) {
  EXPECT_EQ(*ParseNodePolicy("Binpack"), NodePolicy::kBinpack);
  EXPECT_EQ(*ParseNodePolicy("best-fit"), NodePolicy::kBestFit);
  EXPECT_EQ(*ParseNodePolicy("prism"), NodePolicy::kPrism);
  EXPECT_FALSE(ParseNodePolicy("random").ok());
}

TEST(PolicyTest, ParsesHamiGpuPolicyChains) {
  EXPECT_EQ(*ParseGpuPolicy("binpack,numa"), GpuPolicy::kBinpack);
  EXPECT_EQ(*ParseGpuPolicy("numa,spread"), GpuPolicy::kSpread);
  EXPECT_EQ(*ParseGpuPolicy("topology-aware"), GpuPolicy::kSpread);
  EXPECT_FALSE(ParseGpuPolicy("bogus").ok());
  EXPECT_FALSE(ParseGpuPolicy("").ok());
}

TEST(PolicyTest, TypicalShapesCoverTheWorkload) {
  std::vector<PodRequest> pods;
  for (int i = 0; i < 10; ++i) {
    PodRequest p;
    ContainerRequest c;
    c.cpu_milli = 1000;
    c.gpu.count = 1;
    c.gpu.memory_permille = i < 7 ? 500 : (i < 9 ? 250 : 1000);
    p.containers.push_back(c);
    pods.push_back(p);
  }
  TargetWorkload w = TargetWorkload::FromPods(pods, 0.85);
  ASSERT_EQ(w.shapes.size(), 2u);  // 70 % + 20 % >= 85 %.
  EXPECT_EQ(w.shapes[0].gpu.memory_permille, 500);
  EXPECT_DOUBLE_EQ(w.shapes[0].weight, 0.7);
  EXPECT_EQ(w.shapes[1].gpu.memory_permille, 250);
}

}  // namespace
}  // namespace prism::sched
