// src/extender/cache.h: the scheduler extender's view of the cluster: nodes' GPUs (from the node
// agent's inventory annotations), every GPU pod's decision (from pod annotations), and the
// placement engine over them.
//
// Allocation without a node lock (docs/allocation-protocol.md) rests on this cache: a decision is
// charged the moment it is made (Filter "assumes" the pod on its best node; Bind charges the
// node kube-scheduler chose before the Binding is even sent), and stays charged while the pod is
// bound, so any number of pods may be between bind and the kubelet's Allocate on one node without
// a GPU ever being overcommitted. The Binding carries the decision annotations, so a restarted
// extender rebuilds exactly this state from the pods (UpsertPod of every listed pod).
//
// Pod entries move through:
//   assumed   charged by Filter on the best node; expires after `assume_ttl` (kube-scheduler may
//             pick another node, or never bind)
//   binding   charged by BeginBind; the Binding is in flight
//   bound     the Binding succeeded, or the informer shows the pod bound with a decision
//   uncertain the Binding's outcome is unknown (timeout, dropped connection): still charged until
//             the informer or a read of the pod says which (ExpiredUncertain())
// A bound pod's charge ends when it is deleted, reaches Succeeded/Failed, or the node agent
// reports that every GPU container of it failed to get its devices (prism.io/allocation-status).
// A decision that no longer applies (its GPU vanished, a MIG instance in its place is in use by
// something else) leaves the pod uncharged with a `problem`, retried on every rebuild; after
// `problem_grace` it is listed by Problems() so the scheduler can requeue it.
//
// A node change is applied to the engine in place (Engine::UpsertNode): only that node is
// re-scored, and only its pods are charged again from their annotations. A configuration change
// (or many slots left by removed nodes) marks the cache dirty instead; the next verb (or Tick())
// rebuilds the engine from the nodes and re-charges every bound pod.
//
// Thread-safe: one mutex; verbs and informer events serialize on it, but no call does I/O.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

#include "config/pod_request.h"
#include "core/sched/decision.h"
#include "core/sched/device_config.h"
#include "core/sched/engine.h"
#include "core/sched/preemption.h"
#include "extender/wire.h"
#include "k8s/clock.h"

