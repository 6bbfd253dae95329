#include "core/topo/gpu_sets.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/strings.h"
#include "core/topo/test_topologies.h"

namespace prism::topo {
namespace {

using namespace ::prism::topo::testing;  // NOLINT: test machines.

// `count` of `gpus` (all equally good to the engine unless `classes` says otherwise).
SetRequest Request(int count, std::vector<int> gpus, std::vector<int> classes = {},
                   std::vector<int> busy = {}) {
  SetRequest r;
  r.count = count;
  r.candidates = std::move(gpus);
  r.pref_class = classes.empty() ? std::vector<int>(r.candidates.size(), 0) : std::move(classes);
  r.idle.assign(8, true);
  for (int b : busy) r.idle[b] = false;
  return r;
}

const std::vector<int> kAll = {0, 1, 2, 3, 4, 5, 6, 7};

TEST(GpuSetsTest, FourGpusOnADgx1TakeAnNvLinkQuad) {
  EXPECT_EQ(ChooseGpuSet(Dgx1(), Request(4, kAll)), (std::vector<int>{0, 1, 2, 3}));
  // Quad 0-3 partly taken: the other quad, not a set with a cross-socket pair.
  EXPECT_EQ(ChooseGpuSet(Dgx1(), Request(4, {0, 2, 3, 4, 5, 6, 7}, {}, {1})),
            (std::vector<int>{4, 5, 6, 7}));
}

TEST(GpuSetsTest, TwoGpusTakeTheDoubleNvLinkPair) {
  // 0-3 has two NVLinks, 0-1 one: the better pair wins even though 0-1 comes first.
  const std::vector<int> set = ChooseGpuSet(Dgx1(), Request(2, kAll));
  ASSERT_EQ(set.size(), 2u);
  EXPECT_EQ(Dgx1().Link(set[0], set[1]).nvlinks, 2);
}

TEST(GpuSetsTest, OnNvSwitchTheNumaNodeDecides) {
  // Every pair is alike; GPU 1 is taken, so 0, 2, 3 + one of 4-7 would span two NUMA nodes.
  EXPECT_EQ(ChooseGpuSet(HgxH100(), Request(4, {0, 2, 3, 4, 5, 6, 7}, {}, {1})),
            (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(ChooseGpuSet(HgxH100(), Request(4, kAll)), (std::vector<int>{0, 1, 2, 3}));
}

TEST(GpuSetsTest, OneGpuKeepsTheIntactQuadForLaterPods) {
  // Quad 0-3 idle, quad 4-7 has only GPU 7 idle: a one-GPU pod takes 7, which harms no quad.
  EXPECT_EQ(ChooseGpuSet(Dgx1(), Request(1, {0, 1, 2, 3, 7}, {}, {4, 5, 6})),
            (std::vector<int>{7}));
}

TEST(GpuSetsTest, ByDefaultTheInterconnectNeverOverridesTheEnginesPreference) {
  // The engine prefers 1 and 2 (class 0: e.g. partly used GPUs a share packs onto); the
  // NVLink pair 0-3 is class 1. Only equally preferred sets are compared by interconnect.
  const SetRequest r = Request(2, {1, 2, 0, 3}, {0, 0, 1, 1});
  EXPECT_EQ(ChooseGpuSet(Dgx1(), r), (std::vector<int>{1, 2}));
  SetRequest first = r;
  first.topology_first = true;
  const std::vector<int> set = ChooseGpuSet(Dgx1(), first);
  ASSERT_EQ(set.size(), 2u);
  EXPECT_EQ(Dgx1().Link(set[0], set[1]).nvlinks, 2) << set[0] << "," << set[1];
}

TEST(GpuSetsTest, RequiredTiersRefuseSetsThatMissThem) {
  SetRequest r = Request(2, kAll);
  r.required = Tier::kNvLink;
  EXPECT_TRUE(ChooseGpuSet(Pcie8(), r).empty());
  r.required = Tier::kSwitch;
  EXPECT_EQ(ChooseGpuSet(Pcie8(), r), (std::vector<int>{0, 1}));
  // Four GPUs within one socket are NUMA-tier; one per socket is not.
  SetRequest numa = Request(4, {0, 1, 4, 5, 6, 7});
  numa.required = Tier::kNuma;
  EXPECT_EQ(ChooseGpuSet(Pcie8(), numa), (std::vector<int>{4, 5, 6, 7}));
  numa.candidates = {0, 1, 2, 4, 5, 6};
  numa.pref_class.assign(6, 0);
  EXPECT_TRUE(ChooseGpuSet(Pcie8(), numa).empty());
}

TEST(GpuSetsTest, NumaBindNeedsOneKnownNumaNode) {
  SetRequest r = Request(2, {0, 4, 5});
  r.same_numa = true;
  EXPECT_EQ(ChooseGpuSet(HgxH100(), r), (std::vector<int>{4, 5}));
  NodeTopology unknown = HgxH100();
  unknown.numa_node.assign(8, kNumaUnknown);
  EXPECT_TRUE(ChooseGpuSet(unknown, r).empty());
  r.count = 1;  // One GPU is always on one NUMA node.
  EXPECT_EQ(ChooseGpuSet(unknown, r).size(), 1u);
}

TEST(GpuSetsTest, WithoutTopologyTheEnginesOrderStands) {
  EXPECT_EQ(ChooseGpuSet(NodeTopology{}, Request(3, {5, 2, 7, 0})), (std::vector<int>{5, 2, 7}));
  EXPECT_TRUE(ChooseGpuSet(NodeTopology{}, Request(5, {5, 2, 7, 0})).empty());
}

TEST(GpuSetsTest, LargeNodesAreSearchedGreedilyAndStillMeetTheTier) {
  // 16 GPUs in two NVSwitch islands of 8 joined by PCIe: 8 of 16 is past exhaustive search.
  std::vector<std::string> rows;
  for (int a = 0; a < 16; ++a) {
    std::vector<std::string> row;
    for (int b = 0; b < 16; ++b) row.push_back(a == b ? "X" : (a / 8 == b / 8 ? "NVS12" : "SYS"));
    rows.push_back(StrJoin(row, " "));
  }
  std::vector<int> numa(16, 0);
  for (int g = 8; g < 16; ++g) numa[g] = 1;
  const NodeTopology t = Topology(rows, numa);
  SetRequest r;
  r.count = 8;
  for (int g = 1; g < 16; ++g) r.candidates.push_back(g);  // GPU 0 taken: island 0 has 7.
  r.pref_class.assign(r.candidates.size(), 0);
  r.idle.assign(16, true);
  r.idle[0] = false;
  r.required = Tier::kNvLink;
  EXPECT_EQ(ChooseGpuSet(t, r), (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));
}

TEST(GpuSetsTest, AVeryLargeNodeAndRequestStayABoundedSearch) {
  // 256 GPUs in two NUMA halves of NVSwitch islands, 128 asked on one NUMA node: greedy, from at
  // most kGreedySeeds starts (the whole search judges 16 complete sets).
  constexpr int kGpus = 256;
  NodeTopology t;
  t.links.assign(kGpus, std::vector<GpuLink>(kGpus));
  for (int a = 0; a < kGpus; ++a) {
    t.numa_node.push_back(a < kGpus / 2 ? 0 : 1);
    for (int b = 0; b < kGpus; ++b) {
      if (a != b)
        t.links[a][b] =
            a / 128 == b / 128 ? GpuLink{LinkTier::kNvSwitch, 18} : GpuLink{LinkTier::kSystem, 0};
    }
  }
  SetRequest r;
  r.count = 128;
  for (int g = 1; g < kGpus; ++g) r.candidates.push_back(g);  // GPU 0 taken: NUMA 0 has 127.
  r.pref_class.assign(r.candidates.size(), 0);
  r.idle.assign(kGpus, true);
  r.same_numa = true;
  std::vector<int> expected;
  for (int g = 128; g < kGpus; ++g) expected.push_back(g);
  EXPECT_EQ(ChooseGpuSet(t, r), expected);
}

TEST(GpuSetsTest, TiersAndScores) {
  EXPECT_EQ(SetTier(Dgx1(), std::vector<int>{0, 1, 2, 3}), Tier::kNvLink);
  EXPECT_EQ(SetTier(Dgx1(), std::vector<int>{0, 5}), Tier::kAny);
  EXPECT_EQ(SetTier(Pcie8(), std::vector<int>{0, 1}), Tier::kSwitch);
  EXPECT_EQ(SetTier(Pcie8(), std::vector<int>{0, 2}), Tier::kNuma);
  EXPECT_EQ(SetTier(Pcie8(), std::vector<int>{3}), Tier::kNvLink);
  EXPECT_EQ(LinkScore({LinkTier::kNvLink, 2}), 200);
  EXPECT_EQ(LinkScore({LinkTier::kSystem, 0}), 10);
  EXPECT_EQ(LinkScore({}), 0);
  for (Tier t : {Tier::kAny, Tier::kNuma, Tier::kSwitch, Tier::kNvLink}) {
    auto parsed = ParseTier(TierName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_FALSE(ParseTier("NVLINK").ok());
}

}  // namespace
}  // namespace prism::topo
