#include "sim/cluster.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sim/test_util.h"

namespace prism::sim {
namespace {

using testing::A100;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::Pod;
using testing::Profile;
using testing::SmallCluster;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(ClusterTest, InternsModelsAndMasksSpecs) {
  auto c = Cluster::FromTrace({{"a", 1000, 1, 2, "T4"},
                               {"b", 1000, 1, 8, "V100M16"},
                               {"c", 1000, 1, 0, ""},
                               {"d", 1000, 1, 1, "T4"}});
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(c->models(), ElementsAre("T4", "V100M16"));
  EXPECT_EQ(c->total_gpus(), 11);
  EXPECT_EQ(c->gpu_offset(3), 10);
  EXPECT_EQ(c->ModelMask(""), ~0ull);
  EXPECT_EQ(c->ModelMask("V100M16|V100M32"), 2u);
  EXPECT_EQ(c->ModelMask("G1"), 0u);
}

TEST(ClusterTest, RejectsDuplicateNodes) {
  auto c = Cluster::FromTrace({{"a", 1, 1, 0, ""}, {"a", 1, 1, 0, ""}});
  EXPECT_THAT(Message(c.status()), HasSubstr("node 'a' appears twice"));
}

TEST(ClusterStateTest, PlaceAndReleaseAccountForCpuMemoryAndGpuShares) {
  Cluster c = SmallCluster({2});
  ClusterState s(&c);
  PodRequest half = Pod("half", 1, 500, 4000, 2048);
  ASSERT_TRUE(s.Place(half, Placement{0, {1}, {}}).ok());
  EXPECT_EQ(s.cpu_left(0), 60000);
  EXPECT_EQ(s.memory_left(0), 262144 - 2048);
  EXPECT_THAT(s.gpu_left(0), ElementsAre(1000, 500));
  EXPECT_EQ(s.used_gpu_milli(), 500);
  const uint64_t v = s.version(0);
  ASSERT_TRUE(s.Release(half, Placement{0, {1}, {}}, false).ok());
  EXPECT_THAT(s.gpu_left(0), ElementsAre(1000, 1000));
  EXPECT_EQ(s.used_gpu_milli(), 0);
  EXPECT_GT(s.version(0), v);
}

TEST(ClusterStateTest, RejectsOverCommitAndLeavesTheStateUnchanged) {
  Cluster c = SmallCluster({2});
  ClusterState s(&c);
  ASSERT_TRUE(s.Place(Pod("a", 1, 700), Placement{0, {0}, {}}).ok());
  EXPECT_THAT(Message(s.Place(Pod("b", 1, 400), Placement{0, {0}, {}})),
              HasSubstr("GPU 0 has 300 milli left, the pod needs 400"));
  EXPECT_THAT(Message(s.Place(Pod("c", 2, 1000), Placement{0, {1, 1}, {}})),
              HasSubstr("a GPU repeats"));
  EXPECT_THAT(Message(s.Place(Pod("d", 2, 1000), Placement{0, {1}, {}})),
              HasSubstr("1 GPUs given, 2 requested"));
  EXPECT_THAT(Message(s.Place(Pod("e", 0, 0, 65000), Placement{0, {}, {}})),
              HasSubstr("not enough CPU or memory"));
  PodRequest wrong_model = Pod("f", 1, 100);
  wrong_model.gpu_spec = "T4";
  wrong_model.model_mask = 0;
  EXPECT_THAT(Message(s.Place(wrong_model, Placement{0, {1}, {}})),
              HasSubstr("GPU model not in 'T4'"));
  EXPECT_THAT(s.gpu_left(0), ElementsAre(300, 1000));
  EXPECT_EQ(s.cpu_left(0), 63000);
}

TEST(ClusterStateTest, MigPlacementCreatesUsesAndDestroysInstances) {
  Cluster c = SmallCluster({1});
  c.EnableMig(&A100());
  ClusterState s(&c);
  const int p3 = Profile(A100(), "3g.40gb");
  PodRequest pod = Pod("p", 1, 400);
  MigAssignment a;
  a.gpu = 0;
  a.create = {mig::Instance{p3, 4}};
  a.use = mig::Instance{p3, 4};
  Placement placement{0, {}, {a}};
  ASSERT_TRUE(s.Place(pod, placement).ok());
  EXPECT_EQ(s.layout(0, 0).size(), 1u);
  EXPECT_TRUE(s.layout(0, 0)[0].busy);
  EXPECT_EQ(s.busy_instances(0), 1);
  EXPECT_EQ(s.busy_slices(), 3);
  EXPECT_EQ(s.counters().instances_created, 1);
  ASSERT_TRUE(s.Release(pod, placement, /*keep_instances=*/false).ok());
  EXPECT_TRUE(s.layout(0, 0).empty());
  EXPECT_EQ(s.counters().instances_destroyed, 1);
}

TEST(ClusterStateTest, KeptInstancesCanBeReusedWithoutOperations) {
  Cluster c = SmallCluster({1});
  c.EnableMig(&A100());
  ClusterState s(&c);
  const int p1 = Profile(A100(), "1g.10gb");
  MigAssignment make{0, {}, {mig::Instance{p1, 6}}, mig::Instance{p1, 6}};
  ASSERT_TRUE(s.Place(Pod("a", 1, 100), Placement{0, {}, {make}}).ok());
  ASSERT_TRUE(s.Release(Pod("a", 1, 100), Placement{0, {}, {make}}, true).ok());
  MigAssignment reuse{0, {}, {}, mig::Instance{p1, 6}};
  ASSERT_TRUE(s.Place(Pod("b", 1, 100), Placement{0, {}, {reuse}}).ok());
  EXPECT_EQ(s.counters().instances_created, 1);
  EXPECT_EQ(s.counters().instances_destroyed, 0);
}

TEST(ClusterStateTest, RefusesToDestroyAnInstanceInUseAndCountsTheAttempt) {
  Cluster c = SmallCluster({1});
  c.EnableMig(&A100());
  ClusterState s(&c);
  const int p3 = Profile(A100(), "3g.40gb");
  const int p7 = Profile(A100(), "7g.80gb");
  MigAssignment a{0, {}, {mig::Instance{p3, 0}}, mig::Instance{p3, 0}};
  ASSERT_TRUE(s.Place(Pod("a", 1, 400), Placement{0, {}, {a}}).ok());
  MigAssignment evict{0, {mig::Instance{p3, 0}}, {mig::Instance{p7, 0}}, mig::Instance{p7, 0}};
  EXPECT_THAT(Message(s.Place(Pod("b", 1, 1000), Placement{0, {}, {evict}})),
              HasSubstr("instance 3g.40gb@0 is in use"));
  EXPECT_EQ(s.counters().busy_instances_moved, 1);
  EXPECT_EQ(s.layout(0, 0).size(), 1u);
}

TEST(ClusterStateTest, RejectsIllegalLayoutsAndTooSmallInstances) {
  Cluster c = SmallCluster({1});
  c.EnableMig(&A100());
  ClusterState s(&c);
  const int p1 = Profile(A100(), "1g.10gb");
  const int p4 = Profile(A100(), "4g.40gb");
  MigAssignment bad_start{0, {}, {mig::Instance{p4, 4}}, mig::Instance{p4, 4}};
  EXPECT_THAT(Message(s.Place(Pod("a", 1, 400), Placement{0, {}, {bad_start}})),
              HasSubstr("cannot create 4g.40gb@4"));
  MigAssignment small{0, {}, {mig::Instance{p1, 0}}, mig::Instance{p1, 0}};
  EXPECT_THAT(Message(s.Place(Pod("b", 1, 400), Placement{0, {}, {small}})),
              HasSubstr("1g.10gb@0 is too small for 400 milli-GPU (memory mapping)"));
  EXPECT_THAT(Message(s.Place(Pod("c", 1, 400), Placement{0, {0}, {}})),
              HasSubstr("GPU 0 is a MIG GPU"));
  EXPECT_TRUE(s.layout(0, 0).empty());
}

TEST(MigMappingTest, MapsSharesToProfilesByMemoryOrCompute) {
  const mig::GpuModel& m = A100();
  // 3g.40gb holds 4 of the 8 memory slices: up to 500 milli.
  EXPECT_TRUE(ProfileServes(m, Profile(m, "3g.40gb"), 500, MigMapping::kMemory));
  EXPECT_FALSE(ProfileServes(m, Profile(m, "3g.40gb"), 501, MigMapping::kMemory));
  EXPECT_TRUE(ProfileServes(m, Profile(m, "1g.20gb"), 250, MigMapping::kMemory));
  EXPECT_FALSE(ProfileServes(m, Profile(m, "1g.10gb"), 126, MigMapping::kMemory));
  EXPECT_TRUE(ProfileServes(m, Profile(m, "7g.80gb"), 1000, MigMapping::kMemory));
  EXPECT_FALSE(ProfileServes(m, Profile(m, "4g.40gb"), 1000, MigMapping::kMemory));
  // Compute: ceil(470 * 7 / 1000) = 4 slices.
  EXPECT_TRUE(ProfileServes(m, Profile(m, "4g.40gb"), 470, MigMapping::kCompute));
  EXPECT_FALSE(ProfileServes(m, Profile(m, "3g.40gb"), 470, MigMapping::kCompute));
  EXPECT_EQ(MemorySlicesNeeded(m, 1000), 8);
  EXPECT_EQ(MemorySlicesNeeded(m, 470), 4);
}

}  // namespace
}  // namespace prism::sim
