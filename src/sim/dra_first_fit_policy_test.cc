// The DRA baselines of `prism sim`: dra-first-fit (kube-scheduler + the DRA allocator's first
// fit) and prism-dra (Prism's engine through the DRA mapping), issue 32.
#include <algorithm>
#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "base/check.h"
#include "sim/builtin_policies.h"
#include "sim/policy.h"
#include "sim/rng.h"
#include "sim/simulator.h"
#include "sim/test_util.h"
#include "sim/trace.h"
#include "sim/workload.h"

namespace prism::sim {
namespace {

using testing::A100;
using ::testing::HasSubstr;
using testing::Pod;
using testing::Profile;
using testing::SmallCluster;

Workload Sequence(const Cluster& c, std::vector<PodRequest> pods, uint64_t seed = 1) {
  Workload w;
  w.trace_pods = pods;
  w.pods = std::move(pods);
  for (int i = 0; i < c.node_count(); ++i) w.node_rank.push_back(i);
  w.seed = seed;
  return w;
}

// Records every placement a policy makes, by pod, in order.
class Recorder : public Policy {
 public:
  explicit Recorder(std::unique_ptr<Policy> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return inner_->name(); }
  absl::Status Begin(const RunContext& context) override {
    log_.clear();
    return inner_->Begin(context);
  }
  std::optional<Placement> Place(const ClusterState& state, const PodRequest& pod) override {
    std::optional<Placement> p = inner_->Place(state, pod);
    log_.push_back(Describe(pod, p));
    return p;
  }
  absl::Status Placed(const ClusterState& s, const PodRequest& pod, const Placement& p) override {
    return inner_->Placed(s, pod, p);
  }
  absl::Status Released(const ClusterState& s, const PodRequest& pod, const Placement& p) override {
    return inner_->Released(s, pod, p);
  }
  bool keeps_idle_instances() const override { return inner_->keeps_idle_instances(); }
  const std::vector<std::string>& log() const { return log_; }

 private:
  static std::string Describe(const PodRequest& pod, const std::optional<Placement>& p) {
    std::string out = pod.name + " -> ";
    if (!p) return out + "none";
    out += "node " + std::to_string(p->node);
    for (int g : p->gpus) out += " gpu " + std::to_string(g);
    for (const MigAssignment& a : p->mig) {
      out += " mig gpu " + std::to_string(a.gpu) + " use " + std::to_string(a.use.profile) + "@" +
             std::to_string(a.use.start);
      for (const mig::Instance& i : a.destroy)
        out += " -" + std::to_string(i.profile) + "@" + std::to_string(i.start);
      for (const mig::Instance& i : a.create)
        out += " +" + std::to_string(i.profile) + "@" + std::to_string(i.start);
    }
    return out;
  }

