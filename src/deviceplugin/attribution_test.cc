#include "deviceplugin/attribution.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::deviceplugin {
namespace {

using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

AllocationView A(const std::string& id, uint64_t seq, std::vector<std::string> ids,
                 int64_t age_ms = 0) {
  AllocationView a;
  a.id = id;
  a.seq = seq;
  a.device_ids = std::move(ids);
  a.age_ms = age_ms;
  return a;
}

PodView Live(const std::string& key, std::vector<std::string> gpu_init = {}, bool reported = true) {
  return PodView{key, true, std::move(gpu_init), reported};
}

TEST(AttributionTest, IdenticalPodsEachGetTheAllocationOfTheirOwnDevices) {
  // Two identical pods, admitted in the opposite order to their names.
  const std::vector<AllocationView> allocations{A("a1", 1, {"g::1"}), A("a2", 2, {"g::0"})};
  const std::vector<ReportedPod> reported{{"ns/p0", {{"main", {"g::0"}}}},
                                          {"ns/p1", {{"main", {"g::1"}}}}};
  EXPECT_THAT(
      Attribute(allocations, reported, {Live("ns/p0"), Live("ns/p1")}),
      UnorderedElementsAre(Attribution{"a1", "ns/p1", "main"}, Attribution{"a2", "ns/p0", "main"}));
}

TEST(AttributionTest, WaitsUntilTheKubeletRecordsTheAllocation) {
  EXPECT_THAT(Attribute({A("a1", 1, {"g::1"})}, {}, {Live("ns/p")}), IsEmpty());
  // Recorded for a pod the API does not show as live: not attributed either.
  EXPECT_THAT(Attribute({A("a1", 1, {"g::1"})}, {{"ns/p", {{"main", {"g::1"}}}}},
                        {PodView{"ns/p", false, {}, true}}),
              IsEmpty());
}

TEST(AttributionTest, InitContainerAllocationsPrecedeTheirPodsAppContainers) {
  // init-a (1 device, reused by main), init-b (2 devices), then main; another pod before.
  const std::vector<AllocationView> allocations{A("x", 1, {"g::5"}), A("i1", 2, {"g::1"}),
                                                A("i2", 3, {"g::1", "g::2"}), A("m", 4, {"g::1"})};
  const std::vector<ReportedPod> reported{{"ns/other", {{"c", {"g::5"}}}},
                                          {"ns/p", {{"main", {"g::1"}}}}};
  EXPECT_THAT(
      Attribute(allocations, reported, {Live("ns/other"), Live("ns/p", {"init-a", "init-b"})}),
      UnorderedElementsAre(Attribution{"x", "ns/other", "c"}, Attribution{"m", "ns/p", "main"},
                           Attribution{"i1", "ns/p", "init-a"},
                           Attribution{"i2", "ns/p", "init-b"}));
}

TEST(AttributionTest, InitAllocationsWaitForTheAppContainer) {
  // main is not allocated yet: the init allocation cannot be placed.
  EXPECT_THAT(
      Attribute({A("i1", 1, {"g::1"})}, {{"ns/p", {{"main", {}}}}}, {Live("ns/p", {"init"})}),
      IsEmpty());
}

TEST(AttributionTest, AHeldContainerDoesNotTakeANewerAllocationOfTheSameDevices) {
  // p's main holds a1 on g::1; p is still reported although q now got g::1 (a2).
  std::vector<AllocationView> allocations{A("a1", 1, {"g::1"}), A("a2", 2, {"g::1"})};
  allocations[0].pod_key = "ns/p";
  allocations[0].container = "main";
  const std::vector<ReportedPod> reported{{"ns/p", {{"main", {"g::1"}}}},
                                          {"ns/q", {{"main", {"g::1"}}}}};
  EXPECT_THAT(Attribute(allocations, reported, {Live("ns/p"), Live("ns/q")}),
              UnorderedElementsAre(Attribution{"a2", "ns/q", "main"}));
}

TEST(AttributionTest, InitOnlyPodTakesOldEnoughUnmatchedRun) {
  const std::vector<PodView> pods{Live("ns/job", {"prepare", "load"}, false), Live("ns/p")};
  const std::vector<ReportedPod> reported{{"ns/p", {{"main", {"g::0"}}}}};
  std::vector<AllocationView> allocations{A("m", 1, {"g::0"}, 5000), A("j1", 2, {"g::1"}, 5000),
                                          A("j2", 3, {"g::1"}, 5000)};
  EXPECT_THAT(
      Attribute(allocations, reported, pods),
      UnorderedElementsAre(Attribution{"m", "ns/p", "main"}, Attribution{"j1", "ns/job", "prepare"},
                           Attribution{"j2", "ns/job", "load"}));
  // Too young: may belong to a pod the kubelet has not recorded yet.
  allocations[2].age_ms = 10;
  EXPECT_THAT(Attribute(allocations, reported, pods),
              UnorderedElementsAre(Attribution{"m", "ns/p", "main"}));
  // Two init-only pods waiting: ambiguous, nothing attributed.
  allocations[2].age_ms = 5000;
  std::vector<PodView> two = pods;
  two.push_back(Live("ns/job2", {"x", "y"}, false));
  EXPECT_THAT(Attribute(allocations, reported, two),
              UnorderedElementsAre(Attribution{"m", "ns/p", "main"}));
}

TEST(AttributionTest, SidecarsAreReportedLikeAppContainers) {
  const std::vector<AllocationView> allocations{A("s", 1, {"g::3"}), A("m", 2, {"g::4"})};
  const std::vector<ReportedPod> reported{{"ns/p", {{"sidecar", {"g::3"}}, {"main", {"g::4"}}}}};
  EXPECT_THAT(
      Attribute(allocations, reported, {Live("ns/p")}),
      UnorderedElementsAre(Attribution{"s", "ns/p", "sidecar"}, Attribution{"m", "ns/p", "main"}));
}

}  // namespace
}  // namespace prism::deviceplugin
