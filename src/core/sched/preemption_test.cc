#include "core/sched/preemption.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "base/strings.h"
#include "core/sched/test_util.h"

namespace prism::sched {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using namespace ::prism::sched::testing;  // NOLINT: test builders.

// A slice pod pinned to one GPU by uuid.
PodRequest PinnedSlice(std::string name, int64_t memory_mib, std::string uuid) {
  PodRequest p = GpuPod(std::move(name), 1, memory_mib, 10);
  p.use_uuids = {std::move(uuid)};
  return p;
}

Preemptor High(PodRequest pod, int32_t priority = 100) {
  Preemptor p;
  p.pod = std::move(pod);
  p.priority = priority;
  return p;
}

// Every pod charged on the node, with the priority `priority` gives by key.
std::vector<PreemptionCandidate> CandidatesOn(const Engine& engine, int node,
                                              const std::map<std::string, int32_t>& priority) {
  std::vector<PreemptionCandidate> out;
  for (const std::string& key : engine.cluster().PodKeys()) {
    if (engine.cluster().FindPod(key)->node != node) continue;
    out.push_back({key, priority.at(key)});
  }
  return out;
}

// --- Sliced T4s ----------------------------------------------------------------

class SlicedT4Test : public ::testing::Test {
 protected:
  // Two 15 GiB T4s. GPU 0: a 8 GiB + b 6 GiB; GPU 1: c 10 GiB + d 4 GiB (1 GiB free on each).
  SlicedT4Test()
      : engine_(MakeEngine({Node("t4", 32, 128, 2, Gpu("T4", std::nullopt, 15360))}, {})) {
    Place("a", 8192, "t4-gpu0");
    Place("b", 6144, "t4-gpu0");
    Place("c", 10240, "t4-gpu1");
    Place("d", 4096, "t4-gpu1");
  }
  void Place(const std::string& name, int64_t mib, const std::string& uuid) {
    ScheduleResult r = engine_.Place(PinnedSlice(name, mib, uuid));
    ASSERT_TRUE(r.scheduled) << r.Summary();
  }
  // The victims for a `mib` slice at priority 100, with a, b, c, d at the priorities given.
  absl::StatusOr<VictimChoice> Choose(int32_t a, int32_t b, int32_t c, int32_t d, int64_t mib) {
    const std::map<std::string, int32_t> prio = {
        {"default/a", a}, {"default/b", b}, {"default/c", c}, {"default/d", d}};
    Engine scratch = MakeScratchEngine(engine_);
    return SelectVictims(scratch, High(GpuPod("hi", 1, mib, 10)), 0,
                         CandidatesOn(engine_, 0, prio));
  }
  Engine engine_;
};

TEST_F(SlicedT4Test, OnePodOnTheGpuWhereThatSufficesNotCheaperPodsElsewhere) {
  // a, b and d are cheaper victims, but none alone frees 10 GiB on one GPU; c does.
  auto choice = Choose(0, 0, 5, 0, 10240);
  ASSERT_TRUE(choice.ok()) << choice.status();
  ASSERT_TRUE(choice->fits) << choice->reason;
  EXPECT_THAT(choice->victims, ElementsAre("default/c"));
  EXPECT_EQ(choice->gpu_memory_freed_mib, 10240);
  EXPECT_EQ(choice->decision.containers[0].devices[0].uuid, "t4-gpu1");
  EXPECT_TRUE(choice->exhaustive);
}

TEST_F(SlicedT4Test, EqualOrHigherPriorityIsNeverChosen) {
  // c has the preemptor's priority: two pods on GPU 0 go instead (fewer is impossible).
  auto choice = Choose(1, 2, 100, 0, 10240);
  ASSERT_TRUE(choice.ok()) << choice.status();
  ASSERT_TRUE(choice->fits) << choice->reason;
  // By decreasing priority, as kube-scheduler expects.
  EXPECT_THAT(choice->victims, ElementsAre("default/b", "default/a"));
  EXPECT_EQ(choice->decision.containers[0].devices[0].uuid, "t4-gpu0");
}

TEST_F(SlicedT4Test, AmongEqualSizesTheLowestPrioritiesGo) {
  // 7 GiB: a, b (GPU 0) or c (GPU 1) each suffice alone, d does not; the lowest priority of
  // those goes, not d, the lowest of all.
  auto choice = Choose(7, 4, 3, 0, 7168);
  ASSERT_TRUE(choice.ok()) << choice.status();
  ASSERT_TRUE(choice->fits) << choice->reason;
  EXPECT_THAT(choice->victims, ElementsAre("default/c"));
}

TEST_F(SlicedT4Test, ImpossibleDropsTheNodeWithAReason) {
  // 20 GiB: larger than a T4.
  auto choice = Choose(0, 0, 0, 0, 20480);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_FALSE(choice->fits);
  EXPECT_TRUE(choice->victims.empty());
  EXPECT_THAT(choice->reason, HasSubstr("even with its 4 lower-priority pods evicted"));
  EXPECT_THAT(choice->reason, HasSubstr("CardInsufficientMemory"));
  // Past max_candidates the reason says how many were searched.
  Engine scratch = MakeScratchEngine(engine_);
  PreemptionLimits two;
  two.max_candidates = 2;
  std::vector<PreemptionCandidate> all = {
      {"default/a", 0}, {"default/b", 0}, {"default/c", 0}, {"default/d", 0}};
  auto cut = SelectVictims(scratch, High(GpuPod("hi", 1, 20480, 10)), 0, all, {}, two);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_THAT(cut->reason, HasSubstr("its 2 lower-priority pods evicted (the first 2 of 4"));
}

TEST_F(SlicedT4Test, OnlyHigherPriorityPodsWouldHelp) {
  // The only pods whose eviction helps have the preemptor's priority or more.
  auto choice = Choose(100, 0, 200, 0, 10240);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_FALSE(choice->fits);
  EXPECT_THAT(choice->reason, HasSubstr("2 pods of equal or higher priority are never evicted"));
}

TEST_F(SlicedT4Test, PreemptionPolicyNeverPreemptsNothing) {
  const std::map<std::string, int32_t> prio = {
      {"default/a", 0}, {"default/b", 0}, {"default/c", 0}, {"default/d", 0}};
  Engine scratch = MakeScratchEngine(engine_);
  Preemptor never = High(GpuPod("hi", 1, 10240, 10));
  never.preempt_never = true;
  auto choice = SelectVictims(scratch, never, 0, CandidatesOn(engine_, 0, prio));
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_FALSE(choice->fits);
  EXPECT_THAT(choice->reason, HasSubstr("preemptionPolicy is Never"));
}

TEST_F(SlicedT4Test, RequiredVictimsAreKeptAndCompleted) {
  // kube-scheduler proposed d (in-tree reasons); on GPU 1 d alone frees 5 GiB, c must join.
  const std::map<std::string, int32_t> prio = {
      {"default/a", 0}, {"default/b", 0}, {"default/c", 5}, {"default/d", 1}};
  std::vector<PreemptionCandidate> all = CandidatesOn(engine_, 0, prio);
  std::vector<PreemptionCandidate> others;
  for (const auto& c : all) {
    if (c.key != "default/d") others.push_back(c);
  }
  Engine scratch = MakeScratchEngine(engine_);
  auto choice = SelectVictims(scratch, High(GpuPod("hi", 1, 14336, 10)), 0, others,
                              {{"default/d", 1}});
  ASSERT_TRUE(choice.ok()) << choice.status();
  ASSERT_TRUE(choice->fits) << choice->reason;
  EXPECT_THAT(choice->victims, ElementsAre("default/c", "default/d"));
  // A required victim that does not need company is the whole answer.
  auto alone = SelectVictims(scratch, High(GpuPod("hi", 1, 4096, 10)), 0, others,
                             {{"default/d", 1}});
  ASSERT_TRUE(alone.ok()) << alone.status();
  ASSERT_TRUE(alone->fits);
  EXPECT_THAT(alone->victims, ElementsAre("default/d"));
}

TEST_F(SlicedT4Test, LiveAndScratchStatesAreLeftAsTheyWere) {
  const std::map<std::string, int32_t> prio = {
      {"default/a", 0}, {"default/b", 0}, {"default/c", 0}, {"default/d", 0}};
  const ClusterState before = engine_.cluster();
  Engine scratch = MakeScratchEngine(engine_);
  auto choice = SelectVictims(scratch, High(GpuPod("hi", 1, 14336, 10)), 0,
                              CandidatesOn(engine_, 0, prio));
  ASSERT_TRUE(choice.ok()) << choice.status();
  ASSERT_TRUE(choice->fits);
  for (const ClusterState* s : {&engine_.cluster(), &scratch.cluster()}) {
    EXPECT_EQ(s->PodKeys(), before.PodKeys());
    for (int g = 0; g < before.gpu_count(); ++g) EXPECT_EQ(s->gpu_usage(g), before.gpu_usage(g));
    EXPECT_EQ(s->node_usage(0).cpu_used, before.node_usage(0).cpu_used);
  }
  EXPECT_EQ(engine_.cluster().node_usage(0).version, before.node_usage(0).version);
  // The scratch engine still places as the live one does.
  ScheduleResult live = engine_.Schedule(CpuPod("x", 1000));
  ScheduleResult copy = scratch.Schedule(CpuPod("x", 1000));
  EXPECT_EQ(live.scheduled, copy.scheduled);
}

TEST_F(SlicedT4Test, BadInputIsAnErrorNamingThePod) {
  Engine scratch = MakeScratchEngine(engine_);
  Preemptor hi = High(GpuPod("hi", 1, 10240, 10));
  auto unknown = SelectVictims(scratch, hi, 0, {{"default/zz", 0}});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("default/zz"));
  auto twice = SelectVictims(scratch, hi, 0, {{"default/a", 0}, {"default/a", 0}});
  EXPECT_THAT(twice.status().message(), HasSubstr("listed twice"));
  auto node = SelectVictims(scratch, hi, 7, {});
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument);
  auto required_high = SelectVictims(scratch, hi, 0, {}, {{"default/a", 100}});
  EXPECT_THAT(required_high.status().message(), HasSubstr("not below the preemptor"));
}

