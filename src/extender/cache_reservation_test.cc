// The cache's side of preemption (docs/preemption.md §2): Filter's resolvable split, path B's plan,
// and the nominated preemptor's reservation (path B's, and path A's from kube-scheduler's nomination).
#include <memory>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "config/device_config_yaml.h"
#include "config/pod_json.h"
#include "extender/cache.h"
#include "extender/test_util.h"
#include "k8s/clock.h"

namespace prism::extender {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
using json = nlohmann::json;
using testing::GpuPod;
using testing::Manifest;
using testing::NodeJson;
using testing::TestGpu;
using testing::Views;

class ReservationTest : public ::testing::Test {
 protected:
  // n1: two 15 GiB T4s. GPU 0: a 8 GiB + b 6 GiB (priority 0); GPU 1: c 10 GiB (priority 5) +
  // d 4 GiB (priority 0). n2: one T4 full with e (priority 200).
  ReservationTest() {
    CacheOptions options;
    options.engine = DefaultEngineOptions();
    options.clock = &clock_;
    cache_ = std::make_unique<SchedulerCache>(config::DefaultDeviceConfig(), options);
    cache_->UpsertNode(NodeJson("n1", {TestGpu{"T4", 15360}, TestGpu{"T4", 15360}}));
    cache_->UpsertNode(NodeJson("n2", {TestGpu{"T4", 15360}}));
    pods_["a"] = Run("a", "n1", 8192, 0, 0);
    pods_["b"] = Run("b", "n1", 6144, 0, 0);
    pods_["c"] = Run("c", "n1", 10240, 1, 5);
    pods_["d"] = Run("d", "n1", 4096, 1, 0);
    pods_["e"] = Run("e", "n2", 15360, 0, 200);
  }
  json Run(const std::string& name, const std::string& node, int64_t mib, int gpu,
           int32_t priority) {
    json pod = GpuPod(name, 1, mib, 10, {{"nvidia.com/use-gpuuuid", StrCat("GPU-", node, "-", gpu)}});
    pod["spec"]["priority"] = priority;
    const config::PodManifest m = Manifest(pod);
    FilterOutcome f = cache_->Filter(m, Views({node}));
    EXPECT_EQ(f.assumed_node, node) << f.Summary(1);
    absl::StatusOr<BindTicket> t = cache_->BeginBind(m, node);
    EXPECT_TRUE(t.ok()) << t.status();
    cache_->FinishBind(*t, BindOutcome::kBound);
    pod["spec"]["nodeName"] = node;
    for (const auto& [k, v] : t->annotations) pod["metadata"]["annotations"][k] = v;
    cache_->UpsertPod(pod);
    return pod;
  }
  static json Pod(const std::string& name, int64_t mib, int32_t priority) {
    json pod = GpuPod(name, 1, mib, 10);
    pod["spec"]["priority"] = priority;
    return pod;
  }
  std::vector<std::string_view> Resolvable(const json& pod, bool never = false) {
    return cache_->ResolvableNodes(Manifest(pod), PodPriority(pod), never, Views(nodes_));
  }
  int64_t UsedMiB() {
    int64_t used = 0;
    for (const GpuSnapshot& g : cache_->GpuSnapshots()) used += g.memory_used_mib;
    return used;
  }

