#include "sim/pattern_packing.h"

#include <cstdio>
#include <vector>

#include "gtest/gtest.h"

#include "sim/ceiling.h"
#include "sim/packing_check.h"
#include "sim/rng.h"
#include "sim/test_util.h"
#include "sim/trace.h"
#include "sim/workload.h"

namespace prism::sim {
namespace {

using testing::Pod;
using testing::SmallCluster;

// The packing, re-checked here too (PackWithPatterns checks it itself).
int64_t Packed(const Cluster& c, const std::vector<PodRequest>& pods,
               MigMapping mapping = MigMapping::kMemory, const CeilingBound* guide = nullptr) {
  auto p = PackWithPatterns(c, pods, guide, {mapping});
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return -1;
  auto checked = CheckPacking(c, pods, p->placements, mapping);
  EXPECT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(checked.value_or(-1), p->gpu_milli);
  return p->gpu_milli;
}

TEST(PatternPackingTest, FindsThePairBestFitDecreasingMisses) {
  // Largest first puts the 600 alone on the GPU; 500 + 500 fill it.
  Cluster c = SmallCluster({1});
  const std::vector<PodRequest> pods = {Pod("a", 1, 600), Pod("b", 1, 500), Pod("c", 1, 500)};
  EXPECT_LT(PackOffline(c, pods).gpu_milli, 1000);
  EXPECT_EQ(Packed(c, pods), 1000);
}

TEST(PatternPackingTest, LeavesCpuForTheGpusOfANode) {
  // 2 GPUs, 10 cores. A whole GPU with 8 cores strands the other GPU (2 cores left for two
  // 4-core 450s); two 450s + two 500s on 8 cores fill 1.9 GPUs.
  std::vector<NodeSpec> nodes = {{"n", 10000, 262144, 2, 0, nullptr}};
  auto c = Cluster::FromNodes(nodes, {"M0"});
  ASSERT_TRUE(c.ok());
  const std::vector<PodRequest> pods = {Pod("w", 1, 1000, 8000), Pod("a", 1, 450, 2000),
                                        Pod("b", 1, 450, 2000), Pod("c", 1, 500, 2000),
                                        Pod("d", 1, 500, 2000)};
  EXPECT_EQ(Packed(*c, pods), 1900);
}

TEST(PatternPackingTest, PacksMigInstancesByTheCatalogsRules) {
  // A100-80GB, memory mapping: two 500s take 4g.40gb + 3g.40gb; the 125 (1g.10gb) no longer
  // fits beside them (ceiling_test's MigLayoutsLimitTheBound: bound 1000).
  Cluster c = SmallCluster({1});
  c.EnableMig(&testing::A100());
  EXPECT_EQ(Packed(c, {Pod("a", 1, 500), Pod("b", 1, 500), Pod("c", 1, 125)}), 1000);
  std::vector<PodRequest> small;
  for (int i = 0; i < 8; ++i) small.push_back(Pod("s", 1, 100));
  EXPECT_EQ(Packed(c, small), 700);  // Seven 1g.10gb instances.
}

TEST(PatternPackingTest, StaysWithinTheBoundAndAboveTheGreedyPackingOnRandomInstances) {
  for (uint64_t seed = 200; seed < 230; ++seed) {
    Rng rng(seed);
    std::vector<int> gpus;
    for (int i = 0; i < 6; ++i) gpus.push_back(1 + static_cast<int>(rng.Uniform(4)));
    Cluster c = SmallCluster(gpus);
    const int shares[] = {100, 190, 250, 300, 470, 500, 650, 810, 1000};
    std::vector<PodRequest> pods;
    for (int i = 0; i < 40; ++i) {
      pods.push_back(Pod("p", 1 + (rng.Uniform(8) == 0), shares[rng.Uniform(std::size(shares))],
                         4000 + 4000 * static_cast<int64_t>(rng.Uniform(6))));
      if (pods.back().gpu_count > 1) pods.back().gpu_milli = 1000;
    }
    auto bound = ComputeCeiling(c, pods);
    ASSERT_TRUE(bound.ok());
    const int64_t packed = Packed(c, pods, MigMapping::kMemory, &*bound);
    EXPECT_LE(packed, bound->bound_gpu_milli) << "seed " << seed;
    EXPECT_GE(packed, PackOffline(c, pods, &*bound).gpu_milli) << "seed " << seed;
  }
}

TEST(PatternPackingTest, CarriesPatternsToTheNextCallWhateverItsPods) {
  Cluster c = SmallCluster({2, 2});
  const std::vector<PodRequest> first = {Pod("a", 1, 600), Pod("b", 1, 400), Pod("c", 1, 500)};
  PatternCarry carry;
  auto p = PackWithPatterns(c, first, nullptr, {}, nullptr, &carry);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(carry.patterns.empty());
  // A longer prefix uses them; pods of other requests ignore the patterns they cannot use.
  std::vector<PodRequest> longer = first;
  longer.push_back(Pod("d", 1, 500));
  auto q = PackWithPatterns(c, longer, nullptr, {}, nullptr, &carry);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->gpu_milli, 2000);
  const std::vector<PodRequest> other = {Pod("x", 1, 700), Pod("y", 1, 300)};
  auto r = PackWithPatterns(c, other, nullptr, {}, nullptr, &carry);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->gpu_milli, 1000);
}

TEST(PatternPackingTest, ComesWithinAFewHundredthsOfTheBoundOnTheDefaultTrace) {
  const Trace& trace = EmbeddedDefaultTrace();
  auto cluster = Cluster::FromTrace(trace.nodes);
  ASSERT_TRUE(cluster.ok());
  Workload w = BuildInflatedWorkload(*cluster, trace.pods, {42, 1.3});
  std::span<const PodRequest> pods(w.pods.data(), PodsArrivedAt(*cluster, w.pods, 100));
  auto bound = ComputeCeiling(*cluster, pods);
  ASSERT_TRUE(bound.ok());
  PatternPackingStats stats;
  auto p = PackWithPatterns(*cluster, pods, &*bound, {}, &stats);
  ASSERT_TRUE(p.ok()) << p.status();
  const double capacity = static_cast<double>(cluster->total_gpu_milli());
  const double pct = static_cast<double>(p->gpu_milli) * 100 / capacity;
  const double bound_pct = static_cast<double>(bound->bound_gpu_milli) * 100 / capacity;
  std::printf("seed 42 at 100 %%: packing %.3f %%, bound %.3f %% (%d rounds, %d patterns, LP %.1f, "
              "MIP %.1f GPUs, %d nodes)\n",
              pct, bound_pct, stats.rounds, stats.patterns, stats.lp_gpus, stats.mip_gpus,
              stats.mip_nodes);
  EXPECT_GE(pct, 96.8);  // 96.847 (deterministic); the bound of these pods is 96.892.
  EXPECT_LE(pct, bound_pct);
}

}  // namespace
}  // namespace prism::sim