TEST(PreemptionTest, VictimOnAnotherNodeIsAnError) {
  Engine engine = MakeEngine({Node("n1", 8, 32, 1, Gpu("T4", std::nullopt, 15360)),
                              Node("n2", 8, 32, 1, Gpu("T4", std::nullopt, 15360))},
                             {});
  ASSERT_TRUE(engine.Place(PinnedSlice("a", 15360, "n2-gpu0")).scheduled);
  Engine scratch = MakeScratchEngine(engine);
  auto r = SelectVictims(scratch, High(GpuPod("hi", 1, 10240, 10)), 0, {{"default/a", 0}});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("is on node n2, not n1"));
}

// --- MIG -----------------------------------------------------------------------

// An A100-80GB in placement mode full of 1g.10gb pods, one per memory slice 0..6.
class MigTest : public ::testing::Test {
 protected:
  MigTest()
      : engine_(MakeEngine({Node("a100", 64, 256, 1, Gpu("A100-SXM4-80GB", GpuMode::kMig))},
                           {})) {
    for (int i = 0; i < 7; ++i) {
      ScheduleResult r = engine_.Place(GpuPod(StrCat("p", i), 1, 9000, 0, kModeMig));
      EXPECT_TRUE(r.scheduled) << r.Summary();
      const DeviceAssignment& d = r.decision.containers[0].devices[0];
      EXPECT_EQ(d.profile_name, "1g.10gb");
      at_start_[d.start] = StrCat("default/p", i);
    }
  }
  // Candidates with priority by start slice.
  std::vector<PreemptionCandidate> ByStart(const std::map<int, int32_t>& priority) {
    std::vector<PreemptionCandidate> out;
    for (const auto& [start, key] : at_start_) out.push_back({key, priority.at(start)});
    return out;
  }
  // A 3g.40gb request.
  static PodRequest Big() { return GpuPod("big", 1, 40000, 40, kModeMig); }
  Engine engine_;
  std::map<int, std::string> at_start_;
};