namespace prism::extender {

struct CacheOptions {
  sched::EngineOptions engine;
  absl::Duration assume_ttl = absl::Seconds(30);
  absl::Duration uncertain_ttl = absl::Seconds(10);
  absl::Duration problem_grace = absl::Seconds(30);
  // Rebuilds after node changes happen at most this often (a rebuild costs O(nodes + pods); MIG
  // nodes re-publish their inventory as instances come and go). Pods are charged at once either
  // way; what waits is a node's new inventory. 0: rebuild before the next call.
  absl::Duration min_rebuild_interval = absl::ZeroDuration();
  // How often Tick() re-derives the target workload (the shapes fragmentation is scored
  // against) from the charged pods. It is replaced only when the mix moved, and then staged
  // (Engine::StageTargetWorkload): Filters keep the old one, and its indexes, while Tick()
  // builds the indexes for the new one. 0: only at rebuilds.
  absl::Duration workload_refresh_interval = absl::Minutes(1);
  // A staged workload not built by then is taken at the next refresh all the same (the indexes
  // it lacks are then built as prepared ones), so that the workload is never staler than this.
  absl::Duration workload_switch_timeout = absl::Minutes(5);
  // Node scorings Tick() may spend catching up the engine's shape indexes that lag by more than
  // engine.max_index_backlog changes (Engine::MaintainIndexes), so that the next Filter of a
  // shape not used for a while does not pay for every change since, and then building the
  // indexes prepared ahead of their first Filter (the running pods' shapes after a restart, a
  // pending pod's). 1-3 µs each, under the cache lock: the default bounds one hold to about a
  // millisecond. 0: off.
  int64_t index_maintenance_per_tick = 500;
  // While that budget is used up (more to catch up or build), Tick() goes on for up to this many
  // rounds of it in all, taking the lock anew for each, so that Filters get in between: after a
  // restart of a 5,000-node cluster with 90 running shapes (450,000 scorings) the indexes are
  // built in about 45 s at 2,000 scorings a tick, five ticks a second.
  int index_maintenance_rounds_per_tick = 4;
  const k8s::Clock* clock = k8s::RealClock::Get();
};

// The engine options the extender uses by default: kube-scheduler scores CPU and host memory with
// every pod in view, so the engine's partial view of them (GPU pods only) does not score.
sched::EngineOptions DefaultEngineOptions();

// Node names are views of the names passed to Filter (valid while those are), so that a call
// over thousands of candidates copies none; each distinct failure text is kept once.
struct FilterOutcome {
  absl::Status request_status;  // Not OK: the pod's GPU request is invalid (every node failed).
  bool wants_gpu = false;
  std::vector<std::string_view> feasible;  // In request order.
  struct FailedNode {
    std::string_view node;
    uint32_t reason = 0;  // Index into `reasons`.
  };
  std::vector<FailedNode> failed;  // In request order.
  std::vector<std::string> reasons;
  std::map<sched::Reason, int> reason_counts;  // Over the failed nodes with engine reasons.
  int nodes_without_inventory = 0;
  std::string assumed_node;  // Where the pod is now assumed ("" if nowhere).
  // The reason `node` failed ("" if it did not).
  std::string Reason(std::string_view node) const;
  // "0/3 nodes are available: 2 CardInsufficientMemory, 1 node has no GPU inventory".
  std::string Summary(size_t candidates) const;
};

// A preemption Prism would make (SchedulerCache::PlanPreemption): the node, and the victims by
// decreasing priority.
struct PreemptionPlan {
  std::string node;
  struct Victim {
    std::string namespace_name;
    std::string name;
    std::string uid;
    int32_t priority = 0;
  };
  std::vector<Victim> victims;
  // Lower-priority preemptors holding GPUs on the node (reservations, not yet bound) whose holds
  // the plan takes: Reserve ends them (keys), as upstream clears their nominations.
  std::vector<std::string> yielded;
  std::string gpus;  // Where the preemptor goes once they are gone ("GPU-1 (10240 MiB)").
  int64_t gpu_memory_freed_mib = 0;
  int nodes_searched = 0;
  int evaluations = 0;
};

struct BindTicket {
  std::string key;  // namespace/name
  std::string uid;
  std::string node;
  std::map<std::string, std::string> annotations;  // Decision annotations for the Binding.
  uint64_t seq = 0;
  bool charged = false;
};

enum class BindOutcome { kBound, kFailed, kUncertain };

// A ResourceClaim's allocation of Prism's devices, charged like a bound pod's decision for as
// long as the claim stays allocated (docs/dra-design.md §2.4, "State and restart"): `request` is
// config::DraClaimRequest of the claim, `annotations` the decision its allocation's marker
// carries ({"prism.io/decision": ...}).
struct DraClaimCharge {
  std::string namespace_name;
  std::string claim;
  std::string uid;
  std::string node;
  sched::PodRequest request;
  std::map<std::string, std::string> annotations;
};

// Where AllocateDra placed a pod: the node and the claims it charged there.
struct DraPlacement {
  std::string node;
  std::vector<std::string> claims;
};

struct PodRef {
  std::string namespace_name;
  std::string name;
  std::string uid;
  std::string node;
  std::map<std::string, std::string> annotations;  // What the Binding carried.
};

struct PodProblem {
  PodRef pod;
  std::string problem;
  absl::Time since;
};

struct InstanceSnapshot {
  std::string profile;
  int start = 0;
  int size = 0;
  std::string state;  // "idle", "in-use" (untracked), "assigned".
};

struct GpuSnapshot {
  std::string node;
  std::string uuid;
  int index = 0;
  std::string type;
  std::string mode;
  bool healthy = true;
  int64_t memory_total_mib = 0;
  int64_t memory_used_mib = 0;
  int32_t cores_total_permille = 0;
  int32_t cores_used_permille = 0;
  int tasks = 0;
  int split_count = 0;
  std::vector<InstanceSnapshot> instances;
};

// The GPUs of `state` as /metrics and `prism status` show them (dead slots left by changed nodes
// are skipped).
std::vector<GpuSnapshot> SnapshotGpus(const sched::ClusterState& state);

// Everything the cache decides with, copied out so that another engine can be built from it
// (extender/status.h) without touching, or holding the lock of, the live one. Node specs and
// decisions are in the engine's input form, not its ids: a state rebuilt from `nodes` numbers
// GPUs afresh, so each decision travels as its annotations and is decoded against the new state
// with the reader a restarted extender uses.
struct CacheSnapshot {
  sched::DeviceConfig config;
  sched::EngineOptions engine_options;
  // Nodes the engine holds, by name, as it got them: instances that a tracked decision claims
  // are idle (their pods take them again when charged).
  std::vector<sched::NodeSpec> nodes;
  struct ChargedPod {
    std::string key;    // namespace/name
    std::string state;  // assumed, binding, bound, uncertain
    sched::PodRequest request;
    // The charged decision (config::EncodeDecisionAnnotations of what the engine holds).
    std::map<std::string, std::string> annotations;
  };
  // In the order the cache first saw them (the order it charges them in).
  std::vector<ChargedPod> pods;
  // The shapes fragmentation is scored against now.
  sched::TargetWorkload workload;
  // Nodes whose inventory is unusable (malformed, or rejected by the engine), with the reason;
  // by name. Their GPUs are in no other field.
  std::vector<std::pair<std::string, std::string>> node_problems;
  int nodes_without_inventory = 0;
  struct PodIssue {
    PodRef pod;
    std::string state;    // "problem" or "allocation-failed"
    std::string problem;  // Why (empty for allocation-failed).
    // A problem of a pod whose earlier, readable decision stays charged (an edit broke it).
    bool charged = false;
  };
  // Bound pods whose decision the cache cannot charge, or whose node agent reported that every
  // GPU container failed (nothing charged), listed at once (Problems() waits for
  // `problem_grace`); by key.
  std::vector<PodIssue> pod_issues;
};

struct CacheStats {
  int nodes_with_gpus = 0;
  int nodes_without_inventory = 0;
  int nodes_invalid = 0;
  std::map<std::string, int> pods_by_state;  // assumed, binding, bound, uncertain, problem.
  // Allocated ResourceClaims of Prism's devices: charged, or problem (not charged).
  std::map<std::string, int> dra_claims_by_state;
  int64_t rebuilds = 0;
  int64_t node_updates = 0;  // Node changes applied in place.
  int64_t workload_refreshes = 0;          // New target workloads staged.
  int64_t workload_switches_forced = 0;    // Of those, taken at workload_switch_timeout unbuilt.
  int64_t index_maintenance_scorings = 0;  // Spent by Tick() on lagging shape indexes.
  int64_t indexes_prepared = 0;            // Shape indexes registered ahead of their first Filter.
  int pending_index_builds = 0;            // Of those, not built yet.
  double last_node_update_seconds = 0;
  int64_t assumptions_expired = 0;
  int64_t decode_failures = 0;
  int64_t allocation_failures_released = 0;
  double last_rebuild_seconds = 0;
  uint64_t generation = 0;
};

class SchedulerCache {
 public:
  explicit SchedulerCache(sched::DeviceConfig config, CacheOptions options = {});
  ~SchedulerCache();
  SchedulerCache(const SchedulerCache&) = delete;
  SchedulerCache& operator=(const SchedulerCache&) = delete;