  k8s::FakeClock clock_;
  std::unique_ptr<SchedulerCache> cache_;
  std::map<std::string, json> pods_;
  const std::vector<std::string> nodes_ = {"n1", "n2", "unknown"};
};

TEST_F(ReservationTest, AFailureIsResolvableOnlyWhereEvictingLowerPriorityPodsLetsThePodFit) {
  const int64_t used = UsedMiB();
  // n1 frees a T4 from lower-priority pods; n2's pod outranks it; "unknown" has no inventory.
  EXPECT_THAT(Resolvable(Pod("hi", 10240, 100)), ElementsAre("n1"));
  // Larger than any GPU: nothing helps.
  EXPECT_THAT(Resolvable(Pod("huge", 20480, 100)), IsEmpty());
  // preemptionPolicy: Never, and a pod with no lower-priority pod anywhere.
  EXPECT_THAT(Resolvable(Pod("hi", 10240, 100), /*never=*/true), IsEmpty());
  EXPECT_THAT(Resolvable(Pod("low", 10240, 0)), IsEmpty());
  // Priority 3: only a, b and d may go; a and b together free GPU 0.
  EXPECT_THAT(Resolvable(Pod("mid", 10240, 3)), ElementsAre("n1"));
  // Priority 3 and 12 GiB: a + b free 15 GiB on GPU 0, so still n1; 15 GiB too (GPU 0 whole).
  EXPECT_THAT(Resolvable(Pod("mid", 15360, 3)), ElementsAre("n1"));
  // Nothing changed: every trial put the node back.
  EXPECT_EQ(UsedMiB(), used);
  EXPECT_TRUE(cache_->ChargedDecision("default/a").has_value());
  EXPECT_TRUE(cache_->Filter(Manifest(Pod("x", 4096, 0)), Views(nodes_)).feasible.empty());
}

TEST_F(ReservationTest, ANodeWherePreemptionCannotHelpSaysWhy) {
  auto notes = [&](const json& pod, bool never = false) {
    SchedulerCache::FailedNodeNotes out;
    cache_->ResolvableNodes(Manifest(pod), PodPriority(pod), never, Views(nodes_), 100, &out);
    return out;
  };
  using Note = std::pair<std::string_view, std::string_view>;
  // n1 is resolvable; only e (200) holds n2's GPU; "unknown" has no inventory: no note.
  EXPECT_THAT(notes(Pod("hi", 10240, 100)),
              UnorderedElementsAre(Note{"n2", kPreemptionOnlyHigher}));
  // Priority 0: a, b and d are equal, c higher: nothing below it anywhere.
  EXPECT_THAT(notes(Pod("low", 10240, 0)),
              UnorderedElementsAre(Note{"n1", kPreemptionOnlyHigher},
                                   Note{"n2", kPreemptionOnlyHigher}));
  // Never: n1's lower-priority pods are not tried.
  EXPECT_THAT(notes(Pod("hi", 10240, 100), /*never=*/true),
              UnorderedElementsAre(Note{"n1", kPreemptionNever},
                                   Note{"n2", kPreemptionOnlyHigher}));
  // Priority 1, two whole T4s: a, b and d gone free GPU 0 only (c, priority 5, stays on GPU 1).
  json two = GpuPod("two", 2, 15360, 10);
  two["spec"]["priority"] = 1;
  EXPECT_THAT(notes(two), UnorderedElementsAre(Note{"n1", kPreemptionNotEnough},
                                               Note{"n2", kPreemptionOnlyHigher}));
  // A pod being evicted for a reservation is not "equal or higher": no note where it is.
  auto plan = cache_->PlanPreemption(Manifest(Pod("hi", 10240, 100)), 100, false, {"n1"});
  ASSERT_TRUE(plan.ok() && plan->has_value());
  cache_->Reserve(Manifest(Pod("hi", 10240, 100)), 100, **plan, clock_.Now() + absl::Minutes(2));
  EXPECT_THAT(notes(Pod("low", 10240, 0)),
              UnorderedElementsAre(Note{"n2", kPreemptionOnlyHigher}));
}

TEST_F(ReservationTest, ThePlanSearchesTheCandidateNodesTheBoundsAllow) {
  const json hi = Pod("hi", 10240, 100);
  const std::vector<std::string> thrice = {"n1", "n1", "n1"};
  // Defaults (10 %, at least 100): all three; 0 % and at least 1: one; 50 % and at least 0: one.
  const std::vector<std::tuple<int, int, int>> cases = {{10, 100, 3}, {0, 1, 1}, {50, 0, 1}};
  for (const auto& [percentage, absolute, searched] : cases) {
    auto plan =
        cache_->PlanPreemption(Manifest(hi), 100, false, thrice, 20000, percentage, absolute);
    ASSERT_TRUE(plan.ok() && plan->has_value()) << percentage << " " << absolute;
    EXPECT_EQ((*plan)->nodes_searched, searched) << percentage << " " << absolute;
  }
}

TEST_F(ReservationTest, TheTrialBudgetBoundsTheSplitAndRotates) {
  const json hi = Pod("hi", 10240, 100);
  const std::vector<std::string> twice = {"n1", "n1"};
  int found = 0;
  for (int i = 0; i < 2; ++i) {
    found += static_cast<int>(
        cache_->ResolvableNodes(Manifest(hi), 100, false, Views(twice), /*max_trials=*/1).size());
  }
  EXPECT_EQ(found, 2);  // One trial a call.
}

TEST_F(ReservationTest, ThePlanEvictsTheFewestLowestPodsOnTheGpuWhereThatSuffices) {
  const json hi = Pod("hi", 10240, 100);
  auto plan = cache_->PlanPreemption(Manifest(hi), 100, false, {"n2", "n1"});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->has_value());
  // One pod on GPU 1 (c, priority 5) beats two on GPU 0 (a and b, priority 0): fewest victims.
  EXPECT_EQ((*plan)->node, "n1");
  ASSERT_EQ((*plan)->victims.size(), 1u);
  EXPECT_EQ((*plan)->victims[0].uid, "uid-default-c");
  EXPECT_EQ((*plan)->gpu_memory_freed_mib, 10240);
  EXPECT_NE((*plan)->gpus.find("GPU-n1-1"), std::string::npos) << (*plan)->gpus;
  // An equal-priority pod: nothing below it fits the bill on n2.
  auto none = cache_->PlanPreemption(Manifest(hi), 100, false, {"n2"});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto never = cache_->PlanPreemption(Manifest(hi), 100, true, {"n1"});
  ASSERT_TRUE(never.ok());
  EXPECT_FALSE(never->has_value());
}