  std::unique_ptr<Policy> inner_;
  std::vector<std::string> log_;
};

std::unique_ptr<Recorder> Recorded(std::string_view name) {
  auto p = MakeBuiltinPolicy(name);
  PRISM_CHECK(p.ok());
  return std::make_unique<Recorder>(*std::move(p));
}

// --- dra-first-fit: device choice.

TEST(DraFirstFitTest, MigDevicesAreInByteWiseNameOrder) {
  // On an A100-SXM4-80GB: 1g.10gb is profile ID 19, so the first device of GPU 0 is
  // gpu-0-mig-1g10gb-19-0; "gpu-10-..." sorts before "gpu-2-..." (names, not numbers).
  std::vector<DraMigDevice> d = DraMigDevicesInNameOrder(A100(), 11);
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(d.front().name, "gpu-0-mig-1g10gb-19-0");
  EXPECT_EQ(d.front().gpu, 0);
  EXPECT_EQ(d.front().start, 0);
  for (size_t i = 1; i < d.size(); ++i) EXPECT_LT(d[i - 1].name, d[i].name);
  auto first_of = [&](int gpu) {
    return std::find_if(d.begin(), d.end(), [&](const DraMigDevice& x) { return x.gpu == gpu; }) -
           d.begin();
  };
  EXPECT_LT(first_of(10), first_of(2));
  // Within a GPU: 1g10gb, 1g10gb-me, 1g20gb, 2g20gb, 3g40gb, 4g40gb, 7g80gb.
  EXPECT_EQ(DraFirstFitProfile(A100(), 100, MigMapping::kMemory), Profile(A100(), "1g.10gb"));
  EXPECT_EQ(DraFirstFitProfile(A100(), 200, MigMapping::kMemory), Profile(A100(), "1g.20gb"));
  EXPECT_EQ(DraFirstFitProfile(A100(), 1000, MigMapping::kMemory), Profile(A100(), "7g.80gb"));
}

TEST(DraFirstFitTest, OnAnEmptyA100A1g5gbGetsTheFirstName) {
  // A100-SXM4-40GB: a 1g.5gb share (<= 125 milli) takes gpu-0-mig-1g5gb-19-0, i.e. GPU 0 at
  // start 0, the first of the node's names that the claim's profile selects.
  const mig::GpuModel* a100_40 = mig::FindModel("A100-SXM4-40GB");
  ASSERT_NE(a100_40, nullptr);
  const int p1 = Profile(*a100_40, "1g.5gb");
  std::vector<DraMigDevice> d = DraMigDevicesInNameOrder(*a100_40, 2);
  auto first =
      std::find_if(d.begin(), d.end(), [&](const DraMigDevice& x) { return x.profile == p1; });
  ASSERT_NE(first, d.end());
  EXPECT_EQ(first->name, "gpu-0-mig-1g5gb-19-0");
  Cluster c = SmallCluster({2});
  c.EnableMig(a100_40);
  auto policy = Recorded("dra-first-fit");
  auto r = Simulate(c, Sequence(c, {Pod("small", 1, 100)}), *policy);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(policy->log()[0], "small -> node 0 mig gpu 0 use " + std::to_string(p1) + "@0 +" +
                                  std::to_string(p1) + "@0");
}

TEST(DraFirstFitTest, MigSharesTakeTheFirstNameThatFits) {
  Cluster c = SmallCluster({2});
  c.EnableMig(&A100());
  // Seven 1g.10gb fill GPU 0 at starts 0..6 (gpu-0-mig-1g10gb-19-0 .. -6); the eighth goes to
  // GPU 1 start 0; a 3g.40gb then goes to GPU 1 start 4 (3g40gb-9-0 overlaps 1g@0).
  std::vector<PodRequest> pods;
  for (int i = 0; i < 8; ++i) pods.push_back(Pod("small-" + std::to_string(i), 1, 100));
  pods.push_back(Pod("mid", 1, 400));
  Workload w = Sequence(c, pods);
  auto policy = Recorded("dra-first-fit");
  auto r = Simulate(c, w, *policy);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rejected_placements, 0) << r->first_rejection;
  const int p1 = Profile(A100(), "1g.10gb"), p3 = Profile(A100(), "3g.40gb");
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(policy->log()[i], "small-" + std::to_string(i) + " -> node 0 mig gpu 0 use " +
                                    std::to_string(p1) + "@" + std::to_string(i) + " +" +
                                    std::to_string(p1) + "@" + std::to_string(i));
  }
  EXPECT_EQ(policy->log()[7], "small-7 -> node 0 mig gpu 1 use " + std::to_string(p1) + "@0 +" +
                                  std::to_string(p1) + "@0");
  EXPECT_EQ(policy->log()[8], "mid -> node 0 mig gpu 1 use " + std::to_string(p3) + "@4 +" +
                                  std::to_string(p3) + "@4");
}

TEST(DraFirstFitTest, ConsumableCapacityFirstFitsAndNeverOverCommits) {
  Cluster c = SmallCluster({4});
  // Name order gpu-0..gpu-3: 600 -> 0, 600 -> 1, 400 -> 0 (0 has 400 left), whole -> 2,
  // 500 -> 3, whole -> none (no GPU unshared), 500 -> 3.
  Workload w =
      Sequence(c, {Pod("a", 1, 600), Pod("b", 1, 600), Pod("c", 1, 400), Pod("d", 1, 1000),
                   Pod("e", 1, 500), Pod("f", 1, 1000), Pod("g", 1, 500), Pod("h", 1, 100)});
  auto policy = Recorded("dra-first-fit");
  auto r = Simulate(c, w, *policy);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rejected_placements, 0) << r->first_rejection;
  EXPECT_THAT(policy->log(),
              ::testing::ElementsAre("a -> node 0 gpu 0", "b -> node 0 gpu 1", "c -> node 0 gpu 0",
                                     "d -> node 0 gpu 2", "e -> node 0 gpu 3", "f -> none",
                                     "g -> node 0 gpu 3", "h -> node 0 gpu 1"));
  // Random shares on several nodes: the simulator rejects any over-commitment.
  Cluster big = SmallCluster({8, 4, 2, 0});
  std::vector<PodRequest> pods;
  Rng rng(7);
  for (int i = 0; i < 400; ++i) {
    const int gpus = rng.Uniform(10) == 0 ? 1 + static_cast<int>(rng.Uniform(4)) : 1;
    const int milli = gpus > 1 ? 1000 : 50 * (1 + static_cast<int>(rng.Uniform(20)));
    pods.push_back(Pod("p" + std::to_string(i), rng.Uniform(8) == 0 ? 0 : gpus, milli,
                       500 * static_cast<int64_t>(rng.Uniform(8)), 512));
  }
  auto any = MakeBuiltinPolicy("dra-first-fit");
  ASSERT_TRUE(any.ok());
  auto rr = Simulate(big, Sequence(big, pods), **any);
  ASSERT_TRUE(rr.ok()) << rr.status();
  EXPECT_EQ(rr->rejected_placements, 0) << rr->first_rejection;
  EXPECT_GT(rr->placed, 50);
  EXPECT_LE(rr->final_used_gpu_milli, big.total_gpu_milli());
}