  // --- Informer feed -----------------------------------------------------------------------
  void UpsertNode(const Json& node);
  void DeleteNode(std::string_view name);
  void UpsertPod(const Json& pod);
  void DeletePod(const Json& pod);
  // Replaces the device configuration (hot reload); the next verb rebuilds.
  void SetDeviceConfig(sched::DeviceConfig config);
  sched::DeviceConfig device_config() const;

  // --- Extender verbs ----------------------------------------------------------------------
  // With `assume`, the pod is assumed on its best node (FilterOutcome::assumed_node).
  FilterOutcome Filter(const config::PodManifest& pod, absl::Span<const std::string_view> nodes,
                       bool assume = true);
  // 0..10 per node: the node Filter assumed the pod on gets 10, the others 0..9 by the engine's
  // score, so kube-scheduler (with a large enough extender weight) binds where Filter assumed.
  // Each HostPriority views its name in `nodes`.
  std::vector<HostPriority> Prioritize(const config::PodManifest& pod,
                                       absl::Span<const std::string_view> nodes);
  // Charges the pod's decision on `node` and returns the annotations the Binding must carry.
  // FailedPrecondition for a node without usable GPUs or a pod already bound / binding;
  // ResourceExhausted (with the node's reasons) when the pod no longer fits there;
  // InvalidArgument for an invalid request.
  absl::StatusOr<BindTicket> BeginBind(const config::PodManifest& pod, const std::string& node);
  void FinishBind(const BindTicket& ticket, BindOutcome outcome);

