// src/sim/workload.h: the pod sequences a run replays.
//
// Inflated (the FGD paper's method, no departures):
//   1. the trace's pods, sorted by name, are shuffled with the seed;
//   2. while the total GPU request is below `tune` x cluster GPU capacity, pods
//      drawn uniformly (with replacement) from the trace are appended; above it,
//      random pods are removed until it is not;
//   3. nodes get a seeded random tie-break rank (the paper's simulator prefixes
//      node names with a random permutation and breaks score ties by the
//      lexicographically smallest name).
// Churn (departures): pods drawn from the trace arrive as a Poisson process whose
//   offered GPU load is `load` x capacity; each stays for its trace lifetime
//   (deletion_time - creation_time, capped at `max_lifetime`: the trace's
//   lifetimes are heavy-tailed, up to months, and a steady state needs the
//   arrivals to span several lifetimes) if placed and is lost if not. Arrivals
//   span `lifetimes` x max_lifetime; the first max_lifetime is warm-up. Or,
//   with `native_times`, the trace's own creation and deletion times are
//   replayed (they offer about 1 % of the trace cluster's GPUs).
// Pure and deterministic for a given seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "sim/cluster.h"
#include "sim/trace.h"

namespace prism::sim {

struct Event {
  double time = 0;  // Seconds.
  int pod = 0;      // Index into Workload::pods.
  bool arrival = true;
};

struct Workload {
  // The trace's pods as requests, sorted by name: the mix policies may learn
  // from (FGD's "typical pods").
  std::vector<PodRequest> trace_pods;
  // The pods of this run in arrival order.
  std::vector<PodRequest> pods;
  // Per node: rank for breaking score ties (0 = preferred); a permutation.
  std::vector<int> node_rank;
  // Runs with departures only: arrivals and departures in time order.
  // Departures of pods that were not placed are ignored.
  std::vector<Event> events;
  // Runs with departures: measurements start here (seconds).
  double warmup_end = 0;
  uint64_t seed = 0;

  bool has_departures() const { return !events.empty(); }
};

struct InflationOptions {
  uint64_t seed = 42;
  double tune = 1.3;  // Target total GPU request / cluster GPU capacity.
};

// The largest tune: the workload (and the memory it takes) grows with it, and past a few times
// the capacity every policy has long stopped placing pods.
inline constexpr double kMaxTune = 10.0;

// REQUIRES: trace_pods is not empty; 0 < options.tune <= kMaxTune.
Workload BuildInflatedWorkload(const Cluster& cluster, const std::vector<TracePod>& trace_pods,
                               const InflationOptions& options);

struct ChurnOptions {
  uint64_t seed = 42;
  // Offered load: mean GPU demand in the system / GPU capacity (Little's law).
  double load = 1.0;
  // Lifetimes are capped here (seconds).
  double max_lifetime = 7200;
  // Arrivals span this many max_lifetime; the first one is warm-up.
  double lifetimes = 4;
  // Skip pods the trace never scheduled (empty scheduled_time).
  bool skip_never_scheduled = true;
  // Replay the trace's own creation/deletion times instead (load is ignored).
  bool native_times = false;
};

// Errors: InvalidArgument if no pod has a usable lifetime.
absl::StatusOr<Workload> BuildChurnWorkload(const Cluster& cluster,
                                            const std::vector<TracePod>& trace_pods,
                                            const ChurnOptions& options);

}  // namespace prism::sim