// --- dra-first-fit: node choice.

TEST(DraFirstFitTest, NodeScoreIsLeastAllocatedPlusBalanced) {
  // 4 cores, 8 GiB; 1 core and 2 GiB requested; the pod asks 1 core and 1 GiB.
  // LeastAllocated: cpu (4000-2000)*100/4000 = 50, memory (8192-3072)*100/8192 = 62 (62.5
  // truncated), (50+62)/2 = 56. Balanced: fractions 0.5 and 0.375, std 0.0625, 93.75 -> 93.
  KubeSchedulerNodeLoad n{4000, 8192, 1000, 2048, 1000, 2048};
  EXPECT_EQ(KubeSchedulerNodeScore(n, 1000, 1024), 56 + 93);
  // A pod without requests: LeastAllocated counts 100m / 200 MiB, Balanced is skipped.
  // cpu (4000-1100)*100/4000 = 72, memory (8192-2248)*100/8192 = 72 (72.56): 72 + 0.
  EXPECT_EQ(KubeSchedulerNodeScore(n, 0, 0), 72);
  // Over capacity: LeastAllocated 0 for that resource, the fraction capped at 1. The pod asks
  // 500m and no memory: LeastAllocated cpu 1500 > 1000 -> 0, memory 512 + 200 (the default)
  // -> (1024-712)*100/1024 = 30, (0+30)/2 = 15; Balanced: cpu 1 (capped), memory 0.5, std
  // 0.25 -> 75.
  KubeSchedulerNodeLoad full{1000, 1024, 1000, 512, 1000, 512};
  EXPECT_EQ(KubeSchedulerNodeScore(full, 500, 0), 15 + 75);
  // Sampling: all nodes below 100; 1,213 nodes -> 41 % = 497; 5,000 -> 10 % = 500.
  EXPECT_EQ(KubeSchedulerNodesToFind(80), 80);
  EXPECT_EQ(KubeSchedulerNodesToFind(1213), 497);
  EXPECT_EQ(KubeSchedulerNodesToFind(5000), 500);
  EXPECT_EQ(KubeSchedulerNodesToFind(150), 100);
}

TEST(DraFirstFitTest, PicksTheBestScoredNode) {
  // A big CPU pod lands on one of two empty nodes (a tie); a GPU pod then goes to the other,
  // least allocated node (64 cores, 256 GiB: LeastAllocated 98 + Balanced 99 there against
  // 73 + 74), and a small CPU-only pod too, whatever the seed.
  Cluster c = SmallCluster({1, 1});
  for (uint64_t seed : {1, 2, 3, 4, 5, 6}) {
    Workload w = Sequence(c,
                          {Pod("big", 0, 0, 32000, 1024), Pod("gpu", 1, 500, 1000, 1024),
                           Pod("cpu", 0, 0, 1000, 1024)},
                          seed);
    auto policy = Recorded("dra-first-fit");
    auto r = Simulate(c, w, *policy);
    ASSERT_TRUE(r.ok()) << r.status();
    const char other = policy->log()[0] == "big -> node 0" ? '1' : '0';
    EXPECT_EQ(policy->log()[1], std::string("gpu -> node ") + other + " gpu 0");
    EXPECT_EQ(policy->log()[2], std::string("cpu -> node ") + other);
  }
}

TEST(DraFirstFitTest, TiesGoToEveryNodeAlike) {
  // Equal empty nodes: selectHost draws uniformly among them (the run's seed).
  Cluster c = SmallCluster({1, 1, 1, 1});
  std::vector<int> first(4, 0);
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    Workload w = Sequence(c, {Pod("a", 0, 0, 1000, 1024)}, seed);
    auto policy = Recorded("dra-first-fit");
    ASSERT_TRUE(Simulate(c, w, *policy).ok());
    ++first[policy->log()[0].back() - '0'];
  }
  for (int n : first) EXPECT_GT(n, 25);
}