  // --- Preemption (cache_preemption.cc, docs/preemption.md) ---------------------------------
  // For each node kube-scheduler proposed, the victims (UIDs) that let `pod` fit there: the
  // proposed ones (the in-tree filters need them gone) plus the fewest lower-priority GPU pods
  // Prism holds on the node whose release lets the engine place the pod; a node where no such set
  // exists, or where the pod fits with no victim, is dropped. A proposed UID Prism does not hold
  // is passed through; a node Prism does not know is passed through unchanged. Trials are bounded
  // per node (sched::PreemptionLimits) and per request (`request_trials`). Nothing changes.
  // InvalidArgument: an invalid pod request, a proposed victim Prism holds on another node or
  // whose priority is not below `priority`.
  // With `hold` > 0 the answer is remembered for that long: when kube-scheduler then nominates
  // the pod to one of the answered nodes (status.nominatedNodeName, seen by UpsertPod), the
  // pod reserves that node as Reserve does, waiting for the victims Prism holds there.
  absl::StatusOr<std::vector<NodeVictims>> Preempt(const config::PodManifest& pod,
                                                   int32_t priority, bool preempt_never,
                                                   const std::vector<NodeVictims>& proposed,
                                                   int64_t request_trials = 20000,
                                                   absl::Duration hold = absl::ZeroDuration());
  // Filter's resolvable/unresolvable split (docs/preemption.md §2): of `failed` (nodes where the
  // pod did not fit), those where evicting every lower-priority pod Prism holds there lets the
  // engine place it. One trial per node (release them all, decide, put the node back exactly:
  // Engine::SaveNode / RestoreNode on the live engine, under the lock), at most `max_trials`
  // trials per call from a rotating offset; nodes past the budget are left out (unresolvable this
  // time, looked at first next time). Empty for preemptionPolicy: Never or an invalid request.
  // `notes`, when given, gets the failed nodes where preemption cannot help and why (one of the
  // kPreemption* texts below; a node without one: its own GPUs refuse the pod, or no trial).
  using FailedNodeNotes = std::vector<std::pair<std::string_view, std::string_view>>;
  std::vector<std::string_view> ResolvableNodes(const config::PodManifest& pod, int32_t priority,
                                                bool preempt_never,
                                                absl::Span<const std::string_view> failed,
                                                int max_trials = 100,
                                                FailedNodeNotes* notes = nullptr);
  // Path B (docs/preemption.md §2): where Prism would evict for `pod`. SelectVictims (on a copy
  // of the engine) over `nodes`, at most min(n, max(n * `min_percentage` / 100,
  // `min_absolute`)) of them (calculateNumCandidates; kube-scheduler's defaults 10 and 100) from a
  // rotating offset, trials bounded per node and by `request_trials`; the node picked in
  // pickOneNodeForPreemption's order (no PDB violations counted: Prism reads no PDBs; lowest
  // highest victim priority, lowest sum of priorities, fewest victims, then request order).
  // Victims exclude pods another reservation is already evicting. nullopt when no node helps.
  // InvalidArgument: invalid request.
  absl::StatusOr<std::optional<PreemptionPlan>> PlanPreemption(
      const config::PodManifest& pod, int32_t priority, bool preempt_never,
      const std::vector<std::string>& nodes, int64_t request_trials = 20000,
      int min_percentage = 10, int min_absolute = 100);
  // Reserves `plan`'s node for the preemptor until `deadline` (nominated pod, §2): once every
  // victim's charge is gone the preemptor's decision there is charged as its assumption, before
  // any other decision is made, so a lower-priority pod cannot take the freed GPU; the
  // preemptor's next Filter takes it. Ends when the preemptor is filtered again or bound
  // (the reservation became its assumption), deleted (DropReservation), at `deadline`, or when
  // it no longer fits there once the victims are gone (lapsed).
  void Reserve(const config::PodManifest& pod, int32_t priority, const PreemptionPlan& plan,
               absl::Time deadline);
  void DropReservation(std::string_view key, std::string_view uid);
  // Whether the pod (by UID) holds a reservation, charged or waiting for its victims.
  bool HasReservation(std::string_view key, std::string_view uid) const;
  // Reservations made from kube-scheduler's nomination after a Preempt answer (path A).
  int64_t reservations_nominated() const;
  // A nominated reservation (path A) whose victims are gone: its GPUs are now held for the pod,
  // which the scheduler tells it in an Event (path B's runner says so when it evicts).
  struct HeldNotice {
    std::string namespace_name;
    std::string name;
    std::string uid;
    std::string node;
    std::string gpus;  // "GPU-1 (10240 MiB)", as PreemptionPlan::gpus.
  };
  // The notices since the last call, oldest first (at most kMaxHeldNotices kept).
  std::vector<HeldNotice> TakeHeldNotices();
  // Reservations ended because the preemptor no longer fit once its victims were gone.
  int64_t reservations_lapsed() const;

