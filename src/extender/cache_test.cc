#include "extender/cache.h"

#include <functional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "config/allocation_status.h"
#include "config/annotations.h"
#include "config/device_config_yaml.h"
#include "config/pod_json.h"
#include "extender/test_util.h"
#include "k8s/objects.h"

namespace prism::extender {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using json = nlohmann::json;
using testing::GpuPod;
using testing::Manifest;
using testing::NodeJson;
using testing::TestGpu;
using testing::Views;

// The pod as the API server shows it after a Binding that carried `annotations`.
json Bound(json pod, const std::string& node,
           const std::map<std::string, std::string>& annotations) {
  pod["spec"]["nodeName"] = node;
  for (const auto& [k, v] : annotations) pod["metadata"]["annotations"][k] = v;
  return pod;
}

class CacheTest : public ::testing::Test {
 protected:
  CacheTest() { Reset(); }

  void Reset(absl::Duration min_rebuild_interval = absl::ZeroDuration(),
             const std::function<void(CacheOptions&)>& adjust = nullptr) {
    CacheOptions options;
    options.min_rebuild_interval = min_rebuild_interval;
    options.engine = DefaultEngineOptions();
    options.clock = &clock_;
    options.assume_ttl = absl::Seconds(30);
    options.uncertain_ttl = absl::Seconds(5);
    options.problem_grace = absl::Seconds(10);
    if (adjust) adjust(options);
    cache_ = std::make_unique<SchedulerCache>(config::DefaultDeviceConfig(), options);
  }

  // Filter + Prioritize + bind on the best node; returns the bound pod.
  json Schedule(const json& pod, const std::vector<std::string>& nodes) {
    const config::PodManifest m = Manifest(pod);
    FilterOutcome f = cache_->Filter(m, Views(nodes));
    EXPECT_FALSE(f.assumed_node.empty()) << f.Summary(nodes.size());
    absl::StatusOr<BindTicket> t = cache_->BeginBind(m, f.assumed_node);
    EXPECT_TRUE(t.ok()) << t.status();
    cache_->FinishBind(*t, BindOutcome::kBound);
    return Bound(pod, f.assumed_node, t->annotations);
  }

  int64_t UsedMiB(const std::string& node) {
    int64_t used = 0;
    for (const GpuSnapshot& g : cache_->GpuSnapshots()) {
      if (g.node == node) used += g.memory_used_mib;
    }
    return used;
  }

  k8s::FakeClock clock_;
  std::unique_ptr<SchedulerCache> cache_;
};

// A node's allocatable CPU unlike any other's: nodes that differ only in their names are twins,
// which share one evaluation per shape (tests that count scorings need every node scored).
std::string Distinct(int i) { return StrCat(64 + i); }

TEST_F(CacheTest, FilterGivesPerNodeReasonsAndAssumesOnTheBestNode) {
  cache_->UpsertNode(NodeJson("big", {TestGpu{}, TestGpu{}}));
  cache_->UpsertNode(NodeJson("small", {TestGpu{"A100-SXM4-40GB", 10000}}));
  cache_->UpsertNode(NodeJson("cpu-only", {}));
  FilterOutcome f =
      cache_->Filter(Manifest(GpuPod("p", 1, 20000)), {"big", "small", "cpu-only", "ghost"});
  ASSERT_TRUE(f.request_status.ok());
  EXPECT_TRUE(f.wants_gpu);
  EXPECT_THAT(f.feasible, ElementsAre("big"));
  EXPECT_EQ(f.Reason("small"), "1/1 CardInsufficientMemory");
  EXPECT_THAT(f.Reason("cpu-only"), HasSubstr("no GPU inventory"));
  EXPECT_THAT(f.Reason("ghost"), HasSubstr("no GPU inventory"));
  EXPECT_EQ(f.assumed_node, "big");
  EXPECT_EQ(UsedMiB("big"), 20000);
  EXPECT_EQ(cache_->EntryState("default/p"), "assumed");
  EXPECT_THAT(f.Summary(4), HasSubstr("1/4 nodes are available"));
}

TEST_F(CacheTest, NextFilterSeesTheAssumption) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  FilterOutcome a = cache_->Filter(Manifest(GpuPod("a", 1, 30000)), {"n1"});
  EXPECT_EQ(a.assumed_node, "n1");
  FilterOutcome b = cache_->Filter(Manifest(GpuPod("b", 1, 30000)), {"n1"});
  EXPECT_THAT(b.feasible, IsEmpty());
  EXPECT_EQ(b.Reason("n1"), "1/1 CardInsufficientMemory");
}

TEST_F(CacheTest, RefilteringAPodDropsItsOldAssumption) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  const config::PodManifest m = Manifest(GpuPod("a", 1, 30000));
  EXPECT_EQ(cache_->Filter(m, {"n1"}).assumed_node, "n1");
  EXPECT_EQ(cache_->Filter(m, {"n1"}).assumed_node, "n1");
  EXPECT_EQ(UsedMiB("n1"), 30000);
}

TEST_F(CacheTest, AssumptionsExpire) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  cache_->Filter(Manifest(GpuPod("a", 1, 30000)), {"n1"});
  clock_.Advance(absl::Seconds(31));
  cache_->Tick();
  EXPECT_EQ(UsedMiB("n1"), 0);
  EXPECT_EQ(cache_->EntryState("default/a"), "");
  EXPECT_EQ(cache_->stats().assumptions_expired, 1);
}

TEST_F(CacheTest, PrioritizeGivesTheAssumedNodeTen) {
  for (const char* n : {"n1", "n2", "n3"}) cache_->UpsertNode(NodeJson(n, {TestGpu{}}));
  // Make n2 the binpack choice: it is already partly used.
  cache_->UpsertPod(Schedule(GpuPod("seed", 1, 10000), {"n2"}));
  const config::PodManifest m = Manifest(GpuPod("p", 1, 10000));
  FilterOutcome f = cache_->Filter(m, {"n1", "n2", "n3"});
  ASSERT_EQ(f.feasible.size(), 3u);
  std::vector<HostPriority> scores = cache_->Prioritize(m, {"n1", "n2", "n3"});
  ASSERT_EQ(scores.size(), 3u);
  for (const HostPriority& h : scores) {
    EXPECT_GE(h.score, 0);
    if (h.host == f.assumed_node) {
      EXPECT_EQ(h.score, 10);
    } else {
      EXPECT_LE(h.score, 9);
    }
  }
}

TEST_F(CacheTest, PrioritizeScoresEachNodeAlikeInAnyOrderAndSubset) {
  for (const char* n : {"n1", "n2", "n3", "n4"}) cache_->UpsertNode(NodeJson(n, {TestGpu{}}));
  // Different loads, so that the engine's scores differ between nodes.
  cache_->UpsertPod(Schedule(GpuPod("seed-a", 1, 10000), {"n2"}));
  cache_->UpsertPod(Schedule(GpuPod("seed-b", 1, 5000), {"n3"}));
  // Binpack (HAMi's per-pod annotation): the more used a node, the higher its score.
  json pod = GpuPod("p", 1, 30000);
  pod["metadata"]["annotations"]["hami.io/node-scheduler-policy"] = "binpack";
  const config::PodManifest m = Manifest(pod);
  ASSERT_EQ(cache_->Filter(m, {"n1", "n2", "n3", "n4"}, /*assume=*/false).feasible.size(), 4u);
  auto by_host = [](const std::vector<HostPriority>& list) {
    std::map<std::string, int64_t> out;
    for (const HostPriority& h : list) out[std::string(h.host)] = h.score;
    return out;
  };
  // In Filter's order (the remembered scores walked in step), and without a remembered Filter.
  const std::map<std::string, int64_t> in_order =
      by_host(cache_->Prioritize(m, {"n1", "n2", "n3", "n4"}));
  ASSERT_EQ(in_order.size(), 4u);
  EXPECT_LT(in_order.at("n1"), in_order.at("n3"));
  EXPECT_LT(in_order.at("n3"), in_order.at("n2"));
  // Reversed: each node keeps its score. A subset out of order is scaled over its own nodes
  // (0 for the least, 10 for the most used), with each node's own engine score.
  EXPECT_EQ(by_host(cache_->Prioritize(m, {"n4", "n3", "n2", "n1"})), in_order);
  const std::map<std::string, int64_t> subset = by_host(cache_->Prioritize(m, {"n2", "n1"}));
  EXPECT_EQ(subset.at("n2"), 10);
  EXPECT_EQ(subset.at("n1"), 0);
  // A node Filter did not return (unknown here) scores 0.
  EXPECT_EQ(by_host(cache_->Prioritize(m, {"n1", "nope"})).at("nope"), 0);
}

