// src/sim/topology_report.h: the table and CSV of `prism sim --topology` (RunResult::topology;
// sim/wiring.h). Pure string building.
#pragma once

#include <string>
#include <vector>

#include "sim/report.h"

namespace prism::sim {

// One table per trace, a row per policy: placed pods of >= 2 GPUs, the share on a set of the
// best tier their node offered (all, 2-, 4-, 8-GPU pods), the same against the best tier any
// node where the pod fit offered (TopologyStats::best_any), NUMA-split pods (all, and those a
// one-NUMA set was free for), and the allocated GPU at `arrived_pcts` as the main table has it.
// Shares pool the pods of every seed; allocation is the mean over seeds. Ceiling series are
// left out.
std::string FormatTopologyTable(const std::vector<Series>& series,
                                const std::vector<int>& arrived_pcts);

// `trace,policy,seed,gpus,placed,best_tier,numa_split,numa_split_avoidable,best_any`, one row per run
// and pod size (gpus "all" = every pod of >= 2 GPUs; "9+" = more than 8).
std::string FormatTopologyCsv(const std::vector<Series>& series);

}  // namespace prism::sim
