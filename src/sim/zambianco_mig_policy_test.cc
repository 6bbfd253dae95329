// Tests of the Zambianco et al. baseline (zambianco_mig_policy.cc). The
// expected fragmentation values are worked out by hand from the metric's
// definition on the A100-80GB's placements: 1g at starts 0-6 (1 slice), 2g at
// 0, 2, 4 (2 slices), 3g at 0, 4 and 4g at 0 (4 slices), 7g at 0 (8 slices).
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sim/builtin_policies.h"
#include "sim/simulator.h"
#include "sim/test_util.h"

namespace prism::sim {
namespace {

using testing::A100;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::Pod;
using testing::Profile;
using testing::SmallCluster;

// `gpus_per_node` A100-SXM4-80GB MIG GPUs per node.
Cluster MigCluster(const std::vector<int>& gpus_per_node) {
  Cluster c = SmallCluster(gpus_per_node);
  c.EnableMig(&A100());
  return c;
}

Workload Ranked(const Cluster& c, std::vector<int> rank = {}) {
  Workload w;
  if (rank.empty()) {
    for (int i = 0; i < c.node_count(); ++i) rank.push_back(i);
  }
  w.node_rank = std::move(rank);
  return w;
}

std::unique_ptr<Policy> Start(const Cluster& c, const Workload& w,
                              MigMapping mapping = MigMapping::kMemory) {
  auto p = MakeBuiltinPolicy("zambianco");
  PRISM_CHECK(p.ok());
  absl::Status s = (*p)->Begin(RunContext{&c, &w, mapping, 1});
  PRISM_CHECK(s.ok());
  return *std::move(p);
}

// Sum over the profile set of the free slices the profile cannot cover, for
// the busy instances `placed` ("3g.40gb" at start 4, ...).
int Unusable(const std::vector<std::pair<const char*, int>>& placed) {
  const mig::GpuModel& m = A100();
  mig::Layout layout;
  for (const auto& [name, start] : placed) {
    layout.push_back(mig::Instance{Profile(m, name), start, true});
  }
  auto occupancy = mig::Occupy(m, layout);
  PRISM_CHECK(occupancy.ok());
  return ZambiancoUnusableSlices(m, *occupancy, ZambiancoProfiles(m));
}

// Puts a busy instance of `profile` at `start` on `gpu` of `node`.
void Occupy(ClusterState& s, int node, int gpu, const char* profile, int start,
            int gpu_milli = 100) {
  MigAssignment a;
  a.gpu = gpu;
  a.create.push_back(mig::Instance{Profile(A100(), profile), start});
  a.use = mig::Instance{Profile(A100(), profile), start};
  Placement p;
  p.node = node;
  p.mig.push_back(a);
  ASSERT_TRUE(s.Place(Pod("pre", 1, gpu_milli), p).ok());
}

TEST(ZambiancoMetricTest, ProfileSetIsThePlainProfilePerComputeSize) {
  const mig::GpuModel& m = A100();
  std::vector<std::string> names;
  for (int p : ZambiancoProfiles(m)) names.push_back(m.profiles[p].Name());
  EXPECT_THAT(names, ElementsAre("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"));
}

TEST(ZambiancoMetricTest, HandComputedGpuStates) {
  // Empty: 1g cannot reach slice 7 (1), 2g slices 6-7 (2), 4g slices 4-7 (4);
  // 3g and 7g reach everything. 7 / 5 profiles = 1.4 slices.
  EXPECT_EQ(Unusable({}), 7);
  // 1g@6: free 0-5 and 7. 1g {7}, 2g {7}, 3g and 4g {4, 5, 7}, 7g all 7.
  EXPECT_EQ(Unusable({{"1g.10gb", 6}}), 1 + 1 + 3 + 3 + 7);
  // 1g@0: free 1-7. 1g {7}; 2g only at 2, 4: {1, 6, 7}; 3g only at 4: {1, 2, 3};
  // 4g and 7g nothing: 7 each.
  EXPECT_EQ(Unusable({{"1g.10gb", 0}}), 1 + 3 + 3 + 7 + 7);
  // 3g@4: free 0-3, reachable by every profile but 7g.
  EXPECT_EQ(Unusable({{"3g.40gb", 4}}), 4);
  // 2g@0 + 3g@4: free 2-3; 1g and 2g fit there, 3g, 4g and 7g do not.
  EXPECT_EQ(Unusable({{"2g.20gb", 0}, {"3g.40gb", 4}}), 0 + 0 + 2 + 2 + 2);
  // 4g@0 + 2g@4: free 6-7. 1g at 6 only ({7}); 2g has no start at 6.
  EXPECT_EQ(Unusable({{"4g.40gb", 0}, {"2g.20gb", 4}}), 1 + 2 + 2 + 2 + 2);
  // Full GPU: nothing free, nothing unusable.
  EXPECT_EQ(Unusable({{"7g.80gb", 0}}), 0);
}

TEST(ZambiancoMetricTest, ComputeSlicesLimitWhatIsReachable) {
  // Six 1g at 0-5 use 6 of 7 compute slices; slices 6-7 are free. A 1g still
  // fits at 6 (unusable {7}); 2g, 3g, 4g and 7g need more compute than is
  // left, so both free slices are unusable to each.
  EXPECT_EQ(Unusable({{"1g.10gb", 0},
                      {"1g.10gb", 1},
                      {"1g.10gb", 2},
                      {"1g.10gb", 3},
                      {"1g.10gb", 4},
                      {"1g.10gb", 5}}),
            1 + 2 + 2 + 2 + 2);
  // 3g@0 + 3g@4 fill the memory with one compute slice unused: the metric
  // counts free memory slices only, so nothing is unusable.
  EXPECT_EQ(Unusable({{"3g.40gb", 0}, {"3g.40gb", 4}}), 0);
}

TEST(ZambiancoPolicyTest, TakesTheStartOfLeastGrowth) {
  Cluster c = MigCluster({1});
  ClusterState s(&c);
  Workload w = Ranked(c);
  auto p = Start(c, w);
  // Empty GPU (7): 1g@6 -> 15 (+8) beats 1g@4/@5 -> 17 and the rest -> 21.
  auto a = p->Place(s, Pod("a", 1, 100));
  ASSERT_TRUE(a.has_value());
  ASSERT_EQ(a->mig.size(), 1u);
  EXPECT_EQ(a->mig[0].use.profile, Profile(A100(), "1g.10gb"));
  EXPECT_EQ(a->mig[0].use.start, 6);
  ASSERT_TRUE(s.Place(Pod("a", 1, 100), *a).ok());
  // 230 milli needs 2 memory slices: 2g.20gb. Next to 1g@6, 2g@4 leaves 9
  // (-6); 2g@0 and 2g@2 leave 17 (+2). A first-fit (HAMi v2.10) takes 0.
  auto b = p->Place(s, Pod("b", 1, 230));
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->mig[0].use.profile, Profile(A100(), "2g.20gb"));
  EXPECT_EQ(b->mig[0].use.start, 4);
  EXPECT_THAT(b->mig[0].create, ElementsAre(::testing::Field(&mig::Instance::start, 4)));
  EXPECT_TRUE(b->mig[0].destroy.empty());
  ASSERT_TRUE(s.Place(Pod("b", 1, 230), *b).ok());
  // So a 3g.40gb still fits, at 0.
  auto d = p->Place(s, Pod("d", 1, 400));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->mig[0].use.profile, Profile(A100(), "3g.40gb"));
  EXPECT_EQ(d->mig[0].use.start, 0);
}

