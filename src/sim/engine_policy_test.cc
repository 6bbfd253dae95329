#include "sim/engine_policy.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sim/simulator.h"
#include "sim/test_util.h"

namespace prism::sim {
namespace {

using testing::A100;
using ::testing::HasSubstr;
using testing::Pod;
using testing::Sequence;
using testing::SmallCluster;

TEST(EnginePolicyTest, PlacesSharedGpuPodsTheSimulatorAccepts) {
  Cluster c = SmallCluster({2, 4, 0});
  // Whatever the policy, these fit: the whole-GPU pod comes first and no
  // three shares exceed one GPU.
  std::vector<PodRequest> pods = {Pod("whole", 2, 1000)};
  for (int i = 0; i < 6; ++i) pods.push_back(Pod("share-" + std::to_string(i), 1, 100 + 50 * i));
  pods.push_back(Pod("cpu", 0, 0, 8000));
  pods.push_back(Pod("too-big", 8, 1000));
  Workload w = Sequence(c, pods);
  for (const std::string& name : EnginePolicyNames()) {
    auto policy = MakeEnginePolicyByName(name);
    ASSERT_TRUE(policy.ok()) << name;
    auto r = Simulate(c, w, **policy);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    EXPECT_EQ(r->rejected_placements, 0) << name << ": " << r->first_rejection;
    EXPECT_EQ(r->placed, 8) << name;
    EXPECT_EQ(r->failed, 1) << name;
  }
}

TEST(EnginePolicyTest, PlacesMigPodsAndCreatesInstancesPerPod) {
  Cluster c = SmallCluster({2});
  c.EnableMig(&A100());
  Workload w =
      Sequence(c, {Pod("a", 1, 100), Pod("b", 1, 400), Pod("c", 1, 1000), Pod("d", 1, 230)});
  auto policy = MakeEnginePolicyByName("prism");
  ASSERT_TRUE(policy.ok());
  auto r = Simulate(c, w, **policy);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rejected_placements, 0) << r->first_rejection;
  EXPECT_EQ(r->placed, 4);
  EXPECT_EQ(r->mig.instances_created, 4);
  EXPECT_EQ(r->mig.busy_instances_moved, 0);
}

TEST(EnginePolicyTest, ReleasesPodsInTheEngineOnDeparture) {
  Cluster c = SmallCluster({1});
  c.EnableMig(&A100());
  Workload w = Sequence(c, {Pod("a", 1, 1000), Pod("b", 1, 1000)});
  w.events = {{0, 0, true}, {10, 0, false}, {20, 1, true}, {30, 1, false}};
  auto policy = MakeEnginePolicyByName("prism");
  auto r = Simulate(c, w, **policy);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->placed, 2);
  EXPECT_EQ(r->mig.instances_destroyed, 1);
}

TEST(EnginePolicyTest, HonoursModelConstraintsOnMigClusters) {
  auto c = Cluster::FromTrace({{"n0", 64000, 262144, 1, "G2"}, {"n1", 64000, 262144, 1, "T4"}});
  ASSERT_TRUE(c.ok());
  c->EnableMig(&A100());
  PodRequest t4 = Pod("t4-only", 1, 500);
  t4.gpu_spec = "T4";
  t4.model_mask = c->ModelMask("T4");
  Workload w = Sequence(*c, {t4, t4});
  auto policy = MakeEnginePolicyByName("prism");
  auto r = Simulate(*c, w, **policy);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rejected_placements, 0) << r->first_rejection;
  EXPECT_EQ(r->placed, 2);  // Two 3g.40gb on the T4-labelled node.
}

TEST(EnginePolicyTest, ParsesKnobsAndRejectsUnknownOnes) {
  EXPECT_TRUE(MakeEnginePolicyByName("prism:pack_weight=0.1,frag_weight=2,gpu=binpack").ok());
  EXPECT_TRUE(MakeEnginePolicyByName("prism:cpu_pack=0,exact_gpu=0").ok());
  EXPECT_TRUE(MakeEnginePolicyByName("prism:cpu_pack=0;exact_gpu=0").ok());
  EXPECT_THAT(std::string(MakeEnginePolicyByName("prism:cpu_pack=0;speed").status().message()),
              HasSubstr("'speed' is not key=value"));
  EXPECT_THAT(std::string(MakeEnginePolicyByName("prism:speed=3").status().message()),
              HasSubstr("unknown policy option 'speed'"));
  EXPECT_THAT(std::string(MakeEnginePolicyByName("prism:pack_weight=x").status().message()),
              HasSubstr("'x' is not a number"));
  // Issue 13, finding 6: out-of-range knobs were taken as given.
  EXPECT_THAT(std::string(MakeEnginePolicyByName("prism:coverage=5").status().message()),
              HasSubstr("policy option coverage=5 is outside [0, 1]"));
  EXPECT_THAT(std::string(MakeEnginePolicyByName("prism:split=-3").status().message()),
              HasSubstr("policy option split=-3 is outside [1, 1000]"));
  EXPECT_THAT(std::string(MakeEnginePolicyByName("prism:frag_weight=nan").status().message()),
              HasSubstr("'nan' is not a number"));
  EXPECT_THAT(std::string(MakeEnginePolicyByName("prism:resolution=inf").status().message()),
              HasSubstr("'inf' is not a number"));
  EXPECT_TRUE(MakeEnginePolicyByName("prism:coverage=1,split=10,bestfit_cpu_share=0").ok());
  EXPECT_THAT(std::string(MakeEnginePolicyByName("prism-tetris").status().message()),
              HasSubstr("unknown engine policy 'prism-tetris'"));
  auto named = MakeBuiltinPolicy("prism:pack_weight=0.1");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ((*named)->name(), "prism:pack_weight=0.1");
}

}  // namespace
}  // namespace prism::sim
