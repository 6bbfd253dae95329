#include "sim/preemption_experiment.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sim/test_util.h"
#include "sim/trace.h"
#include "sim/workload.h"

namespace prism::sim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Optional;
using testing::Pod;
using testing::SmallCluster;

ScalarPod Gpu(int32_t priority, int64_t start, int64_t gpu_milli) {
  ScalarPod p;
  p.priority = priority;
  p.start = start;
  p.request = {1000, 1024, 1, gpu_milli};
  return p;
}

// One node: 2 GPUs (2000 milli), 64 cores, 256 GiB, split count 100.
ScalarResources TwoGpus() { return ScalarAllocatable(SmallCluster({2}).node(0), 100); }

TEST(GpuBlindVictimsTest, ReprievesTheMostImportantFirstByNodeSums) {
  // a 700 (first placed), b 500, c 400: 400 free on the node; the pod asks 600.
  const std::vector<ScalarPod> pods = {Gpu(0, 0, 700), Gpu(0, 1, 500), Gpu(0, 2, 400)};
  // Reprieved in start order a, b; c no longer fits the sums: c is the victim, whichever GPU
  // it is on.
  EXPECT_THAT(GpuBlindVictims(TwoGpus(), pods, Gpu(1000, 9, 600)), Optional(ElementsAre(2)));
}

TEST(GpuBlindVictimsTest, HigherPriorityReprievedBeforeEarlierStart) {
  // x (priority 5, started last) is reprieved before y (priority 1, started first).
  const std::vector<ScalarPod> pods = {Gpu(1, 0, 900), Gpu(5, 1, 900)};
  EXPECT_THAT(GpuBlindVictims(TwoGpus(), pods, Gpu(10, 9, 1000)), Optional(ElementsAre(0)));
}

TEST(GpuBlindVictimsTest, NoCandidateWithoutLowerPriorityOrWhenAllGoneIsNotEnough) {
  // Equal priority is never a victim.
  EXPECT_EQ(GpuBlindVictims(TwoGpus(), {Gpu(1000, 0, 1000)}, Gpu(1000, 9, 1500)), std::nullopt);
  // A higher-priority pod holds 1500: evicting the lower one does not make room for 600.
  EXPECT_EQ(GpuBlindVictims(TwoGpus(), {Gpu(2000, 0, 1500), Gpu(0, 1, 400)}, Gpu(1000, 9, 600)),
            std::nullopt);
}

TEST(GpuBlindVictimsTest, FitsWithoutEvictingIsAnEmptyList) {
  // 1000 free by the sums: no victim (DryRunPreemption then drops the node).
  EXPECT_THAT(GpuBlindVictims(TwoGpus(), {Gpu(0, 0, 500), Gpu(0, 1, 500)}, Gpu(1000, 9, 600)),
              Optional(ElementsAre()));
}

TEST(PickOneNodeForPreemptionTest, UpstreamOrder) {
  const std::vector<VictimSummary> candidates = {
      {{0, 0}, {0, 1}},  // Two victims.
      {{5}, {2}},        // Higher victim priority.
      {{0}, {3}},        // One victim of priority 0, started at 3.
      {{0}, {7}},        // The same, started later: preferred.
  };
  EXPECT_EQ(PickOneNodeForPreemption(candidates), 3u);
  // Lowest highest priority beats fewer victims.
  EXPECT_EQ(PickOneNodeForPreemption({{{5}, {0}}, {{1, 1, 1}, {0, 0, 0}}}), 1u);
  // A full tie: the first.
  EXPECT_EQ(PickOneNodeForPreemption({{{0}, {4}}, {{0}, {4}}}), 0u);
}

TEST(NumCandidatesTest, CalculateNumCandidates) {
  EXPECT_EQ(NumCandidates(1213, {}), 121);
  EXPECT_EQ(NumCandidates(5000, {}), 500);
  EXPECT_EQ(NumCandidates(40, {}), 40);
}

TEST(DrawPrioritiesTest, SeededFractionOfGpuPodsOnly) {
  Workload w;
  for (int i = 0; i < 20000; ++i) w.pods.push_back(Pod("p", i % 2, 500));  // Half CPU-only.
  const std::vector<int32_t> a = DrawPriorities(w, 0.1, 42);
  EXPECT_EQ(a, DrawPriorities(w, 0.1, 42));
  EXPECT_NE(a, DrawPriorities(w, 0.1, 43));
  int high = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (w.pods[i].gpu_count == 0) {
      EXPECT_EQ(a[i], 0);
    }
    high += a[i] == 1000;
  }
  EXPECT_GT(high, 800);  // About 1,000 of the 10,000 GPU pods.
  EXPECT_LT(high, 1200);
}

// The by-hand case: one node of two GPUs. The engine puts a (700) on one GPU, b (500) on the
// other and c (400) next to b; the high-priority pod asks 600.
class TwoGpuNodeTest : public ::testing::Test {
 protected:
  TwoGpuNodeTest() : cluster_(SmallCluster({2})) {
    workload_.pods = {Pod("a", 1, 700), Pod("b", 1, 500), Pod("c", 1, 400), Pod("hi", 1, 600)};
    workload_.trace_pods = workload_.pods;
    workload_.node_rank = {0};
    workload_.seed = 42;
    priorities_ = {0, 0, 0, 1000};
  }
  PreemptionRunResult Run(PreemptionMode mode) {
    auto r = RunPreemptionExperiment(cluster_, workload_, priorities_, mode);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : PreemptionRunResult{};
  }
  Cluster cluster_;
  Workload workload_;
  std::vector<int32_t> priorities_;
};

