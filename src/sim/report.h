// src/sim/report.h: tables, CSV and SVG plots of simulator results.
//
// Pure string building (the CLI writes the files). A "series" is the runs of one
// policy on one trace (one run per seed); figures are means over its seeds.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/simulator.h"

namespace prism::sim {

struct Series {
  std::string trace;  // e.g. "default" or "gpushare40".
  std::string policy;
  std::vector<RunResult> runs;

  // Mean over the seeds of the allocation at `arrived_pct` (NaN if no run has it).
  double MeanAt(int arrived_pct) const;
  double MinAt(int arrived_pct) const;
  double MaxAt(int arrived_pct) const;
  std::vector<double> MeanCurve() const;
  double MeanChurn(double ChurnSummary::*field) const;
  // Mean wall time per pod, microseconds.
  double MicrosPerPod() const;
};

// The FGD paper's published means over seeds 42-51 (artifact
// analysis_allo_discrete.csv), for the trace variants it ran; nullopt if unknown.
// `policy` is one of random, best-fit, fgd.
std::optional<double> PublishedAllocation(std::string_view trace, std::string_view policy,
                                          int arrived_pct);
// The 17 trace variants of the paper, default first.
const std::vector<std::string>& PaperTraceVariants();

struct TableOptions {
  std::vector<int> arrived_pcts = {90, 95, 100, 110, 130};
  bool show_published = true;  // A "paper" column where a published value exists.
  bool show_mig = false;       // MIG operation counters.
};

// One table per trace: a row per policy.
std::string FormatTable(const std::vector<Series>& series, const TableOptions& options);
// The ceiling rows `prism sim` adds (policy "ceiling": the LP upper bound,
// "offline-packing": a placement that approaches it; ceiling.h) are series whose
// curves are sampled at a few points only.
bool IsCeilingSeries(const Series& series);
// Where the unallocated GPU is at `arrived_pct` (RunResult::waste; waste.h), a row
// per policy in GPUs, means over seeds, with the ceiling's unavoidable share.
std::string FormatWasteTable(const std::vector<Series>& series, int arrived_pct);
// Runs with departures: a row per policy and trace.
std::string FormatChurnTable(const std::vector<Series>& series, bool show_mig);
// Several traces: a row per trace, a column per policy, at `arrived_pct`, plus
// the published value and the reduction of unallocated GPU by the last policy
// against the best other one.
std::string FormatVariantTable(const std::vector<Series>& series, int arrived_pct);

// `policy,seed,arrived_pct,alloc_pct` (with a leading `trace` column when
// `with_trace`), one row per run and arrived percentage with a sample.
std::string FormatCsv(const std::vector<Series>& series, bool with_trace);
// Runs with departures: `policy,seed,window_pct,alloc_pct`.
std::string FormatChurnCsv(const std::vector<Series>& series, bool with_trace);

// Allocation vs arrived demand, one line per policy (mean over seeds): the full
// range and a zoom on the saturated region side by side. `series` share a trace.
std::string SvgPlot(const std::vector<Series>& series, std::string_view title);
// Allocation over the measurement window, one line per policy.
std::string SvgChurnPlot(const std::vector<Series>& series, std::string_view title);

}  // namespace prism::sim
