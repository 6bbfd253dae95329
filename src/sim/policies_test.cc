#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sim/policy.h"
#include "sim/test_util.h"

namespace prism::sim {
namespace {

using testing::A100;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::Pod;
using testing::Profile;
using testing::SmallCluster;

Workload TestWorkload(const Cluster& c, std::vector<PodRequest> mix, uint64_t seed = 1) {
  Workload w;
  w.trace_pods = std::move(mix);
  w.node_rank.resize(c.node_count());
  for (int i = 0; i < c.node_count(); ++i) w.node_rank[i] = i;
  w.seed = seed;
  return w;
}

std::unique_ptr<Policy> Start(std::string_view name, const Cluster& c, const Workload& w) {
  auto p = MakeBuiltinPolicy(name);
  PRISM_CHECK(p.ok());
  RunContext ctx{&c, &w, MigMapping::kMemory, w.seed};
  absl::Status s = (*p)->Begin(ctx);
  PRISM_CHECK(s.ok());
  return *std::move(p);
}

TEST(PolicyRegistryTest, KnowsEveryBuiltinAndNamesThemOnError) {
  for (const std::string& name : BuiltinPolicyNames()) {
    auto p = MakeBuiltinPolicy(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ((*p)->name(), name);
    EXPECT_FALSE(BuiltinPolicyDescription(name).empty());
  }
  auto bad = MakeBuiltinPolicy("tetris");
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("unknown policy 'tetris' (known: random"));
}

TEST(BestFitTest, PicksTheNodeAndGpuWithLeastLeft) {
  Cluster c = SmallCluster({2, 2});
  ClusterState s(&c);
  ASSERT_TRUE(s.Place(Pod("x", 1, 600), Placement{1, {0}, {}}).ok());
  Workload w = TestWorkload(c, {});
  auto p = Start("best-fit", c, w);
  auto placement = p->Place(s, Pod("y", 1, 300));
  ASSERT_TRUE(placement.has_value());
  EXPECT_EQ(placement->node, 1);
  EXPECT_THAT(placement->gpus, ElementsAre(0));
  // A whole GPU goes to the lowest-indexed idle GPU of the fullest node.
  auto whole = p->Place(s, Pod("z", 1, 1000));
  EXPECT_EQ(whole->node, 1);
  EXPECT_THAT(whole->gpus, ElementsAre(1));
}

TEST(FgdTest, FillsTheGpuWhoseLeftoverNoTypicalPodCouldUse) {
  // Typical pods ask for 500 milli. Node 0 has a GPU with 500 left; node 1 one
  // with 700 left. A 200-milli pod on node 1 leaves exactly 500 there.
  Cluster c = SmallCluster({1, 1});
  ClusterState s(&c);
  ASSERT_TRUE(s.Place(Pod("a", 1, 500), Placement{0, {0}, {}}).ok());
  ASSERT_TRUE(s.Place(Pod("b", 1, 300), Placement{1, {0}, {}}).ok());
  Workload w = TestWorkload(c, {Pod("t", 1, 500)});
  auto p = Start("fgd", c, w);
  auto placement = p->Place(s, Pod("y", 1, 200));
  ASSERT_TRUE(placement.has_value());
  EXPECT_EQ(placement->node, 1);
}

TEST(FgdTest, BreaksTiesByNodeRank) {
  Cluster c = SmallCluster({1, 1, 1});
  ClusterState s(&c);
  Workload w = TestWorkload(c, {Pod("t", 1, 1000)});
  w.node_rank = {2, 0, 1};
  auto p = Start("fgd", c, w);
  EXPECT_EQ(p->Place(s, Pod("y", 1, 1000))->node, 1);
}

TEST(FgdPlusTest, PutsCpuOnlyPodsWhereNoGpuIsFree) {
  Cluster c = SmallCluster({2, 2, 2});
  ClusterState s(&c);
  ASSERT_TRUE(s.Place(Pod("a", 2, 1000), Placement{1, {0, 1}, {}}).ok());
  ASSERT_TRUE(s.Place(Pod("b", 1, 500, 30000), Placement{2, {0}, {}}).ok());
  Workload w = TestWorkload(c, {Pod("t", 1, 500), Pod("cpu", 0, 0, 8000)});
  auto p = Start("fgd+", c, w);
  EXPECT_EQ(p->name(), "fgd+");
  // Node 1 has no free GPU: CPU there strands nothing.
  EXPECT_EQ(p->Place(s, Pod("cpu", 0, 0, 8000))->node, 1);
}

TEST(FgdPlusTest, BreaksGpuScoreTiesByExactFragmentation) {
  // Typical pods: 94 % need 600 milli, 6 % need 630. GPU 0 has 645 left, GPU 1
  // 640. A 30-milli pod leaves 615 or 610, both useless to the 630 pods: the
  // fragmentation grows by 36.9 or 36.6 milli, the same quantized score (49).
  // FGD takes the first GPU; fgd+ the lower exact fragmentation, GPU 1.
  Cluster c = SmallCluster({2});
  ClusterState s(&c);
  ASSERT_TRUE(s.Place(Pod("x", 1, 355), Placement{0, {0}, {}}).ok());
  ASSERT_TRUE(s.Place(Pod("y", 1, 360), Placement{0, {1}, {}}).ok());
  std::vector<PodRequest> mix(94, Pod("t", 1, 600));
  for (int i = 0; i < 6; ++i) mix.push_back(Pod("u", 1, 630));
  Workload w = TestWorkload(c, mix);
  EXPECT_THAT(Start("fgd", c, w)->Place(s, Pod("z", 1, 30))->gpus, ElementsAre(0));
  EXPECT_THAT(Start("fgd+", c, w)->Place(s, Pod("z", 1, 30))->gpus, ElementsAre(1));
}

TEST(RandomTest, OnlyPicksFeasibleNodes) {
  Cluster c = SmallCluster({1, 1, 1, 1});
  ClusterState s(&c);
  ASSERT_TRUE(s.Place(Pod("a", 1, 1000), Placement{0, {0}, {}}).ok());
  ASSERT_TRUE(s.Place(Pod("b", 1, 1000), Placement{2, {0}, {}}).ok());
  Workload w = TestWorkload(c, {});
  auto p = Start("random", c, w);
  std::set<int> nodes;
  for (int i = 0; i < 64; ++i) nodes.insert(p->Place(s, Pod("y", 1, 500))->node);
  EXPECT_THAT(nodes, ElementsAre(1, 3));
}

TEST(SharedPoliciesTest, RejectMigClusters) {
  Cluster c = SmallCluster({1});
  c.EnableMig(&A100());
  Workload w = TestWorkload(c, {});
  auto p = MakeBuiltinPolicy("fgd");
  RunContext ctx{&c, &w, MigMapping::kMemory, 1};
  EXPECT_THAT(std::string((*p)->Begin(ctx).message()), HasSubstr("has MIG GPUs"));
}

TEST(HamiLegacyTest, FirstFitGeometriesFreezeWhileInUse) {
  Cluster c = SmallCluster({2});
  c.EnableMig(&A100());
  ClusterState s(&c);
  Workload w = TestWorkload(c, {});
  auto p = Start("hami-legacy", c, w);
  EXPECT_TRUE(p->keeps_idle_instances());
  // 100 milli needs 1 memory slice: the first geometry (7 x 1g.10gb) has a slot.
  PodRequest small = Pod("a", 1, 100);
  auto first = p->Place(s, small);
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->mig.size(), 1u);
  EXPECT_EQ(first->mig[0].gpu, 0);
  EXPECT_EQ(first->mig[0].create.size(), 7u);
  ASSERT_TRUE(s.Place(small, *first).ok());
  // 400 milli (4 slices) fits no slot of GPU 0's frozen geometry: GPU 1 takes
  // the first geometry with a big enough template, 2 x 3g.40gb.
  PodRequest medium = Pod("b", 1, 400);
  auto second = p->Place(s, medium);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->mig[0].gpu, 1);
  EXPECT_EQ(second->mig[0].create.size(), 2u);
  EXPECT_EQ(second->mig[0].use.profile, Profile(A100(), "3g.40gb"));
  ASSERT_TRUE(s.Place(medium, *second).ok());
  // Spread: the next small pod goes to the less used GPU 0, into a free slot.
  auto third = p->Place(s, Pod("c", 1, 100));
  ASSERT_TRUE(third.has_value());
  EXPECT_EQ(third->mig[0].gpu, 0);
  EXPECT_TRUE(third->mig[0].create.empty());
  // A whole GPU fits nowhere: both geometries are frozen.
  EXPECT_FALSE(p->Place(s, Pod("d", 1, 1000)).has_value());
}

