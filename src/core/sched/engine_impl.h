// src/core/sched/engine_impl.h: the placement engine's implementation class, Engine::Impl (its
// state and the steps of placing one pod), split by responsibility over
//   engine.cc           setup, workload switches, request resolution, indexes, entry points;
//   engine_slices.cc    software slices on a node's GPUs;
//   engine_mig.cc       MIG instances (template and placement modes);
//   engine_evaluate.cc  node scores, node evaluation and the decision.
// Included by those files only; not part of the engine's interface (engine.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "core/sched/engine.h"
#include "core/sched/engine_internal.h"
#include "core/sched/shape_indexes.h"
#include "core/sched/workload_fragmentation.h"

namespace prism::sched {
using namespace engine_internal;  // NOLINT: the engine's own private types (engine*.cc only).

class Engine::Impl {
 public:
  Impl(ClusterState cluster, DeviceConfig config, EngineOptions options)
      : cluster_(std::move(cluster)), config_(std::move(config)), options_(std::move(options)) {
    RebuildShapes();
  }

  ClusterState cluster_;
  DeviceConfig config_;
  EngineOptions options_;
  TargetWorkload workload_;
  // What scoring reads of the target workload: workload_'s, or the staged workload's while
  // MaintainIndexes builds its indexes.
  std::unique_ptr<WorkloadFragmentation> frag_ =
      std::make_unique<WorkloadFragmentation>(&cluster_, &config_);
  ShapeIndexes indexes_{&cluster_, options_.max_indexes};
  // A workload switch in progress (StageTargetWorkload): its fragmentation measures and the
  // indexes built for it so far, which replace frag_ and indexes_ once complete.
  std::optional<TargetWorkload> staged_workload_;
  std::unique_ptr<WorkloadFragmentation> staged_frag_;
  ShapeIndexes staged_indexes_{&cluster_, options_.max_indexes};
  // Scratch.
  std::vector<ScratchGpu> scratch_;
  std::vector<ScratchGpu> best_scratch_;
  std::vector<ScratchGpu> saved_scratch_;  // EvaluateNode: scratch_ before a first attempt.
  std::vector<DeviceRec> recs_;
  std::vector<DeviceRec> best_recs_;
  std::vector<uint8_t> reasons_;
  std::vector<std::pair<GpuPref, int>> ranked_;
  std::vector<const GpuUsage*> view_;
  std::vector<const GpuUsage*> frag_view_;
  std::vector<GpuUsage> slice_usage_;
  std::vector<const GpuUsage*> slice_view_;
  std::vector<SeenSliceGpu> seen_gpus_;  // PlaceSlices: FragWithGpu per GPU state tried.
  std::vector<int> changed_gpus_;        // EvaluateNode: local GPUs the pod's choice changes.
  std::vector<int> chosen_gpus_;         // ChooseSliceGpus' answer.
  topo::SetRequest set_request_;         // ChooseSliceGpus' question (kept for its buffers).

  // --- Setup --------------------------------------------------------------

  void InvalidateCaches();

  // A node brought a GPU type or template set the engine had not seen. What is cached per
  // type or set grows; what was computed for the old ones stays exact, because a node's score
  // depends only on its own GPUs and the new node is in the change log.
  void ClusterVocabularyGrew();

  void RebuildShapes();

  // --- Workload switches -------------------------------------------------------

  void DropStagedWorkload();

  void StageTargetWorkload(TargetWorkload workload);

  bool CommitStagedWorkload();

  // The staged workload's share of MaintainIndexes: its indexes scored with its measures.
  int64_t MaintainStaged(uint64_t max_backlog, int64_t max_evaluations);

  absl::Status Validate(const PodRequest& pod) const;

  absl::StatusOr<NodePolicy> DefaultNodePolicy() const;

  absl::StatusOr<Resolved> Resolve(const PodRequest& pod) const;

  // --- Within-node placement ----------------------------------------------

  uint8_t CommonGpuCheck(const Resolved& rp, int g, GpuMode mode) const;

  // HAMi's per-device checks for a software slice; kNoReason when it fits.
  uint8_t CheckSlice(const Resolved& rp, const ContainerRequest& c, int g,
                     const ScratchGpu& s) const;

  // The usage a GPU would show with the pod's slice contributions.
  static GpuUsage SliceUsageAfter(const ScratchGpu& s);

  GpuPref SlicePref(GpuPolicy policy, int g, const ScratchGpu& before, const ScratchGpu& after);