TEST_F(CacheTest, BindOnTheAssumedNodeKeepsTheAssumedDecision) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}, TestGpu{}}));
  const config::PodManifest m = Manifest(GpuPod("p", 1, 10000));
  FilterOutcome f = cache_->Filter(m, {"n1"});
  const std::optional<sched::Decision> assumed = cache_->ChargedDecision("default/p");
  ASSERT_TRUE(assumed.has_value());
  absl::StatusOr<BindTicket> t = cache_->BeginBind(m, "n1");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->annotations.at(config::kHamiNodeAnnotation), "n1");
  EXPECT_TRUE(t->annotations.count(config::kPrismDecisionAnnotation));
  EXPECT_EQ(cache_->ChargedDecision("default/p")->containers[0].devices[0].uuid,
            assumed->containers[0].devices[0].uuid);
  EXPECT_EQ(cache_->EntryState("default/p"), "binding");
  EXPECT_EQ(UsedMiB("n1"), 10000);
}

TEST_F(CacheTest, BindOnAnotherNodeMovesTheCharge) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  cache_->UpsertNode(NodeJson("n2", {TestGpu{}}));
  const config::PodManifest m = Manifest(GpuPod("p", 1, 10000));
  FilterOutcome f = cache_->Filter(m, {"n1", "n2"});
  const std::string other = f.assumed_node == "n1" ? "n2" : "n1";
  absl::StatusOr<BindTicket> t = cache_->BeginBind(m, other);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(UsedMiB(other), 10000);
  EXPECT_EQ(UsedMiB(f.assumed_node), 0);
}

TEST_F(CacheTest, BindWhereThePodNoLongerFitsIsResourceExhausted) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  cache_->UpsertPod(Schedule(GpuPod("a", 1, 30000), {"n1"}));
  absl::StatusOr<BindTicket> t = cache_->BeginBind(Manifest(GpuPod("b", 1, 30000)), "n1");
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(t.status()));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("CardInsufficientMemory"));
  t = cache_->BeginBind(Manifest(GpuPod("b", 1, 30000)), "ghost");
  EXPECT_TRUE(absl::IsFailedPrecondition(t.status()));
}

TEST_F(CacheTest, FailedBindReleasesTheCharge) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  const config::PodManifest m = Manifest(GpuPod("p", 1, 30000));
  cache_->Filter(m, {"n1"});
  absl::StatusOr<BindTicket> t = cache_->BeginBind(m, "n1");
  ASSERT_TRUE(t.ok());
  cache_->FinishBind(*t, BindOutcome::kFailed);
  EXPECT_EQ(UsedMiB("n1"), 0);
  EXPECT_TRUE(cache_->BeginBind(Manifest(GpuPod("q", 1, 30000)), "n1").ok());
}

TEST_F(CacheTest, ConcurrentBindOfTheSamePodIsRefused) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  const config::PodManifest m = Manifest(GpuPod("p", 1, 1000));
  ASSERT_TRUE(cache_->BeginBind(m, "n1").ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(cache_->BeginBind(m, "n1").status()));
}

TEST_F(CacheTest, UncertainBindStaysChargedUntilSettled) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  const config::PodManifest m = Manifest(GpuPod("p", 1, 30000));
  absl::StatusOr<BindTicket> t = cache_->BeginBind(m, "n1");
  ASSERT_TRUE(t.ok());
  cache_->FinishBind(*t, BindOutcome::kUncertain);
  EXPECT_EQ(UsedMiB("n1"), 30000);
  EXPECT_THAT(cache_->ExpiredUncertain(), IsEmpty());
  clock_.Advance(absl::Seconds(6));
  std::vector<PodRef> expired = cache_->ExpiredUncertain();
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].node, "n1");
  cache_->ResolveUncertain(expired[0], /*bound=*/false);
  EXPECT_EQ(UsedMiB("n1"), 0);
}

TEST_F(CacheTest, RetriedBindAfterAnUncertainOneReusesTheDecision) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  const config::PodManifest m = Manifest(GpuPod("p", 1, 30000));
  absl::StatusOr<BindTicket> t = cache_->BeginBind(m, "n1");
  cache_->FinishBind(*t, BindOutcome::kUncertain);
  absl::StatusOr<BindTicket> again = cache_->BeginBind(m, "n1");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->annotations, t->annotations);
  EXPECT_EQ(UsedMiB("n1"), 30000);
}

TEST_F(CacheTest, InformerConfirmsOurBindWithoutRecharging) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  json pod = Schedule(GpuPod("p", 1, 10000), {"n1"});
  const uint64_t before = cache_->stats().generation;
  cache_->UpsertPod(pod);
  EXPECT_EQ(cache_->stats().generation, before);  // Nothing released or applied again.
  EXPECT_EQ(cache_->EntryState("default/p"), "bound");
  EXPECT_EQ(UsedMiB("n1"), 10000);
}

TEST_F(CacheTest, RestartRebuildsTheSameUsageFromAnnotations) {
  std::vector<std::string> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(StrCat("n", i));
    cache_->UpsertNode(NodeJson(nodes.back(), {TestGpu{}, TestGpu{"H100-SXM5-80GB", 81920, true}}));
  }
  std::vector<json> bound;
  for (int i = 0; i < 12; ++i) {
    json pod = GpuPod(StrCat("p", i), 1, 5000 + 1000 * (i % 4), 10,
                      {{"nvidia.com/vgpu-mode", i % 2 ? "mig" : "hami-core"}});
    bound.push_back(Schedule(pod, nodes));
  }
  const std::vector<GpuSnapshot> before = cache_->GpuSnapshots();
  Reset();  // A new process: only the API objects survive.
  for (const std::string& n : nodes) {
    cache_->UpsertNode(NodeJson(n, {TestGpu{}, TestGpu{"H100-SXM5-80GB", 81920, true}}));
  }
  for (const json& pod : bound) cache_->UpsertPod(pod);
  const std::vector<GpuSnapshot> after = cache_->GpuSnapshots();
  ASSERT_EQ(before.size(), after.size());
  int64_t charged_mib = 0;
  int assigned_instances = 0;
  auto placements = [](const GpuSnapshot& gpu) {
    std::vector<std::string> out;
    for (const InstanceSnapshot& i : gpu.instances) {
      out.push_back(StrCat(i.profile, "@", i.start, ":", i.state));
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  for (size_t g = 0; g < before.size(); ++g) {
    ASSERT_EQ(before[g].uuid, after[g].uuid);
    EXPECT_EQ(before[g].memory_used_mib, after[g].memory_used_mib) << before[g].uuid;
    EXPECT_EQ(before[g].cores_used_permille, after[g].cores_used_permille) << before[g].uuid;
    EXPECT_EQ(before[g].tasks, after[g].tasks) << before[g].uuid;
    // The same instances in the same places, held the same way (not just as many).
    EXPECT_EQ(placements(before[g]), placements(after[g])) << before[g].uuid;
    charged_mib += before[g].memory_used_mib;
    for (const InstanceSnapshot& i : before[g].instances) assigned_instances += i.state == "assigned";
  }
  // What was compared was really charged: six slices of 5-8 GB and six MIG instances.
  EXPECT_GE(charged_mib, 6 * 5000);
  EXPECT_EQ(assigned_instances, 6);
  EXPECT_EQ(cache_->stats().pods_by_state["bound"], 12);
}

TEST_F(CacheTest, PodsSeenBeforeTheirNodeAreChargedOnceTheNodeArrives) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  json pod = Schedule(GpuPod("p", 1, 10000), {"n1"});
  Reset();
  cache_->UpsertPod(pod);
  cache_->RebuildIfDirty();
  EXPECT_EQ(cache_->EntryState("default/p"), "problem");
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  cache_->RebuildIfDirty();
  EXPECT_EQ(cache_->EntryState("default/p"), "bound");
  EXPECT_EQ(UsedMiB("n1"), 10000);
}

