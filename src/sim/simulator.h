// src/sim/simulator.h: replays a workload against a cluster with one policy.
//
// Without departures (the FGD paper's method) pods are placed one by one; a pod
// that fits nowhere fails and is skipped. After every pod the simulator records
// the arrived GPU request and the allocated GPU (milli-GPU of the placed pods).
// The curve "allocation at x % arrived" is computed as the paper's analysis
// scripts do: the mean allocation over the pods whose arrived request rounds to
// x % of the cluster's GPU capacity (if none, the mean over x-1..x+1).
// With departures, arrivals and departures are replayed in time order and the
// result summarises the steady state (see ChurnSummary).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

#include "sim/cluster.h"
#include "sim/policy.h"
#include "sim/waste.h"
#include "sim/wiring.h"
#include "sim/workload.h"

namespace prism::sim {

struct RunOptions {
  MigMapping mig_mapping = MigMapping::kMemory;
  int max_arrived_pct = 130;  // Last point of the curve.
  // Runs without departures: where the unallocated GPU is (RunResult::waste) when the
  // arrived demand reaches each of these % of capacity (the state after the last pod
  // that keeps it at or below; the ceiling's prefix, ceiling.h).
  std::vector<int> waste_pcts;
  // With waste_pcts: also the placements of the pods placed by then (RunResult::placements;
  // `prism sim --patterns`, pattern_report.h).
  bool record_placements = false;
  // Judge the interconnect of every placed pod of two or more GPUs on a wired node
  // (RunResult::topology; `prism sim --topology`).
  bool topology_metrics = false;
  // Called about every 1 % of the pods (done, total); may be empty.
  std::function<void(int64_t, int64_t)> progress;
};

// Steady state of a run with departures, measured from Workload::warmup_end
// (20 % into the arrival span if unset) to the last arrival.
struct ChurnSummary {
  double mean_alloc_pct = 0;  // Time-averaged allocated GPU / capacity.
  double peak_alloc_pct = 0;
  double blocked_demand_pct = 0;  // GPU request of failed pods / arrived GPU request.
  int64_t blocked_pods = 0;       // In the window.
  int64_t window_arrivals = 0;
  // Allocation over time: 100 samples evenly spaced over the window.
  std::vector<double> alloc_over_time;
};

struct RunResult {
  std::string policy;
  uint64_t seed = 0;
  int64_t pods = 0;  // Arrivals.
  int64_t placed = 0;
  int64_t failed = 0;  // Fitted nowhere (or the policy's answer was rejected).
  int64_t arrived_gpu_milli = 0;
  int64_t failed_gpu_milli = 0;
  // Placements the cluster state rejected (a policy bug); 0 for a correct policy.
  int64_t rejected_placements = 0;
  std::string first_rejection;
  MigCounters mig;
  int64_t final_used_gpu_milli = 0;
  double seconds = 0;  // Wall time of the policy's decisions and their application.
  // Runs without departures: allocation % at arrived % 0..max (NaN: no sample).
  std::vector<double> curve;
  std::vector<WasteBreakdown> waste;  // One per RunOptions::waste_pcts.
  // RunOptions::record_placements: one per waste_pcts, (index into Workload::pods, where).
  std::vector<std::vector<std::pair<size_t, Placement>>> placements;
  // Runs with departures.
  ChurnSummary churn;
  // RunOptions::topology_metrics.
  TopologyStats topology;
};

// Errors: the policy's Begin() error.
absl::StatusOr<RunResult> Simulate(const Cluster& cluster, const Workload& workload, Policy& policy,
                                   const RunOptions& options = {});

// Python's round(): to the nearest integer, halves to even, of num / den (den > 0).
int64_t RoundHalfEven(int64_t num, int64_t den);

}  // namespace prism::sim
