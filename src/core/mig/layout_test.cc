#include "core/mig/layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "core/mig/test_util.h"

namespace prism::mig {
namespace {

using ::prism::mig::testing::L;
using ::prism::mig::testing::Model;
using ::testing::HasSubstr;

std::string Error(const GpuModel& m, const Layout& layout) {
  auto s = ValidateLayout(m, layout);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  return std::string(s.message());
}

TEST(ValidateLayoutTest, AcceptsBalancedLayouts) {
  const GpuModel& a100 = Model("A100-SXM4-40GB");
  EXPECT_TRUE(ValidateLayout(a100, L(a100, "1g.5gb@0 1g.5gb@1 2g.10gb@2 3g.20gb@4")).ok());
  EXPECT_TRUE(ValidateLayout(a100, L(a100, "4g.20gb@0 3g.20gb@4")).ok());
  EXPECT_TRUE(ValidateLayout(a100, L(a100, "2g.10gb@0 2g.10gb@2 2g.10gb@4 1g.5gb@6")).ok());
  EXPECT_TRUE(ValidateLayout(a100, {}).ok());
}

TEST(ValidateLayoutTest, NamesTheConflict) {
  const GpuModel& a100 = Model("A100-SXM4-40GB");
  EXPECT_THAT(Error(a100, L(a100, "3g.20gb@0 2g.10gb@2")),
              HasSubstr("2g.10gb@2 overlaps 3g.20gb@0 on memory slices 2-3"));
  EXPECT_THAT(Error(a100, L(a100, "3g.20gb@2")),
              HasSubstr("start 2 is not a legal placement of 3g.20gb (allowed: 0, 4)"));
  EXPECT_THAT(Error(a100, L(a100, "1g.5gb@7")), HasSubstr("not a legal placement"));
  EXPECT_THAT(Error(a100, L(a100, "1g.5gb+me@0 1g.5gb+me@1")),
              HasSubstr("2 instances of 1g.5gb+me exceed its maximum of 1"));
  const GpuModel& a30 = Model("A30-24GB");
  EXPECT_THAT(Error(a30, L(a30, "1g.6gb+me@0 2g.12gb+me@2")), HasSubstr("at most one +me"));
  Layout bad = {Instance{42, 0}};
  EXPECT_THAT(Error(a100, bad), HasSubstr("unknown profile index 42"));
}

// RTX PRO 6000 (issue 17): +me.all takes every media engine, so only -me instances share the
// GPU with it; +me and +me.all both hold the single OFA; +gfx and -me place like plain ones.
TEST(ValidateLayoutTest, MediaVariantsOfBlackwellShareTheEnginesAsNvidiaSays) {
  const GpuModel& rtx = Model("RTX-PRO-6000-96GB");
  EXPECT_TRUE(ValidateLayout(rtx, L(rtx, "1g.24gb+me.all@0 1g.24gb-me@3 2g.48gb-me@6")).ok());
  EXPECT_TRUE(
      ValidateLayout(rtx, L(rtx, "1g.24gb+gfx@0 1g.24gb+gfx@3 1g.24gb+gfx@6 1g.24gb+gfx@9")).ok());
  EXPECT_TRUE(ValidateLayout(rtx, L(rtx, "1g.24gb+me@0 1g.24gb@3 2g.48gb@6")).ok());
  EXPECT_THAT(Error(rtx, L(rtx, "1g.24gb+me.all@0 1g.24gb@3")), HasSubstr("only -me instances"));
  EXPECT_THAT(Error(rtx, L(rtx, "1g.24gb+gfx@0 2g.48gb+me.all@6")), HasSubstr("only -me"));
  EXPECT_THAT(Error(rtx, L(rtx, "1g.24gb+me@0 1g.24gb+me.all@3")), HasSubstr("+me.all"));
  EXPECT_THAT(Error(rtx, L(rtx, "1g.24gb@0 1g.24gb@3 1g.24gb@6 1g.24gb@9 1g.24gb-me@0")),
              HasSubstr("overlaps"));
  EXPECT_THAT(Error(rtx, L(rtx, "2g.48gb@3")), HasSubstr("not a legal placement"));
  // The planner knows it too: a +me.all next to a plain instance has no placement.
  auto placed = PlaceProfiles(rtx, L(rtx, "1g.24gb@0"), {rtx.FindProfile("1g.24gb+me.all")});
  EXPECT_EQ(placed.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(placed.status().message(), HasSubstr("only -me instances fit next to it"));
  Occupancy occ = *Occupy(rtx, L(rtx, "1g.24gb+me.all@0"));
  EXPECT_EQ(MaxAdditional(rtx, occ, rtx.FindProfile("1g.24gb")), 0);
  EXPECT_EQ(MaxAdditional(rtx, occ, rtx.FindProfile("1g.24gb-me")), 3);
}

TEST(ValidateLayoutTest, EnforcesTheComputeSliceBudget) {
  // No 8-slice lattice layout can exceed 7 compute slices by geometry alone, so
  // check the rule on a model whose memory would allow it.
  GpuModel m = Model("A100-SXM4-40GB");
  m.compute_slices = 3;
  EXPECT_THAT(Error(m, L(m, "2g.10gb@0 2g.10gb@2")),
              HasSubstr("compute slices would total 4, more than the 3"));
}

TEST(PlaceProfilesTest, PrefersPlacementsThatKeepLargeProfilesPossible) {
  const GpuModel& a100 = Model("A100-SXM4-40GB");
  // Like NVML's own defaults: a lone 1g goes to slot 6, a 3g to slot 4, a 2g to 4.
  EXPECT_EQ(LayoutToString(a100, *PlaceProfiles(a100, {}, {a100.FindProfile("1g.5gb")})),
            "1g.5gb@6");
  EXPECT_EQ(LayoutToString(a100, *PlaceProfiles(a100, {}, {a100.FindProfile("3g.20gb")})),
            "3g.20gb@4");
  EXPECT_EQ(LayoutToString(a100, *PlaceProfiles(a100, {}, {a100.FindProfile("2g.10gb")})),
            "2g.10gb@4");
}

TEST(PlaceProfilesTest, PlacesWhatNvmlCannotInAnyOrder) {
  // The MIG guide's example: -cgi 19,19,14,9 fails on NVML's default placements.
  const GpuModel& a100 = Model("A100-SXM4-40GB");
  const int g1 = a100.FindProfile("1g.5gb");
  const int g2 = a100.FindProfile("2g.10gb");
  const int g3 = a100.FindProfile("3g.20gb");
  auto placed = PlaceProfiles(a100, {}, {g1, g1, g2, g3});
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(LayoutToString(a100, *placed), "1g.5gb@0 1g.5gb@1 2g.10gb@2 3g.20gb@4");
}

TEST(PlaceProfilesTest, PlacesNextToExistingInstances) {
  const GpuModel& a100 = Model("A100-SXM4-40GB");
  auto placed = PlaceProfiles(a100, L(a100, "3g.20gb@4"), {a100.FindProfile("4g.20gb")});
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(LayoutToString(a100, *placed), "4g.20gb@0");
}

TEST(PlaceProfilesTest, ExplainsWhyNothingFits) {
  const GpuModel& a100 = Model("A100-SXM4-40GB");
  const int g4 = a100.FindProfile("4g.20gb");
  const int g1 = a100.FindProfile("1g.5gb");
  auto two_4g = PlaceProfiles(a100, {}, {g4, g4});
  EXPECT_EQ(two_4g.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(two_4g.status().message()), HasSubstr("exceed its maximum of 1"));

  auto no_room = PlaceProfiles(a100, L(a100, "3g.20gb@0 3g.20gb@4"), {g1});
  EXPECT_THAT(std::string(no_room.status().message()), HasSubstr("needs 1 memory slices, 0 free"));

  // 1g.5gb@3 splits the lower half: a 4g no longer fits although 4 slices are free.
  auto split = PlaceProfiles(a100, L(a100, "1g.5gb@3 3g.20gb@4"), {g4});
  EXPECT_THAT(std::string(split.status().message()), HasSubstr("needs 4 compute slices, 3 free"));
  auto split2 = PlaceProfiles(a100, L(a100, "1g.5gb@1 2g.10gb@4"), {a100.FindProfile("3g.20gb")});
  EXPECT_THAT(std::string(split2.status().message()),
              HasSubstr("no legal placement fits them in the free memory slices (0, 2-3, 6-7)"));
}

TEST(EnumerateMaximalLayoutsTest, EveryLayoutIsLegalMaximalAndUnique) {
  for (const GpuModel& m : Catalog()) {
    SCOPED_TRACE(m.name);
    const auto layouts = EnumerateMaximalLayouts(m);
    EXPECT_GT(layouts.size(), 5u);
    std::set<std::string> seen;
    for (const Layout& layout : layouts) {
      auto occ = Occupy(m, layout);
      ASSERT_TRUE(occ.ok()) << occ.status();
      for (size_t p = 0; p < m.profiles.size(); ++p) {
        EXPECT_EQ(MaxAdditional(m, *occ, static_cast<int>(p)), 0)
            << LayoutToString(m, layout) << " still fits " << m.profiles[p].Name();
      }
      EXPECT_TRUE(seen.insert(LayoutToString(m, layout)).second) << LayoutToString(m, layout);
    }
  }
}

TEST(EnumerateMaximalLayoutsTest, ContainsTheKnownFullLayouts) {
  const GpuModel& a100 = Model("A100-SXM4-40GB");
  std::set<std::string> all;
  for (const Layout& layout : EnumerateMaximalLayouts(a100))
    all.insert(LayoutToString(a100, layout));
  EXPECT_TRUE(all.count("7g.40gb@0"));
  EXPECT_TRUE(all.count("4g.20gb@0 3g.20gb@4"));
  EXPECT_TRUE(all.count("1g.5gb@0 1g.5gb@1 2g.10gb@2 3g.20gb@4"));
  EXPECT_TRUE(all.count("1g.10gb@0 1g.10gb@2 1g.10gb@4 1g.10gb@6"));
  EXPECT_TRUE(all.count("1g.5gb@0 1g.5gb@1 1g.5gb@2 1g.5gb@3 1g.5gb@4 1g.5gb@5 1g.5gb@6"));
  // Not maximal: a 1g still fits in slot 6.
  EXPECT_FALSE(all.count("2g.10gb@0 2g.10gb@2 2g.10gb@4"));
}

// Every subset of a legal layout is legal, and PlaceProfiles always finds a
// placement for the profiles of any maximal layout.
TEST(PlaceProfilesTest, ReproducesEveryMaximalLayoutsProfiles) {
  for (const GpuModel& m : Catalog()) {
    SCOPED_TRACE(m.name);
    for (const Layout& layout : EnumerateMaximalLayouts(m)) {
      std::vector<int> profiles;
      for (const Instance& inst : layout) profiles.push_back(inst.profile);
      auto placed = PlaceProfiles(m, {}, profiles);
      ASSERT_TRUE(placed.ok()) << LayoutToString(m, layout) << ": " << placed.status();
      EXPECT_TRUE(ValidateLayout(m, *placed).ok());
      EXPECT_EQ(CountProfiles(m, *placed), CountProfiles(m, layout));
    }
  }
}

TEST(ProfileCountsTest, ConvertsNamesAndRejectsUnknownOnes) {
  const GpuModel& a100 = Model("A100-SXM4-40GB");
  auto counts = ProfileCountsFromNames(a100, {{"1g.5gb", 2}, {"3g.20gb", 1}});
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(CountsToString(a100, *counts), "1g.5gb: 2, 3g.20gb: 1");
  auto unknown = ProfileCountsFromNames(a100, {{"1g.10gb+me", 1}});
  EXPECT_THAT(std::string(unknown.status().message()),
              HasSubstr("'1g.10gb+me' does not exist on A100-SXM4-40GB"));
  auto negative = ProfileCountsFromNames(a100, {{"1g.5gb", -1}});
  EXPECT_THAT(std::string(negative.status().message()), HasSubstr("negative"));
  auto split = ProfileCountsFromNames(a100, {{"1c.3g.20gb", 1}});
  EXPECT_THAT(std::string(split.status().message()), HasSubstr("compute instances"));
}

TEST(FreeSpaceUtilityTest, DropsAsTheGpuFills) {
  const GpuModel& h100 = Model("H100-SXM5-80GB");
  for (const Layout& layout : EnumerateMaximalLayouts(h100)) {
    Occupancy occ;
    double last = FreeSpaceUtility(h100, occ);
    for (const Instance& inst : layout) {
      Add(h100, &occ, inst.profile, inst.start);
      const double now = FreeSpaceUtility(h100, occ);
      EXPECT_LE(now, last);
      last = now;
    }
    EXPECT_EQ(last, 0);
  }
}

}  // namespace
}  // namespace prism::mig