TEST_F(CacheTest, DeletedAndFinishedPodsGiveTheirGpusBack) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  json a = Schedule(GpuPod("a", 1, 10000), {"n1"});
  json b = Schedule(GpuPod("b", 1, 10000), {"n1"});
  cache_->UpsertPod(a);
  cache_->UpsertPod(b);
  EXPECT_EQ(UsedMiB("n1"), 20000);
  cache_->DeletePod(a);
  EXPECT_EQ(UsedMiB("n1"), 10000);
  b["status"]["phase"] = "Succeeded";
  cache_->UpsertPod(b);
  EXPECT_EQ(UsedMiB("n1"), 0);
}

TEST_F(CacheTest, RecreatedPodUnderTheSameNameReplacesTheOldOne) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  json old_pod = Schedule(GpuPod("p", 1, 30000), {"n1"});
  cache_->UpsertPod(old_pod);
  ASSERT_EQ(UsedMiB("n1"), 30000);
  json fresh = GpuPod("p", 1, 30000);
  fresh["metadata"]["uid"] = "uid-2";
  cache_->UpsertPod(fresh);  // Pending, new UID: the old pod is gone.
  EXPECT_EQ(UsedMiB("n1"), 0);
}

TEST_F(CacheTest, AllocationFailureReportedByTheNodeAgentReleases) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  json pod = Schedule(GpuPod("p", 1, 30000), {"n1"});
  cache_->UpsertPod(pod);
  ASSERT_EQ(UsedMiB("n1"), 30000);
  pod["metadata"]["annotations"]["prism.io/allocation-status"] =
      R"({"node":"n1","containers":{"main":{"allocations":["a-1"],"error":"NVML: boom"}}})";
  cache_->UpsertPod(pod);
  EXPECT_EQ(UsedMiB("n1"), 0);
  EXPECT_EQ(cache_->EntryState("default/p"), "allocation-failed");
  cache_->UpsertPod(pod);  // Later updates do not charge it again.
  EXPECT_EQ(UsedMiB("n1"), 0);
}

TEST_F(CacheTest, SuccessfulAllocationKeepsTheCharge) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  json pod = Schedule(GpuPod("p", 1, 30000), {"n1"});
  pod["metadata"]["annotations"]["prism.io/allocation-status"] =
      R"({"node":"n1","containers":{"main":{"allocations":["a-1"],"devices":[]}}})";
  cache_->UpsertPod(pod);
  EXPECT_EQ(UsedMiB("n1"), 30000);
}

// A malformed prism.io/allocation-status (anyone who may edit the pod may write one) says
// nothing about what the pod holds: the pod stays charged, and the status counts as a decode
// failure once, not at every informer update.
TEST_F(CacheTest, MalformedAllocationStatusIsADecodeFailureNotARelease) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  json pod = Schedule(GpuPod("p", 1, 30000), {"n1"});
  cache_->UpsertPod(pod);
  ASSERT_EQ(UsedMiB("n1"), 30000);
  const int64_t before = cache_->stats().decode_failures;
  // Every GPU container "failed", but the allocation ID is a path: not the agent's writing.
  pod["metadata"]["annotations"]["prism.io/allocation-status"] =
      R"({"node":"n1","containers":{"main":{"allocations":["../../x-1"],"error":"boom"}}})";
  cache_->UpsertPod(pod);
  cache_->UpsertPod(pod);
  EXPECT_EQ(UsedMiB("n1"), 30000);
  EXPECT_EQ(cache_->EntryState("default/p"), "bound");
  EXPECT_EQ(cache_->stats().decode_failures, before + 1);
  pod["metadata"]["annotations"]["prism.io/allocation-status"] = "{not json";
  cache_->UpsertPod(pod);
  EXPECT_EQ(cache_->stats().decode_failures, before + 2);
  EXPECT_EQ(UsedMiB("n1"), 30000);
  // The agent's own report still releases it.
  pod["metadata"]["annotations"]["prism.io/allocation-status"] =
      R"({"node":"n1","containers":{"main":{"allocations":["a-1"],"error":"NVML: boom"}}})";
  cache_->UpsertPod(pod);
  EXPECT_EQ(UsedMiB("n1"), 0);
  EXPECT_EQ(cache_->EntryState("default/p"), "allocation-failed");
  EXPECT_EQ(cache_->stats().decode_failures, before + 2);
}

// Issue 13 #1 names them: the decision that aborted the scheduler sat on any pod with
// spec.nodeName, CPU-only and Pending ones included (the webhook checks only GPU pods).
TEST_F(CacheTest, CpuOnlyAndPendingPodsWithAMalformedDecisionDoNotStopScheduling) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}, TestGpu{}}));
  const std::string bad = R"({"containers":[{"name":"main","devices":[{"mode":1}]}]})";
  const int64_t before = cache_->stats().decode_failures;
  // A CPU-only pod bound to the node, running.
  json cpu_only = testing::PodJson("default", "cpu-only", {testing::TestContainer("main", 0)});
  cpu_only["status"]["phase"] = "Running";
  cache_->UpsertPod(Bound(cpu_only, "n1", {{"prism.io/decision", bad}}));
  // A GPU pod bound but still Pending (phase), and one not bound at all.
  json pending = GpuPod("pending", 1, 1000);
  ASSERT_EQ(pending["status"]["phase"], "Pending");
  cache_->UpsertPod(Bound(pending, "n1", {{"prism.io/decision", bad}}));
  json unbound = GpuPod("unbound", 1, 1000);
  unbound["metadata"]["annotations"]["prism.io/decision"] = bad;
  cache_->UpsertPod(unbound);
  EXPECT_EQ(cache_->EntryState("default/cpu-only"), "problem");
  EXPECT_EQ(cache_->EntryState("default/pending"), "problem");
  EXPECT_EQ(cache_->EntryState("default/unbound"), "");  // Not the cache's until it is bound.
  EXPECT_EQ(cache_->stats().decode_failures, before + 2);
  // Well-formed pods are scheduled and charged beside them, also across a rebuild.
  json good = Schedule(GpuPod("good", 1, 1000), {"n1"});
  cache_->UpsertPod(good);
  EXPECT_EQ(cache_->EntryState("default/good"), "bound");
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}, TestGpu{}}, "32"));  // Forces a rebuild.
  cache_->RebuildIfDirty();
  EXPECT_EQ(UsedMiB("n1"), 1000);
  json second = Schedule(GpuPod("second", 1, 2000), {"n1"});
  cache_->UpsertPod(second);
  EXPECT_EQ(UsedMiB("n1"), 3000);
  clock_.Advance(absl::Seconds(11));
  std::vector<std::string> names;
  for (const PodProblem& p : cache_->Problems()) {
    names.push_back(p.pod.name);
    EXPECT_THAT(p.problem, HasSubstr("prism.io/decision: node: missing"));
  }
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("cpu-only", "pending"));
}

TEST_F(CacheTest, MalformedDecisionIsAProblemNotACrash) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  json pod = Bound(GpuPod("p", 1, 1000), "n1", {{"prism.io/decision", "{garbage"}});
  cache_->UpsertPod(pod);
  cache_->Tick();
  EXPECT_EQ(cache_->EntryState("default/p"), "problem");
  EXPECT_THAT(cache_->Problems(), IsEmpty());  // Within the grace period.
  clock_.Advance(absl::Seconds(11));
  std::vector<PodProblem> problems = cache_->Problems();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0].problem, HasSubstr("decision"));
  EXPECT_EQ(UsedMiB("n1"), 0);
}

