// The MIG benchmark's shared variant (EnginePolicyOptions::mig_sharing, docs/mig-slices.md):
// small shares pack onto one shared instance, and the simulator's ClusterState keeps every
// shared instance within its memory, compute and slice count.
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sim/engine_policy.h"
#include "sim/simulator.h"
#include "sim/test_util.h"

namespace prism::sim {
namespace {

using testing::A100;
using ::testing::HasSubstr;
using testing::Pod;
using testing::Profile;
using testing::Sequence;
using testing::SmallCluster;

RunResult RunPolicy(const Cluster& c, const Workload& w, std::string_view policy_name) {
  auto policy = MakeEnginePolicyByName(policy_name);
  PRISM_CHECK(policy.ok());
  auto r = Simulate(c, w, **policy);
  PRISM_CHECK(r.ok());
  return *std::move(r);
}

TEST(EnginePolicyMigSharingTest, SmallSharesPackOntoOneSharedInstance) {
  Cluster c = SmallCluster({1});
  c.EnableMig(&A100());
  // 30 milli of an A100-80GB: 2458 MiB and 3 % of its compute each. Three fit one 1g.10gb
  // (7374 of 9728 MiB, 90 of 142 per-mille); the fourth does not (9832 MiB) and gets a new one.
  std::vector<PodRequest> pods;
  for (int i = 0; i < 4; ++i) pods.push_back(Pod("small-" + std::to_string(i), 1, 30));
  Workload w = Sequence(c, pods);

  RunResult shared = RunPolicy(c, w, "prism:mig_sharing=1");
  EXPECT_EQ(shared.rejected_placements, 0) << shared.first_rejection;
  EXPECT_EQ(shared.placed, 4);
  EXPECT_EQ(shared.mig.instances_created, 2);
  EXPECT_EQ(shared.final_used_gpu_milli, 120);  // Allocation counts the pods' shares.

  RunResult today = RunPolicy(c, w, "prism");
  EXPECT_EQ(today.rejected_placements, 0) << today.first_rejection;
  EXPECT_EQ(today.placed, 4);
  EXPECT_EQ(today.mig.instances_created, 4);  // One whole instance each.
  EXPECT_EQ(today.final_used_gpu_milli, 120);
}

TEST(EnginePolicyMigSharingTest, ComputeReservationDecidesWhatPacks) {
  Cluster c = SmallCluster({1});
  c.EnableMig(&A100());
  // 110 milli: 9012 MiB, 11 % of the GPU. Alone on a 1g.10gb as a slice; a second one does not
  // fit beside it (memory and compute), so each gets its own instance either way. Without the
  // compute reservation, two 50-milli pods (4096 MiB each) still share one.
  Workload w = Sequence(c, {Pod("a", 1, 110), Pod("b", 1, 110), Pod("c", 1, 50), Pod("d", 1, 50)});
  RunResult shared = RunPolicy(c, w, "prism:mig_sharing=1");
  EXPECT_EQ(shared.rejected_placements, 0) << shared.first_rejection;
  EXPECT_EQ(shared.placed, 4);
  EXPECT_EQ(shared.mig.instances_created, 3);
  RunResult memory_only = RunPolicy(c, w, "prism:mig_sharing=1;slice_cores=0");
  EXPECT_EQ(memory_only.rejected_placements, 0) << memory_only.first_rejection;
  EXPECT_EQ(memory_only.mig.instances_created, 3);
}

TEST(EnginePolicyMigSharingTest, WholeAndMultiGpuPodsStayWholeInstances) {
  Cluster c = SmallCluster({2});
  c.EnableMig(&A100());
  Workload w = Sequence(c, {Pod("whole", 1, 1000), Pod("s0", 1, 30), Pod("s1", 1, 30)});
  RunResult r = RunPolicy(c, w, "prism:mig_sharing=2");
  EXPECT_EQ(r.rejected_placements, 0) << r.first_rejection;
  EXPECT_EQ(r.placed, 3);
  EXPECT_EQ(r.mig.instances_created, 2);  // The 7g, and one shared 1g for both slices.
}

TEST(EnginePolicyMigSharingTest, TheLastSliceLeavingMakesTheInstanceIdle) {
  Cluster c = SmallCluster({1});
  c.EnableMig(&A100());
  Workload w = Sequence(c, {Pod("a", 1, 30), Pod("b", 1, 30), Pod("c", 1, 1000)});
  w.events = {{0, 0, true}, {1, 1, true}, {10, 0, false}, {20, 1, false}, {30, 2, true},
              {40, 2, false}};
  auto policy = MakeEnginePolicyByName("prism:mig_sharing=1");
  ASSERT_TRUE(policy.ok());
  auto r = Simulate(c, w, **policy);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rejected_placements, 0) << r->first_rejection;
  // With its last slice gone the 1g is idle (the engine's policy keeps idle instances in the
  // simulator), so the 7g may destroy it: it would be refused while a slice held it.
  EXPECT_EQ(r->placed, 3);
  EXPECT_EQ(r->mig.instances_created, 2);
  EXPECT_EQ(r->mig.instances_destroyed, 1);
  EXPECT_EQ(r->mig.busy_instances_moved, 0);
}

TEST(EnginePolicyMigSharingTest, KnobsAndTheirLimits) {
  EXPECT_THAT(std::string(MakeEnginePolicyByName("prism:mig_sharing=3").status().message()),
              HasSubstr("mig_sharing=3 is outside [0, 2]"));
  Cluster c = SmallCluster({1});
  c.EnableMig(&A100());
  Workload w = Sequence(c, {Pod("a", 1, 30)});
  auto policy = MakeEnginePolicyByName("prism:mig_sharing=1");
  ASSERT_TRUE(policy.ok());
  RunOptions compute;
  compute.mig_mapping = MigMapping::kCompute;
  EXPECT_THAT(std::string(Simulate(c, w, **policy, compute).status().message()),
              HasSubstr("mig_sharing needs the memory mapping"));
  Cluster plain = SmallCluster({1});
  EXPECT_THAT(std::string(Simulate(plain, Sequence(plain, {Pod("a", 1, 30)}), **policy)
                              .status()
                              .message()),
              HasSubstr("mig_sharing needs MIG GPUs"));
  // Level 1: the 1g profiles; level 2: every plain profile below the whole GPU.
  const mig::GpuModel& a100 = A100();
  EXPECT_EQ(SimShareableProfiles(a100, 1),
            (1u << Profile(a100, "1g.10gb")) | (1u << Profile(a100, "1g.20gb")));
  EXPECT_EQ(SimShareableProfiles(a100, 2),
            (1u << Profile(a100, "1g.10gb")) | (1u << Profile(a100, "1g.20gb")) |
                (1u << Profile(a100, "2g.20gb")) | (1u << Profile(a100, "3g.40gb")) |
                (1u << Profile(a100, "4g.40gb")));
}

// The simulator's own check of slices, whatever the policy.
TEST(ClusterStateSlicesTest, NothingOvercommitsASharedInstance) {
  Cluster c = SmallCluster({1});
  c.EnableMig(&A100());
  ClusterState s(&c);
  const mig::Instance one_g{Profile(A100(), "1g.10gb"), 0};
  auto slice = [&](int64_t memory, int cores, bool create) {
    Placement p;
    p.node = 0;
    MigAssignment a;
    a.gpu = 0;
    if (create) a.create.push_back(one_g);
    a.use = one_g;
    a.shared = true;
    a.memory_mib = memory;
    a.cores_permille = cores;
    p.mig.push_back(a);
    return p;
  };
  const PodRequest a = Pod("a", 1, 50);  // 4096 MiB.
  EXPECT_THAT(std::string(s.Place(a, slice(4000, 50, true)).message()),
              HasSubstr("do not serve 50 milli-GPU"));
  ASSERT_TRUE(s.Place(a, slice(4096, 50, true)).ok());
  EXPECT_EQ(s.busy_instances(0), 1);
  // Memory: 4096 + 6000 > 9728.
  EXPECT_THAT(std::string(s.Place(Pod("b", 1, 70), slice(6000, 70, false)).message()),
              HasSubstr("MiB of slices, the instance has 9728"));
  // Compute: 50 + 100 > 142.
  EXPECT_THAT(std::string(s.Place(Pod("c", 1, 50), slice(4096, 100, false)).message()),
              HasSubstr("per-mille of slices, the instance has 142"));
  // A whole instance never takes a shared one.
  Placement whole;
  whole.node = 0;
  whole.mig.push_back(MigAssignment{0, {}, {}, one_g});
  EXPECT_THAT(std::string(s.Place(Pod("w", 1, 100), whole).message()),
              HasSubstr("no idle instance"));
  const PodRequest b = Pod("b", 1, 50);
  ASSERT_TRUE(s.Place(b, slice(4096, 50, false)).ok());
  EXPECT_EQ(s.busy_instances(0), 1);
  EXPECT_EQ(s.used_gpu_milli(), 100);
  ASSERT_TRUE(s.Release(a, slice(4096, 50, false), /*keep_instances=*/false).ok());
  EXPECT_EQ(s.layout(0, 0).size(), 1u);  // b still holds it.
  ASSERT_TRUE(s.Release(b, slice(4096, 50, false), /*keep_instances=*/false).ok());
  EXPECT_TRUE(s.layout(0, 0).empty());
  EXPECT_EQ(s.busy_instances(0), 0);

  // A slice never joins an instance held whole.
  Placement held;
  held.node = 0;
  held.mig.push_back(MigAssignment{0, {}, {one_g}, one_g});
  ASSERT_TRUE(s.Place(Pod("w", 1, 100), held).ok());
  EXPECT_THAT(std::string(s.Place(a, slice(4096, 50, false)).message()),
              HasSubstr("the instance is held whole"));
}

}  // namespace
}  // namespace prism::sim