TEST_F(ReservationTest, TheFreedGpuIsHeldForThePreemptorNotALowerPriorityPod) {
  const json hi = Pod("hi", 10240, 100);
  auto plan = cache_->PlanPreemption(Manifest(hi), 100, false, {"n1"});
  ASSERT_TRUE(plan.ok() && plan->has_value());
  cache_->Reserve(Manifest(hi), 100, **plan, clock_.Now() + absl::Minutes(2));
  EXPECT_TRUE(cache_->HasReservation("default/hi", "uid-default-hi"));
  // Victims being evicted are not candidates again: another preemptor finds a and b instead.
  auto second = cache_->PlanPreemption(Manifest(Pod("hi2", 10240, 100)), 100, false, {"n1"});
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->victims.size(), 2u);
  // c terminates: its GPU goes to the reservation at once.
  cache_->DeletePod(pods_["c"]);
  const json lo = Pod("lo", 10240, 1);
  EXPECT_TRUE(cache_->Filter(Manifest(lo), Views(nodes_)).feasible.empty());
  EXPECT_EQ(cache_->EntryState("default/hi"), "assumed");
  // The preemptor's own Filter takes it, and Bind charges it there.
  FilterOutcome f = cache_->Filter(Manifest(hi), Views(nodes_));
  EXPECT_EQ(f.assumed_node, "n1") << f.Summary(3);
  absl::StatusOr<BindTicket> t = cache_->BeginBind(Manifest(hi), "n1");
  ASSERT_TRUE(t.ok()) << t.status();
  cache_->FinishBind(*t, BindOutcome::kBound);
  EXPECT_FALSE(cache_->HasReservation("default/hi", "uid-default-hi"));
  EXPECT_TRUE(cache_->Filter(Manifest(lo), Views(nodes_)).feasible.empty());
}

TEST_F(ReservationTest, AReservationEndsAtItsDeadlineOrWithItsPod) {
  const json hi = Pod("hi", 10240, 100);
  auto plan = cache_->PlanPreemption(Manifest(hi), 100, false, {"n1"});
  ASSERT_TRUE(plan.ok() && plan->has_value());
  cache_->Reserve(Manifest(hi), 100, **plan, clock_.Now() + absl::Minutes(2));
  cache_->DeletePod(pods_["c"]);
  const json lo = Pod("lo", 10240, 1);
  EXPECT_TRUE(cache_->Filter(Manifest(lo), Views(nodes_), false).feasible.empty());
  clock_.Advance(absl::Minutes(3));
  EXPECT_THAT(cache_->Filter(Manifest(lo), Views(nodes_), false).feasible, ElementsAre("n1"));
  EXPECT_FALSE(cache_->HasReservation("default/hi", "uid-default-hi"));
  // Deleted preemptor: dropped, hold and all. A whole T4: d goes from GPU 1.
  const json whole = Pod("whole", 15360, 100);
  auto again = cache_->PlanPreemption(Manifest(whole), 100, false, {"n1"});
  ASSERT_TRUE(again.ok() && again->has_value());
  ASSERT_EQ((*again)->victims.size(), 1u);
  EXPECT_EQ((*again)->victims[0].name, "d");
  cache_->Reserve(Manifest(whole), 100, **again, clock_.Now() + absl::Minutes(2));
  cache_->DeletePod(pods_["d"]);
  EXPECT_TRUE(cache_->Filter(Manifest(lo), Views(nodes_), false).feasible.empty());
  EXPECT_EQ(cache_->EntryState("default/whole"), "assumed");
  cache_->DropReservation("default/whole", "uid-default-whole");
  EXPECT_EQ(cache_->EntryState("default/whole"), "");
  EXPECT_THAT(cache_->Filter(Manifest(lo), Views(nodes_), false).feasible, ElementsAre("n1"));
}

