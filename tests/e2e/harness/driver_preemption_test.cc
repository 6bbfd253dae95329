// The stand-in's NodeResourcesFit and DefaultPreemption steps against upstream's rules
// (driver_preemption.h).
#include "tests/e2e/harness/driver_preemption.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::e2e {
namespace {

using json = nlohmann::json;

AssignedPod Pod(const std::string& name, int32_t priority, int64_t milli_cpu,
                const std::string& start = "2026-12-07T10:00:00Z") {
  AssignedPod p;
  p.key = "default/" + name;
  p.name = name;
  p.uid = "uid-" + name;
  p.node = "n1";
  p.priority = priority;
  p.milli_cpu = milli_cpu;
  p.start_time = start;
  return p;
}

NodeAllocatable Cpus(int64_t cpus) {
  return NodeAllocatable{true, cpus * 1000, int64_t{1} << 40, 110};
}

TEST(DriverPreemptionTest, DescribesRequestsAndAllocatable) {
  const json pod = {{"metadata", {{"name", "p"}, {"namespace", "ns"}, {"uid", "u"}}},
                    {"spec",
                     {{"priority", 5},
                      {"nodeName", "n1"},
                      {"containers",
                       {{{"resources", {{"requests", {{"cpu", "500m"}, {"memory", "1Gi"}}}}}},
                        {{"resources", {{"limits", {{"cpu", "2"}}}}}}}}}}};
  const AssignedPod p = DescribePod(pod);
  EXPECT_EQ(p.key, "ns/p");
  EXPECT_EQ(p.milli_cpu, 2500);
  EXPECT_EQ(p.memory_bytes, int64_t{1} << 30);
  EXPECT_EQ(p.priority, 5);
  EXPECT_EQ(p.node, "n1");
  const NodeAllocatable n =
      DescribeNode({{"status", {{"allocatable", {{"cpu", "4"}, {"memory", "8Gi"}, {"pods", "3"}}}}}});
  EXPECT_TRUE(n.known);
  EXPECT_EQ(n.milli_cpu, 4000);
  EXPECT_EQ(n.pods, 3);
  EXPECT_FALSE(DescribeNode(json{{"metadata", {{"name", "x"}}}}).known);
  // A node naming only its GPUs: cpu, memory and pods unchecked.
  const NodeAllocatable gpus_only =
      DescribeNode({{"status", {{"allocatable", {{"nvidia.com/gpu", "8"}}}}}});
  EXPECT_EQ(gpus_only.pods, -1);
  EXPECT_EQ(FitsRequest(p, gpus_only, {&p, &p}), "");
  // One that does not parse is 0: nothing fits.
  EXPECT_EQ(DescribeNode({{"status", {{"allocatable", {{"cpu", "lots"}}}}}}).milli_cpu, 0);
}

TEST(DriverPreemptionTest, FitsRequestNamesEachShortage) {
  const AssignedPod a = Pod("a", 0, 3000);
  const AssignedPod me = Pod("me", 0, 2000);
  EXPECT_EQ(FitsRequest(me, Cpus(5), {&a}), "");
  EXPECT_EQ(FitsRequest(me, Cpus(4), {&a}), "Insufficient cpu");
  NodeAllocatable one_pod = Cpus(100);
  one_pod.pods = 1;
  EXPECT_EQ(FitsRequest(me, one_pod, {&a}), "Too many pods");
  EXPECT_EQ(FitsRequest(me, NodeAllocatable{}, {&a}), "");  // Unknown allocatable: no check.
}

// SelectVictimsOnNode: remove every lower-priority pod, then reprieve the most important first.
TEST(DriverPreemptionTest, ReprievesTheMostImportantPodsFirst) {
  const AssignedPod high = Pod("high", 100, 1000);  // Not below the preemptor: never a victim.
  const AssignedPod old_big = Pod("old-big", 1, 3000, "2026-12-07T09:00:00Z");
  const AssignedPod new_big = Pod("new-big", 1, 3000, "2026-12-07T11:00:00Z");
  const AssignedPod low = Pod("low", 0, 1000);
  const AssignedPod me = Pod("me", 10, 3000);
  // 8 CPUs: high 1 + me 3 leave 4: old-big (more important: earlier) is reprieved, then new-big
  // does not fit, then low does.
  auto victims = SelectVictimsOnNode(me, Cpus(8), {&high, &low, &new_big, &old_big});
  ASSERT_TRUE(victims.has_value());
  ASSERT_EQ(victims->size(), 1u);
  EXPECT_EQ(victims->front()->name, "new-big");
  // Fits without preemption: no victim, no candidate.
  EXPECT_FALSE(SelectVictimsOnNode(me, Cpus(100), {&high, &low}).has_value());
  // Does not fit even with every lower-priority pod gone.
  EXPECT_FALSE(SelectVictimsOnNode(me, Cpus(3), {&high, &low}).has_value());
  // Nothing below the preemptor.
  EXPECT_FALSE(SelectVictimsOnNode(me, Cpus(1), {&high}).has_value());
}

TEST(DriverPreemptionTest, PicksTheNodeInUpstreamsOrder) {
  const AssignedPod p5 = Pod("p5", 5, 0), p3 = Pod("p3", 3, 0), p3b = Pod("p3b", 3, 0),
                    p1 = Pod("p1", 1, 0), p1_late = Pod("p1-late", 1, 0, "2026-12-07T12:00:00Z");
  // Lowest highest-priority victim first.
  EXPECT_EQ(PickOneNodeForPreemption({{"a", {&p5}}, {"b", {&p3, &p1}}}), "b");
  // Then the lowest sum of priorities.
  EXPECT_EQ(PickOneNodeForPreemption({{"a", {&p3, &p3b}}, {"b", {&p3, &p1}}}), "b");
  // Then the fewest victims: at the lowest priority each adds 0 to the sum (priority + 2^31).
  const AssignedPod m1 = Pod("m1", std::numeric_limits<int32_t>::min(), 0),
                    m2 = Pod("m2", std::numeric_limits<int32_t>::min(), 0);
  EXPECT_EQ(PickOneNodeForPreemption({{"a", {&m1, &m2}}, {"b", {&m1}}}), "b");
  // Then the latest start among the highest-priority victims.
  EXPECT_EQ(PickOneNodeForPreemption({{"a", {&p1}}, {"b", {&p1_late}}}), "b");
  // Then the first.
  EXPECT_EQ(PickOneNodeForPreemption({{"a", {&p1}}, {"b", {&p1}}}), "a");
  EXPECT_EQ(PickOneNodeForPreemption({}), "");
}

TEST(DriverPreemptionTest, ReadsTheExtendersAnswerAsCallExtendersDoes) {
  const AssignedPod a = Pod("a", 0, 0), b = Pod("b", 0, 0);
  const std::map<std::string, std::vector<const AssignedPod*>> on_node = {{"n1", {&a, &b}}};
  const json args = PreemptionArgsJson(json{{"metadata", {{"name", "me"}}}}, {{"n1", {&a}}});
  EXPECT_EQ(args["NodeNameToMetaVictims"]["n1"]["Pods"][0]["UID"], "uid-a");
  EXPECT_TRUE(args["NodeNameToVictims"].is_null());
  std::string error;
  auto read = ReadPreemptionResult(
      {{"NodeNameToMetaVictims", {{"n1", {{"Pods", {{{"UID", "uid-b"}}, {{"UID", "uid-a"}}}}}}}}},
      on_node, &error);
  ASSERT_TRUE(read.has_value()) << error;
  ASSERT_EQ(read->size(), 1u);
  EXPECT_EQ((*read)[0].victims[0]->name, "b");
  // A node left out is dropped; none left is no candidate (not an error).
  read = ReadPreemptionResult({{"NodeNameToMetaVictims", json::object()}}, on_node, &error);
  ASSERT_TRUE(read.has_value());
  EXPECT_TRUE(read->empty());
  // Errors: no victims on a node, a UID not on the node, an unknown node.
  EXPECT_FALSE(ReadPreemptionResult({{"NodeNameToMetaVictims", {{"n1", {{"Pods", json::array()}}}}}},
                                    on_node, &error));
  EXPECT_THAT(error, ::testing::HasSubstr("expected at least one victim pod"));
  EXPECT_FALSE(ReadPreemptionResult(
      {{"NodeNameToMetaVictims", {{"n1", {{"Pods", {{{"UID", "uid-x"}}}}}}}}}, on_node, &error));
  EXPECT_THAT(error, ::testing::HasSubstr("not found on that node"));
  EXPECT_FALSE(ReadPreemptionResult(
      {{"NodeNameToMetaVictims", {{"n9", {{"Pods", {{{"UID", "uid-a"}}}}}}}}}, on_node, &error));
}

}  // namespace
}  // namespace prism::e2e