// Issue 13 #1: a decision whose fields have the wrong type used to throw out of UpsertPod
// (nlohmann's value() on a non-string) and abort the scheduler, at every restart.
TEST_F(CacheTest, DecisionFieldsOfTheWrongTypeAreAProblemNotACrash) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}, TestGpu{}}));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"containers":[{"name":"main","devices":[{"mode":1}]}]})", "node: missing"},
      {R"({"node":"n1","containers":[{"name":"main","devices":[{"uuid":"GPU-n1-0","mode":1}]}]})",
       "containers[0].devices[0].mode: expected a string, got number"},
      {R"({"node":"n1","containers":[{"name":"main","devices":[{"mode":"mig","uuid":7,)"
       R"("profile":"1g.10gb","placement":{"start":0}}]}]})",
       "uuid"},
      {R"({"node":"n1","containers":[{"name":"main","devices":[{"mode":"mig","uuid":"GPU-n1-0",)"
       R"("memoryMiB":1,"cores":1,"profile":[],"placement":{"start":0}}]}]})",
       "profile"},
      {R"({"node":"n1","containers":[{"devices":[{"uuid":"GPU-n1-0","mode":"hami-core",)"
       R"("memoryMiB":"1000","cores":10}]}]})",
       "memoryMiB"},
      {R"({"node":"n1","containers":[{"devices":"x"}]})", "devices"},
      {R"({"node":"n1","containers":[{"devices":[{"uuid":"GPU-n1-0","mode":"hami-core",)"
       R"("memoryMiB":1000,"cores":1e999}]}]})",
       "decision"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string name = StrCat("bad", i);
    cache_->UpsertPod(Bound(GpuPod(name, 1, 1000), "n1", {{"prism.io/decision", cases[i].first}}));
    EXPECT_EQ(cache_->EntryState("default/" + name), "problem") << cases[i].first;
  }
  // A well-formed pod next to them is still scheduled and charged.
  json good = Schedule(GpuPod("good", 1, 1000), {"n1"});
  cache_->UpsertPod(good);
  EXPECT_EQ(cache_->EntryState("default/good"), "bound");
  EXPECT_EQ(UsedMiB("n1"), 1000);
  cache_->RebuildIfDirty();  // A rebuild (as at a restart) reads them all again.
  EXPECT_EQ(UsedMiB("n1"), 1000);
  clock_.Advance(absl::Seconds(11));
  const std::vector<PodProblem> problems = cache_->Problems();
  ASSERT_EQ(problems.size(), cases.size());
  for (const PodProblem& p : problems) {
    const size_t i = static_cast<size_t>(std::stoi(p.pod.name.substr(3)));
    EXPECT_THAT(p.problem, HasSubstr(cases[i].second)) << p.pod.name;
  }
  EXPECT_GE(cache_->stats().decode_failures, static_cast<int64_t>(cases.size()));
}

TEST_F(CacheTest, ADecisionEditedIntoGarbageKeepsItsOldCharge) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  json pod = Schedule(GpuPod("p", 1, 3000), {"n1"});
  cache_->UpsertPod(pod);
  ASSERT_EQ(UsedMiB("n1"), 3000);
  // The node agent allocated from the old decision: the pod may hold all of it.
  pod["metadata"]["annotations"]["prism.io/decision"] =
      R"({"node":"n1","containers":[{"devices":[{"mode":1}]}]})";
  cache_->UpsertPod(pod);
  EXPECT_EQ(cache_->EntryState("default/p"), "bound");
  EXPECT_EQ(UsedMiB("n1"), 3000);
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}, "32"));  // Forces a rebuild.
  cache_->RebuildIfDirty();
  EXPECT_EQ(UsedMiB("n1"), 3000);
  cache_->DeletePod(pod);
  EXPECT_EQ(UsedMiB("n1"), 0);
}

TEST_F(CacheTest, MalformedNodeInventoryExcludesOnlyThatNode) {
  cache_->UpsertNode(NodeJson("good", {TestGpu{}}));
  json bad = NodeJson("bad", {TestGpu{}});
  bad["metadata"]["annotations"]["prism.io/gpu-inventory"] = R"({"version":1,"gpus":"x"})";
  cache_->UpsertNode(bad);
  FilterOutcome f = cache_->Filter(Manifest(GpuPod("p", 1, 1000)), {"good", "bad"});
  EXPECT_THAT(f.feasible, ElementsAre("good"));
  EXPECT_THAT(f.Reason("bad"), HasSubstr("unusable GPU inventory"));
  EXPECT_EQ(cache_->stats().nodes_invalid, 1);
}

TEST_F(CacheTest, UnknownGpuModelInMigModeIsRejectedPerNode) {
  cache_->UpsertNode(NodeJson("good", {TestGpu{}}));
  cache_->UpsertNode(NodeJson("odd", {TestGpu{"Tesla T4", 15360, false}}));
  json weird = NodeJson("weird", {TestGpu{}});
  // A MIG-mode GPU whose model the catalog does not know.
  json inv =
      json::parse(weird["metadata"]["annotations"]["prism.io/gpu-inventory"].get<std::string>());
  inv["gpus"][0]["model"] = "Mystery-GPU";
  inv["gpus"][0]["mode"] = "mig";
  inv["gpus"][0]["mig"] = {
      {"enabled", true}, {"profiles", json::array()}, {"instances", json::array()}};
  weird["metadata"]["annotations"]["prism.io/gpu-inventory"] = inv.dump();
  cache_->UpsertNode(weird);
  FilterOutcome f = cache_->Filter(Manifest(GpuPod("p", 1, 1000)), {"good", "odd", "weird"});
  EXPECT_THAT(f.feasible, ElementsAre("good", "odd"));
  EXPECT_THAT(f.Reason("weird"), HasSubstr("unusable GPU inventory"));
}

// Two nodes fine alone that report one GPU UUID (a cloned disk, simulated GPUs seeded alike):
// the first in name order keeps its GPUs, the other is unusable with the clash named, and the
// rest of the cluster is scheduled as before (it used to leave every node without GPUs).
TEST_F(CacheTest, NodesReportingOneGpuUuidKeepTheFirstAndNameTheClash) {
  json a = NodeJson("a", {TestGpu{}});
  json b = NodeJson("b", {TestGpu{}});
  json other = NodeJson("c", {TestGpu{}});
  const json a_inventory =
      json::parse(a["metadata"]["annotations"]["prism.io/gpu-inventory"].get<std::string>());
  json b_inventory =
      json::parse(b["metadata"]["annotations"]["prism.io/gpu-inventory"].get<std::string>());
  b_inventory["gpus"][0]["uuid"] = a_inventory["gpus"][0]["uuid"];
  b["metadata"]["annotations"]["prism.io/gpu-inventory"] = b_inventory.dump();
  cache_->UpsertNode(b);
  cache_->UpsertNode(other);
  cache_->UpsertNode(a);
  FilterOutcome f = cache_->Filter(Manifest(GpuPod("p", 1, 1000)), {"a", "b", "c"});
  EXPECT_THAT(f.feasible, ElementsAre("a", "c"));
  EXPECT_THAT(f.Reason("b"), HasSubstr("also on node a"));
}

TEST_F(CacheTest, InventoryChangeIsAppliedInPlaceAndKeepsBoundPods) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}, TestGpu{}}));
  cache_->UpsertNode(NodeJson("n2", {TestGpu{}}));
  cache_->UpsertPod(Schedule(GpuPod("a", 1, 30000), {"n1"}));
  cache_->UpsertPod(Schedule(GpuPod("b", 1, 30000), {"n1"}));
  cache_->UpsertPod(Schedule(GpuPod("x", 1, 30000), {"n2"}));
  ASSERT_EQ(UsedMiB("n1"), 60000);
  const CacheStats before = cache_->stats();
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}, TestGpu{}, TestGpu{}}));  // A GPU more.
  const CacheStats after = cache_->stats();
  EXPECT_EQ(after.rebuilds, before.rebuilds);  // No whole rebuild...
  EXPECT_EQ(after.node_updates, before.node_updates + 1);  // ...but the node, in place.
  EXPECT_EQ(UsedMiB("n1"), 60000);  // Its pods charged again.
  EXPECT_EQ(UsedMiB("n2"), 30000);  // The other node untouched.
  FilterOutcome f = cache_->Filter(Manifest(GpuPod("c", 1, 30000)), {"n1"});
  EXPECT_EQ(cache_->stats().rebuilds, before.rebuilds);
  EXPECT_THAT(f.feasible, ElementsAre("n1"));
  EXPECT_EQ(UsedMiB("n1"), 90000);
  FilterOutcome g = cache_->Filter(Manifest(GpuPod("d", 1, 30000)), {"n1"});
  EXPECT_THAT(g.feasible, IsEmpty());
  // Gone: its pods become problems, and the node fails filters for lack of inventory.
  cache_->DeleteNode("n1");
  EXPECT_EQ(cache_->EntryState("default/a"), "problem");
  EXPECT_THAT(cache_->Filter(Manifest(GpuPod("e", 1, 1000)), {"n1"}).Reason("n1"),
              HasSubstr("no GPU inventory"));
  // Back: they are charged again at once.
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}, TestGpu{}}));
  EXPECT_EQ(cache_->EntryState("default/a"), "bound");
  EXPECT_EQ(UsedMiB("n1"), 60000);
  EXPECT_EQ(cache_->stats().rebuilds, before.rebuilds);
}

