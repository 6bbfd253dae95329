#include "sim/report.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

RunResult Run(uint64_t seed, double at100, double at130) {
  RunResult r;
  r.seed = seed;
  r.pods = 100;
  r.seconds = 0.001;
  r.curve.assign(131, std::numeric_limits<double>::quiet_NaN());
  for (int x = 0; x <= 90; ++x) r.curve[x] = x;
  r.curve[100] = at100;
  r.curve[130] = at130;
  return r;
}

std::vector<Series> TwoPolicies() {
  return {Series{"default", "best-fit", {Run(42, 92, 93), Run(43, 93, 94)}},
          Series{"default", "fgd", {Run(42, 95, 96), Run(43, 95.5, 96.5)}}};
}

TEST(ReportTest, SeriesAggregatesOverSeeds) {
  Series s = TwoPolicies()[0];
  EXPECT_DOUBLE_EQ(s.MeanAt(100), 92.5);
  EXPECT_DOUBLE_EQ(s.MinAt(130), 93);
  EXPECT_DOUBLE_EQ(s.MaxAt(130), 94);
  EXPECT_TRUE(std::isnan(s.MeanAt(120)));
  EXPECT_DOUBLE_EQ(s.MicrosPerPod(), 10);
}

TEST(ReportTest, KnowsThePublishedFigures) {
  EXPECT_DOUBLE_EQ(*PublishedAllocation("default", "fgd", 100), 95.23);
  EXPECT_DOUBLE_EQ(*PublishedAllocation("gpushare100", "random", 130), 79.44);
  EXPECT_FALSE(PublishedAllocation("default", "fgd", 95).has_value());
  EXPECT_FALSE(PublishedAllocation("default", "prism", 100).has_value());
  EXPECT_EQ(PaperTraceVariants().size(), 17u);
}

TEST(ReportTest, TableShowsMeansAndThePaper) {
  const std::string t = FormatTable(TwoPolicies(), TableOptions{});
  EXPECT_THAT(t, HasSubstr("Trace default: 2 run(s) per policy (seeds 42-43)"));
  EXPECT_THAT(t, HasSubstr("fgd"));
  EXPECT_THAT(t, HasSubstr("95.25"));  // Mean at 100 %.
  EXPECT_THAT(t, HasSubstr("95.23"));  // Published.
  EXPECT_THAT(t, Not(HasSubstr("rejected")));
}

TEST(ReportTest, VariantTableComparesTheLastPolicyWithTheBestOther) {
  const std::string t = FormatVariantTable(TwoPolicies(), 100);
  // Unallocated 7.5 % (best-fit) -> 4.75 % (fgd): 36.7 % fewer.
  EXPECT_THAT(t, HasSubstr("-36.7 % (fewer)"));
}

TEST(ReportTest, CsvHasOneRowPerRunAndSampledPercent) {
  const std::string csv = FormatCsv(TwoPolicies(), false);
  EXPECT_THAT(csv, HasSubstr("policy,seed,arrived_pct,alloc_pct\n"));
  EXPECT_THAT(csv, HasSubstr("fgd,43,130,96.5000\n"));
  EXPECT_THAT(csv, Not(HasSubstr(",120,")));
  // 4 runs x (91 + 2) sampled points + header.
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4 * 93 + 1);
  EXPECT_THAT(FormatCsv(TwoPolicies(), true), HasSubstr("default,fgd,42,100,95.0000\n"));
}

