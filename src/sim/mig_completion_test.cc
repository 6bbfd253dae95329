#include "sim/mig_completion.h"

#include <vector>

#include "gtest/gtest.h"

#include "sim/packing_check.h"
#include "sim/test_util.h"

namespace prism::sim {
namespace {

using testing::A100;
using testing::Pod;
using testing::Profile;
using testing::SmallCluster;

// The completion, re-checked from scratch.
OfflinePacking Completed(const Cluster& c, const std::vector<PodRequest>& pods,
                         const OfflinePacking& start = {}) {
  OfflinePacking out = CompleteMigPacking(c, pods, start, MigMapping::kMemory);
  auto checked = CheckPacking(c, pods, out.placements, MigMapping::kMemory);
  EXPECT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(checked.value_or(-1), out.gpu_milli);
  return out;
}

TEST(MigCompletionTest, InsertsLargestFirstByTheCatalogsRules) {
  // A100-80GB, memory mapping: the two 500s take 4 memory slices each; the 125 (1g.10gb)
  // then finds no slice (ceiling_test's MigLayoutsLimitTheBound: 1000 at most).
  Cluster c = SmallCluster({1});
  c.EnableMig(&A100());
  const std::vector<PodRequest> pods = {Pod("s", 1, 125), Pod("a", 1, 500), Pod("b", 1, 500)};
  const OfflinePacking out = Completed(c, pods);
  EXPECT_EQ(out.gpu_milli, 1000);
  EXPECT_EQ(out.placed, 2);
}

TEST(MigCompletionTest, KeepsTheStartAndFillsTheTightestGpu) {
  // GPU 0 already holds a 3g.40gb; a 1g.10gb pod goes beside it, not on the idle GPU 1.
  Cluster c = SmallCluster({2});
  c.EnableMig(&A100());
  const std::vector<PodRequest> pods = {Pod("a", 1, 500), Pod("s", 1, 100)};
  OfflinePacking start;
  Placement p;
  p.node = 0;
  MigAssignment a;
  a.gpu = 0;
  a.use = mig::Instance{Profile(A100(), "3g.40gb"), 4, false, -1};
  a.create = {a.use};
  p.mig.push_back(a);
  start.placements.emplace_back(0, p);
  start.gpu_milli = 500;
  start.placed = 1;
  const OfflinePacking out = Completed(c, pods, start);
  ASSERT_EQ(out.placements.size(), 2u);
  EXPECT_EQ(out.gpu_milli, 600);
  EXPECT_EQ(out.placements[1].second.mig[0].gpu, 0);
  EXPECT_EQ(out.placements[1].second.mig[0].use.profile, Profile(A100(), "1g.10gb"));
}

TEST(MigCompletionTest, GivesAMultiGpuPodAnInstanceOnEachOfItsGpus) {
  Cluster c = SmallCluster({2, 1});
  c.EnableMig(&A100());
  const OfflinePacking out = Completed(c, {Pod("w", 2, 1000), Pod("x", 2, 1000)});
  EXPECT_EQ(out.placed, 1);  // Only node 0 has two GPUs.
  EXPECT_EQ(out.gpu_milli, 2000);
}

}  // namespace
}  // namespace prism::sim