TEST(HamiV210Test, SmallestProfileHighStartFor1gAnd3g) {
  Cluster c = SmallCluster({1});
  c.EnableMig(&A100());
  ClusterState s(&c);
  Workload w = TestWorkload(c, {});
  auto p = Start("hami-v2.10", c, w);
  EXPECT_FALSE(p->keeps_idle_instances());
  auto a = p->Place(s, Pod("a", 1, 100));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->mig[0].use.profile, Profile(A100(), "1g.10gb"));
  EXPECT_EQ(a->mig[0].use.start, 6);
  ASSERT_TRUE(s.Place(Pod("a", 1, 100), *a).ok());
  // 230 milli needs 2 memory slices: 2g.20gb (1g.20gb is not allowlisted), low start.
  auto b = p->Place(s, Pod("b", 1, 230));
  EXPECT_EQ(b->mig[0].use.profile, Profile(A100(), "2g.20gb"));
  EXPECT_EQ(b->mig[0].use.start, 0);
  // 3g.40gb prefers start 4, which 1g@6 blocks; start 0 is next.
  auto d = p->Place(s, Pod("d", 1, 400));
  EXPECT_EQ(d->mig[0].use.profile, Profile(A100(), "3g.40gb"));
  EXPECT_EQ(d->mig[0].use.start, 0);
}

TEST(HamiTest, NeedsMigGpusAndTheMemoryMapping) {
  Cluster shared = SmallCluster({1});
  Workload w = TestWorkload(shared, {});
  auto p = MakeBuiltinPolicy("hami-v2.10");
  RunContext ctx{&shared, &w, MigMapping::kMemory, 1};
  EXPECT_THAT(std::string((*p)->Begin(ctx).message()), HasSubstr("needs MIG GPUs"));
  Cluster mig = SmallCluster({1});
  mig.EnableMig(&A100());
  RunContext compute{&mig, &w, MigMapping::kCompute, 1};
  EXPECT_THAT(std::string((*p)->Begin(compute).message()), HasSubstr("memory only"));
}

TEST(HamiTest, CpuOnlyPodsGoToTheLeastAllocatedNode) {
  Cluster c = SmallCluster({1, 1});
  c.EnableMig(&A100());
  ClusterState s(&c);
  ASSERT_TRUE(s.Place(Pod("busy", 0, 0, 32000, 1024), Placement{0, {}, {}}).ok());
  Workload w = TestWorkload(c, {});
  auto p = Start("hami-legacy", c, w);
  EXPECT_EQ(p->Place(s, Pod("cpu", 0, 0, 4000))->node, 1);
}

}  // namespace
}  // namespace prism::sim
