#include "sim/ceiling.h"

#include <cmath>
#include <functional>
#include <memory>

#include "gtest/gtest.h"

#include "sim/offline_packing.h"
#include "sim/policy_util.h"
#include "sim/rng.h"
#include "sim/simulator.h"
#include "sim/test_util.h"
#include "sim/trace.h"
#include "sim/workload.h"

namespace prism::sim {
namespace {

using testing::Pod;
using testing::SmallCluster;

int64_t Bound(const Cluster& cluster, const std::vector<PodRequest>& pods,
              MigMapping mapping = MigMapping::kMemory) {
  auto b = ComputeCeiling(cluster, pods, {mapping});
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? b->bound_gpu_milli : -1;
}

// Replays the packing into a fresh state: every placement must be accepted.
int64_t CheckedPacking(const Cluster& cluster, const std::vector<PodRequest>& pods,
                       const CeilingBound* guide) {
  OfflinePacking p = PackOffline(cluster, pods, guide);
  ClusterState state(&cluster);
  std::vector<bool> seen(pods.size(), false);
  for (const auto& [i, placement] : p.placements) {
    EXPECT_FALSE(seen[i]) << "pod " << i << " placed twice";
    seen[i] = true;
    EXPECT_TRUE(state.Place(pods[i], placement).ok());
  }
  EXPECT_EQ(state.used_gpu_milli(), p.gpu_milli);
  return p.gpu_milli;
}

TEST(CeilingTest, OnlyOneOfThreeSixtyPercentSharesFitsOneGpu) {
  Cluster c = SmallCluster({1});
  EXPECT_EQ(Bound(c, {Pod("a", 1, 600), Pod("b", 1, 600), Pod("c", 1, 600)}), 600);
}

TEST(CeilingTest, ComplementarySharesFillTwoGpus) {
  Cluster c = SmallCluster({2});
  const std::vector<PodRequest> pods = {Pod("a", 1, 600), Pod("b", 1, 600), Pod("c", 1, 600),
                                        Pod("d", 1, 400), Pod("e", 1, 400)};
  EXPECT_EQ(Bound(c, pods), 2000);
  EXPECT_EQ(CheckedPacking(c, pods, nullptr), 2000);
}

TEST(CeilingTest, SeventyPercentSharesLeaveThirtyPercentOfEachGpu) {
  // Two 700s never share a GPU: 2 x 700, not the 2000 a volume bound would give.
  Cluster c = SmallCluster({2});
  EXPECT_EQ(Bound(c, {Pod("a", 1, 700), Pod("b", 1, 700), Pod("c", 1, 700)}), 1400);
}

TEST(CeilingTest, PatternsAreGeneratedForMixedShares) {
  // 3 GPUs; 3 x 500, 3 x 300, 3 x 200: one 500+300+200 per GPU fills all three.
  Cluster c = SmallCluster({3});
  std::vector<PodRequest> pods;
  for (int i = 0; i < 3; ++i) {
    pods.push_back(Pod("a", 1, 500));
    pods.push_back(Pod("b", 1, 300));
    pods.push_back(Pod("c", 1, 200));
  }
  auto b = ComputeCeiling(c, pods);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->bound_gpu_milli, 3000);
  EXPECT_GT(b->rounds, 1);  // The 500+300+200 pattern had to be priced in.
}

TEST(CeilingTest, CpuLimitsWholeGpuPods) {
  // One node, 4 GPUs, 8 cores; whole-GPU pods of 4 cores each: only 2 fit.
  std::vector<NodeSpec> nodes = {{"n", 8000, 262144, 4, 0, nullptr}};
  auto c = Cluster::FromNodes(nodes, {"M0"});
  ASSERT_TRUE(c.ok());
  std::vector<PodRequest> pods;
  for (int i = 0; i < 4; ++i) pods.push_back(Pod("p", 1, 1000, 4000));
  EXPECT_EQ(Bound(*c, pods), 2000);
}

TEST(CeilingTest, MultiGpuPodsNeedNodesWithEnoughGpus) {
  // Two 2-GPU nodes cannot host a 4-GPU pod; the 1-GPU pods fill them.
  Cluster c = SmallCluster({2, 2});
  EXPECT_EQ(Bound(c, {Pod("big", 4, 1000), Pod("a", 1, 1000), Pod("b", 1, 1000)}), 2000);
}

TEST(CeilingTest, GpuModelConstraintsHold) {
  std::vector<NodeSpec> nodes = {{"a", 64000, 262144, 1, 0, nullptr},
                                 {"b", 64000, 262144, 1, 1, nullptr}};
  auto c = Cluster::FromNodes(nodes, {"M0", "M1"});
  ASSERT_TRUE(c.ok());
  std::vector<PodRequest> pods = {Pod("x", 1, 1000), Pod("y", 1, 1000)};
  for (PodRequest& p : pods) {
    p.gpu_spec = "M1";
    p.model_mask = c->ModelMask(p.gpu_spec);
  }
  EXPECT_EQ(Bound(*c, pods), 1000);
}

TEST(CeilingTest, CpuOnlyPodsAreIgnoredAndNothingIsZero) {
  Cluster c = SmallCluster({1});
  EXPECT_EQ(Bound(c, {Pod("cpu", 0, 0)}), 0);
  EXPECT_EQ(Bound(c, {}), 0);
}

TEST(CeilingTest, MigLayoutsLimitTheBound) {
  // A100-80GB, memory mapping: 500 milli needs 4 memory slices (3g.40gb or 4g.40gb), 125
  // needs 1 (1g.10gb). Two 3g.40gb fill all 8 memory slices, so the 1g pod no longer fits:
  // 500 + 500 = 1000 beats 500 + 125 + ... (at most 500 + 3 x 125 on one GPU's other half).
  Cluster c = SmallCluster({1});
  c.EnableMig(&testing::A100());
  EXPECT_EQ(Bound(c, {Pod("a", 1, 500), Pod("b", 1, 500), Pod("c", 1, 125)}), 1000);
  // Three 3g-sized pods: only two fit one A100.
  EXPECT_EQ(Bound(c, {Pod("a", 1, 400), Pod("b", 1, 400), Pod("c", 1, 400)}), 800);
  // Seven 1g.10gb pods fit one GPU (7 compute slices), an eighth does not.
  std::vector<PodRequest> small;
  for (int i = 0; i < 8; ++i) small.push_back(Pod("s", 1, 100));
  EXPECT_EQ(Bound(c, small), 700);
}

TEST(CeilingTest, PodsArrivedAtIsTheLongestPrefixWithinThePercentage) {
  Cluster c = SmallCluster({2});  // 2000 milli.
  const std::vector<PodRequest> pods = {Pod("a", 1, 500), Pod("b", 0, 0), Pod("c", 1, 500),
                                        Pod("d", 1, 500)};
  EXPECT_EQ(PodsArrivedAt(c, pods, 25), 2u);  // 500 = 25 %, the CPU-only pod too.
  EXPECT_EQ(PodsArrivedAt(c, pods, 49), 2u);
  EXPECT_EQ(PodsArrivedAt(c, pods, 50), 3u);
  EXPECT_EQ(PodsArrivedAt(c, pods, 100), 4u);
}

// The best any placement achieves, by trying every one (tiny instances only).
int64_t BruteForceOptimum(ClusterState& state, const std::vector<PodRequest>& pods, size_t i) {
  if (i == pods.size()) return state.used_gpu_milli();
  int64_t best = BruteForceOptimum(state, pods, i + 1);  // Skip pod i.
  const PodRequest& pod = pods[i];
  for (int n = 0; n < state.cluster().node_count(); ++n) {
    if (!SharedFits(state, n, pod)) continue;
    const int gpus = state.cluster().node(n).gpu_count;
    // Every set of gpu_count distinct GPUs (bit masks; nodes here have at most 3 GPUs).
    for (int mask = 0; mask < (1 << gpus); ++mask) {
      if (__builtin_popcount(static_cast<unsigned>(mask)) != pod.gpu_count) continue;
      Placement p{n, {}, {}};
      for (int g = 0; g < gpus; ++g) {
        if ((mask >> g) & 1) p.gpus.push_back(g);
      }
      if (!state.Place(pod, p).ok()) continue;
      best = std::max(best, BruteForceOptimum(state, pods, i + 1));
      EXPECT_TRUE(state.Release(pod, p, false).ok());
    }
  }
  return best;
}

struct RandomInstance {
  Cluster cluster;
  std::vector<PodRequest> pods;
};

RandomInstance MakeRandomInstance(uint64_t seed, int max_pods) {
  Rng rng(seed);
  std::vector<NodeSpec> nodes;
  const int node_count = 1 + static_cast<int>(rng.Uniform(3));
  for (int i = 0; i < node_count; ++i) {
    nodes.push_back({"n" + std::to_string(i), 4000 + 2000 * static_cast<int64_t>(rng.Uniform(4)),
                     16384, 1 + static_cast<int>(rng.Uniform(3)),
                     static_cast<int>(rng.Uniform(2)), nullptr});
  }
  auto c = Cluster::FromNodes(nodes, {"M0", "M1"});
  EXPECT_TRUE(c.ok());
  RandomInstance out{*std::move(c), {}};
  const int shares[] = {100, 190, 250, 300, 470, 500, 650, 810, 1000};
  const int pod_count = 1 + static_cast<int>(rng.Uniform(static_cast<uint64_t>(max_pods)));
  for (int i = 0; i < pod_count; ++i) {
    const bool multi = rng.Uniform(6) == 0;
    PodRequest p = Pod("p" + std::to_string(i), multi ? 2 : 1,
                       multi ? 1000 : shares[rng.Uniform(std::size(shares))],
                       1000 + 1000 * static_cast<int64_t>(rng.Uniform(4)),
                       1024 * (1 + static_cast<int64_t>(rng.Uniform(8))));
    if (rng.Uniform(4) == 0) {
      p.gpu_spec = rng.Uniform(2) == 0 ? "M0" : "M1";
      p.model_mask = out.cluster.ModelMask(p.gpu_spec);
    }
    out.pods.push_back(std::move(p));
  }
  return out;
}

TEST(CeilingTest, BoundsTheExactOptimumAndThePackingOnRandomTinyInstances) {
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    RandomInstance inst = MakeRandomInstance(seed, 6);
    ClusterState state(&inst.cluster);
    const int64_t optimum = BruteForceOptimum(state, inst.pods, 0);
    auto bound = ComputeCeiling(inst.cluster, inst.pods);
    ASSERT_TRUE(bound.ok());
    EXPECT_GE(bound->bound_gpu_milli, optimum) << "seed " << seed;
    const int64_t packed = CheckedPacking(inst.cluster, inst.pods, &*bound);
    EXPECT_LE(packed, optimum) << "seed " << seed;
  }
}

