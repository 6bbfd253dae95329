// src/sim/pattern_report.h: which GPU share combinations and node mixes a placement ends with.
//
// The instrument of issue 35: the offline packing (pattern_packing.h), which comes within
// about 0.1 point of the optimum, against an online policy at the same arrived pods. For each
// software-shared GPU its *share combination*, the per-GPU shares of the pods on it from the
// largest ("810+190", "1000", "500+250+250"; "idle" for a GPU nothing uses), and for each
// node its *mix*, the node's kind and the combinations of its GPUs ("8xV100M32: 6 1000 |
// 2 810+190"). Counts are means over the runs tallied, so two tallies of the same seeds
// compare directly. CPU-only pods allocate no GPU and are left out; MIG GPUs are not
// tallied (their shares are instances, mig.md). Pure string building.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sim/cluster.h"

namespace prism::sim {

struct PatternTally {
  int runs = 0;
  // Summed over runs: GPUs per share combination, nodes per mix.
  std::map<std::string, int64_t, std::less<>> gpus;
  std::map<std::string, int64_t, std::less<>> nodes;
};

// The share combination of one GPU: its pods' shares from the largest, "+"-joined;
// "idle" without pods.
std::string ShareCombination(std::vector<int> shares);

// Adds one run's placement to `tally`: `placements` are (index into `pods`, where it went).
void TallyPatterns(const Cluster& cluster, std::span<const PodRequest> pods,
                   std::span<const std::pair<size_t, Placement>> placements, PatternTally* tally);

// Adds `from`'s runs and counts to `into`.
void MergePatternTally(const PatternTally& from, PatternTally* into);

// Two tables (GPU share combinations, then node mixes): a row per key, the mean count per
// run of `reference` (e.g. the offline packing) and of `online`, and their difference
// (online minus reference), sorted by its absolute value, at most `rows` rows each; the
// combinations also with the milli-GPU each leaves free.
std::string FormatPatternTable(const PatternTally& reference, std::string_view reference_name,
                               const PatternTally& online, std::string_view online_name, int rows);

}  // namespace prism::sim