TEST_F(MigTest, OnlyThePodsOnTheRightSlotsGo) {
  ASSERT_EQ(at_start_.size(), 7u);
  // 3g.40gb sits at slice 0 or 4: the pods at 4, 5, 6 free a placement (3 pods); those at 0..3
  // would take four. The pods at 0..3 have the lowest priority, and are still not chosen.
  const std::map<int, int32_t> prio = {{0, 0}, {1, 0}, {2, 0}, {3, 0}, {4, 5}, {5, 5}, {6, 5}};
  Engine scratch = MakeScratchEngine(engine_);
  auto choice = SelectVictims(scratch, High(Big()), 0, ByStart(prio));
  ASSERT_TRUE(choice.ok()) << choice.status();
  ASSERT_TRUE(choice->fits) << choice->reason;
  EXPECT_THAT(choice->victims, UnorderedElementsAre(at_start_[4], at_start_[5], at_start_[6]));
  const DeviceAssignment& d = choice->decision.containers[0].devices[0];
  EXPECT_EQ(d.profile_name, "3g.40gb");
  EXPECT_EQ(d.start, 4);
  EXPECT_TRUE(choice->exhaustive);
}

TEST_F(MigTest, AHigherPriorityPodOnASlotMovesTheChoiceToTheOtherPlacement) {
  // The pod at slice 5 outranks the preemptor: slices 0..3 (four pods) it is.
  const std::map<int, int32_t> prio = {{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 0}, {5, 500}, {6, 0}};
  Engine scratch = MakeScratchEngine(engine_);
  auto choice = SelectVictims(scratch, High(Big()), 0, ByStart(prio));
  ASSERT_TRUE(choice.ok()) << choice.status();
  ASSERT_TRUE(choice->fits) << choice->reason;
  EXPECT_THAT(choice->victims,
              UnorderedElementsAre(at_start_[0], at_start_[1], at_start_[2], at_start_[3]));
  EXPECT_EQ(choice->decision.containers[0].devices[0].start, 0);
}

