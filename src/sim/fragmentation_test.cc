#include "sim/fragmentation.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sim/test_util.h"

namespace prism::sim {
namespace {

using testing::Pod;

std::vector<PodRequest> Repeat(const PodRequest& p, int n) { return std::vector<PodRequest>(n, p); }

TEST(TypicalPodsTest, TakesTheMostFrequentShapesUntilTheCoverage) {
  std::vector<PodRequest> pods = Repeat(Pod("a", 1, 500, 4000), 6);
  for (const PodRequest& p : Repeat(Pod("b", 1, 1000, 8000), 3)) pods.push_back(p);
  pods.push_back(Pod("c", 0, 0, 2000));
  std::vector<TypicalPod> t = TypicalPods(pods, 0.85);
  ASSERT_EQ(t.size(), 2u);  // 6 + 3 of 10 pods reach 85 %.
  EXPECT_EQ(t[0].gpu_milli, 500);
  EXPECT_DOUBLE_EQ(t[0].frequency, 6.0 / 9.0);
  EXPECT_DOUBLE_EQ(t[1].frequency, 3.0 / 9.0);
  EXPECT_EQ(TypicalPods(pods, 1.0).size(), 3u);
}

TEST(TypicalPodsTest, BreaksCountTiesByTheLargerShape) {
  std::vector<PodRequest> pods = {Pod("a", 1, 300, 1000), Pod("b", 1, 300, 2000)};
  std::vector<TypicalPod> t = TypicalPods(pods, 1.0);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].milli_cpu, 2000);
}

TEST(FragmentationTest, CountsFreeShareThatTypicalPodsCannotUse) {
  // One typical pod: 500 milli, 1 GPU, 1 core.
  FragmentationModel m(TypicalPods({Pod("a", 1, 500, 1000)}, 1.0));
  const std::vector<int> gpus = {1000, 300, 500};
  // Fits: only the 300 left on GPU 1 is unusable.
  EXPECT_DOUBLE_EQ(m.NodeFragmentation(0, 64000, gpus), 300);
  // Not enough CPU: all 1,800 free milli are unusable.
  EXPECT_DOUBLE_EQ(m.NodeFragmentation(0, 500, gpus), 1800);
  const std::vector<int> small = {400, 300};
  EXPECT_DOUBLE_EQ(m.NodeFragmentation(0, 64000, small), 700);
}

TEST(FragmentationTest, CpuOnlyPodsAndForbiddenModelsSeeAllFreeGpuAsFragment) {
  PodRequest t4_only = Pod("t4", 1, 200);
  t4_only.gpu_spec = "T4";
  t4_only.model_mask = 1u << 1;
  FragmentationModel m(TypicalPods({Pod("cpu", 0, 0), t4_only}, 1.0));
  const std::vector<int> gpus = {1000, 1000};
  EXPECT_DOUBLE_EQ(m.NodeFragmentation(/*model=*/0, 64000, gpus), 2000);
  EXPECT_DOUBLE_EQ(m.NodeFragmentation(/*model=*/1, 64000, gpus), 1000);
}

TEST(FragmentationTest, ScoreIsASigmoidOfTheFragmentationDrop) {
  EXPECT_EQ(FragmentationModel::Score(100, 100), 50);
  EXPECT_EQ(FragmentationModel::Score(2000, 0), 88);  // 100 * sigmoid(2) = 88.08.
  EXPECT_EQ(FragmentationModel::Score(0, 2000), 11);
}

}  // namespace
}  // namespace prism::sim