TEST_F(TwoGpuNodeTest, GpuBlindEvictsThePodWhoseDepartureFreesNothingUsable) {
  // By the sums c is the victim (400 + 400 free >= 600), but it frees 400 on b's GPU: 500 there,
  // 300 on a's. The pod does not fit; on the next attempt the node fits by the sums without a
  // victim, so there is no candidate left.
  const PreemptionRunResult r = Run(PreemptionMode::kGpuBlind);
  EXPECT_EQ(r.high_unplaced, 1);
  EXPECT_EQ(r.preemptions, 1);
  EXPECT_EQ(r.succeeded, 0);
  EXPECT_EQ(r.victims, 1);
  EXPECT_EQ(r.victim_gpu_milli, 400);
  EXPECT_EQ(r.wasted_victims, 1);
  EXPECT_THAT(r.preemptions_by_kind, ElementsAre(1, 0, 0));  // A share.
  EXPECT_THAT(r.failed_by_kind, ElementsAre(1, 0, 0));
  EXPECT_EQ(r.high_pending, 1);
  EXPECT_EQ(r.final_used_gpu_milli, 1200);
}

TEST_F(TwoGpuNodeTest, PrismEvictsOnePodOnTheGpuWhereThePodThenFits) {
  // Alone, a (700) or b (500) makes room; b holds less. c frees too little.
  const PreemptionRunResult r = Run(PreemptionMode::kPrism);
  EXPECT_EQ(r.preemptions, 1);
  EXPECT_EQ(r.succeeded, 1);
  EXPECT_THAT(r.victims_per_preemption, ElementsAre(1));
  EXPECT_EQ(r.victim_gpu_milli, 500);
  EXPECT_EQ(r.wasted_victims, 0);
  EXPECT_EQ(r.high_pending, 0);
  EXPECT_EQ(r.final_used_gpu_milli, 700 + 400 + 600);
}

TEST_F(TwoGpuNodeTest, NoPreemptionLeavesItPending) {
  const PreemptionRunResult r = Run(PreemptionMode::kNone);
  EXPECT_EQ(r.preemptions, 0);
  EXPECT_EQ(r.high_pending, 1);
}

TEST_F(TwoGpuNodeTest, EqualPriorityIsNeverEvicted) {
  priorities_ = {1000, 1000, 1000, 1000};
  for (PreemptionMode mode : {PreemptionMode::kPrism, PreemptionMode::kGpuBlind}) {
    const PreemptionRunResult r = Run(mode);
    EXPECT_EQ(r.preemptions, 0) << PreemptionModeName(mode);
    EXPECT_EQ(r.high_pending, 1) << PreemptionModeName(mode);
  }
}

TEST_F(TwoGpuNodeTest, BadInput) {
  priorities_.pop_back();
  EXPECT_THAT(std::string(RunPreemptionExperiment(cluster_, workload_, priorities_,
                                                  PreemptionMode::kPrism)
                              .status()
                              .message()),
              HasSubstr("3 priorities for 4 pods"));
}

// A slice of the shipped trace past saturation: the invariants of each mode, and the table.
TEST(PreemptionExperimentTest, TraceSliceInvariants) {
  const Trace& trace = EmbeddedDefaultTrace();
  std::vector<TraceNode> nodes(trace.nodes.begin(), trace.nodes.begin() + 30);
  auto cluster = Cluster::FromTrace(nodes);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const Workload workload = BuildInflatedWorkload(*cluster, trace.pods, {7, 1.3});
  const std::vector<int32_t> priorities = DrawPriorities(workload, 0.2, 7);
  std::vector<PreemptionRunResult> runs;
  for (PreemptionMode mode :
       {PreemptionMode::kNone, PreemptionMode::kGpuBlind, PreemptionMode::kPrism}) {
    auto r = RunPreemptionExperiment(*cluster, workload, priorities, mode);
    ASSERT_TRUE(r.ok()) << r.status();
    runs.push_back(*r);
  }
  const PreemptionRunResult& none = runs[0];
  const PreemptionRunResult& prism = runs[2];
  EXPECT_GT(none.high_pending, 0);  // Saturated: preemption has work to do.
  for (const PreemptionRunResult& r : runs) {
    EXPECT_EQ(r.high_pods, none.high_pods) << r.mode;
    EXPECT_LE(r.succeeded, r.preemptions) << r.mode;
    EXPECT_EQ(r.high_pending + r.succeeded, r.high_unplaced) << r.mode;
    EXPECT_LE(r.wasted_victims, r.victims) << r.mode;
  }
  // Prism's victims always make room: every preemption places its pod, nothing is wasted.
  EXPECT_GT(prism.preemptions, 0);
  EXPECT_EQ(prism.succeeded, prism.preemptions);
  EXPECT_EQ(prism.wasted_victims, 0);
  EXPECT_LT(prism.high_pending, none.high_pending);

  const std::string table = FormatPreemptionTable(runs);
  EXPECT_THAT(table, HasSubstr("| Metric | none | gpu-blind | prism |"));
  EXPECT_THAT(table, HasSubstr("| Wasted evictions (the preemptor still did not fit) |"));
  EXPECT_THAT(FormatPreemptionCsv(runs), HasSubstr("\nprism,7,"));
}

}  // namespace
}  // namespace prism::sim