  // The GPU-level preference under FGD: the node's fragmentation change
  // `delta` (GPUs), compared the way the node policy compares nodes
  // (quantized: equal buckets fall to the lowest GPU index, as the paper's
  // simulator does, or under prism's exact tie-break to the lower exact
  // change first; exact: binpack breaks ties).
  GpuPref FgdGpuPref(const Resolved& rp, double delta, int g, const ScratchGpu& before,
                     const ScratchGpu& after, int l);

  // How fragmentation-aware policies score a fragmentation change `delta`
  // (GPUs): higher is better. See PolicyOptions.
  double FragTerm(double delta) const;

  void AddSlice(ScratchGpu& s, const ContainerRequest& c, int64_t need);

  // Whether scratch_ still shows the node as it is (nothing of the pod on it).
  bool ScratchIsPristine(int gpus) const;

  // FragWithGpu for a slice GPU whose state before (`before`, with the pod's earlier
  // contributions) and after (`after`) are those of a GPU already tried for this container
  // on this node, with the same facts, is what it gave then: the base view's parts of two
  // such GPUs are equal. Nodes mostly hold a few kinds of GPU state (free, full, ...).
  double FragWithGpuOnce(int node, int64_t cpu_after, int64_t mem_after, int l,
                         const ScratchGpu& before, const GpuUsage& after);

  // Picks `count` distinct hami-core GPUs for container `ci`. Returns false,
  // with per-GPU reasons, when too few fit.
  bool PlaceSlices(const Resolved& rp, int ci, int node, bool* too_few);

  // Of the GPUs ranked_ (best first), the container's into chosen_gpus_: by the node's wiring
  // and the pod's TopologyRequest (topo::ChooseGpuSet), or the first `count` on a node whose
  // wiring is unknown. False, with the candidates' reasons, when no set meets the request.
  bool ChooseSliceGpus(const Resolved& rp, const ContainerRequest& c, int node);

  // What a pod that prefers interconnect gains on `node` from the choice in recs_: the
  // weakest tier its multi-GPU containers got (0 any .. 3 NVLink) times two, plus one when each
  // such container is on one NUMA node. 0 for a node of unknown wiring.
  int TopologyGrade(int node) const;
  // The default (not `preferred`) topology terms of the prism node policy on a wired node:
  // PolicyOptions::topology_weight x TopologyGrade for a multi-GPU pod (not one taking the
  // whole node unless topology_whole_node), -topology_harm x BrokenNvLinkPairs for others.
  double TopologyTerms(const Resolved& rp, int node) const;
  // GPUs the choice in view_ takes from idle while an NVLink peer of theirs stays idle: each
  // breaks an NVLink pair a later multi-GPU pod could have had whole.
  int BrokenNvLinkPairs(int node) const;

  // Compute units (per-mille of the GPU) a request really needs of a MIG GPU.
  static int32_t RequestedUnits(const GpuInfo& gi, const GpuRequest& req);

  // Fragmentation of one MIG GPU in per-mille units: free compute the target
  // workload could not use (sum of weights x free - usable).
  double MigFrag(int32_t free, double usable) const;

  // The grant of an instance (template slots may declare their own memory/core).
  std::pair<int64_t, int32_t> Grant(const GpuInfo& gi, const GpuUsage& layout,
                                    const MigInstance& inst, int tmpl) const;

  // Template mode. Frozen GPU (an instance in use): the smallest free slot
  // that fits. Idle GPU: any geometry; each is judged by placing all of the
  // container's `remaining` instances that fit it, so that a pod asking for
  // two 8000 MiB instances takes {1g.5gb, 3x 2g.10gb} (the seed's example)
  // rather than two 3g.20gb. Order: more of the container's instances on this
  // GPU, then the smallest grant (internal waste), then fewer operations, then
  // the least fragmentation. The grant comes before fragmentation because the
  // target workload is made of other pods' shapes: with fragmentation first, a
  // software-slice pod elsewhere in the cluster could make a MIG pod get a
  // 3g.20gb where a 2g.10gb fits; and operations before fragmentation keep a
  // GPU's idle instances in use instead of re-carving it for the same grant.
  // `share_mask` != 0: only idle instances of these profiles (a new shared instance).
  MigOption BestTemplateOption(const Resolved& rp, int oi, int g, const ScratchGpu& s,
                               int remaining, uint8_t* reason, uint32_t share_mask = 0);

  Reason NoProfileReason(const mig::GpuModel& model, const GpuRequest& req) const;

  // Placement mode: the smallest allowed profile that fits this GPU, at the
  // start that leaves the most usable free space (then free-space utility,
  // fewer operations, higher start).
  // `only`: these profiles (smallest first) instead of the request's candidates.
  MigOption BestPlacementOption(const Resolved& rp, int oi, int g, const ScratchGpu& s,
                                uint8_t* reason, const std::vector<int8_t>* only = nullptr);