TEST_F(CacheTest, TickRefreshesTheTargetWorkloadOnlyWhenTheMixMoves) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}, TestGpu{}}));
  cache_->Tick();
  EXPECT_EQ(cache_->stats().workload_refreshes, 0);  // No pods: nothing to learn from.
  cache_->UpsertPod(Schedule(GpuPod("a", 1, 10000), {"n1"}));
  clock_.Advance(absl::Minutes(1));
  cache_->Tick();
  EXPECT_EQ(cache_->stats().workload_refreshes, 1);
  cache_->UpsertPod(Schedule(GpuPod("b", 1, 10000), {"n1"}));  // The same shape.
  clock_.Advance(absl::Minutes(1));
  cache_->Tick();
  EXPECT_EQ(cache_->stats().workload_refreshes, 1);
  cache_->UpsertPod(Schedule(GpuPod("c", 1, 20000), {"n1"}));  // A new one.
  cache_->Tick();  // Within the interval.
  EXPECT_EQ(cache_->stats().workload_refreshes, 1);
  clock_.Advance(absl::Minutes(1));
  cache_->Tick();
  EXPECT_EQ(cache_->stats().workload_refreshes, 2);
}

// Two shapes of near-equal frequency that swap places are the same mix (the shares moved by
// 2.5 points); a new shape with a third of the pods is not.
TEST_F(CacheTest, WorkloadRefreshIgnoresOrderAndSmallDrift) {
  std::vector<std::string> names;
  for (int i = 0; i < 20; ++i) {
    names.push_back(StrCat("n", i));
    cache_->UpsertNode(NodeJson(names.back(), {TestGpu{}, TestGpu{}}));
  }
  for (int i = 0; i < 20; ++i) cache_->UpsertPod(Schedule(GpuPod(StrCat("x", i), 1, 1000), names));
  for (int i = 0; i < 19; ++i) cache_->UpsertPod(Schedule(GpuPod(StrCat("y", i), 1, 2000), names));
  clock_.Advance(absl::Minutes(1));
  cache_->Tick();
  ASSERT_EQ(cache_->stats().workload_refreshes, 1);
  for (int i = 19; i < 21; ++i) cache_->UpsertPod(Schedule(GpuPod(StrCat("y", i), 1, 2000), names));
  clock_.Advance(absl::Minutes(1));
  cache_->Tick();
  EXPECT_EQ(cache_->stats().workload_refreshes, 1) << "y now outnumbers x: only the order moved";
  for (int i = 0; i < 20; ++i) cache_->UpsertPod(Schedule(GpuPod(StrCat("z", i), 1, 3000), names));
  clock_.Advance(absl::Minutes(1));
  cache_->Tick();
  EXPECT_EQ(cache_->stats().workload_refreshes, 2);
}

// A new target workload is staged: Filters keep the old one, and its indexes, while Tick()
// builds the new one's a budget at a time, and then it takes over. One not built within
// workload_switch_timeout is taken at the next refresh all the same.
TEST_F(CacheTest, ANewWorkloadIsStagedUntilTickHasBuiltItsIndexes) {
  Reset(absl::ZeroDuration(), [](CacheOptions& o) {
    o.index_maintenance_per_tick = 10;
    o.index_maintenance_rounds_per_tick = 1;
  });
  std::vector<std::string> names;
  for (int i = 0; i < 20; ++i) {
    names.push_back(StrCat("n", i));
    cache_->UpsertNode(NodeJson(names.back(), {TestGpu{}, TestGpu{}}, Distinct(i)));
  }
  for (int i = 0; i < 4; ++i) cache_->UpsertPod(Schedule(GpuPod(StrCat("a", i), 1, 10000), names));
  clock_.Advance(absl::Minutes(1));
  cache_->Tick();  // Stages {a}; 10 of the 20 scorings its index needs.
  EXPECT_EQ(cache_->stats().workload_refreshes, 1);
  EXPECT_THAT(cache_->Snapshot().workload.shapes, IsEmpty()) << "still the old workload";
  EXPECT_EQ(cache_->stats().pending_index_builds, 1);
  cache_->Tick();
  EXPECT_EQ(cache_->Snapshot().workload.shapes.size(), 1u) << "built: the new one decides";
  EXPECT_EQ(cache_->stats().pending_index_builds, 0);

  for (int i = 0; i < 6; ++i) cache_->UpsertPod(Schedule(GpuPod(StrCat("c", i), 1, 20000), names));
  clock_.Advance(absl::Minutes(1));
  cache_->Tick();  // Stages {a, c}: two indexes of 20 nodes to build, 10 scorings a tick.
  EXPECT_EQ(cache_->stats().workload_refreshes, 2);
  EXPECT_EQ(cache_->Snapshot().workload.shapes.size(), 1u);
  EXPECT_EQ(cache_->stats().pending_index_builds, 2) << "both open indexes, for the new workload";
  const FilterOutcome meanwhile =
      cache_->Filter(Manifest(GpuPod("d", 1, 10000)), Views(names), false);
  EXPECT_EQ(meanwhile.feasible.size(), names.size());
  // No tick for the timeout: the next refresh takes the staged workload unbuilt.
  clock_.Advance(absl::Minutes(5));
  cache_->Tick();
  EXPECT_EQ(cache_->stats().workload_switches_forced, 1);
  EXPECT_EQ(cache_->stats().workload_refreshes, 2) << "the mix has not moved since";
  EXPECT_EQ(cache_->Snapshot().workload.shapes.size(), 2u);
}

// The target workload records the cluster's GPUs per type (prism's type scarcity); a refresh
// stages a new one when more than a twentieth of the GPUs came or went, even with the same mix.
TEST_F(CacheTest, ANewWorkloadIsStagedWhenTheGpusPerTypeMoved) {
  std::vector<std::string> names;
  for (int i = 0; i < 20; ++i) {
    names.push_back(StrCat("n", i));
    cache_->UpsertNode(NodeJson(names.back(), {TestGpu{}, TestGpu{}}));
  }
  for (int i = 0; i < 4; ++i) cache_->UpsertPod(Schedule(GpuPod(StrCat("a", i), 1, 10000), names));
  clock_.Advance(absl::Minutes(1));
  cache_->Tick();
  cache_->Tick();
  ASSERT_EQ(cache_->stats().workload_refreshes, 1);
  ASSERT_EQ(cache_->Snapshot().workload.gpus_by_type.size(), 1u);
  EXPECT_EQ(cache_->Snapshot().workload.gpus_by_type[0].second, 40);
  // One more node (2 of 42 GPUs, under a twentieth): the same workload is kept.
  cache_->UpsertNode(NodeJson("extra-0", {TestGpu{}, TestGpu{}}));
  clock_.Advance(absl::Minutes(1));
  cache_->Tick();
  EXPECT_EQ(cache_->stats().workload_refreshes, 1);
  // Four more nodes of another type: staged, and recorded once built.
  for (int i = 1; i <= 4; ++i) {
    cache_->UpsertNode(NodeJson(StrCat("extra-", i), {TestGpu("T4", 15360), TestGpu("T4", 15360)}));
  }
  clock_.Advance(absl::Minutes(1));
  for (int i = 0; i < 5; ++i) cache_->Tick();
  EXPECT_EQ(cache_->stats().workload_refreshes, 2);
  EXPECT_EQ(cache_->Snapshot().workload.gpus_by_type.size(), 2u);
}

// Tick() catches up the shape indexes that fell behind (here: shape A's, while only shape B's
// pods were charged), so that A's next Filter does not pay for every change since.
TEST_F(CacheTest, TickCatchesUpShapeIndexesThatFellBehind) {
  std::vector<std::string> names;
  for (int i = 0; i < 20; ++i) {
    names.push_back(StrCat("n", i));
    cache_->UpsertNode(NodeJson(names.back(), {TestGpu{}, TestGpu{}}, Distinct(i)));
  }
  const FilterOutcome first = cache_->Filter(Manifest(GpuPod("a0", 1, 5000)), Views(names), false);
  ASSERT_EQ(first.feasible.size(), names.size());
  cache_->Tick();
  EXPECT_EQ(cache_->stats().index_maintenance_scorings, 0) << "nothing lagged yet";
  for (int i = 0; i < 20; ++i) {
    cache_->UpsertPod(Schedule(GpuPod(StrCat("b", i), 1, 30000), {names[i]}));
  }
  cache_->Tick();
  EXPECT_GT(cache_->stats().index_maintenance_scorings, 0);
  // The maintained index decides as a fresh scoring would: every node still fits an A pod.
  const FilterOutcome again = cache_->Filter(Manifest(GpuPod("a1", 1, 5000)), Views(names), false);
  EXPECT_EQ(again.feasible.size(), names.size());
}