// --- prism-dra: Prism through the DRA mapping decides as the device-plugin path does.
//
// For MIG the device-plugin twin is "prism:profile_requests=1": the same pods asking, through
// the device-plugin path, for what their claim maps to (the claimed profile's memory and
// compute). Plain "prism" asks for the trace's share (memory and compute of gpu_milli/1000),
// which no claim form expresses; whole GPUs are the same request either way.

void ExpectSameDecisions(const Cluster& c, const Workload& w, MigMapping mapping,
                         std::string_view device_plugin = "prism:profile_requests=1") {
  RunOptions o;
  o.mig_mapping = mapping;
  auto prism = Recorded(device_plugin);
  auto dra = Recorded("prism-dra");
  auto a = Simulate(c, w, *prism, o);
  auto b = Simulate(c, w, *dra, o);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(prism->log().size(), dra->log().size());
  for (size_t i = 0; i < prism->log().size(); ++i) {
    ASSERT_EQ(prism->log()[i], dra->log()[i]) << "pod #" << i;
  }
  EXPECT_EQ(a->placed, b->placed);
  EXPECT_EQ(a->failed, b->failed);
  EXPECT_EQ(a->final_used_gpu_milli, b->final_used_gpu_milli);
  EXPECT_EQ(a->mig.instances_created, b->mig.instances_created);
  EXPECT_EQ(b->rejected_placements, 0) << b->first_rejection;
  ASSERT_EQ(a->curve.size(), b->curve.size());
  for (size_t i = 0; i < a->curve.size(); ++i) {
    if (std::isnan(a->curve[i])) {
      EXPECT_TRUE(std::isnan(b->curve[i]));
    } else {
      EXPECT_EQ(a->curve[i], b->curve[i]) << "at " << i << " %";
    }
  }
}

TEST(PrismDraTest, SmallMigTraceSameAsDevicePluginPath) {
  Cluster c = SmallCluster({2, 4, 1, 0});
  c.EnableMig(&A100());
  std::vector<PodRequest> pods;
  Rng rng(11);
  for (int i = 0; i < 120; ++i) {
    const int gpus = rng.Uniform(12) == 0 ? 2 : 1;
    const int milli = gpus > 1 ? 1000 : 50 * (1 + static_cast<int>(rng.Uniform(20)));
    pods.push_back(Pod("p" + std::to_string(i), rng.Uniform(6) == 0 ? 0 : gpus, milli,
                       1000 * static_cast<int64_t>(rng.Uniform(6)), 2048));
  }
  for (MigMapping m : {MigMapping::kMemory, MigMapping::kCompute}) {
    ExpectSameDecisions(c, Sequence(c, pods), m);
  }
}

TEST(PrismDraTest, WholeGpusSameAsPrism) {
  Cluster c = SmallCluster({2, 4, 8, 0});
  std::vector<PodRequest> pods;
  for (int i = 0; i < 30; ++i) pods.push_back(Pod("w" + std::to_string(i), 1 + i % 3, 1000));
  ExpectSameDecisions(c, Sequence(c, pods), MigMapping::kMemory, "prism");
}

TEST(PrismDraTest, SharesWithoutMigAreRefusedNotPlacedOtherwise) {
  Cluster c = SmallCluster({2});
  Workload w = Sequence(c, {Pod("whole", 1, 1000), Pod("share", 1, 300)});
  auto policy = MakeBuiltinPolicy("prism-dra");
  ASSERT_TRUE(policy.ok());
  auto r = Simulate(c, w, **policy);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(r.status().message(), HasSubstr("slice.gpu.prism.io"));
  EXPECT_THAT(r.status().message(), HasSubstr("pod share"));
}

TEST(PrismDraTest, MigDefaultRunSameAsDevicePluginPath) {
  // `prism sim --mig`'s default run (shipped trace, every GPU an A100-SXM4-80GB in MIG mode,
  // inflated to 130 %), seed 42.
  const Trace& trace = EmbeddedDefaultTrace();
  auto cluster = Cluster::FromTrace(trace.nodes);
  ASSERT_TRUE(cluster.ok());
  cluster->EnableMig(&A100());
  Workload w = BuildInflatedWorkload(*cluster, trace.pods, {42, 1.3});
  ExpectSameDecisions(*cluster, w, MigMapping::kMemory);
}

}  // namespace
}  // namespace prism::sim
