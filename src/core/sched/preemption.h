// src/core/sched/preemption.h: which lower-priority pods to evict from a node so that a pod
// fits there (docs/preemption.md).
//
// Pure: no I/O, no clock. Every trial runs on a scratch engine (MakeScratchEngine) whose node is
// put back exactly afterwards, so the live state is never changed. A set of victims is good only
// if the engine decides the pod fits once their GPU holdings are released (slices on their GPUs,
// MIG instances at their slots, CPU and memory): pods on the wrong GPU or the wrong MIG slots
// are never chosen, because freeing them does not make the pod fit.
// Thread-compatible: one caller per scratch engine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "core/sched/decision.h"
#include "core/sched/engine.h"
#include "core/sched/request.h"

namespace prism::sched {

// A pod that wants to preempt.
struct Preemptor {
  PodRequest pod;
  int32_t priority = 0;        // spec.priority (0 when absent).
  bool preempt_never = false;  // spec.preemptionPolicy: Never.
};

// A pod that could be evicted: charged in the engine under `key`.
struct PreemptionCandidate {
  std::string key;
  int32_t priority = 0;
};

struct PreemptionLimits {
  // Candidates searched per node: the first in (priority, GPU memory, GPU compute, key) order.
  int max_candidates = 32;
  // Trials (release a set, decide, restore) per node. 2048 covers every single and every pair
  // of 32 candidates (528 trials); past the budget the search settles (docs/preemption.md §3).
  int max_evaluations = 2048;
};

struct VictimChoice {
  int32_t node = -1;
  bool fits = false;  // A set of victims was found (possibly just the required ones).
  // When it fits: the victims' keys, by decreasing priority (then GPU taken, then key), as
  // kube-scheduler's pickOneNodeForPreemption expects; the required ones are included.
  std::vector<std::string> victims;
  Decision decision;                // Where the pod goes once they are gone.
  int64_t gpu_memory_freed_mib = 0;  // What the victims hold on GPUs.
  int32_t gpu_cores_freed = 0;       // Per-mille.
  int evaluations = 0;               // Trials run.
  // False when the budget cut the search: the set is minimal (none can be spared) but a smaller
  // one may exist.
  bool exhaustive = true;
  std::string reason;  // When it does not fit: why, for the node's failure message.
};

// A copy of `live`'s state for what-ifs (indexes off, same configuration and policy). Costs a
// copy of the cluster state: take one per preemption request, not per node.
Engine MakeScratchEngine(const Engine& live);

// The smallest set of `candidates` (plus `required`, evicted anyway) whose eviction lets
// `preemptor` fit on `node` of `scratch`, by fewest pods, then lowest highest priority, lowest
// sum of priorities, least GPU memory and compute taken. Candidates of equal or higher priority
// than the preemptor are never chosen. `scratch` is left as it was.
// InvalidArgument: a malformed pod, an unknown node, a candidate or required key that is
// unknown, charged on another node, listed twice, or (required) not of lower priority.
absl::StatusOr<VictimChoice> SelectVictims(Engine& scratch, const Preemptor& preemptor,
                                           int32_t node,
                                           const std::vector<PreemptionCandidate>& candidates,
                                           const std::vector<PreemptionCandidate>& required = {},
                                           const PreemptionLimits& limits = {});

}  // namespace prism::sched