TEST(ReportTest, SvgHasALinePerPolicyInEveryPanel) {
  const std::string svg = SvgPlot(TwoPolicies(), "Trace <default>");
  EXPECT_THAT(svg, HasSubstr("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_THAT(svg, HasSubstr("Trace &lt;default&gt;"));
  size_t lines = 0;
  for (size_t pos = 0; (pos = svg.find("<polyline", pos)) != std::string::npos; ++pos) ++lines;
  // Full range and saturated region; in the difference to fgd only fgd itself: best-fit,
  // 2.75 points below, is named off scale so that close lines keep their resolution.
  EXPECT_EQ(lines, 5u);
  EXPECT_THAT(svg, HasSubstr("difference to fgd"));
  EXPECT_THAT(svg, HasSubstr("off scale, at 100 %: best-fit -2.75"));
  // Runs without a waste breakdown (MIG) still get a bar: their unallocated GPU, in grey.
  EXPECT_THAT(svg, HasSubstr("fill=\"#999\""));
  EXPECT_THAT(svg, HasSubstr("unallocated, not broken down"));
  EXPECT_THAT(svg, HasSubstr(">best-fit</text>"));
  EXPECT_THAT(svg, HasSubstr("</svg>"));
}

// The ceiling rows: sampled at a few points, drawn dashed, in the CSV as policy "ceiling".
std::vector<Series> WithCeilingAndWaste() {
  std::vector<Series> series = TwoPolicies();
  for (Series& s : series) {
    for (RunResult& r : s.runs) {
      WasteBreakdown w;
      w.arrived_pct = 100;
      w.capacity_milli = 100000;
      w.unallocated_milli = s.policy == "fgd" ? 5000 : 8000;
      w.holes_milli = {3000, 1000, 0, 0};
      w.cpu_stranded_milli = w.unallocated_milli - 4000;
      w.failed = {{"1x810", 4, 3240}, {"1x470", 2, 940}};
      r.waste.push_back(w);
    }
  }
  Series ceiling{"default", "ceiling", {}};
  for (uint64_t seed : {42, 43}) {
    RunResult r;
    r.seed = seed;
    r.curve.assign(131, std::numeric_limits<double>::quiet_NaN());
    r.curve[100] = 97;
    r.curve[130] = 99.5;
    ceiling.runs.push_back(r);
  }
  series.push_back(ceiling);
  return series;
}

TEST(ReportTest, CeilingIsARowOfTheTableTheCsvAndADashedLine) {
  const std::vector<Series> series = WithCeilingAndWaste();
  EXPECT_TRUE(IsCeilingSeries(series.back()));
  EXPECT_FALSE(IsCeilingSeries(series.front()));
  const std::string table = FormatTable(series, {});
  EXPECT_THAT(table, HasSubstr("ceiling"));
  EXPECT_THAT(table, HasSubstr("97.00"));
  const std::string csv = FormatCsv(series, false);
  EXPECT_THAT(csv, HasSubstr("ceiling,42,100,97.0000\n"));
  EXPECT_THAT(csv, HasSubstr("ceiling,43,130,99.5000\n"));
  EXPECT_THAT(csv, Not(HasSubstr("ceiling,42,99,")));
  const std::string svg = SvgPlot(series, "t");
  EXPECT_THAT(svg, HasSubstr("stroke=\"#000000\" stroke-dasharray=\"7,4\""));
  EXPECT_THAT(svg, HasSubstr("ceiling (LP)"));
  EXPECT_THAT(svg, HasSubstr("stranded by CPU"));
}

TEST(ReportTest, WasteTableBreaksDownEveryPolicyBesideTheCeiling) {
  const std::string table = FormatWasteTable(WithCeilingAndWaste(), 100);
  EXPECT_THAT(table, HasSubstr("Where the unallocated GPU is at 100 % arrived, trace default"));
  // fgd: 5 GPUs unallocated, 3 in holes under 0.25, 1 CPU-stranded; 6 failed pods.
  EXPECT_THAT(table, HasSubstr("fgd               5.0      3.0     1.0       0.0     0.0     1.0"));
  EXPECT_THAT(table, HasSubstr("6 (1x810: 4, 3.2, 1x470: 2, 0.9)"));
  // The ceiling: 3 % of 100 GPUs cannot be allocated by any placement.
  EXPECT_THAT(table, HasSubstr("ceiling           3.0      unavoidable"));
  EXPECT_TRUE(FormatWasteTable(TwoPolicies(), 100).empty());
}

}  // namespace
}  // namespace prism::sim