TEST(ZambiancoPolicyTest, PrefersTheGpuOfLeastGrowthOverNodeRank) {
  // Node 0 (rank 0) is empty: a 1g costs +8 there. Node 1 (rank 1) holds
  // 3g@4 (4): a 1g at 0-3 leaves 10, +6.
  Cluster c = MigCluster({1, 1});
  ClusterState s(&c);
  Occupy(s, 1, 0, "3g.40gb", 4, 400);
  Workload w = Ranked(c);
  auto p = Start(c, w);
  auto a = p->Place(s, Pod("a", 1, 100));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->node, 1);
  EXPECT_EQ(a->mig[0].use.start, 0);  // 0-3 tie at +6: the lowest start.
}

TEST(ZambiancoPolicyTest, BreaksTiesByNodeRankThenGpuIndex) {
  Cluster c = MigCluster({2, 2, 2});
  ClusterState s(&c);
  Occupy(s, 2, 0, "7g.80gb", 0, 1000);
  Workload w = Ranked(c, {2, 1, 0});
  auto p = Start(c, w);
  // Every empty GPU ties; node 2 has the lowest rank and GPU 1 is its only empty one.
  auto a = p->Place(s, Pod("a", 1, 1000));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->node, 2);
  EXPECT_EQ(a->mig[0].gpu, 1);
  // Two whole GPUs: node 1 (rank 1), GPUs 0 and 1.
  auto b = p->Place(s, Pod("b", 2, 1000));
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->node, 1);
  ASSERT_EQ(b->mig.size(), 2u);
  EXPECT_EQ(b->mig[0].gpu, 0);
  EXPECT_EQ(b->mig[1].gpu, 1);
}

TEST(ZambiancoPolicyTest, MultiGpuPodsTakeTheGpusOfLeastGrowth) {
  // Node 0 (rank 0): GPU 0 empty, GPU 1 with 3g@4. Node 1 (rank 1): both
  // GPUs with 3g@4. Two 1g: +8 + 6 = 14 on node 0, 6 + 6 = 12 on node 1.
  Cluster c = MigCluster({2, 2});
  ClusterState s(&c);
  Occupy(s, 0, 1, "3g.40gb", 4, 400);
  Occupy(s, 1, 0, "3g.40gb", 4, 400);
  Occupy(s, 1, 1, "3g.40gb", 4, 400);
  Workload w = Ranked(c);
  auto p = Start(c, w);
  auto a = p->Place(s, Pod("a", 2, 100));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->node, 1);
  ASSERT_EQ(a->mig.size(), 2u);
  EXPECT_NE(a->mig[0].gpu, a->mig[1].gpu);
}

