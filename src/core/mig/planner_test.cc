#include "core/mig/planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "core/mig/test_util.h"

namespace prism::mig {
namespace {

using ::prism::mig::testing::L;
using ::prism::mig::testing::Model;
using ::testing::HasSubstr;

ProfileCounts Counts(const GpuModel& m, const std::map<std::string, int>& named) {
  auto c = ProfileCountsFromNames(m, named);
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

TEST(PlanTransitionTest, FromEmptyCreatesEverything) {
  const GpuModel& a100 = Model("A100-SXM4-40GB");
  auto plan =
      PlanTransition(a100, {}, Counts(a100, {{"1g.5gb", 2}, {"2g.10gb", 1}, {"3g.20gb", 1}}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->destroy.empty());
  EXPECT_EQ(LayoutToString(a100, plan->create), "1g.5gb@0 1g.5gb@1 2g.10gb@2 3g.20gb@4");
}

TEST(PlanTransitionTest, SatisfiedLayoutIsANoOp) {
  const GpuModel& a100 = Model("A100-SXM4-40GB");
  // A layout NVML might have made by itself, in a different arrangement.
  const Layout current = L(a100, "2g.10gb@0 1g.5gb@2 1g.5gb@3 3g.20gb@4");
  auto plan = PlanTransition(a100, current, CountProfiles(a100, current));
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->NoOp());
  EXPECT_EQ(plan->keep.size(), 4u);
}

TEST(PlanTransitionTest, DestroysOnlyWhatMustGo) {
  const GpuModel& a100 = Model("A100-SXM4-40GB");
  const Layout balanced = L(a100, "1g.5gb@0 1g.5gb@1 2g.10gb@2 3g.20gb@4");
  auto plan = PlanTransition(a100, balanced, Counts(a100, {{"1g.5gb", 7}}));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(LayoutToString(a100, plan->keep), "1g.5gb@0 1g.5gb@1");
  EXPECT_EQ(LayoutToString(a100, plan->destroy), "2g.10gb@2 3g.20gb@4");
  EXPECT_EQ(plan->create.size(), 5u);
  EXPECT_TRUE(ValidateLayout(a100, plan->Result()).ok());
}

TEST(PlanTransitionTest, KeepsBusyInstancesAndPlansAroundThem) {
  const GpuModel& a100 = Model("A100-SXM4-40GB");
  // The busy 3g at slot 0 forces the new 3g to slot 4.
  const Layout current = L(a100, "3g.20gb@0* 1g.5gb@4 1g.5gb@5");
  auto plan = PlanTransition(a100, current, Counts(a100, {{"3g.20gb", 2}}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(LayoutToString(a100, plan->keep), "3g.20gb@0");
  EXPECT_EQ(LayoutToString(a100, plan->destroy), "1g.5gb@4 1g.5gb@5");
  EXPECT_EQ(LayoutToString(a100, plan->create), "3g.20gb@4");
}

TEST(PlanTransitionTest, RefusesToDestroyOrMoveBusyInstances) {
  const GpuModel& a100 = Model("A100-SXM4-40GB");
  Layout current = L(a100, "2g.10gb@2*");
  current[0].gpu_instance_id = 5;
  auto gone = PlanTransition(a100, current, Counts(a100, {{"7g.40gb", 1}}));
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(gone.status().message()),
              HasSubstr("2g.10gb@2 (GPU instance 5) is in use"));
  // 4g needs slots 0-3, which the busy 2g@2 occupies.
  auto moved = PlanTransition(a100, current, Counts(a100, {{"4g.20gb", 1}, {"2g.10gb", 1}}));
  EXPECT_EQ(moved.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(moved.status().message()), HasSubstr("without moving instances in use"));
}

TEST(PlanTransitionTest, RejectsImpossibleDesiredLayouts) {
  const GpuModel& a100 = Model("A100-SXM4-40GB");
  auto plan = PlanTransition(a100, {}, Counts(a100, {{"4g.20gb", 1}, {"3g.20gb", 2}}));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("is impossible"));
}

TEST(PlanExactTransitionTest, KeepsMatchingInstances) {
  const GpuModel& h100 = Model("H100-SXM5-80GB");
  auto plan = PlanExactTransition(h100, L(h100, "3g.40gb@4 1g.10gb@0"),
                                  L(h100, "3g.40gb@4 2g.20gb@0 1g.10gb@2"));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(LayoutToString(h100, plan->keep), "3g.40gb@4");
  EXPECT_EQ(LayoutToString(h100, plan->destroy), "1g.10gb@0");
  EXPECT_EQ(LayoutToString(h100, plan->create), "2g.20gb@0 1g.10gb@2");
  auto busy = PlanExactTransition(h100, L(h100, "1g.10gb@0*"), L(h100, "7g.80gb@0"));
  EXPECT_EQ(busy.status().code(), absl::StatusCode::kFailedPrecondition);
  auto illegal = PlanExactTransition(h100, {}, L(h100, "4g.40gb@0 4g.40gb@0"));
  EXPECT_EQ(illegal.status().code(), absl::StatusCode::kInvalidArgument);
}

// Property: for random busy subsets of maximal layouts and random targets, a
// plan never destroys a busy instance, reaches exactly the desired counts, and
// keeps as many instances as the best subset allows.
TEST(PlanTransitionTest, RandomTransitionsNeverTouchBusyInstances) {
  std::mt19937 rng(20261129);
  for (const char* name : {"A100-SXM4-40GB", "H100-SXM5-80GB", "A30-24GB"}) {
    const GpuModel& m = Model(name);
    const auto layouts = EnumerateMaximalLayouts(m);
    for (int trial = 0; trial < 400; ++trial) {
      SCOPED_TRACE(::testing::Message() << name << " trial " << trial);
      Layout current = layouts[rng() % layouts.size()];
      Layout partial;
      for (Instance inst : current) {
        if (rng() % 3 == 0) continue;  // drop some
        inst.busy = rng() % 3 == 0;
        partial.push_back(inst);
      }
      const Layout& target = layouts[rng() % layouts.size()];
      const ProfileCounts want = CountProfiles(m, target);
      auto plan = PlanTransition(m, partial, want);
      if (!plan.ok()) {
        EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition) << plan.status();
        continue;
      }
      for (const Instance& d : plan->destroy) EXPECT_FALSE(d.busy);
      int busy_kept = 0;
      for (const Instance& k : plan->keep) busy_kept += k.busy;
      int busy_total = 0;
      for (const Instance& p : partial) busy_total += p.busy;
      EXPECT_EQ(busy_kept, busy_total);
      const Layout result = plan->Result();
      EXPECT_TRUE(ValidateLayout(m, result).ok()) << LayoutToString(m, result);
      EXPECT_EQ(CountProfiles(m, result), want);
      EXPECT_EQ(plan->keep.size() + plan->destroy.size(), partial.size());
    }
  }
}

}  // namespace
}  // namespace prism::mig
