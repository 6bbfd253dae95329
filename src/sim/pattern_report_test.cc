#include "sim/pattern_report.h"

#include "gtest/gtest.h"

#include "sim/simulator.h"
#include "sim/test_util.h"

namespace prism::sim {
namespace {

using testing::Pod;
using testing::SmallCluster;

TEST(PatternReportTest, ShareCombinationListsLargestFirst) {
  EXPECT_EQ(ShareCombination({}), "idle");
  EXPECT_EQ(ShareCombination({190, 810}), "810+190");
  EXPECT_EQ(ShareCombination({250, 500, 250}), "500+250+250");
}

TEST(PatternReportTest, TalliesGpusAndNodeMixes) {
  const Cluster c = SmallCluster({2, 1, 0});
  const std::vector<PodRequest> pods = {Pod("a", 1, 810), Pod("b", 1, 190), Pod("c", 1, 1000),
                                        Pod("cpu", 0, 0), Pod("d", 2, 300)};
  // a and b share GPU 0 of node 0, c takes node 1's GPU; d is left out (not placed).
  const std::vector<std::pair<size_t, Placement>> placed = {
      {0, {0, {0}, {}}}, {1, {0, {0}, {}}}, {2, {1, {0}, {}}}, {3, {2, {}, {}}}};
  PatternTally tally;
  TallyPatterns(c, pods, placed, &tally);
  EXPECT_EQ(tally.runs, 1);
  EXPECT_EQ(tally.gpus["810+190"], 1);
  EXPECT_EQ(tally.gpus["idle"], 1);
  EXPECT_EQ(tally.gpus["1000"], 1);
  EXPECT_EQ(tally.nodes.size(), 2u);  // The node without GPUs is left out.
  EXPECT_EQ(tally.nodes["2xM0 64c: 1 810+190 | 1 idle"], 1);
  EXPECT_EQ(tally.nodes["1xM0 64c: 1 1000"], 1);
}

TEST(PatternReportTest, TableSortsByDifferenceAndAveragesRuns) {
  const Cluster c = SmallCluster({1, 1});
  const std::vector<PodRequest> pods = {Pod("a", 1, 500), Pod("b", 1, 500), Pod("c", 1, 1000)};
  PatternTally reference;  // Two runs of {500+500, 1000}.
  const std::vector<std::pair<size_t, Placement>> best = {
      {0, {0, {0}, {}}}, {1, {0, {0}, {}}}, {2, {1, {0}, {}}}};
  TallyPatterns(c, pods, best, &reference);
  TallyPatterns(c, pods, best, &reference);
  PatternTally online;  // One run that split the halves and left c out.
  TallyPatterns(c, pods,
                std::vector<std::pair<size_t, Placement>>{{0, {0, {0}, {}}}, {1, {1, {0}, {}}}},
                &online);
  PatternTally merged;
  MergePatternTally(online, &merged);
  EXPECT_EQ(merged.runs, 1);
  const std::string table = FormatPatternTable(reference, "offline", merged, "prism", 10);
  // Per run: offline 1 GPU 500+500, 1 GPU 1000; prism 2 GPUs 500: +2 first, then -1 each.
  const size_t half = table.find("500 ");
  const size_t pair = table.find("500+500");
  const size_t whole = table.find("\n1000 ");
  ASSERT_NE(half, std::string::npos) << table;
  ASSERT_NE(pair, std::string::npos) << table;
  ASSERT_NE(whole, std::string::npos) << table;
  EXPECT_LT(half, pair) << table;
  EXPECT_NE(table.find("+2.0"), std::string::npos) << table;
  EXPECT_NE(table.find("-1.0"), std::string::npos) << table;
  EXPECT_NE(table.find("1xM0 64c: 1 500"), std::string::npos) << table;
}

}  // namespace
}  // namespace prism::sim