TEST_F(MigTest, ASmallBudgetStillGivesAMinimalSet) {
  const std::map<int, int32_t> prio = {{0, 0}, {1, 0}, {2, 0}, {3, 0}, {4, 5}, {5, 5}, {6, 5}};
  Engine scratch = MakeScratchEngine(engine_);
  PreemptionLimits limits;
  limits.max_evaluations = 10;  // Not enough for all 35 triples.
  auto choice = SelectVictims(scratch, High(Big()), 0, ByStart(prio), {}, limits);
  ASSERT_TRUE(choice.ok()) << choice.status();
  ASSERT_TRUE(choice->fits) << choice->reason;
  EXPECT_FALSE(choice->exhaustive);
  // Reprieve keeps back the highest priorities first: the pods at 4..6 stay, 0..3 go.
  EXPECT_THAT(choice->victims,
              UnorderedElementsAre(at_start_[0], at_start_[1], at_start_[2], at_start_[3]));
}

TEST(MigFixedTest, AFixedLayoutWithoutTheProfileIsImpossible) {
  // A fixed layout of seven 1g.10gb instances: no 3g.40gb can ever be made.
  GpuSpec gpu = Gpu("A100-SXM4-80GB", GpuMode::kMig);
  gpu.mig_layout_fixed = true;
  for (int s = 0; s < 7; ++s) gpu.instances.push_back({"1g.10gb", s, false});
  Engine engine = MakeEngine({Node("a100", 64, 256, {gpu})}, {});
  std::vector<PreemptionCandidate> candidates;
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(engine.Place(GpuPod(StrCat("p", i), 1, 9000, 0, kModeMig)).scheduled);
    candidates.push_back({StrCat("default/p", i), 0});
  }
  Engine scratch = MakeScratchEngine(engine);
  auto choice = SelectVictims(scratch, High(GpuPod("big", 1, 40000, 40, kModeMig)), 0,
                              candidates);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_FALSE(choice->fits);
  EXPECT_THAT(choice->reason, HasSubstr("even with its 7 lower-priority pods evicted"));
  // A 1g.10gb preemptor needs one victim.
  auto small = SelectVictims(scratch, High(GpuPod("small", 1, 9000, 0, kModeMig)), 0,
                             candidates);
  ASSERT_TRUE(small.ok()) << small.status();
  ASSERT_TRUE(small->fits);
  EXPECT_EQ(small->victims.size(), 1u);
}

}  // namespace
}  // namespace prism::sched