// Path A: kube-scheduler's DefaultPreemption asks the preempt verb, picks a node, deletes the
// victims and nominates the preemptor there (schedule_one.go, handleSchedulingFailure); the
// nomination reserves what Prism's answer freed on that node.
TEST_F(ReservationTest, KubeSchedulersNominationReservesTheGpuPrismsAnswerFreed) {
  json hi = Pod("hi", 10240, 100);
  // kube-scheduler proposes n1 with a CPU victim Prism does not hold; Prism adds c (GPU 1).
  absl::StatusOr<std::vector<NodeVictims>> answer = cache_->Preempt(
      Manifest(hi), 100, false, {NodeVictims{"n1", {"uid-cpu"}}}, 20000, absl::Minutes(2));
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_EQ(answer->size(), 1u);
  EXPECT_THAT((*answer)[0].uids, UnorderedElementsAre("uid-default-c", "uid-cpu"));
  EXPECT_FALSE(cache_->HasReservation("default/hi", "uid-default-hi"));
  hi["status"]["nominatedNodeName"] = "n1";
  cache_->UpsertPod(hi);
  EXPECT_TRUE(cache_->HasReservation("default/hi", "uid-default-hi"));
  EXPECT_EQ(cache_->reservations_nominated(), 1);
  // c terminates: its GPU is held for hi, not taken by a lower-priority pod.
  cache_->DeletePod(pods_["c"]);
  const json lo = Pod("lo", 10240, 1);
  EXPECT_TRUE(cache_->Filter(Manifest(lo), Views(nodes_), false).feasible.empty());
  EXPECT_EQ(cache_->EntryState("default/hi"), "assumed");
  // The same nomination seen again changes nothing.
  cache_->UpsertPod(hi);
  EXPECT_EQ(cache_->EntryState("default/hi"), "assumed");
  // A higher-priority preemptor's prepareCandidate clears hi's nomination: the hold ends.
  hi["status"].erase("nominatedNodeName");
  cache_->UpsertPod(hi);
  EXPECT_FALSE(cache_->HasReservation("default/hi", "uid-default-hi"));
  EXPECT_EQ(cache_->EntryState("default/hi"), "");
  EXPECT_THAT(cache_->Filter(Manifest(lo), Views(nodes_), false).feasible, ElementsAre("n1"));
}

TEST_F(ReservationTest, ANominationReservesOnlyWhatARememberedAnswerCovers) {
  json hi = Pod("hi", 10240, 100);
  auto nominate = [&](json pod, const std::string& node) {
    pod["status"]["nominatedNodeName"] = node;
    cache_->UpsertPod(pod);
  };
  auto preempt = [&](absl::Duration hold) {
    absl::StatusOr<std::vector<NodeVictims>> a =
        cache_->Preempt(Manifest(hi), 100, false, {NodeVictims{"n1", {}}}, 20000, hold);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_EQ(a->size(), 1u);
  };
  // No hold asked (the default): nothing is remembered.
  preempt(absl::ZeroDuration());
  nominate(hi, "n1");
  EXPECT_FALSE(cache_->HasReservation("default/hi", "uid-default-hi"));
  // Nominated to a node Prism did not answer for.
  preempt(absl::Minutes(2));
  nominate(hi, "n2");
  EXPECT_FALSE(cache_->HasReservation("default/hi", "uid-default-hi"));
  // Another pod under the name (a new UID) is not the one answered for, and ends the answer.
  json other = hi;
  other["metadata"]["uid"] = "uid-other";
  nominate(other, "n1");
  nominate(hi, "n1");
  EXPECT_FALSE(cache_->HasReservation("default/hi", "uid-default-hi"));
  EXPECT_FALSE(cache_->HasReservation("default/hi", "uid-other"));
  // Nominated after the hold: too late.
  preempt(absl::Minutes(2));
  clock_.Advance(absl::Minutes(3));
  nominate(hi, "n1");
  EXPECT_FALSE(cache_->HasReservation("default/hi", "uid-default-hi"));
  // In time: reserved, c still charged until it terminates.
  preempt(absl::Minutes(2));
  nominate(hi, "n1");
  EXPECT_TRUE(cache_->HasReservation("default/hi", "uid-default-hi"));
  EXPECT_TRUE(cache_->ChargedDecision("default/c").has_value());
  EXPECT_EQ(cache_->EntryState("default/hi"), "");
  EXPECT_EQ(cache_->reservations_nominated(), 1);
  // The preemptor deleted: answer and reservation go.
  cache_->DeletePod(hi);
  cache_->DropReservation("default/hi", "uid-default-hi");
  EXPECT_FALSE(cache_->HasReservation("default/hi", "uid-default-hi"));
}