TEST(ZambiancoPolicyTest, UsesTheRunsMappingAndSkipsFullGpus) {
  Cluster c = MigCluster({1});
  ClusterState s(&c, MigMapping::kCompute);
  Workload w = Ranked(c);
  auto p = Start(c, w, MigMapping::kCompute);
  // 300 milli needs ceil(2.1) = 3 compute slices: 3g.40gb.
  EXPECT_EQ(p->Place(s, Pod("a", 1, 300))->mig[0].use.profile, Profile(A100(), "3g.40gb"));
  // 140 milli needs ceil(0.98) = 1 compute slice: 1g.10gb (under the memory
  // mapping ceil(1.12) = 2 memory slices, a 2g.20gb).
  EXPECT_EQ(p->Place(s, Pod("b", 1, 140))->mig[0].use.profile, Profile(A100(), "1g.10gb"));
  ClusterState by_memory(&c);
  EXPECT_EQ(Start(c, w)->Place(by_memory, Pod("b", 1, 140))->mig[0].use.profile,
            Profile(A100(), "2g.20gb"));
  Occupy(s, 0, 0, "7g.80gb", 0, 1000);
  EXPECT_FALSE(p->Place(s, Pod("c", 1, 100)).has_value());
}

TEST(ZambiancoPolicyTest, CpuOnlyPodsGoToTheLowestRankWithRoom) {
  Cluster c = MigCluster({1, 1, 1});
  ClusterState s(&c);
  ASSERT_TRUE(s.Place(Pod("big", 0, 0, 60000), Placement{1, {}, {}}).ok());
  Workload w = Ranked(c, {2, 0, 1});
  auto p = Start(c, w);
  // Node 1 has the lowest rank but only 4 cores left.
  EXPECT_EQ(p->Place(s, Pod("cpu", 0, 0, 8000))->node, 2);
}

TEST(ZambiancoPolicyTest, NeedsMigGpus) {
  Cluster shared = SmallCluster({1});
  Workload w = Ranked(shared);
  auto p = MakeBuiltinPolicy("zambianco");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->name(), "zambianco");
  EXPECT_FALSE((*p)->keeps_idle_instances());
  RunContext ctx{&shared, &w, MigMapping::kMemory, 1};
  EXPECT_THAT(std::string((*p)->Begin(ctx).message()), HasSubstr("needs MIG GPUs"));
}

// End to end: the sequence of TakesTheStartOfLeastGrowth through the
// simulator. HAMi v2.10 puts the 2g at 0, which strands the 3g.
TEST(ZambiancoEndToEndTest, PlacesWhatAFirstFitStrands) {
  Cluster c = MigCluster({1});
  Workload w = Ranked(c);
  w.pods = {Pod("a", 1, 100), Pod("b", 1, 230), Pod("d", 1, 400)};
  w.trace_pods = w.pods;
  for (const char* name : {"zambianco", "hami-v2.10"}) {
    SCOPED_TRACE(name);
    auto policy = MakeBuiltinPolicy(name);
    ASSERT_TRUE(policy.ok());
    auto r = Simulate(c, w, **policy);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->rejected_placements, 0) << r->first_rejection;
    EXPECT_EQ(r->placed, std::string(name) == "zambianco" ? 3 : 2);
  }
}

// Random arrivals and departures on a small MIG cluster: every placement is
// legal by the simulator's own checks (layouts, no instance in use moved).
TEST(ZambiancoEndToEndTest, PlacementsAreLegalUnderChurn) {
  Cluster c = MigCluster({2, 4, 8});
  Workload w = Ranked(c, {1, 2, 0});
  std::mt19937 rng(7);
  const int shares[] = {60, 100, 230, 300, 470, 810, 1000};
  for (int i = 0; i < 400; ++i) {
    const int kind = static_cast<int>(rng() % 9);
    if (kind == 7) {
      w.pods.push_back(Pod("multi-" + std::to_string(i), 2, 1000, 4000));
    } else if (kind == 8) {
      w.pods.push_back(Pod("cpu-" + std::to_string(i), 0, 0, 2000));
    } else {
      w.pods.push_back(Pod("p-" + std::to_string(i), 1, shares[kind], 2000));
    }
  }
  w.trace_pods = w.pods;
  // Pod i arrives at 10 i and stays 10 (i mod 37) + 5 seconds.
  std::vector<Event> events;
  for (int i = 0; i < static_cast<int>(w.pods.size()); ++i) {
    events.push_back({10.0 * i, i, true});
    events.push_back({10.0 * i + 10.0 * (i % 37) + 5, i, false});
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const Event& a, const Event& b) { return a.time < b.time; });
  w.events = events;
  auto policy = MakeBuiltinPolicy("zambianco");
  ASSERT_TRUE(policy.ok());
  auto r = Simulate(c, w, **policy);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rejected_placements, 0) << r->first_rejection;
  EXPECT_EQ(r->mig.busy_instances_moved, 0);
  EXPECT_GT(r->placed, 200);
  EXPECT_GT(r->failed, 0);  // The cluster saturates: the test exercises full GPUs.
  EXPECT_GT(r->mig.instances_destroyed, 0);
}

}  // namespace
}  // namespace prism::sim
