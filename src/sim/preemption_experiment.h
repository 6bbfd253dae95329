// src/sim/preemption_experiment.h: `prism sim --preemption` (docs/results/preemption.md).
//
// Priority tiers injected into a trace replayed past saturation: every pod is low priority
// except a seeded fraction of the GPU pods, high priority. Pods are placed one by one by Prism's
// engine (the `prism` policy); nothing departs. A high-priority pod that fits nowhere preempts,
// with the victims chosen by one of:
//   - prism: Prism's path B (docs/preemption.md §2): the resolvable split (every lower-priority
//     pod of a node released, does the pod fit?), then sched::SelectVictims on the resolvable
//     nodes, the node picked in pickOneNodeForPreemption's order;
//   - gpu-blind: kube-scheduler's DefaultPreemption with GPU as opaque node-level scalars
//     (nvidia.com/gpu count and GPU share summed over the node, as NodeResourcesFit sees
//     extended resources): SelectVictimsOnNode's remove-all-then-reprieve on those sums, the
//     same node pick; whether the preemptor then fits is Prism's engine's answer;
//   - none: no preemption (the baseline of pending high-priority pods).
// Victims are lost (not requeued). After a preemption the preemptor is scheduled again; if it
// still fits nowhere, the victims were wasted and it may preempt again (`max_attempts`).
//
// Pure and deterministic for a seed; no I/O. Thread-compatible.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "sim/cluster.h"
#include "sim/workload.h"

namespace prism::sim {

enum class PreemptionMode { kNone, kGpuBlind, kPrism };
std::string_view PreemptionModeName(PreemptionMode mode);  // "none", "gpu-blind", "prism".

struct PreemptionExperimentOptions {
  int32_t low_priority = 0;
  int32_t high_priority = 1000;
  // Preemptions one high-priority pod may trigger on arrival before it is left pending (a
  // GPU-blind preemption can free nothing usable; kube-scheduler would go on retrying).
  int max_attempts = 3;
  // Prism: release-all trials of the resolvable split per attempt and SelectVictims trials
  // per preemption (the extender's PreemptionOptions defaults).
  int filter_trials = 100;
  int64_t request_trials = 20000;
  // calculateNumCandidates (default_preemption.go) with DefaultPreemptionArgs' defaults.
  int min_candidate_nodes_percentage = 10;
  int min_candidate_nodes_absolute = 100;
  // GPU-blind: nvidia.com/gpu per GPU (HAMi's deviceSplitCount; the engine's split count).
  int64_t split_count = 100;
};

// Per pod of `workload.pods`: high priority for a `high_fraction` of the GPU pods, drawn with a
// generator seeded from `seed` (its own stream: the workload's draws are not disturbed); every
// other pod low. CPU-only pods are always low.
std::vector<int32_t> DrawPriorities(const Workload& workload, double high_fraction, uint64_t seed,
                                    const PreemptionExperimentOptions& options = {});

// --- The GPU-blind view: GPU as node-level scalar resources.

struct ScalarResources {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int64_t gpus = 0;       // nvidia.com/gpu.
  int64_t gpu_milli = 0;  // GPU share over all the node's GPUs (GPU memory on a one-model node).
};
ScalarResources ScalarRequest(const PodRequest& pod);
ScalarResources ScalarAllocatable(const NodeSpec& node, int64_t split_count);

struct ScalarPod {
  int32_t priority = 0;
  int64_t start = 0;  // When it was placed: earlier is "more important" at equal priority.
  ScalarResources request;
};

// SelectVictimsOnNode (pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go)
// when the only filter is NodeResourcesFit on scalars: every pod of lower priority removed; if
// the preemptor then fits, they are reprieved most important first (util.MoreImportantPod:
// higher priority, then earlier start) while it still fits. Returns the victims (indexes into
// `pods`, most important first; empty when it fits without any), or nullopt when no pod has
// lower priority or it does not fit with all of them gone.
std::optional<std::vector<int>> GpuBlindVictims(const ScalarResources& allocatable,
                                                const std::vector<ScalarPod>& pods,
                                                const ScalarPod& preemptor);

// A candidate node's victims, for the node pick.
struct VictimSummary {
  std::vector<int32_t> priorities;
  std::vector<int64_t> starts;  // Same order.
};

// pickOneNodeForPreemption (pkg/scheduler/framework/preemption/preemption.go) without PDBs:
// lowest highest victim priority, lowest sum of priorities (each + 2^31), fewest victims, latest
// earliest start among the highest-priority victims, then the first. Returns an index.
// REQUIRES: `candidates` is not empty and each has at least one victim.
size_t PickOneNodeForPreemption(const std::vector<VictimSummary>& candidates);

// calculateNumCandidates: nodes * percentage / 100, at least `absolute`, at most `nodes`.
int64_t NumCandidates(int64_t nodes, const PreemptionExperimentOptions& options);

// --- One run.

// A preemptor by its request: 0 a share of one GPU, 1 one whole GPU, 2 several GPUs.
int PreemptorKind(const PodRequest& pod);

struct PreemptionRunResult {
  std::string mode;
  uint64_t seed = 0;
  int64_t pods = 0;           // Arrivals.
  int64_t high_pods = 0;      // High-priority arrivals.
  int64_t high_unplaced = 0;  // ...that fit nowhere on arrival.
  int64_t preemptions = 0;    // Preemptions carried out (victims evicted).
  int64_t succeeded = 0;      // ...after which the preemptor was placed.
  int64_t high_pending = 0;   // High-priority pods never placed.
  std::vector<int> victims_per_preemption;
  // By the preemptor's request (PreemptorKind): preemptions, and those after which it still
  // did not fit.
  std::array<int64_t, 3> preemptions_by_kind{};
  std::array<int64_t, 3> failed_by_kind{};
  int64_t victims = 0;
  int64_t victim_gpu_milli = 0;  // GPU share the victims held.
  int64_t wasted_victims = 0;    // Victims of preemptions after which the pod still did not fit.
  int64_t wasted_gpu_milli = 0;
  int64_t search_trials = 0;  // Prism: engine trials (split and victim search).
  int64_t final_used_gpu_milli = 0;
  int64_t capacity_gpu_milli = 0;
  double seconds = 0;
};

// Replays `workload` (no departures) with `priorities` (one per pod). InvalidArgument: a MIG
// cluster (the GPU-blind view of MIG resources is not modelled), a workload with departures,
// `priorities` of the wrong size; errors of the engine.
absl::StatusOr<PreemptionRunResult> RunPreemptionExperiment(
    const Cluster& cluster, const Workload& workload, const std::vector<int32_t>& priorities,
    PreemptionMode mode, const PreemptionExperimentOptions& options = {});

// The table of docs/results/preemption.md: one column per mode (in order of appearance), mean
// ± standard deviation over the runs (seeds) of each.
std::string FormatPreemptionTable(const std::vector<PreemptionRunResult>& runs);
// One row per run.
std::string FormatPreemptionCsv(const std::vector<PreemptionRunResult>& runs);

}  // namespace prism::sim
