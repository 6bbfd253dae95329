#include "sim/workload.h"

#include <algorithm>
#include <numeric>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sim/test_util.h"

namespace prism::sim {
namespace {

using testing::SmallCluster;

std::vector<TracePod> Pods(int n, int gpu_milli) {
  std::vector<TracePod> pods;
  for (int i = 0; i < n; ++i) {
    TracePod p;
    p.name = "pod-" + std::to_string(1000 + i);
    p.milli_cpu = 1000;
    p.num_gpu = gpu_milli > 0 ? 1 : 0;
    p.gpu_milli = gpu_milli;
    p.creation_time = i * 10;
    p.deletion_time = i * 10 + 100;
    p.scheduled_time = i * 10;
    pods.push_back(p);
  }
  return pods;
}

int64_t TotalMilli(const Workload& w) {
  int64_t t = 0;
  for (const PodRequest& p : w.pods) t += p.TotalGpuMilli();
  return t;
}

TEST(InflatedWorkloadTest, AppendsTracePodsUntilTheTargetShareOfCapacity) {
  Cluster c = SmallCluster({8, 8});  // 16,000 milli-GPU.
  Workload w = BuildInflatedWorkload(c, Pods(10, 500), {42, 1.3});
  EXPECT_EQ(TotalMilli(w), 20500);  // The first pod that would cross 20,800 stops it.
  EXPECT_EQ(w.pods.size(), 41u);
  EXPECT_EQ(w.trace_pods.size(), 10u);
  EXPECT_EQ(w.pods[12].name.find("-tuned-"), 8u);
}

TEST(InflatedWorkloadTest, RemovesRandomPodsAboveTheTarget) {
  Cluster c = SmallCluster({1});  // 1,000 milli-GPU: 10 x 500 is 5x capacity.
  Workload w = BuildInflatedWorkload(c, Pods(10, 500), {7, 1.3});
  EXPECT_EQ(TotalMilli(w), 1000);
  EXPECT_EQ(w.pods.size(), 2u);
}

TEST(InflatedWorkloadTest, IsDeterministicPerSeedAndShufflesAcrossSeeds) {
  Cluster c = SmallCluster({8, 8, 8});
  std::vector<TracePod> pods = Pods(50, 300);
  Workload a = BuildInflatedWorkload(c, pods, {42, 1.3});
  Workload b = BuildInflatedWorkload(c, pods, {42, 1.3});
  Workload d = BuildInflatedWorkload(c, pods, {43, 1.3});
  auto names = [](const Workload& w) {
    std::vector<std::string> out;
    for (const PodRequest& p : w.pods) out.push_back(p.name);
    return out;
  };
  EXPECT_EQ(names(a), names(b));
  EXPECT_EQ(a.node_rank, b.node_rank);
  EXPECT_NE(names(a), names(d));
  std::vector<int> rank = a.node_rank;
  std::sort(rank.begin(), rank.end());
  EXPECT_THAT(rank, ::testing::ElementsAre(0, 1, 2));
  // The original pods all come first, in some order.
  const std::vector<std::string> all = names(a);
  std::vector<std::string> first(all.begin(), all.begin() + 50);
  std::sort(first.begin(), first.end());
  EXPECT_EQ(first.front(), "pod-1000");
  EXPECT_EQ(first.back(), "pod-1049");
}

TEST(ChurnWorkloadTest, ReplaysNativeTimesWithDeparturesAfterArrivals) {
  Cluster c = SmallCluster({8});
  ChurnOptions o;
  o.native_times = true;
  auto w = BuildChurnWorkload(c, Pods(5, 500), o);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->events.size(), 10u);
  EXPECT_TRUE(std::is_sorted(w->events.begin(), w->events.end(),
                             [](const Event& a, const Event& b) { return a.time < b.time; }));
  EXPECT_TRUE(w->events.front().arrival);
  EXPECT_FALSE(w->events.back().arrival);
}

TEST(ChurnWorkloadTest, PoissonArrivalsOfferTheRequestedLoad) {
  Cluster c = SmallCluster({8});
  ChurnOptions o;
  o.load = 0.5;
  o.max_lifetime = 1000;  // Lifetimes are 100 s: not capped.
  o.lifetimes = 250;      // 250,000 s of arrivals.
  auto w = BuildChurnWorkload(c, Pods(5, 500), o);
  ASSERT_TRUE(w.ok()) << w.status();
  // rate = 0.5 * 8000 / (500 * 100) = 0.08 per second: ~20,000 arrivals.
  EXPECT_NEAR(static_cast<double>(w->pods.size()), 20000, 20000 * 0.05);
  EXPECT_DOUBLE_EQ(w->warmup_end, 1000);
}

TEST(ChurnWorkloadTest, CapsLifetimes) {
  Cluster c = SmallCluster({8});
  std::vector<TracePod> pods = Pods(5, 500);
  for (TracePod& p : pods) p.deletion_time = *p.creation_time + 100000;
  ChurnOptions o;
  o.max_lifetime = 50;
  auto w = BuildChurnWorkload(c, pods, o);
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<double> arrival(w->pods.size());
  for (const Event& e : w->events) {
    if (e.arrival) arrival[e.pod] = e.time;
  }
  for (const Event& e : w->events) {
    if (!e.arrival) {
      EXPECT_DOUBLE_EQ(e.time - arrival[e.pod], 50);
    }
  }
}

TEST(ChurnWorkloadTest, NeedsLifetimes) {
  Cluster c = SmallCluster({8});
  std::vector<TracePod> pods = Pods(3, 500);
  for (TracePod& p : pods) p.deletion_time.reset();
  EXPECT_FALSE(BuildChurnWorkload(c, pods, {}).ok());
  EXPECT_FALSE(BuildChurnWorkload(c, Pods(3, 500), ChurnOptions{.load = -1}).ok());
}

}  // namespace
}  // namespace prism::sim