  // --- DRA (cache_dra.cc) -------------------------------------------------------------------
  // Charges a claim's allocation (again, if it changed); a charge that no longer fits is a
  // problem the claim keeps (DraClaimProblem) until a rebuild finds room, as a pod's would.
  void ChargeDraClaim(DraClaimCharge charge);
  void ReleaseDraClaim(std::string_view namespace_name, std::string_view claim);
  // Why a claim's allocation is not charged ("" when it is, or is not known).
  std::string DraClaimProblem(std::string_view namespace_name, std::string_view claim);
  // Places `request` (the pod's own containers plus its unallocated Prism claims,
  // config::BuildDraPodRequest) on the best of `nodes` (all nodes when empty); `build` turns the
  // decision into the claims' charges (config::BuildDraAllocations), which are charged before
  // the lock is released, so no other decision can take the same devices. ResourceExhausted
  // with the engine's summary when no node fits; `build`'s error (nothing charged) otherwise.
  absl::StatusOr<DraPlacement> AllocateDra(
      const sched::PodRequest& request, const std::vector<std::string>& nodes,
      const std::function<absl::StatusOr<std::vector<DraClaimCharge>>(
          const sched::Decision&, const sched::ClusterState&)>& build);

  // --- Maintenance -------------------------------------------------------------------------
  // Drops expired assumptions and rebuilds if something changed.
  void Tick();
  // Binds whose outcome is still unknown after `uncertain_ttl`; the caller reads each pod and
  // calls ResolveUncertain.
  std::vector<PodRef> ExpiredUncertain();
  // `bound`: the pod is bound to the ticket's node with the ticket's annotations.
  void ResolveUncertain(const PodRef& pod, bool bound);
  // Pods whose decision could not be charged for longer than `problem_grace`.
  std::vector<PodProblem> Problems();
  // Forgets a pod (after the scheduler requeued it by deleting it).
  void Forget(std::string_view key, std::string_view uid);