// After a restart the running pods' shapes, and a pending pod's shape when it is seen, are
// indexed by Tick() before their first Filter, which then scores no node.
TEST_F(CacheTest, TickBuildsTheIndexesOfRunningAndPendingShapesBeforeTheirFilter) {
  std::vector<std::string> names;
  std::vector<json> nodes;
  for (int i = 0; i < 20; ++i) {
    names.push_back(StrCat("n", i));
    nodes.push_back(NodeJson(names.back(), {TestGpu{}, TestGpu{}}, Distinct(i)));
    cache_->UpsertNode(nodes.back());
  }
  std::vector<json> running;
  for (int i = 0; i < 6; ++i) {
    running.push_back(Schedule(GpuPod(StrCat("p", i), 1, i % 3 == 0 ? 30000 : 8000), names));
  }
  const FilterOutcome before =
      cache_->Filter(Manifest(GpuPod("big", 1, 30000)), Views(names), false);
  const FilterOutcome before_pending =
      cache_->Filter(Manifest(GpuPod("pending", 1, 12000)), Views(names), false);
  Reset();  // A restart: the informer replays nodes and pods into a new cache.
  for (const json& n : nodes) cache_->UpsertNode(n);
  for (const json& p : running) cache_->UpsertPod(p);
  cache_->RebuildIfDirty();
  EXPECT_EQ(cache_->stats().indexes_prepared, 2) << "two shapes run";
  EXPECT_EQ(cache_->stats().pending_index_builds, 2);
  cache_->UpsertPod(GpuPod("pending", 1, 12000));
  EXPECT_EQ(cache_->stats().indexes_prepared, 3);
  EXPECT_EQ(cache_->stats().pending_index_builds, 3);
  cache_->UpsertPod(GpuPod("pending-again", 1, 8000));  // A shape already indexed.
  cache_->UpsertPod(GpuPod("no-gpu", 0, 0));
  EXPECT_EQ(cache_->stats().indexes_prepared, 3);
  cache_->Tick();
  EXPECT_EQ(cache_->stats().pending_index_builds, 0);
  EXPECT_EQ(cache_->stats().index_maintenance_scorings, 3 * 20) << "each node once per shape";
  const FilterOutcome f =
      cache_->Filter(Manifest(GpuPod("pending", 1, 12000)), Views(names), false);
  EXPECT_EQ(f.feasible, before_pending.feasible) << f.Summary(names.size());
  const FilterOutcome g = cache_->Filter(Manifest(GpuPod("big", 1, 30000)), Views(names), false);
  EXPECT_EQ(g.feasible, before.feasible) << g.Summary(names.size());
  EXPECT_LT(g.feasible.size(), names.size()) << "the running pods must matter";
}

// Maintenance comes in rounds of index_maintenance_per_tick scorings, each under the lock anew,
// up to index_maintenance_rounds_per_tick a tick, and stops when there is nothing left.
TEST(CacheMaintenanceTest, TickSpendsRoundsOfItsBudgetWhileWorkRemains) {
  k8s::FakeClock clock;
  CacheOptions options;
  options.engine = DefaultEngineOptions();
  options.clock = &clock;
  options.index_maintenance_per_tick = 10;
  options.index_maintenance_rounds_per_tick = 4;
  SchedulerCache cache(config::DefaultDeviceConfig(), options);
  for (int i = 0; i < 20; ++i) cache.UpsertNode(NodeJson(StrCat("n", i), {TestGpu{}}, Distinct(i)));
  cache.RebuildIfDirty();
  for (int i = 0; i < 3; ++i) cache.UpsertPod(GpuPod(StrCat("pending-", i), 1, 1000 * (i + 1)));
  ASSERT_EQ(cache.stats().pending_index_builds, 3);
  cache.Tick();
  EXPECT_EQ(cache.stats().index_maintenance_scorings, 40) << "four rounds of ten";
  EXPECT_EQ(cache.stats().pending_index_builds, 1) << "two of the three built";
  cache.Tick();
  EXPECT_EQ(cache.stats().index_maintenance_scorings, 60) << "the rest, then it stops";
  EXPECT_EQ(cache.stats().pending_index_builds, 0);
  cache.Tick();
  EXPECT_EQ(cache.stats().index_maintenance_scorings, 60) << "nothing to do";
}

// Nodes alike but for their names (twins) share one evaluation per shape: a build over them costs
// the ticker an eighth of a scoring per node whose twin lends its score.
TEST(CacheMaintenanceTest, TwinNodesCostTheTickerAnEighthOfAScoring) {
  k8s::FakeClock clock;
  CacheOptions options;
  options.engine = DefaultEngineOptions();
  options.clock = &clock;
  options.index_maintenance_per_tick = 1000;
  SchedulerCache cache(config::DefaultDeviceConfig(), options);
  for (int i = 0; i < 20; ++i) cache.UpsertNode(NodeJson(StrCat("n", i), {TestGpu{}}));
  cache.RebuildIfDirty();
  cache.UpsertPod(GpuPod("pending", 1, 1000));
  ASSERT_EQ(cache.stats().pending_index_builds, 1);
  cache.Tick();
  EXPECT_EQ(cache.stats().pending_index_builds, 0);
  // One node evaluated (8 eighths), 19 lent (19 eighths): 27 eighths, 4 scorings rounded up.
  EXPECT_EQ(cache.stats().index_maintenance_scorings, 4);
}

TEST_F(CacheTest, VanishedGpuTurnsItsPodsIntoProblems) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  json pod = Schedule(GpuPod("p", 1, 30000), {"n1"});
  cache_->UpsertPod(pod);
  // The node now reports a different GPU (the old one failed and was replaced).
  json node = NodeJson("n1", {TestGpu{}});
  json inv =
      json::parse(node["metadata"]["annotations"]["prism.io/gpu-inventory"].get<std::string>());
  inv["gpus"][0]["uuid"] = "GPU-replacement";
  node["metadata"]["annotations"]["prism.io/gpu-inventory"] = inv.dump();
  cache_->UpsertNode(node);
  cache_->RebuildIfDirty();
  EXPECT_EQ(cache_->EntryState("default/p"), "problem");
  clock_.Advance(absl::Seconds(11));
  ASSERT_EQ(cache_->Problems().size(), 1u);
  EXPECT_THAT(cache_->Problems()[0].problem, HasSubstr("GPU-n1-0"));
  cache_->Forget("default/p", "uid-default-p");
  EXPECT_THAT(cache_->Problems(), IsEmpty());
}

TEST_F(CacheTest, NodeChangesApplyAtOnceAndConfigRebuildsAreRateLimited) {
  Reset(absl::Seconds(1));
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  EXPECT_EQ(cache_->Filter(Manifest(GpuPod("a", 1, 1000)), {"n1"}).assumed_node, "n1");
  cache_->UpsertNode(NodeJson("n2", {TestGpu{}}));  // No rebuild to wait for.
  EXPECT_THAT(cache_->Filter(Manifest(GpuPod("c", 1, 1000)), {"n1", "n2"}).feasible,
              ElementsAre("n1", "n2"));
  // A configuration change needs a whole rebuild, which waits for the interval; a node that
  // arrives meanwhile waits with it, but a bound pod is charged at once.
  clock_.Advance(absl::Seconds(2));
  cache_->SetDeviceConfig(config::DefaultDeviceConfig());
  cache_->Filter(Manifest(GpuPod("warm", 1, 1)), {"n1"});  // Rebuilds (the interval passed).
  sched::DeviceConfig split = config::DefaultDeviceConfig();
  split.device_split_count = 1;
  cache_->SetDeviceConfig(split);
  cache_->UpsertNode(NodeJson("n3", {TestGpu{}}));
  json bound = Schedule(GpuPod("b", 1, 20000), {"n1"});
  cache_->UpsertPod(bound);
  EXPECT_EQ(cache_->EntryState("default/b"), "bound");
  FilterOutcome f = cache_->Filter(Manifest(GpuPod("d", 1, 1000)), {"n2", "n3"});
  EXPECT_THAT(f.feasible, ElementsAre("n2"));  // Still the old split count: 1 task on n2 fits.
  EXPECT_THAT(f.Reason("n3"), HasSubstr("not loaded yet"));
  clock_.Advance(absl::Seconds(1));
  cache_->Tick();
  f = cache_->Filter(Manifest(GpuPod("e", 1, 1000)), {"n1", "n3"});
  EXPECT_THAT(f.feasible, ElementsAre("n3"));  // n1 holds b: one task is its limit now.
  EXPECT_EQ(f.Reason("n1"), "1/1 CardTimeSlicingExhausted");
  EXPECT_EQ(cache_->EntryState("default/b"), "bound");
}

