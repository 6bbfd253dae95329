#include "sim/waste.h"

#include "gtest/gtest.h"

#include "sim/simulator.h"
#include "sim/test_util.h"

namespace prism::sim {
namespace {

using testing::Pod;
using testing::SmallCluster;

TEST(WasteTest, SortsFreeGpuIntoCategories) {
  // Node 0: one GPU with 190 free after an 810; node 1: CPU used up, its idle GPU
  // stranded; node 2: one GPU idle, one half used.
  std::vector<NodeSpec> nodes = {{"a", 64000, 262144, 1, 0, nullptr},
                                 {"b", 4000, 262144, 1, 0, nullptr},
                                 {"c", 64000, 262144, 2, 0, nullptr}};
  auto c = Cluster::FromNodes(nodes, {"M0"});
  ASSERT_TRUE(c.ok());
  ClusterState state(&*c);
  const PodRequest big = Pod("big", 1, 810, 1000);
  const PodRequest cpu_hog = Pod("hog", 0, 0, 4000);
  ASSERT_TRUE(state.Place(big, {0, {0}, {}}).ok());
  ASSERT_TRUE(state.Place(cpu_hog, {1, {}, {}}).ok());
  ASSERT_TRUE(state.Place(Pod("half", 1, 500, 1000), {2, {1}, {}}).ok());
  const std::vector<PodRequest> shapes = {Pod("s", 1, 300, 2000), big};
  const PodRequest failed = Pod("f", 1, 810, 1000);
  const PodRequest* failed_list[] = {&failed, &failed};
  WasteBreakdown w = ComputeWaste(state, shapes, failed_list, 100);
  EXPECT_EQ(w.capacity_milli, 4000);
  EXPECT_EQ(w.unallocated_milli, 4000 - 1310);
  EXPECT_EQ(w.holes_milli[0], 190);
  EXPECT_EQ(w.holes_milli[1], 0);
  EXPECT_EQ(w.holes_milli[2], 500);
  EXPECT_EQ(w.holes_milli[3], 1000);
  EXPECT_EQ(w.cpu_stranded_milli, 1000);
  EXPECT_EQ(w.memory_stranded_milli, 0);
  ASSERT_EQ(w.failed.size(), 1u);
  EXPECT_EQ(w.failed[0].shape, "1x810");
  EXPECT_EQ(w.failed[0].pods, 2);
  EXPECT_EQ(w.failed[0].gpu_milli, 1620);
}

TEST(WasteTest, MemoryStrandingIsToldApartFromCpu) {
  std::vector<NodeSpec> nodes = {{"a", 64000, 2048, 1, 0, nullptr}};
  auto c = Cluster::FromNodes(nodes, {"M0"});
  ASSERT_TRUE(c.ok());
  ClusterState state(&*c);
  const std::vector<PodRequest> shapes = {Pod("s", 1, 300, 1000, 4096)};
  WasteBreakdown w = ComputeWaste(state, shapes, {}, 50);
  EXPECT_EQ(w.memory_stranded_milli, 1000);
  EXPECT_EQ(w.cpu_stranded_milli, 0);
}

TEST(WasteTest, TheSimulatorSnapshotsAtTheRequestedPoints) {
  Cluster c = SmallCluster({1});
  Workload w;
  w.pods = {Pod("a", 1, 810), Pod("b", 1, 810), Pod("c", 1, 100)};
  w.trace_pods = w.pods;
  w.node_rank = {0};
  auto policy = MakeBuiltinPolicy("best-fit");
  ASSERT_TRUE(policy.ok());
  RunOptions options;
  options.waste_pcts = {100, 190};
  auto r = Simulate(c, w, **policy, options);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->waste.size(), 2u);
  // At 100 %: only the first pod (810 <= 1000), nothing failed.
  EXPECT_EQ(r->waste[0].arrived_pct, 100);
  EXPECT_EQ(r->waste[0].unallocated_milli, 190);
  EXPECT_TRUE(r->waste[0].failed.empty());
  // At 190 %: the second 810 failed, the 100 took a part of the hole.
  EXPECT_EQ(r->waste[1].unallocated_milli, 90);
  ASSERT_EQ(r->waste[1].failed.size(), 1u);
  EXPECT_EQ(r->waste[1].failed[0].shape, "1x810");
}

}  // namespace
}  // namespace prism::sim
