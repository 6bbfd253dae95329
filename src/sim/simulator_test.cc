#include "sim/simulator.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sim/test_util.h"

namespace prism::sim {
namespace {

using ::testing::HasSubstr;
using testing::Pod;
using testing::SmallCluster;

Workload Sequence(const Cluster& c, std::vector<PodRequest> pods) {
  Workload w;
  w.trace_pods = pods;
  w.pods = std::move(pods);
  for (int i = 0; i < c.node_count(); ++i) w.node_rank.push_back(i);
  return w;
}

TEST(RoundHalfEvenTest, RoundsLikePython) {
  EXPECT_EQ(RoundHalfEven(5, 10), 0);   // 0.5 -> 0
  EXPECT_EQ(RoundHalfEven(15, 10), 2);  // 1.5 -> 2
  EXPECT_EQ(RoundHalfEven(25, 10), 2);  // 2.5 -> 2
  EXPECT_EQ(RoundHalfEven(26, 10), 3);
  EXPECT_EQ(RoundHalfEven(24, 10), 2);
}

TEST(SimulatorTest, CurveIsTheMeanAllocationPerArrivedPercent) {
  Cluster c = SmallCluster({1});  // 1,000 milli-GPU.
  Workload w = Sequence(c, {Pod("a", 1, 600), Pod("b", 1, 600), Pod("c", 0, 0)});
  auto policy = MakeBuiltinPolicy("best-fit");
  auto r = Simulate(c, w, **policy);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pods, 3);
  EXPECT_EQ(r->placed, 2);
  EXPECT_EQ(r->failed, 1);
  EXPECT_EQ(r->failed_gpu_milli, 600);
  EXPECT_EQ(r->arrived_gpu_milli, 1200);
  ASSERT_EQ(r->curve.size(), 131u);
  EXPECT_DOUBLE_EQ(r->curve[60], 60);
  EXPECT_DOUBLE_EQ(r->curve[120], 60);  // Pods b and c both sit at 120 %.
  EXPECT_DOUBLE_EQ(r->curve[61], 60);   // From the 60..62 window.
  EXPECT_TRUE(std::isnan(r->curve[30]));
}

class BadPolicy : public Policy {
 public:
  std::string_view name() const override { return "bad"; }
  std::optional<Placement> Place(const ClusterState&, const PodRequest&) override {
    return Placement{0, {0, 0}, {}};
  }
};

TEST(SimulatorTest, CountsPlacementsTheClusterRejects) {
  Cluster c = SmallCluster({2});
  Workload w = Sequence(c, {Pod("a", 1, 500)});
  BadPolicy bad;
  auto r = Simulate(c, w, bad);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rejected_placements, 1);
  EXPECT_EQ(r->failed, 1);
  EXPECT_THAT(r->first_rejection, HasSubstr("bad: pod a on node-0: 2 GPUs given, 1 requested"));
}

TEST(SimulatorTest, DeparturesFreeCapacityForLaterPods) {
  Cluster c = SmallCluster({1});
  Workload w = Sequence(c, {Pod("a", 1, 1000), Pod("b", 1, 1000), Pod("c", 1, 1000)});
  // a: [0, 10), b: [5, 15) is blocked while a runs, c: [20, 30).
  w.events = {{0, 0, true},   {5, 1, true},  {10, 0, false},
              {15, 1, false}, {20, 2, true}, {30, 2, false}};
  auto policy = MakeBuiltinPolicy("best-fit");
  auto r = Simulate(c, w, **policy);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->placed, 2);
  EXPECT_EQ(r->failed, 1);
  EXPECT_EQ(r->final_used_gpu_milli, 1000);
  // Window: from 4 s (20 % of 0..20) to 20 s; allocated 4..10 of 16 s.
  EXPECT_NEAR(r->churn.mean_alloc_pct, 100.0 * 6 / 16, 1e-9);
  EXPECT_EQ(r->churn.window_arrivals, 2);
  EXPECT_EQ(r->churn.blocked_pods, 1);
  EXPECT_DOUBLE_EQ(r->churn.blocked_demand_pct, 50);
  EXPECT_EQ(r->churn.alloc_over_time.size(), 100u);
}

}  // namespace
}  // namespace prism::sim