TEST_F(CacheTest, ConfigReloadChangesCapacity) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  sched::DeviceConfig config = config::DefaultDeviceConfig();
  config.device_split_count = 2;
  cache_->SetDeviceConfig(config);
  cache_->UpsertPod(Schedule(GpuPod("a", 1, 1000), {"n1"}));
  cache_->UpsertPod(Schedule(GpuPod("b", 1, 1000), {"n1"}));
  FilterOutcome f = cache_->Filter(Manifest(GpuPod("c", 1, 1000)), {"n1"});
  EXPECT_EQ(f.Reason("n1"), "1/1 CardTimeSlicingExhausted");
  config.device_split_count = 10;
  cache_->SetDeviceConfig(config);
  EXPECT_THAT(cache_->Filter(Manifest(GpuPod("c", 1, 1000)), {"n1"}).feasible, ElementsAre("n1"));
}

TEST_F(CacheTest, InvalidRequestFailsEveryNodeWithTheReason) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{}}));
  json pod = GpuPod("p", 1, 1000, 0, {{"nvidia.com/vgpu-mode", "mps"}});
  FilterOutcome f = cache_->Filter(Manifest(pod), {"n1"});
  EXPECT_FALSE(f.request_status.ok());
  EXPECT_THAT(f.Reason("n1"), HasSubstr("invalid GPU request"));
  EXPECT_THAT(f.Reason("n1"), HasSubstr("vgpu-mode"));
}

TEST_F(CacheTest, PodsWithoutGpusPassEverywhere) {
  json pod = testing::PodJson("default", "web", {{"main", 0}});
  FilterOutcome f = cache_->Filter(Manifest(pod), {"a", "b"});
  EXPECT_FALSE(f.wants_gpu);
  EXPECT_THAT(f.feasible, ElementsAre("a", "b"));
  absl::StatusOr<BindTicket> t = cache_->BeginBind(Manifest(pod), "a");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->annotations.empty());
}

TEST_F(CacheTest, MigDecisionSurvivesTheAgentReportingItsInstance) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{"H100-SXM5-80GB", 81920, true}}));
  json pod = Schedule(GpuPod("p", 1, 20000, 0, {{"nvidia.com/vgpu-mode", "mig"}}), {"n1"});
  cache_->UpsertPod(pod);
  const std::optional<sched::Decision> d = cache_->ChargedDecision("default/p");
  ASSERT_TRUE(d.has_value());
  const sched::DeviceAssignment& dev = d->containers[0].devices[0];
  ASSERT_TRUE(dev.IsMig());
  // The agent created the instance; a process runs on it, so it reports it in use.
  TestGpu gpu{"H100-SXM5-80GB", 81920, true};
  gpu.instances.push_back({dev.profile_name, dev.start, /*in_use=*/true});
  cache_->UpsertNode(NodeJson("n1", {gpu}));
  cache_->RebuildIfDirty();
  EXPECT_EQ(cache_->EntryState("default/p"), "bound");
  int assigned = 0;
  const std::vector<GpuSnapshot> gpus = cache_->GpuSnapshots();  // Outlives the loop.
  for (const InstanceSnapshot& i : gpus[0].instances) {
    if (i.start == dev.start && i.profile == dev.profile_name) {
      EXPECT_EQ(i.state, "assigned");
      ++assigned;
    } else {
      EXPECT_NE(i.state, "assigned");
    }
  }
  EXPECT_EQ(assigned, 1);
}

// The snapshot `prism status` builds its own engine from: nodes as the engine got them (an
// instance a decision claims is idle, though the agent reports it in use), decisions in charge
// order as annotations, the workload; and it changes nothing.
TEST_F(CacheTest, SnapshotCopiesWhatTheEngineHolds) {
  cache_->UpsertNode(NodeJson("n1", {TestGpu{"H100-SXM5-96GB", 97871, true}}));
  cache_->UpsertNode(NodeJson("n2", {TestGpu{}}));
  json bad = NodeJson("bad", {TestGpu{}});
  bad["metadata"]["annotations"]["prism.io/gpu-inventory"] = "{";
  cache_->UpsertNode(bad);
  json mig = Schedule(GpuPod("m", 1, 20000, 0, {{"nvidia.com/vgpu-mode", "mig"}}), {"n1"});
  json slice = Schedule(GpuPod("s", 1, 5000), {"n2"});
  const sched::DeviceAssignment dev =
      cache_->ChargedDecision("default/m")->containers[0].devices[0];
  TestGpu gpu{"H100-SXM5-96GB", 97871, true};
  gpu.instances.push_back({dev.profile_name, dev.start, /*in_use=*/true});
  cache_->UpsertNode(NodeJson("n1", {gpu}));
  cache_->UpsertPod(mig);
  cache_->UpsertPod(slice);
  clock_.Advance(absl::Minutes(1));
  cache_->Tick();  // The workload follows the charged pods.
  const uint64_t generation = cache_->stats().generation;
  const CacheSnapshot s = cache_->Snapshot();
  EXPECT_EQ(cache_->stats().generation, generation);
  ASSERT_EQ(s.nodes.size(), 2u);
  EXPECT_EQ(s.nodes[0].name, "n1");
  ASSERT_EQ(s.nodes[0].gpus[0].instances.size(), 1u);
  EXPECT_FALSE(s.nodes[0].gpus[0].instances[0].in_use);
  ASSERT_EQ(s.node_problems.size(), 1u);
  EXPECT_EQ(s.node_problems[0].first, "bad");
  ASSERT_EQ(s.pods.size(), 2u);
  EXPECT_EQ(s.pods[0].key, "default/m");
  EXPECT_EQ(s.pods[0].state, "bound");
  EXPECT_EQ(s.pods[1].key, "default/s");
  // The decision as charged now: the same instance, which exists, so nothing to create.
  const json d = json::parse(s.pods[0].annotations.at(config::kPrismDecisionAnnotation));
  EXPECT_EQ(d["containers"][0]["devices"][0]["profile"], dev.profile_name);
  EXPECT_EQ(d["containers"][0]["devices"][0]["placement"]["start"], dev.start);
  EXPECT_FALSE(d.contains("migChanges"));
  EXPECT_TRUE(json::parse(k8s::Annotations(mig).at(config::kPrismDecisionAnnotation))
                  .contains("migChanges"));
  EXPECT_FALSE(s.workload.shapes.empty());
  EXPECT_EQ(s.config.mig_strategy, cache_->device_config().mig_strategy);
}

// An allocation status of the node agent's form (docs/annotations.md), containers by name.
std::string AgentStatus(const json& containers) {
  return json{{"node", "n1"}, {"containers", containers}}.dump();
}
json SliceDevices() {
  return json::array({{{"index", 0},
                       {"uuid", "GPU-n1-0"},
                       {"mode", "hami-core"},
                       {"memoryMiB", 8000},
                       {"cores", 25}}});
}

TEST(AllocationProgressTest, ReadyOnlyWhenEveryNamedContainerHasDevices) {
  const std::set<std::string> both{"a", "b"};
  const json device = SliceDevices();
  auto status = AgentStatus;
  EXPECT_EQ(ReadAllocationProgress(
                status({{"a", {{"devices", device}}}, {"b", {{"devices", device}}}}), both),
            AllocationProgress::kReady);
  EXPECT_EQ(ReadAllocationProgress(status({{"a", {{"devices", device}}}}), both),
            AllocationProgress::kPending);
  EXPECT_EQ(ReadAllocationProgress(
                status({{"a", {{"devices", device}}}, {"b", {{"devices", json::array()}}}}), both),
            AllocationProgress::kPending);
  EXPECT_EQ(ReadAllocationProgress(
                status({{"a", {{"devices", device}}}, {"b", {{"allocations", {"mx1-1"}}}}}), both),
            AllocationProgress::kPending);  // Allocated, not yet realized.
  EXPECT_EQ(
      ReadAllocationProgress(status({{"a", {{"devices", device}}}, {"b", {{"error", "x"}}}}), both),
      AllocationProgress::kFailed);
  // Hostile or half-written text is "not yet", never a crash.
  for (const char* text : {"", "{", "[]", R"({"containers":[]})", R"({"containers":{"a":7}})",
                           R"({"containers":{"a":{"devices":"x","error":3}}})"}) {
    EXPECT_EQ(ReadAllocationProgress(text, both), AllocationProgress::kPending) << text;
  }
  EXPECT_EQ(ReadAllocationProgress(status({{"a", {{"devices", device}}}}), {}),
            AllocationProgress::kPending);
}

