#include "core/topo/topology.h"

#include <gtest/gtest.h>

namespace prism::topo {
namespace {

TEST(TopologyTest, LinksRoundTripThroughTheirTokens) {
  const GpuLink links[] = {
      {LinkTier::kNvLink, 2}, {LinkTier::kNvSwitch, 18},   {LinkTier::kBoard, 0},
      {LinkTier::kSwitch, 0}, {LinkTier::kMultiSwitch, 0}, {LinkTier::kHostBridge, 0},
      {LinkTier::kNode, 0},   {LinkTier::kSystem, 0},      {LinkTier::kUnknown, 0}};
  for (const GpuLink& l : links) {
    auto parsed = ParseLink(FormatLink(l));
    ASSERT_TRUE(parsed.ok()) << FormatLink(l) << ": " << parsed.status();
    EXPECT_EQ(*parsed, l) << FormatLink(l);
  }
  EXPECT_EQ(FormatLink({LinkTier::kNvLink, 1}), "NV1");
  EXPECT_EQ(FormatLink({LinkTier::kNvSwitch, 12}), "NVS12");
  EXPECT_EQ(FormatLink({LinkTier::kNode, 0}), "NODE");
}

TEST(TopologyTest, BadTokensAreErrorsAndNewTiersReadAsUnknown) {
  for (const char* bad :
       {"NV0", "NV37", "NVS0", "NV-1", "nv2", "", "PIX PIX", "NV2x", "ABCDEFGHI", "sys"}) {
    EXPECT_FALSE(ParseLink(bad).ok()) << bad;
  }
  // An agent newer than this build may publish a tier it does not know: that pair is unknown.
  auto c2c = ParseLink("C2C");
  ASSERT_TRUE(c2c.ok());
  EXPECT_EQ(c2c->tier, LinkTier::kUnknown);
}

TEST(TopologyTest, NvLinksBeatPcieAndCountsDecide) {
  const GpuLink nv1{LinkTier::kNvLink, 1}, nv2{LinkTier::kNvLink, 2},
      nvs12{LinkTier::kNvSwitch, 12}, nv12{LinkTier::kNvLink, 12}, pix{LinkTier::kSwitch, 0},
      sys{LinkTier::kSystem, 0}, unknown{};
  EXPECT_GT(CompareLinks(nv2, nv1), 0);
  EXPECT_GT(CompareLinks(nv1, pix), 0);
  EXPECT_GT(CompareLinks(pix, sys), 0);
  EXPECT_GT(CompareLinks(sys, unknown), 0);
  EXPECT_GT(CompareLinks(nvs12, nv2), 0);
  EXPECT_GT(CompareLinks(nvs12, nv12), 0);
  EXPECT_EQ(CompareLinks(nv2, nv2), 0);
  EXPECT_LT(CompareLinks(nv1, nv2), 0);
}

TEST(TopologyTest, OutOfRangeLookupsAreUnknown) {
  NodeTopology t;
  t.numa_node = {0, 1};
  t.links = {{GpuLink{}, GpuLink{LinkTier::kSystem, 0}},
             {GpuLink{LinkTier::kSystem, 0}, GpuLink{}}};
  EXPECT_EQ(t.NumaNode(1), 1);
  EXPECT_EQ(t.NumaNode(2), kNumaUnknown);
  EXPECT_EQ(t.NumaNode(-1), kNumaUnknown);
  EXPECT_EQ(t.Link(0, 1).tier, LinkTier::kSystem);
  EXPECT_EQ(t.Link(0, 0).tier, LinkTier::kUnknown);
  EXPECT_EQ(t.Link(0, 5).tier, LinkTier::kUnknown);
  EXPECT_FALSE(t.empty());
  EXPECT_TRUE(NodeTopology{}.empty());
}

TEST(TopologyTest, CpuListsFromMasks) {
  EXPECT_EQ(CpuListFromMask({}), "");
  EXPECT_EQ(CpuListFromMask({0}), "");
  EXPECT_EQ(CpuListFromMask({0xFull}), "0-3");
  // DGX-1: CPUs 0-19 and 40-59 on socket 0.
  EXPECT_EQ(CpuListFromMask({0x0FFFFF00000FFFFFull}), "0-19,40-59");
  EXPECT_EQ(CpuListFromMask({1ull << 63, 1}), "63-64");
  EXPECT_EQ(CpuListFromMask({0x5}), "0,2");
}

TEST(TopologyTest, CpuListsAreValidated) {
  for (const char* good : {"0", "0-19,40-59", "3,5,7-9"}) {
    EXPECT_TRUE(ValidateCpuList(good).ok()) << good;
  }
  for (const char* bad : {"", "a", "1-0", "5,3", "0-3,2-4", "0-70000", "-1", "1,", ",1", "0--3"}) {
    EXPECT_FALSE(ValidateCpuList(bad).ok()) << bad;
  }
  EXPECT_FALSE(ValidateCpuList(std::string(kMaxCpuListBytes + 1, '1')).ok());
}

}  // namespace
}  // namespace prism::topo