// A reservation holds a GPU for its preemptor against lower-priority pods only: a still
// higher-priority preemptor takes it over (upstream filters a node for a pod with only the
// nominated pods of equal or higher priority, and clears the lower ones' nominations where it
// preempts), on both paths, and an equal-priority one does not.
class YieldingReservationTest : public ReservationTest {
 protected:
  // mid (priority 50, 10 GiB) preempted c and holds GPU 1 of n1 (beside d's 4 GiB).
  void SetUp() override {
    auto plan = cache_->PlanPreemption(Manifest(mid_), 50, false, {"n1"});
    ASSERT_TRUE(plan.ok() && plan->has_value());
    ASSERT_EQ((*plan)->victims.size(), 1u);
    ASSERT_EQ((*plan)->victims[0].name, "c");
    cache_->Reserve(Manifest(mid_), 50, **plan, clock_.Now() + absl::Minutes(2));
    cache_->DeletePod(pods_["c"]);
    cache_->Filter(Manifest(Pod("probe", 1024, 0)), Views(nodes_), false);  // Settles.
    ASSERT_EQ(cache_->EntryState("default/mid"), "assumed");
  }
  const json mid_ = Pod("mid", 10240, 50);
};

TEST_F(YieldingReservationTest, PathBTakesTheHoldInsteadOfEvictingPods) {
  const json top = Pod("top", 10240, 100);
  EXPECT_TRUE(cache_->Filter(Manifest(top), Views(nodes_), false).feasible.empty());
  EXPECT_THAT(Resolvable(top), ElementsAre("n1"));
  // Without the hold's yielding, a and b (GPU 0) would have to go; with it, no pod.
  auto plan = cache_->PlanPreemption(Manifest(top), 100, false, {"n1"});
  ASSERT_TRUE(plan.ok() && plan->has_value());
  EXPECT_THAT((*plan)->victims, IsEmpty());
  EXPECT_THAT((*plan)->yielded, ElementsAre("default/mid"));
  EXPECT_NE((*plan)->gpus.find("GPU-n1-1"), std::string::npos) << (*plan)->gpus;
  cache_->Reserve(Manifest(top), 100, **plan, clock_.Now() + absl::Minutes(2));
  EXPECT_FALSE(cache_->HasReservation("default/mid", "uid-default-mid"));
  EXPECT_EQ(cache_->EntryState("default/mid"), "");
  EXPECT_EQ(cache_->EntryState("default/top"), "assumed");
  FilterOutcome f = cache_->Filter(Manifest(top), Views(nodes_));
  EXPECT_EQ(f.assumed_node, "n1") << f.Summary(3);
  for (const char* kept : {"a", "b", "d"}) {
    EXPECT_TRUE(cache_->ChargedDecision(StrCat("default/", kept)).has_value()) << kept;
  }
}

TEST_F(YieldingReservationTest, AnEqualPriorityPreemptorDoesNotTakeTheHold) {
  auto plan = cache_->PlanPreemption(Manifest(Pod("peer", 10240, 50)), 50, false, {"n1"});
  ASSERT_TRUE(plan.ok() && plan->has_value());
  EXPECT_THAT((*plan)->yielded, IsEmpty());
  EXPECT_EQ((*plan)->victims.size(), 2u);  // a and b: GPU 0.
  EXPECT_EQ(cache_->EntryState("default/mid"), "assumed");
}

TEST_F(YieldingReservationTest, PathAAnswersWithoutGpuVictimsAndTheNominationTakesTheHold) {
  json top = Pod("top", 10240, 100);
  auto answer = cache_->Preempt(Manifest(top), 100, false, {NodeVictims{"n1", {"uid-cpu"}}},
                                20000, absl::Minutes(2));
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_EQ(answer->size(), 1u);
  EXPECT_THAT((*answer)[0].uids, ElementsAre("uid-cpu"));
  EXPECT_EQ(cache_->EntryState("default/mid"), "assumed");  // Until kube-scheduler picks n1.
  top["status"]["nominatedNodeName"] = "n1";
  cache_->UpsertPod(top);
  EXPECT_FALSE(cache_->HasReservation("default/mid", "uid-default-mid"));
  EXPECT_EQ(cache_->EntryState("default/top"), "assumed");
}

}  // namespace
}  // namespace prism::extender