// Review: ReadAllocationProgress was a second, lax reader of the annotation, which the pod's owner
// can write: a status the agent's decoder (and the cache) rejects still read as devices ready.
TEST(AllocationProgressTest, AStatusTheDecoderRejectsIsNotProgress) {
  const std::set<std::string> main{"main"};
  json forged_id = {{"main", {{"allocations", {"../../etc/x"}}, {"devices", SliceDevices()}}}};
  json device_without_share = {
      {"main", {{"devices", {{{"index", 0}, {"uuid", "GPU-n1-0"}, {"mode", "hami-core"}}}}}}};
  json unknown_mode = SliceDevices();
  unknown_mode[0]["mode"] = "teleport";
  for (const std::string& text :
       {AgentStatus(forged_id), AgentStatus(device_without_share),
        AgentStatus({{"main", {{"devices", unknown_mode}}}}),
        AgentStatus({{"main", {{"devices", SliceDevices()}, {"error", "both"}}}}),
        json{{"containers", {{"main", {{"devices", SliceDevices()}}}}}}.dump()}) {  // No node.
    EXPECT_FALSE(config::ParseAllocationStatus(text).ok()) << text;
    EXPECT_EQ(ReadAllocationProgress(text, main), AllocationProgress::kPending) << text;
  }
  // An error beside a malformed entry is not trusted either.
  EXPECT_EQ(
      ReadAllocationProgress(
          AgentStatus({{"main", {{"error", "no GPU"}}}, {"other", {{"devices", "x"}}}}), main),
      AllocationProgress::kPending);
}

// --- Preemption (docs/preemption.md) ---------------------------------------------------------

class CachePreemptionTest : public CacheTest {
 protected:
  // n1: two 15 GiB T4s. GPU 0: a 8 GiB + b 6 GiB; GPU 1: c 10 GiB + d 4 GiB. n2: an empty T4.
  CachePreemptionTest() {
    cache_->UpsertNode(NodeJson("n1", {TestGpu{"T4", 15360}, TestGpu{"T4", 15360}}));
    cache_->UpsertNode(NodeJson("n2", {TestGpu{"T4", 15360}}));
    cache_->UpsertNode(NodeJson("cpu-only", {}));
    Run("a", 8192, 0, 0);
    Run("b", 6144, 0, 0);
    Run("c", 10240, 1, 5);
    Run("d", 4096, 1, 0);
  }
  // Scheduled on n1's GPU `gpu`, then seen bound by the informer with `priority`.
  void Run(const std::string& name, int64_t mib, int gpu, int32_t priority) {
    json pod = GpuPod(name, 1, mib, 10, {{"nvidia.com/use-gpuuuid", StrCat("GPU-n1-", gpu)}});
    pod["spec"]["priority"] = priority;
    cache_->UpsertPod(Schedule(pod, {"n1"}));
  }
  absl::StatusOr<std::vector<NodeVictims>> Preempt(const std::vector<NodeVictims>& proposed,
                                                   int64_t mib = 10240, bool never = false) {
    json hi = GpuPod("hi", 1, mib, 10);
    hi["spec"]["priority"] = 100;
    return cache_->Preempt(Manifest(hi), PodPriority(hi), never, proposed);
  }
};

TEST_F(CachePreemptionTest, ProposedVictimsAreCompletedWithThePodOnTheRightGpu) {
  const int64_t used = UsedMiB("n1");
  // kube-scheduler proposed d (in-tree reasons) and a pod Prism does not hold; cpu-only has no
  // GPUs, so Prism has nothing to say about it.
  auto r = Preempt({{"n1", {"uid-default-d", "uid-cpu-pod"}, 1}, {"cpu-only", {"x"}, 0}});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].node, "n1");
  // c frees what d alone cannot, on d's GPU; a and b (GPU 0, lower priority) stay.
  EXPECT_THAT((*r)[0].uids, ElementsAre("uid-default-c", "uid-default-d", "uid-cpu-pod"));
  EXPECT_EQ((*r)[0].pdb_violations, 1);
  EXPECT_EQ((*r)[1].node, "cpu-only");
  EXPECT_THAT((*r)[1].uids, ElementsAre("x"));
  EXPECT_EQ(UsedMiB("n1"), used);  // Nothing changed.
  EXPECT_EQ(PreemptionResultToJson(*r).find("uid-default-a"), std::string::npos);
}

TEST_F(CachePreemptionTest, NodesWherePreemptionCannotHelpOrIsNotNeededAreDropped) {
  // 20 GiB: larger than a T4.
  auto big = Preempt({{"n1", {"uid-default-d"}, 0}}, 20480);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_THAT(*big, IsEmpty());
  // n2 is empty: the pod fits without eviction.
  auto empty = Preempt({{"n2", {}, 0}});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_THAT(*empty, IsEmpty());
  auto never = Preempt({{"n1", {"uid-default-d"}, 0}}, 10240, /*never=*/true);
  ASSERT_TRUE(never.ok());
  EXPECT_THAT(*never, IsEmpty());
}

TEST_F(CachePreemptionTest, BadProposalsAreErrorsAndChangeNothing) {
  const int64_t used = UsedMiB("n1");
  auto elsewhere = Preempt({{"n2", {"uid-default-d"}, 0}});
  ASSERT_FALSE(elsewhere.ok());
  EXPECT_THAT(std::string(elsewhere.status().message()),
              HasSubstr("proposed on node n2 is on node n1"));
  // c's priority is not below an equal-priority preemptor's.
  json peer = GpuPod("peer", 1, 10240, 10);
  auto equal = cache_->Preempt(Manifest(peer), 5, false, {{"n1", {"uid-default-c"}, 0}});
  ASSERT_FALSE(equal.ok());
  EXPECT_THAT(std::string(equal.status().message()), HasSubstr("not below the preemptor's 5"));
  EXPECT_EQ(UsedMiB("n1"), used);
}

TEST_F(CachePreemptionTest, APodWhosePriorityIsNotSeenYetIsNeverChosen) {
  // Bound by Prism, not yet seen by the informer: its priority is unknown.
  json e = GpuPod("e", 1, 15360, 10);
  e["spec"]["priority"] = 0;
  json bound = Schedule(e, {"n2"});
  auto unseen = Preempt({{"n2", {}, 0}});
  ASSERT_TRUE(unseen.ok()) << unseen.status();
  EXPECT_THAT(*unseen, IsEmpty());
  cache_->UpsertPod(bound);
  auto seen = Preempt({{"n2", {}, 0}});
  ASSERT_TRUE(seen.ok()) << seen.status();
  ASSERT_EQ(seen->size(), 1u);
  EXPECT_THAT((*seen)[0].uids, ElementsAre("uid-default-e"));
}

TEST(PodPriorityTest, ReadsSpecPriorityAndPolicy) {
  EXPECT_EQ(PodPriority(json{{"spec", {{"priority", 1000}}}}), 1000);
  EXPECT_EQ(PodPriority(json{{"spec", {{"priority", -5}}}}), -5);
  EXPECT_EQ(PodPriority(json{{"spec", json::object()}}), 0);
  EXPECT_EQ(PodPriority(json{{"spec", {{"priority", "high"}}}}), 0);
  EXPECT_EQ(PodPriority(json{{"spec", {{"priority", int64_t{1} << 40}}}}), 0);
  EXPECT_TRUE(PreemptsNever(json{{"spec", {{"preemptionPolicy", "Never"}}}}));
  EXPECT_FALSE(PreemptsNever(json{{"spec", {{"preemptionPolicy", "PreemptLowerPriority"}}}}));
  EXPECT_FALSE(PreemptsNever(json::object()));
}

}  // namespace
}  // namespace prism::extender