TEST(CeilingTest, BoundsEveryPolicyOnRandomSmallInstances) {
  for (uint64_t seed = 100; seed < 130; ++seed) {
    RandomInstance inst = MakeRandomInstance(seed, 40);
    auto bound = ComputeCeiling(inst.cluster, inst.pods);
    ASSERT_TRUE(bound.ok());
    EXPECT_LE(CheckedPacking(inst.cluster, inst.pods, &*bound), bound->bound_gpu_milli);
    Workload w;
    w.pods = inst.pods;
    w.trace_pods = inst.pods;
    w.seed = seed;
    for (int n = 0; n < inst.cluster.node_count(); ++n) w.node_rank.push_back(n);
    for (const char* name : {"random", "best-fit", "fgd", "prism"}) {
      auto policy = MakeBuiltinPolicy(name);
      ASSERT_TRUE(policy.ok());
      auto r = Simulate(inst.cluster, w, **policy);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_LE(r->final_used_gpu_milli, bound->bound_gpu_milli) << name << " seed " << seed;
      // And the curve, point by point, under the bound of its window.
      for (int x = 0; x < static_cast<int>(r->curve.size()); ++x) {
        if (std::isnan(r->curve[x])) continue;
        auto ceiling = CurveCeilingPct(inst.cluster, inst.pods, x, 1 + x % 3);
        ASSERT_TRUE(ceiling.ok());
        EXPECT_LE(r->curve[x], *ceiling + 1e-9) << name << " seed " << seed << " at " << x;
      }
    }
  }
}

