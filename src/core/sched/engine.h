// src/core/sched/engine.h: the placement engine.
//
// Pure and deterministic: no I/O, no clock, no threads; equal inputs give
// equal decisions. Thread-compatible: one caller at a time.
//
// Three callers, one API:
//   - `prism plan` and the simulator: Place() (= Schedule() + Apply()) pod
//     after pod, Release() on departure;
//   - the scheduler extender: Filter() over kube-scheduler's candidate nodes
//     (per-node reasons), Scores() for Prioritize (0..10), Decide() + Apply()
//     at Bind, Release() when the pod ends.
//
// Speed. Evaluating one pod on one node (the within-node device choice,
// MIG placement search and fragmentation score) costs microseconds. The
// engine keeps, per distinct pod shape (PodRequest::ShapeKey()), the score
// of every node in a max-segment-tree; a node is re-scored only when it
// changed since the index last looked (ClusterState's change log), so a
// decision costs O(nodes changed + log nodes) once the shape was seen.
// Scores depend only on the node's own state and the pod, which is what
// makes the cache exact: tests check indexed and unindexed engines agree.
// It also means nodes in the same state (ClusterState::SameNodeState: a few
// machine types, many empty or full) score alike, so a shape's first
// decision scores each distinct state once and copies the rest.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "core/sched/cluster.h"
#include "core/sched/decision.h"
#include "core/sched/device_config.h"
#include "core/sched/policy.h"
#include "core/sched/request.h"

namespace prism::sched {

struct EngineOptions {
  PolicyOptions policy;
  bool use_indexes = true;   // false: score every node on every call (reference path).
  size_t max_indexes = 256;  // Shape indexes kept, least recently used evicted.
  // Bounded staleness: MaintainIndexes() catches up every shape index that lags the cluster
  // by more than this many changes, so a decision that follows catches up at most about this
  // many (plus what changed since). Decisions are the same either way; only where the work is
  // done moves.
  uint64_t max_index_backlog = 8;
};

struct NodeVerdict {
  int32_t node = -1;
  bool feasible = false;
  double score = 0;     // Policy score when feasible (higher is better).
  NodeFailure failure;  // When not feasible.
};

struct ScheduleResult {
  absl::Status status;  // InvalidArgument for a malformed request; OK otherwise.
  bool scheduled = false;
  Decision decision;  // When scheduled.
  // When not scheduled (and explained): why each node was rejected, by node.
  std::vector<std::pair<int32_t, NodeFailure>> failures;
  int32_t nodes_considered = 0;