  // Shared MIG instances (engine_mig_slices.cc, docs/mig-slices.md). Whether container `oi` may
  // be a slice of a shared instance on GPU `g` (the device config shares some of its profiles,
  // the pod did not opt out, it asks MiB for one device, not a whole GPU). Both MIG modes.
  bool SliceEligible(const Resolved& rp, int oi, int g) const;
  // The slice's option on GPU `g`: an existing shared instance with room (the least memory left
  // after, then the lowest start), else a new one of a shareable profile with room to spare,
  // chosen as any instance of the GPU's mode is (placement: the smallest such profile; template:
  // a free slot of such a profile, or a geometry for an idle GPU). Not ok when neither exists (the caller falls back to a whole
  // instance).
  MigOption BestSharedOption(const Resolved& rp, int oi, int g, const ScratchGpu& s);
  // ApplyMigOption's part for a slice: charges it to the instance at `o.start`.
  void AddMigSlice(ScratchGpu& s, const MigOption& o);

  GpuPref MigPref(GpuPolicy policy, int g, const ScratchGpu& s, const MigOption& o);

  void ApplyMigOption(ScratchGpu& s, int g, const MigOption& o, bool init);

  bool PlaceMig(const Resolved& rp, int oi, int node);

  // Whether recs_ holds a MIG instance of container `ci` (placed earlier in this evaluation).
  bool ContainerHasMig(int ci) const;
  // How GPU `l` connects to container `ci`'s instances in recs_: the weakest link score
  // (topo::LinkScore) to their GPUs, 100000 for the same GPU.
  int LinkToContainer(const topo::NodeTopology& topology, int ci, int l) const;

  DeviceRec MigRec(int ci, int l, int g, const GpuUsage& u, const MigInstance& inst) const;

  // --- Node scores ----------------------------------------------------------

  double Utilization(int node, int64_t cpu_used, int64_t mem_used,
                     const std::vector<const GpuUsage*>& gpus) const;

  // prism's score for a pod without GPUs: the least free GPU on the node, then
  // the least CPU left after placement (best fit on CPU), as one number:
  // -(free GPU units * 2^35 + CPU left), exact in a double (free units stay
  // under 2^18 for up to 256 GPUs; CPU left is clamped to 2^35 - 1 milli-CPU).
  // FGD scores most of these placements alike (the pod changes no GPU), so
  // first fit would put them on nodes with free GPUs and strand those GPUs
  // once their CPU is gone.
  double CpuPodScore(int node, int64_t cpu_after, const std::vector<const GpuUsage*>& gpus) const;

  // The local GPUs whose state in scratch_ the pod's choice changed, into changed_gpus_.
  void CollectChangedGpus(int gpus);

  // NodeFrag of the node with the pod's choice: EvaluateNode's view `after`, whose GPUs
  // changed_gpus_ differ from the node as it is.
  double NodeFragAfter(int node, int64_t cpu_after, int64_t mem_after,
                       const std::vector<const GpuUsage*>& after);

  // `waste`: internal waste of the pod's MIG grants (per-mille units), which
  // fragmentation-aware policies count as fragmentation created.
  double NodeScore(const Resolved& rp, int node, const std::vector<const GpuUsage*>& after,
                   double waste);

  // --- Node evaluation -------------------------------------------------------

  // Scores `rp` on `node`; with `keep_choice`, fills best_recs_/best_scratch_ with the best
  // variant's choice (for BuildDecision).
  bool EvaluateNode(const Resolved& rp, int node, double* score, NodeFailure* failure,
                    bool keep_choice = false);

  // Builds the decision from best_scratch_/best_recs_ of EvaluateNode.
  Decision BuildDecision(const Resolved& rp, int node, double score) const;

  // --- Indexes -----------------------------------------------------------------

  double ScoreOrInfeasible(const Resolved& rp, int node, NodeFailure* failure = nullptr);

  ShapeIndex* IndexFor(const Resolved& rp, const std::string& key);

  // Equal scores go to the node first by name (ClusterState::node_rank).
  bool Before(int a, int b) const { return cluster_.node_rank(a) < cluster_.node_rank(b); }

  int64_t MaintainIndexes(uint64_t max_backlog, int64_t max_evaluations);

  // --- Entry points ---------------------------------------------------------------

  // `index`: the shape's caught-up index (its failures are read, not recomputed), or null.
  void Explain(const Resolved& rp, const ShapeIndex* index, const std::vector<int32_t>* nodes,
               ScheduleResult* result);

  ScheduleResult Schedule(const PodRequest& pod, const std::vector<int32_t>* nodes, bool explain);
};

}  // namespace prism::sched