TEST(CeilingTest, ReproducesTheDefaultTraceCeilingAtOneHundredPercent) {
  // Issue 15: a mean upper bound of 96.90 over seeds 42-51 at 100 % arrived (the full mean
  // is in docs/results/ceiling.md); two seeds here, each within a few hundredths of it.
  const Trace& trace = EmbeddedDefaultTrace();
  auto cluster = Cluster::FromTrace(trace.nodes);
  ASSERT_TRUE(cluster.ok());
  for (uint64_t seed : {42, 43}) {
    Workload w = BuildInflatedWorkload(*cluster, trace.pods, {seed, 1.3});
    std::span<const PodRequest> pods(w.pods.data(), PodsArrivedAt(*cluster, w.pods, 100));
    auto b = ComputeCeiling(*cluster, pods);
    ASSERT_TRUE(b.ok());
    const double pct = static_cast<double>(b->bound_gpu_milli) * 100 /
                       static_cast<double>(cluster->total_gpu_milli());
    EXPECT_NEAR(pct, 96.90, 0.05) << "seed " << seed;
    // The bound of the curve's window (the pods around 100 %) is close, and above.
    auto window = CurveCeilingPct(*cluster, w.pods, 100, 4);
    ASSERT_TRUE(window.ok());
    EXPECT_NEAR(*window, 96.90, 0.06) << "seed " << seed;
  }
}

TEST(CeilingTest, CurveCeilingNeedsASampledPoint) {
  Cluster c = SmallCluster({1});
  auto v = CurveCeilingPct(c, std::vector<PodRequest>{Pod("a", 1, 500)}, 90, 2);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(std::isnan(*v));  // 50 % arrived only.
  v = CurveCeilingPct(c, std::vector<PodRequest>{Pod("a", 1, 500)}, 50, 2);
  ASSERT_TRUE(v.ok());
  EXPECT_DOUBLE_EQ(*v, 50);
}

}  // namespace
}  // namespace prism::sim