  // Kubernetes style: "0/3 nodes are available: 2 Insufficient cpu, 1 ...".
  std::string Summary() const;
};

class Engine {
 public:
  Engine(ClusterState cluster, DeviceConfig config, EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  const ClusterState& cluster() const;
  const DeviceConfig& config() const;
  const EngineOptions& options() const;
  // Changing the policy or the workload drops every cached score.
  void SetPolicy(const PolicyOptions& policy);
  // The workload fragmentation is measured against (fgd, prism). Empty: every
  // change scores alike, so the first node by name that fits wins.
  void SetTargetWorkload(TargetWorkload workload);
  const TargetWorkload& target_workload() const;
  // The same switch without a cliff: decisions keep the current workload (and its indexes)
  // while MaintainIndexes builds, for `workload`, every shape indexed or prepared now (and any
  // shape first decided meanwhile); when the last is built, `workload` takes over with them.
  // PrepareIndex prepares for `workload` meanwhile. Staging again replaces what is staged;
  // SetPolicy and SetTargetWorkload drop it. Without indexes, the same as SetTargetWorkload.
  void StageTargetWorkload(TargetWorkload workload);
  // Takes the staged workload now, with the indexes built for it so far (the others stay
  // prepared). False when nothing is staged.
  bool CommitStagedWorkload();
  // The staged workload; null when none.
  const TargetWorkload* staged_target_workload() const;

  // Checks a request for values no pod can mean (negative, absurd, unknown
  // policy names). InvalidArgument naming the field.
  absl::Status Validate(const PodRequest& pod) const;

  // Best node among all nodes. With `explain`, an unschedulable result lists
  // each node's reason (costs a full scan; the simulator passes false).
  ScheduleResult Schedule(const PodRequest& pod, bool explain = true);
  // Best node among `nodes` (node ids; e.g. kube-scheduler's candidates).
  ScheduleResult ScheduleAmong(const PodRequest& pod, const std::vector<int32_t>& nodes,
                               bool explain = true);
  // Schedule() and, when scheduled, Apply() under pod.Key().
  ScheduleResult Place(const PodRequest& pod, bool explain = true);

  // Per-node verdicts for `nodes`, in the same order. InvalidArgument for a
  // malformed request or an unknown node id.
  absl::StatusOr<std::vector<NodeVerdict>> Filter(const PodRequest& pod,
                                                  const std::vector<int32_t>& nodes);
  // Extender Prioritize: 0..10 per verdict (min-max over the feasible ones;
  // 0 for infeasible; all 10 when every feasible score is equal).
  static std::vector<int> NormalizedScores(const std::vector<NodeVerdict>& verdicts);
  // The devices `pod` gets on `node`. ResourceExhausted with the node's
  // reason when it does not fit.
  absl::StatusOr<Decision> Decide(const PodRequest& pod, int32_t node);

  absl::Status Apply(std::string_view key, const Decision& decision);
  absl::Status Release(std::string_view key);
  // What-if support (ClusterState::SaveNode / RestoreNode): a node's usage and pods now, and
  // putting them back exactly. The restore is a change like any other (indexes catch up).
  ClusterState::NodeSnapshot SaveNode(int32_t node) const;
  absl::Status RestoreNode(const ClusterState::NodeSnapshot& snapshot);

  // Node by node (ClusterState::UpsertNode / RemoveNode with this engine's configuration).
  // Only the changed node is re-scored: the shape indexes catch up from the change log. The
  // keys returned are the pods that were charged on the node and are not any more.
  absl::StatusOr<std::vector<std::string>> UpsertNode(const NodeSpec& spec);
  std::vector<std::string> RemoveNode(std::string_view name);

  // Fragmentation (in GPUs) of one node / the whole cluster under the target workload.
  double NodeFragmentation(int32_t node);
  double ClusterFragmentation();
  // Bytes held by the shape indexes and caches (for reports).
  size_t CacheMemoryBytes() const;
  size_t index_count() const;
  // Since construction: nodes the shape indexes scored, and nodes whose score they took from
  // a twin node in the same state instead (ClusterState::SameNodeState). For benchmarks and
  // tests.
  struct IndexCounts {
    uint64_t nodes_scored = 0;
    uint64_t scores_copied = 0;
  };
  IndexCounts index_counts() const;

  // Index maintenance off the decision path (the caller picks when: after a bind, on a timer):
  // catches up the shape indexes that lag by more than EngineOptions::max_index_backlog
  // changes, spending at most `max_evaluations` node scorings (a score lent by a twin node
  // counts an eighth of one). Returns the scorings spent, rounded up (0: nothing lagged, or
  // indexes are off). Never changes a decision, but may complete a staged
  // workload switch (StageTargetWorkload), which does.
  int64_t MaintainIndexes(int64_t max_evaluations);

  // Registers `pod`'s shape for an index built ahead of its first decision (e.g. the shapes of
  // running and pending pods after a restart): MaintainIndexes() builds it a budget at a time
  // after catching up the others, and a decision that comes first finishes it. Never evicts an
  // index (with max_indexes reached it does nothing) and never changes a decision. Returns
  // whether a build was registered; InvalidArgument for a malformed request. Dropped, like
  // every index, by SetPolicy and SetTargetWorkload.
  absl::StatusOr<bool> PrepareIndex(const PodRequest& pod);
  // Prepared builds not finished yet (a staged workload's included).
  size_t pending_index_builds() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::sched