  // --- Observability -----------------------------------------------------------------------
  std::vector<GpuSnapshot> GpuSnapshots();
  // A copy of the cache's state (CacheSnapshot). Rebuilds first if a rebuild is due, as every
  // verb does; otherwise changes nothing.
  CacheSnapshot Snapshot();
  CacheStats stats();
  // Rebuilds now if anything changed (tests and benchmarks).
  void RebuildIfDirty();
  // What the engine holds for `key` (tests), or nullopt.
  std::optional<sched::Decision> ChargedDecision(std::string_view key) const;
  std::string EntryState(std::string_view key) const;

 private:
  enum class State { kAssumed, kBinding, kBound, kUncertain };
  struct NodeEntry {
    std::optional<sched::NodeSpec> spec;  // nullopt: no inventory.
    std::string error;      // Not empty: malformed annotation or rejected by the engine.
    bool rejected = false;  // `error` came from the engine (retried after a config change).
    std::string fingerprint;
  };
  struct PodEntry {
    std::string uid;
    std::string namespace_name;
    std::string name;
    std::string node;
    State state = State::kAssumed;
    bool charged = false;
    uint64_t seq = 0;
    absl::Time expires = absl::InfiniteFuture();
    config::PodManifest manifest;
    sched::PodRequest request;
    std::map<std::string, std::string> annotations;  // Decision annotations (not for assumed).
    std::set<std::tuple<std::string, std::string, int>> claimed;  // MIG (uuid, profile, start).
    std::string problem;
    absl::Time problem_since = absl::InfinitePast();
    bool allocation_failed = false;
    std::string status_problem;  // The malformed allocation-status last counted.
    int32_t priority = 0;        // spec.priority (PodPriority), from the informer.
    // Whether `priority` came from the informer (a pod Prism just bound may not have been seen
    // yet): a pod of unknown priority is never chosen as a victim.
    bool priority_known = false;
    // A ResourceClaim's allocation (ChargeDraClaim), not a pod: `name` is the claim's, the
    // request is fixed at charge time, and it is never requeued or reported as a pod.
    bool dra = false;
  };
  // A nominated preemptor's hold on a node (Reserve): `held` once charged as its assumption
  // (the assumed entry with `seq`).
  struct Reservation {
    std::string uid;
    std::string node;
    int32_t priority = 0;
    config::PodManifest manifest;
    std::vector<std::pair<std::string, std::string>> victims;  // Key, UID.
    absl::Time deadline;
    bool held = false;
    uint64_t seq = 0;
    // Made from kube-scheduler's nomination (path A): it ends when the nomination names another
    // node or is cleared, as kube-scheduler's nominator forgets the pod there.
    bool nominated = false;
  };
  // A Preempt answer awaiting kube-scheduler's choice of node (its nomination): per answered
  // node, the victims Prism holds there (key, UID).
  struct PreemptAnswer {
    std::string uid;
    int32_t priority = 0;
    config::PodManifest manifest;
    std::map<std::string, std::vector<std::pair<std::string, std::string>>, std::less<>> victims;
    absl::Time deadline;
  };
  // Answers kept at most (the oldest deadline goes first): bounds what preempt requests for
  // pods that are never nominated can hold.
  static constexpr size_t kMaxPreemptAnswers = 4096;
  static constexpr size_t kMaxHeldNotices = 1024;
  // A pending pod's status.nominatedNodeName (UpsertPod): reserves the node a remembered Preempt
  // answer named, or ends a nominated reservation whose nomination moved or was cleared.
  void ObserveNominationLocked(const std::string& key, std::string_view uid,
                               std::string_view nominated) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropReservationLocked(std::map<std::string, Reservation, std::less<>>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `r`'s hold is charged: its assumption (the entry Settle made, `seq`) still stands.
  bool HoldChargedLocked(const std::string& key, const Reservation& r) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A preemptor of `priority` may take what lower-priority reservations on `node` hold, as
  // upstream checks a node for a pod with only the nominated pods of equal or higher priority
  // (framework.go, addGENominatedPods) and clears the lower ones' nominations where it preempts
  // (preemption.go, prepareCandidate). The keys of the held ones (their assumptions charged).
  std::vector<std::string> YieldingReservationsLocked(std::string_view node, int32_t priority)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends every reservation on `node` below `priority` but `key`'s (a preemption there took it).
  void EndLowerReservationsLocked(std::string_view node, int32_t priority, std::string_view key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Charges the reservations whose victims are gone, ends those that no longer apply (run
  // before every decision: MaybeRebuildLocked).
  void SettleReservationsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pods Prism holds on `node` that may be evicted: charged, bound or uncertain, of a priority
  // the informer has shown, not a DRA claim, not a victim of a reservation already.
  std::vector<sched::PreemptionCandidate> EvictableLocked(const std::string& node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The engine's and pods_'s key of a claim's charge.
  static std::string DraKey(std::string_view namespace_name, std::string_view claim);
  // ChargeDraClaim under the lock; false when the charge did not fit.
  bool ChargeDraClaimLocked(DraClaimCharge charge) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string DraClaimProblemLocked(std::string_view namespace_name, std::string_view claim)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Rebuilds if dirty and `min_rebuild_interval` has passed (always with `force`).
  void MaybeRebuildLocked(bool force = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RebuildLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies node `name`'s entry (or its absence) to the engine in place, unless a rebuild is due.
  void ApplyNodeLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RefreshWorkloadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Registers the shapes of the charged pods, most common first, for shape indexes built by
  // Tick() before their next Filter (after a rebuild or a new target workload dropped them).
  void PrepareIndexesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLocked(PodEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // pods_ writes that keep pods_on_node_ in step.
  PodEntry& PutPodLocked(const std::string& key, PodEntry entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ErasePodLocked(std::map<std::string, PodEntry, std::less<>>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keys of the pods on `node` (those whose entry says that node; checked on use).
  std::vector<std::string> PodsOnNodeLocked(const std::string& node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // AllocationFailedEverywhere for `entry`. A malformed status is logged and counted as a decode
  // failure, once per distinct problem (informer updates repeat it), and reads as "not failed":
  // the pod stays charged, since what it holds is then unknown.
  bool AllocationFailedLocked(const std::string& key, PodEntry& entry,
                              const std::map<std::string, std::string>& annotations)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Charges `entry` from its annotations against the current engine; sets `problem` on failure.
  void ChargeFromAnnotationsLocked(const std::string& key, PodEntry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string NodeProblemLocked(std::string_view name) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The engine's id of node `name`, or -1 (a SwissTable lookup: Filter does one per candidate).
  int NodeIdLocked(std::string_view name) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CacheOptions options_;
  mutable absl::Mutex mu_;
  sched::DeviceConfig config_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<sched::Engine> engine_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int32_t> node_ids_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, NodeEntry, std::less<>> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, PodEntry, std::less<>> pods_ ABSL_GUARDED_BY(mu_);
  // Node name -> keys of pods_ on it, so that a node change costs that node's pods, not a scan
  // of every pod. A superset: an entry whose pod left the node is dropped when read.
  std::map<std::string, std::set<std::string>, std::less<>> pods_on_node_ ABSL_GUARDED_BY(mu_);
  // Keys of pods whose bind outcome is unknown, and of pods with a problem, so that the ticker's
  // ExpiredUncertain() and Problems() cost those pods, not a walk over every pod. Supersets in
  // key order: a key whose entry no longer qualifies is dropped when read.
  std::set<std::string, std::less<>> uncertain_keys_ ABSL_GUARDED_BY(mu_);
  std::set<std::string, std::less<>> problem_keys_ ABSL_GUARDED_BY(mu_);
  // The last Filters' engine scores (node id, score; in the order of the feasible nodes Filter
  // returned) per pod UID, for Prioritize, which kube-scheduler calls right after Filter with
  // those nodes in that order. Cleared by rebuilds (node ids change).
  std::map<std::string, std::vector<std::pair<int32_t, double>>> scores_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> scores_order_ ABSL_GUARDED_BY(mu_);
  // When assumptions expire, earliest first (may hold stale entries; ExpireLocked drops them).
  struct Expiry {
    absl::Time expires;
    uint64_t seq = 0;  // The entry's seq when assumed.
    std::string key;
    bool operator>(const Expiry& o) const { return expires > o.expires; }
  };
  std::priority_queue<Expiry, std::vector<Expiry>, std::greater<>> expiries_ ABSL_GUARDED_BY(mu_);
  bool dirty_ ABSL_GUARDED_BY(mu_) = true;
  absl::Time last_rebuild_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_workload_refresh_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time workload_staged_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  CacheStats counters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Reservation, std::less<>> reservations_ ABSL_GUARDED_BY(mu_);  // By key.
  uint64_t preemption_offset_ ABSL_GUARDED_BY(mu_) = 0;  // Rotates the nodes searched first.
  int64_t reservations_lapsed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reservations_nominated_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, PreemptAnswer, std::less<>> preempt_answers_ ABSL_GUARDED_BY(mu_);  // By key.
  std::vector<HeldNotice> held_notices_ ABSL_GUARDED_BY(mu_);
};

// A pod's spec.priority (the API server resolves priorityClassName into it); 0 when absent or
// not an int32, as corev1helpers.PodPriority reads a pod without one.
int32_t PodPriority(const Json& pod);
// Whether the pod's spec.preemptionPolicy is Never.
bool PreemptsNever(const Json& pod);

// Why preemption cannot help a pod on a node where it failed (SchedulerCache::ResolvableNodes;
// Filter adds it to the node's reason in parentheses).
// Every pod charged on the node's GPUs has a priority at or above the pod's.
inline constexpr std::string_view kPreemptionOnlyHigher =
    "preemption cannot help: only pods of equal or higher priority hold its GPUs";
// Releasing every lower-priority pod there still leaves no room (one trial).
inline constexpr std::string_view kPreemptionNotEnough =
    "preemption cannot help: evicting every lower-priority pod there is not enough";
// Lower-priority pods hold GPUs there, but the pod may not evict them.
inline constexpr std::string_view kPreemptionNever =
    "preemption not attempted: the pod's preemptionPolicy is Never";

// The decision-bearing annotations of a pod (prism.io/decision and HAMi's keys), or empty.
std::map<std::string, std::string> DecisionAnnotations(
    const std::map<std::string, std::string>& all);

// Whether the node agent's prism.io/allocation-status says every GPU container of `request`
// failed to get its devices (false without the annotation). InvalidArgument naming the field for
// a malformed status (config::ParseAllocationStatus).
absl::StatusOr<bool> AllocationFailedEverywhere(
    const std::map<std::string, std::string>& annotations, const sched::PodRequest& request);

enum class AllocationProgress { kPending, kReady, kFailed };
// What the node agent's prism.io/allocation-status (`text`, docs/annotations.md) says of the
// containers named: kReady when each has its devices, kFailed when one got an error instead,
// kPending otherwise (an entry missing or still without devices, or a status that
// config::ParseAllocationStatus rejects: not progress, whatever it claims). kPending for an empty
// set.
AllocationProgress ReadAllocationProgress(std::string_view text,
                                          const std::set<std::string>& containers);

}  // namespace prism::extender
