#include "core/sched/engine.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#include "absl/types/span.h"

#include "base/check.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/sched/engine_internal.h"
#include "core/sched/shape_indexes.h"
#include "core/sched/workload_fragmentation.h"

namespace prism::sched {
using namespace engine_internal;  // NOLINT: the engine's own private types (engine.cc only).

// ---------------------------------------------------------------------------

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

  // --- Setup --------------------------------------------------------------

  void InvalidateCaches() {
    indexes_.Clear();
    DropStagedWorkload();
    frag_->Invalidate();
  }

  // A node brought a GPU type or template set the engine had not seen. What is cached per
  // type or set grows; what was computed for the old ones stays exact, because a node's score
  // depends only on its own GPUs and the new node is in the change log.
  void ClusterVocabularyGrew() {
    // Every index is dropped below: a staged workload has nothing left to wait for.
    if (staged_workload_.has_value()) workload_ = *std::move(staged_workload_);
    RebuildShapes();
    indexes_.ForEachShape([this](Resolved& shape) {
      absl::StatusOr<Resolved> rp = Resolve(shape.pod);
      PRISM_CHECK(rp.ok());  // It resolved before; only per-type filters are added.
      shape = std::move(*rp);
    });
  }

  void RebuildShapes() {
    frag_->SetWorkload(workload_);
    InvalidateCaches();
  }

  // --- Workload switches -------------------------------------------------------

  void DropStagedWorkload() {
    staged_workload_.reset();
    staged_frag_.reset();
    staged_indexes_.Clear();
  }

  void StageTargetWorkload(TargetWorkload workload) {
    staged_frag_ = std::make_unique<WorkloadFragmentation>(&cluster_, &config_);
    staged_frag_->SetWorkload(workload);
    staged_workload_ = std::move(workload);
    staged_indexes_.Clear();
    // Every shape indexed or prepared now, the most recently decided first.
    indexes_.ForEachInUseOrder(
        [this](const std::string& key, const Resolved& rp) { staged_indexes_.Prepare(rp, key); });
    if (staged_indexes_.size() == 0) CommitStagedWorkload();  // Nothing to keep fast.
  }

  bool CommitStagedWorkload() {
    if (!staged_workload_.has_value()) return false;
    workload_ = *std::move(staged_workload_);
    std::swap(frag_, staged_frag_);
    indexes_.Swap(staged_indexes_);
    DropStagedWorkload();
    return true;
  }

  // The staged workload's share of MaintainIndexes: its indexes scored with its measures.
  int64_t MaintainStaged(uint64_t max_backlog, int64_t max_evaluations) {
    std::swap(frag_, staged_frag_);
    const int64_t spent = staged_indexes_.Maintain(
        [this](const Resolved& r, int n, NodeFailure* f) { return ScoreOrInfeasible(r, n, f); },
        max_backlog, max_evaluations);
    std::swap(frag_, staged_frag_);
    if (staged_indexes_.pending_builds() == 0) CommitStagedWorkload();
    return spent;
  }

  absl::Status Validate(const PodRequest& pod) const {
    if (pod.containers.empty()) return absl::InvalidArgumentError("pod has no containers");
    if (pod.modes == 0 || (pod.modes & ~kModeAny) != 0) {
      return absl::InvalidArgumentError("pod accepts no GPU mode");
    }
    for (const ContainerRequest& c : pod.containers) {
      const std::string who = StrCat("container ", c.name.empty() ? "(unnamed)" : c.name);
      if (c.cpu_milli < 0 || c.cpu_milli > kMaxCpuMilli) {
        return absl::InvalidArgumentError(
            StrCat(who, ": CPU request ", c.cpu_milli, "m is negative or absurd"));
      }
      if (c.memory_bytes < 0 || c.memory_bytes > kMaxMemoryBytes) {
        return absl::InvalidArgumentError(
            StrCat(who, ": memory request ", c.memory_bytes, " bytes is negative or absurd"));
      }
      const GpuRequest& g = c.gpu;
      if (g.count < 0 || g.count > kMaxGpusPerContainer) {
        return absl::InvalidArgumentError(
            StrCat(who, ": GPU count ", g.count, " is out of range 0..", kMaxGpusPerContainer));
      }
      if (g.count == 0) continue;
      if (g.memory_mib < 0 || g.memory_mib > kMaxGpuMemoryMib) {
        return absl::InvalidArgumentError(
            StrCat(who, ": GPU memory ", g.memory_mib, " MiB is negative or absurd"));
      }
      if (g.memory_permille < 0 || g.memory_permille > kPermille) {
        return absl::InvalidArgumentError(
            StrCat(who, ": GPU memory share ", g.memory_permille, "/1000 is out of range"));
      }
      if (g.cores_permille < 0 || g.cores_permille > kPermille) {
        return absl::InvalidArgumentError(
            StrCat(who, ": GPU compute share ", g.cores_permille, "/1000 is out of range"));
      }
    }
    if (!pod.node_policy.empty()) RETURN_IF_ERROR(ParseNodePolicy(pod.node_policy).status());
    if (!pod.gpu_policy.empty()) RETURN_IF_ERROR(ParseGpuPolicy(pod.gpu_policy).status());
    return absl::OkStatus();
  }

  absl::StatusOr<NodePolicy> DefaultNodePolicy() const {
    if (!config_.default_node_policy.empty()) return ParseNodePolicy(config_.default_node_policy);
    return options_.policy.node;
  }

  absl::StatusOr<Resolved> Resolve(const PodRequest& pod) const {
    RETURN_IF_ERROR(Validate(pod));
    Resolved rp;
    rp.pod = pod;
    rp.cpu = pod.EffectiveCpuMilli();
    rp.memory = pod.EffectiveMemoryBytes();
    if (!pod.node_policy.empty()) {
      ASSIGN_OR_RETURN(rp.node_policy, ParseNodePolicy(pod.node_policy));
    } else {
      ASSIGN_OR_RETURN(rp.node_policy, DefaultNodePolicy());
    }
    if (!pod.gpu_policy.empty()) {
      ASSIGN_OR_RETURN(rp.gpu_policy, ParseGpuPolicy(pod.gpu_policy));
    } else if (!config_.default_gpu_policy.empty()) {
      ASSIGN_OR_RETURN(rp.gpu_policy, ParseGpuPolicy(config_.default_gpu_policy));
    } else {
      rp.gpu_policy = options_.policy.GpuPolicyFor(rp.node_policy);
    }
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = 0; i < pod.containers.size(); ++i) {
        const ContainerRequest& c = pod.containers[i];
        if (c.gpu.count <= 0 || c.init != (pass == 1)) continue;
        rp.order.push_back(static_cast<int>(i));
      }
    }
    rp.wants_gpu = !rp.order.empty();
    rp.names_gpus = !pod.use_uuids.empty() || !pod.nouse_uuids.empty();
    for (const std::string& type : cluster_.gpu_types()) {
      bool ok = pod.use_types.empty();
      for (const std::string& t : pod.use_types) ok = ok || TypeContains(type, t);
      for (const std::string& t : pod.nouse_types) ok = ok && !TypeContains(type, t);
      rp.type_ok.push_back(ok ? 1 : 0);
    }
    for (int ci : rp.order) {
      std::vector<std::vector<int8_t>> per_model;
      for (const mig::GpuModel& model : mig::Catalog()) {
        per_model.push_back(MigCandidates(model, pod.containers[ci].gpu, config_.mig_match_cores));
      }
      rp.mig_candidates.push_back(std::move(per_model));
    }
    return rp;
  }

  // --- Within-node placement ----------------------------------------------

  uint8_t CommonGpuCheck(const Resolved& rp, int g, GpuMode mode) const {
    const GpuInfo& gi = cluster_.gpu(g);
    if (!gi.healthy) return static_cast<uint8_t>(Reason::kCardNotHealth);
    if (!rp.type_ok[cluster_.gpu_type_id(g)] || !(rp.pod.modes & ModeBit(mode))) {
      return static_cast<uint8_t>(Reason::kCardTypeMismatch);
    }
    if (!rp.pod.use_uuids.empty() && std::find(rp.pod.use_uuids.begin(), rp.pod.use_uuids.end(),
                                               gi.uuid) == rp.pod.use_uuids.end()) {
      return static_cast<uint8_t>(Reason::kCardUuidMismatch);
    }
    if (std::find(rp.pod.nouse_uuids.begin(), rp.pod.nouse_uuids.end(), gi.uuid) !=
        rp.pod.nouse_uuids.end()) {
      return static_cast<uint8_t>(Reason::kCardUuidMismatch);
    }
    return kNoReason;
  }

  // HAMi's per-device checks for a software slice; kNoReason when it fits.
  uint8_t CheckSlice(const Resolved& rp, const ContainerRequest& c, int g,
                     const ScratchGpu& s) const {
    if (uint8_t r = CommonGpuCheck(rp, g, GpuMode::kHamiCore); r != kNoReason) return r;
    const GpuInfo& gi = cluster_.gpu(g);
    const GpuUsage& base = s.u;  // Other pods' usage (the pod's own is kept apart).
    const GpuRequest& req = c.gpu;
    const int64_t need = DeviceMemoryNeed(req, gi.memory_mib);
    int64_t mem = 0;
    int32_t cores = 0;
    int tasks = 0;
    if (c.init) {
      mem = std::max(s.app_mem, std::max(s.init_mem, need));
      cores = std::max(s.app_cores, std::max(s.init_cores, req.cores_permille));
      tasks = std::max<int>(s.app_tasks, 1);
    } else {
      mem = std::max(s.app_mem + need, s.init_mem);
      cores = std::max(s.app_cores + req.cores_permille, s.init_cores);
      tasks = std::max<int>(s.app_tasks + 1, s.init_any ? 1 : 0);
    }
    if (base.tasks + tasks > gi.split_count) {
      return static_cast<uint8_t>(Reason::kCardTimeSlicingExhausted);
    }
    if (base.memory_used_mib + mem > gi.memory_mib) {
      return static_cast<uint8_t>(Reason::kCardInsufficientMemory);
    }
    if (base.cores_used + cores > gi.cores_total) {
      return static_cast<uint8_t>(Reason::kCardInsufficientCore);
    }
    const bool exclusive = req.cores_permille >= kPermille && gi.cores_total == kPermille;
    if (exclusive && (base.tasks > 0 || (!c.init && s.app_tasks > 0))) {
      return static_cast<uint8_t>(Reason::kExclusiveDeviceAllocateConflict);
    }
    if (req.cores_permille == 0 &&
        base.cores_used + std::max(s.app_cores, s.init_cores) >= gi.cores_total) {
      return static_cast<uint8_t>(Reason::kCardComputeUnitsExhausted);
    }
    return kNoReason;
  }

  // The usage a GPU would show with the pod's slice contributions.
  static GpuUsage SliceUsageAfter(const ScratchGpu& s) {
    GpuUsage u = s.u;
    u.memory_used_mib += std::max(s.app_mem, s.init_mem);
    u.cores_used += std::max(s.app_cores, s.init_cores);
    u.tasks = static_cast<int16_t>(u.tasks + std::max<int>(s.app_tasks, s.init_any ? 1 : 0));
    return u;
  }

  GpuPref SlicePref(GpuPolicy policy, int g, const ScratchGpu& before, const ScratchGpu& after) {
    const GpuInfo& gi = cluster_.gpu(g);
    const GpuUsage ua = SliceUsageAfter(after);
    const double load =
        static_cast<double>(ua.tasks) / gi.split_count +
        static_cast<double>(ua.cores_used) / gi.cores_total +
        static_cast<double>(ua.memory_used_mib) / static_cast<double>(gi.memory_mib);
    switch (policy) {
      case GpuPolicy::kBinpack:
        return {load, 0};
      case GpuPolicy::kSpread:
        return {-load, 0};
      case GpuPolicy::kFgd: {
        const GpuUsage ub = SliceUsageAfter(before);
        return {-(frag_->GpuFrag(g, ua) - frag_->GpuFrag(g, ub)), load};
      }
    }
    return {load, 0};
  }

  // The GPU-level preference under FGD: the node's fragmentation change
  // `delta` (GPUs), compared the way the node policy compares nodes
  // (quantized: equal buckets fall to the lowest GPU index, as the paper's
  // simulator does, or under prism's exact tie-break to the lower exact
  // change first; exact: binpack breaks ties).
  GpuPref FgdGpuPref(const Resolved& rp, double delta, int g, const ScratchGpu& before,
                     const ScratchGpu& after, int l) {
    const PolicyOptions& p = options_.policy;
    if (p.frag_resolution > 0 || p.fgd_quantize) {
      // Inside a node there is no first-fit order worth keeping: the exact
      // change decides among equal buckets (equal changes keep the lower
      // index, the ranking being a stable sort in index order).
      if (rp.node_policy == NodePolicy::kPrism && p.exact_gpu_tiebreak) {
        return {FragTerm(delta), -delta};
      }
      return {FragTerm(delta), static_cast<double>(-l)};
    }
    return {-delta, SlicePref(GpuPolicy::kBinpack, g, before, after).primary};
  }

  // How fragmentation-aware policies score a fragmentation change `delta`
  // (GPUs): higher is better. See PolicyOptions.
  double FragTerm(double delta) const {
    const PolicyOptions& p = options_.policy;
    if (p.frag_resolution > 0) {
      return -p.frag_resolution * std::floor(delta / p.frag_resolution + 1e-9);
    }
    if (p.fgd_quantize) return std::floor(100.0 * Sigmoid(-delta));
    return -delta;
  }

  void AddSlice(ScratchGpu& s, const ContainerRequest& c, int64_t need) {
    if (c.init) {
      s.init_any = true;
      s.init_mem = std::max(s.init_mem, need);
      s.init_cores = std::max(s.init_cores, c.gpu.cores_permille);
    } else {
      s.app_mem += need;
      s.app_cores += c.gpu.cores_permille;
      ++s.app_tasks;
    }
  }

  // Whether scratch_ still shows the node as it is (nothing of the pod on it).
  bool ScratchIsPristine(int gpus) const {
    for (int l = 0; l < gpus; ++l) {
      const ScratchGpu& s = scratch_[l];
      if (s.app_tasks > 0 || s.init_any || s.mine != 0 || s.switched || s.n_created > 0 ||
          s.n_destroyed > 0) {
        return false;
      }
    }
    return true;
  }

  // FragWithGpu for a slice GPU whose state before (`before`, with the pod's earlier
  // contributions) and after (`after`) are those of a GPU already tried for this container
  // on this node, with the same facts, is what it gave then: the base view's parts of two
  // such GPUs are equal. Nodes mostly hold a few kinds of GPU state (free, full, ...).
  double FragWithGpuOnce(int node, int64_t cpu_after, int64_t mem_after, int l,
                         const ScratchGpu& before, const GpuUsage& after) {
    const int g = cluster_.node(node).first_gpu + l;
    const GpuInfo& gi = cluster_.gpu(g);
    const GpuUsage b = SliceUsageAfter(before);
    SeenSliceGpu key{cluster_.gpu_type_id(g),
                     gi.split_count,
                     gi.cores_total,
                     gi.memory_mib,
                     b.memory_used_mib,
                     b.cores_used,
                     b.tasks,
                     after.memory_used_mib,
                     after.cores_used,
                     after.tasks,
                     0};
    for (const SeenSliceGpu& seen : seen_gpus_) {
      if (seen.SameAs(key)) return seen.frag;
    }
    key.frag = frag_->FragWithGpu(node, cpu_after, mem_after, l, after);
    seen_gpus_.push_back(key);
    return key.frag;
  }

  // Picks `count` distinct hami-core GPUs for container `ci`. Returns false,
  // with per-GPU reasons, when too few fit.
  bool PlaceSlices(const Resolved& rp, int ci, int node, bool* too_few) {
    const ContainerRequest& c = rp.pod.containers[ci];
    const NodeInfo& n = cluster_.node(node);
    ranked_.clear();
    // FGD's GPU choice (as the paper): the node's fragmentation with the share
    // on each candidate GPU, CPU taken, then binpack.
    const bool exact_fgd = rp.gpu_policy == GpuPolicy::kFgd && !frag_->empty();
    const int64_t cpu_after = cluster_.node_usage(node).cpu_used + rp.cpu;
    const int64_t mem_after = cluster_.node_usage(node).memory_used + rp.memory;
    if (exact_fgd) {
      if (recs_.empty()) {
        // Nothing of the pod placed yet: the base is the node as it is, whose parts every
        // shape scoring this node state shares.
        PRISM_DCHECK(ScratchIsPristine(n.gpu_count));
        frag_->FragBaseCurrent(node);
      } else {
        slice_usage_.resize(n.gpu_count);
        slice_view_.resize(n.gpu_count);
        for (int l = 0; l < n.gpu_count; ++l) {
          slice_usage_[l] = SliceUsageAfter(scratch_[l]);
          slice_view_[l] = &slice_usage_[l];
        }
        frag_->FragBase(node, slice_view_);
      }
    }
    seen_gpus_.clear();
    for (int l = 0; l < n.gpu_count; ++l) {
      const int g = n.first_gpu + l;
      if (cluster_.gpu(g).mode != GpuMode::kHamiCore) continue;
      ScratchGpu& s = scratch_[l];
      if (s.container_used) continue;
      const uint8_t r = CheckSlice(rp, c, g, s);
      if (r != kNoReason) {
        reasons_[l] = r;
        continue;
      }
      reasons_[l] = kNoReason;
      ScratchGpu after = s;
      AddSlice(after, c, DeviceMemoryNeed(c.gpu, cluster_.gpu(g).memory_mib));
      if (exact_fgd) {
        const GpuUsage changed = SliceUsageAfter(after);
        const double delta = (FragWithGpuOnce(node, cpu_after, mem_after, l, s, changed) -
                              frag_->CurrentNodeFrag(node)) /
                             kPermille;
        ranked_.emplace_back(FgdGpuPref(rp, delta, g, s, after, l), l);
        continue;
      }
      ranked_.emplace_back(SlicePref(rp.gpu_policy, g, s, after), l);
    }
    if (static_cast<int>(ranked_.size()) < c.gpu.count) {
      if (!ranked_.empty()) *too_few = true;
      return false;
    }
    std::stable_sort(ranked_.begin(), ranked_.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (int k = 0; k < c.gpu.count; ++k) {
      const int l = ranked_[k].second;
      const GpuInfo& gi = cluster_.gpu(n.first_gpu + l);
      const int64_t need = DeviceMemoryNeed(c.gpu, gi.memory_mib);
      AddSlice(scratch_[l], c, need);
      scratch_[l].container_used = true;
      DeviceRec rec;
      rec.container = static_cast<int16_t>(ci);
      rec.gpu = static_cast<int16_t>(l);
      rec.mode = GpuMode::kHamiCore;
      rec.memory_mib = need;
      rec.cores = c.gpu.cores_permille;
      recs_.push_back(rec);
    }
    return true;
  }

  // Workload-usable units of a template-mode or fixed-layout GPU state (see UsableFor).
  // Compute units (per-mille of the GPU) a request really needs of a MIG GPU.
  static int32_t RequestedUnits(const GpuInfo& gi, const GpuRequest& req) {
    const int64_t need = DeviceMemoryNeed(req, gi.memory_mib);
    const int64_t memory_units = (need * kPermille + gi.memory_mib - 1) / gi.memory_mib;
    return static_cast<int32_t>(
        std::min<int64_t>(kPermille, std::max<int64_t>(memory_units, req.cores_permille)));
  }

  // Fragmentation of one MIG GPU in per-mille units: free compute the target
  // workload could not use (sum of weights x free - usable).
  double MigFrag(int32_t free, double usable) const {
    return frag_->weight_total() * free - usable;
  }

  // The grant of an instance (template slots may declare their own memory/core).
  std::pair<int64_t, int32_t> Grant(const GpuInfo& gi, const GpuUsage& layout,
                                    const MigInstance& inst, int tmpl) const {
    const mig::GpuModel& model = *gi.mig_model;
    if (tmpl >= 0 && inst.entry >= 0) {
      for (const auto& slot : cluster_.template_sets()[gi.template_set].geometries[tmpl].slots) {
        if (slot.entry == inst.entry) return {slot.memory_mib, slot.core_permille};
      }
    }
    (void)layout;
    return {model.profiles[inst.profile].memory_mib, MigProfileCorePermille(model, inst.profile)};
  }

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
  MigOption BestTemplateOption(const Resolved& rp, int oi, int g, const ScratchGpu& s,
                               int remaining, uint8_t* reason) {
    const GpuInfo& gi = cluster_.gpu(g);
    const mig::GpuModel& model = *gi.mig_model;
    const TemplateSet& ts = cluster_.template_sets()[gi.template_set];
    const GpuRequest& req = rp.pod.containers[rp.order[oi]].gpu;
    const bool match_cores = config_.mig_match_cores;
    const int32_t requested = RequestedUnits(gi, req);
    MigOption best;
    double best_cost = 0;
    int best_take = 0;
    double best_waste = 0;
    int64_t best_memory = 0;
    bool any_profile = false;
    // Plans `want` instances on `layout` (smallest fitting slots first).
    auto consider = [&](const GpuUsage& layout, int geometry, int ops, int want) {
      const int tmpl = geometry >= 0 ? geometry : layout.template_index;
      struct Cand {
        int index;
        int64_t memory;
        int32_t core;
      };
      // At most kMaxMigInstances: on the stack, as this runs per GPU per node scored.
      std::array<Cand, kMaxMigInstances> fit_storage;
      size_t fit_count = 0;
      for (int i = 0; i < layout.instance_count; ++i) {
        const MigInstance& inst = layout.instances[i];
        if (inst.Busy()) continue;
        const auto [memory, core] = Grant(gi, layout, inst, tmpl);
        if (!SlotFits(model, inst.profile, memory, req, match_cores)) continue;
        fit_storage[fit_count++] = {i, memory, core};
      }
      if (fit_count == 0) return;
      any_profile = true;
      // Smallest first; equal slots keep their layout order. An insertion sort: stable, and at
      // most kMaxMigInstances elements.
      auto smaller = [&](const Cand& a, const Cand& b) {
        const auto& pa = model.profiles[layout.instances[a.index].profile];
        const auto& pb = model.profiles[layout.instances[b.index].profile];
        if (pa.compute_slices != pb.compute_slices) return pa.compute_slices < pb.compute_slices;
        return a.memory < b.memory;
      };
      for (size_t i = 1; i < fit_count; ++i) {
        const Cand c = fit_storage[i];
        size_t j = i;
        for (; j > 0 && smaller(c, fit_storage[j - 1]); --j) fit_storage[j] = fit_storage[j - 1];
        fit_storage[j] = c;
      }
      const absl::Span<const Cand> fits(fit_storage.data(), fit_count);
      GpuUsage after = layout;
      mig::Occupancy busy = layout.busy;
      double waste = 0;
      int64_t memory = 0;
      const int take = std::min<int>(want, static_cast<int>(fits.size()));
      for (int k = 0; k < take; ++k) {
        MigInstance& inst = after.instances[fits[k].index];
        inst.state = InstanceState::kAssigned;
        mig::Add(model, &busy, inst.profile, inst.start);
        waste += std::max(0, fits[k].core - requested);
        memory += fits[k].memory;
      }
      after.busy = busy;
      const double cost = MigFrag(FreeUnits(gi, after), frag_->TemplateUsable(g, after));
      const MigInstance& first = layout.instances[fits[0].index];
      bool better = !best.ok;
      if (!better && take != best_take) {
        better = take > best_take;
      } else if (!better && waste != best_waste) {
        better = waste < best_waste;
      } else if (!better && memory != best_memory) {
        better = memory < best_memory;
      } else if (!better && ops != best.ops) {
        better = ops < best.ops;
      } else if (!better) {
        better = cost < best_cost - 1e-9;
      }
      if (!better) return;
      best_take = take;
      best_waste = waste;
      best_memory = memory;
      best = MigOption{};
      best.ok = true;
      best.profile = first.profile;
      best.start = first.start;
      best.geometry = static_cast<int8_t>(geometry);
      best.reuse = true;
      best.ops = ops;
      best.grant_memory = fits[0].memory;
      best.grant_cores = fits[0].core;
      best.waste = std::max(0, fits[0].core - requested);
      mig::Occupancy one = layout.busy;
      mig::Add(model, &one, first.profile, first.start);
      best.busy_after = one;
      GpuUsage single = layout;
      single.instances[fits[0].index].state = InstanceState::kAssigned;
      single.busy = one;
      best.usable_after = frag_->TemplateUsable(g, single);
      best_cost = cost;
    };
    if (s.u.HasBusyInstance() || s.switched) {
      consider(s.u, -1, 0, 1);  // Frozen: only the free slots of the current geometry.
    } else {
      if (s.u.instance_count > 0) consider(s.u, -1, 0, remaining);
      // A fixed layout (static node) is never switched to another geometry.
      for (size_t k = 0; k < ts.geometries.size() && !gi.fixed_layout; ++k) {
        if (static_cast<int>(k) == s.u.template_index && s.u.instance_count > 0) continue;
        GpuUsage layout = s.u;
        layout.instance_count = 0;
        layout.instances = {};
        for (const auto& slot : ts.geometries[k].slots) {
          MigInstance& inst = layout.instances[layout.instance_count++];
          inst.profile = slot.profile;
          inst.start = slot.start;
          inst.entry = slot.entry;
        }
        layout.template_index = static_cast<int8_t>(k);
        consider(layout, static_cast<int>(k),
                 s.u.instance_count + static_cast<int>(ts.geometries[k].slots.size()), remaining);
      }
    }
    if (!best.ok) {
      *reason = static_cast<uint8_t>(any_profile ? Reason::kCardMigTopologyInfeasible
                                                 : NoProfileReason(model, req));
    }
    return best;
  }

  Reason NoProfileReason(const mig::GpuModel& model, const GpuRequest& req) const {
    GpuRequest memory_only = req;
    memory_only.cores_permille = 0;
    if (MigCandidates(model, memory_only, false).empty()) return Reason::kCardInsufficientMemory;
    if (!MigCandidates(model, req, config_.mig_match_cores).empty()) {
      return Reason::kCardMigTopologyInfeasible;
    }
    return Reason::kCardInsufficientCore;
  }

  // Placement mode: the smallest allowed profile that fits this GPU, at the
  // start that leaves the most usable free space (then free-space utility,
  // fewer operations, higher start).
  MigOption BestPlacementOption(const Resolved& rp, int oi, int g, const ScratchGpu& s,
                                uint8_t* reason) {
    const GpuInfo& gi = cluster_.gpu(g);
    const mig::GpuModel& model = *gi.mig_model;
    const int type = cluster_.gpu_type_id(g);
    const GpuRequest& req = rp.pod.containers[rp.order[oi]].gpu;
    std::vector<int8_t> scratch;
    const int32_t requested = RequestedUnits(gi, req);
    MigOption best;
    bool any_profile = false;
    // A fixed layout (static node) offers its idle instances and nothing else; the allowlist
    // limits what may be created, so it does not apply there.
    auto idle_instance_at = [&s](int8_t profile, int start) {
      for (int i = 0; i < s.u.instance_count; ++i) {
        const MigInstance& inst = s.u.instances[i];
        if (!inst.Busy() && inst.profile == profile && inst.start == start) return true;
      }
      return false;
    };
    for (int8_t p :
         CandidatesOf(rp.mig_candidates[oi], model, req, config_.mig_match_cores, &scratch)) {
      if (!gi.fixed_layout && !(gi.allowed_profiles & (1u << p))) continue;
      any_profile = true;
      for (int start : model.profiles[p].starts) {
        if (gi.fixed_layout && !idle_instance_at(p, start)) continue;
        if (!mig::CanAdd(model, s.u.busy, p, start)) continue;
        mig::Occupancy after = s.u.busy;
        mig::Add(model, &after, p, start);
        const OccEntry& e = frag_->Occ(type, model, after);
        MigOption o;
        o.ok = true;
        o.profile = p;
        o.start = static_cast<int8_t>(start);
        o.usable_after = e.workload_usable;
        o.utility_after = e.free_space_utility;
        if (gi.fixed_layout) {
          GpuUsage taken = s.u;
          for (int i = 0; i < taken.instance_count; ++i) {
            MigInstance& inst = taken.instances[i];
            if (!inst.Busy() && inst.profile == p && inst.start == start) {
              inst.state = InstanceState::kAssigned;
              break;
            }
          }
          taken.busy = after;
          o.usable_after = frag_->TemplateUsable(g, taken);
        }
        o.busy_after = after;
        const uint32_t mask = mig::PlacementMask(model, p, start);
        o.ops = 1;
        for (int i = 0; i < s.u.instance_count; ++i) {
          const MigInstance& inst = s.u.instances[i];
          if (inst.Busy()) continue;
          if (inst.profile == p && inst.start == start) {
            o.reuse = true;
            o.ops = 0;
            break;
          }
          if (mig::PlacementMask(model, inst.profile, inst.start) & mask) ++o.ops;
        }
        o.grant_memory = model.profiles[p].memory_mib;
        o.grant_cores = MigProfileCorePermille(model, p);
        o.waste = std::max(0, o.grant_cores - requested);
        bool better = !best.ok;
        if (!better) {
          if (o.usable_after != best.usable_after) {
            better = o.usable_after > best.usable_after;
          } else if (o.utility_after != best.utility_after) {
            better = o.utility_after > best.utility_after;
          } else if (o.ops != best.ops) {
            better = o.ops < best.ops;
          } else {
            better = o.start > best.start;  // Pack high: keep slot 0 for 4g/7g.
          }
        }
        if (better) best = o;
      }
      if (best.ok) break;  // The smallest profile that fits this GPU.
    }
    if (!best.ok) {
      *reason = static_cast<uint8_t>(any_profile ? Reason::kCardMigTopologyInfeasible
                                                 : NoProfileReason(model, req));
    }
    return best;
  }

  GpuPref MigPref(GpuPolicy policy, int g, const ScratchGpu& s, const MigOption& o) {
    const GpuInfo& gi = cluster_.gpu(g);
    const mig::GpuModel& model = *gi.mig_model;
    const double load =
        static_cast<double>(o.busy_after.compute_used) / model.compute_slices +
        static_cast<double>(std::popcount(o.busy_after.memory_mask)) / model.memory_slices;
    switch (policy) {
      case GpuPolicy::kBinpack:
        return {load, -static_cast<double>(o.waste)};
      case GpuPolicy::kSpread:
        return {-load, -static_cast<double>(o.waste)};
      case GpuPolicy::kFgd: {
        // Fragmentation growth, counting the instance's internal waste.
        const int cs = model.compute_slices;
        const int32_t free_before = (cs - s.u.busy.compute_used) * kPermille / cs;
        const int32_t free_after = (cs - o.busy_after.compute_used) * kPermille / cs;
        double usable_before = 0;
        if (!frag_->empty()) {
          usable_before =
              gi.template_mode || gi.fixed_layout
                  ? frag_->TemplateUsable(g, s.u)
                  : frag_->Occ(cluster_.gpu_type_id(g), model, s.u.busy).workload_usable;
        }
        const double delta =
            MigFrag(free_after, o.usable_after) - MigFrag(free_before, usable_before) + o.waste;
        return {-delta, load};
      }
    }
    return {load, 0};
  }

  void ApplyMigOption(ScratchGpu& s, int g, const MigOption& o, bool init) {
    const GpuInfo& gi = cluster_.gpu(g);
    const mig::GpuModel& model = *gi.mig_model;
    if (o.geometry >= 0) {
      // Template switch on an idle GPU: every existing instance goes.
      const PlacedGeometry& geo = cluster_.template_sets()[gi.template_set].geometries[o.geometry];
      for (int i = 0; i < s.u.instance_count; ++i) {
        s.destroyed[s.n_destroyed++] = {s.u.instances[i].profile, s.u.instances[i].start};
      }
      s.u.instance_count = 0;
      s.u.instances = {};
      for (const auto& slot : geo.slots) {
        MigInstance& inst = s.u.instances[s.u.instance_count++];
        inst.profile = slot.profile;
        inst.start = slot.start;
        inst.entry = slot.entry;
        s.created[s.n_created++] = {slot.profile, slot.start};
      }
      s.old_template = s.u.template_index;
      s.u.template_index = o.geometry;
      s.switched = true;
    } else if (!gi.template_mode && !o.reuse) {
      const uint32_t mask = mig::PlacementMask(model, o.profile, o.start);
      for (int i = 0; i < s.u.instance_count;) {
        const MigInstance& inst = s.u.instances[i];
        if (!inst.Busy() && (mig::PlacementMask(model, inst.profile, inst.start) & mask)) {
          s.destroyed[s.n_destroyed++] = {inst.profile, inst.start};
          for (int j = i + 1; j < s.u.instance_count; ++j) s.u.instances[j - 1] = s.u.instances[j];
          s.u.instances[--s.u.instance_count] = MigInstance{};
          continue;
        }
        ++i;
      }
      // Idle instances elsewhere may still block (compute or count limits):
      // destroy them, highest start first, until the new one fits.
      auto all = [&]() {
        mig::Occupancy occ;
        for (int i = 0; i < s.u.instance_count; ++i) {
          mig::Add(model, &occ, s.u.instances[i].profile, s.u.instances[i].start);
        }
        return occ;
      };
      while (!mig::CanAdd(model, all(), o.profile, o.start)) {
        int victim = -1;
        for (int i = 0; i < s.u.instance_count; ++i) {
          if (!s.u.instances[i].Busy() &&
              (victim < 0 || s.u.instances[i].start > s.u.instances[victim].start)) {
            victim = i;
          }
        }
        PRISM_CHECK(victim >= 0);
        s.destroyed[s.n_destroyed++] = {s.u.instances[victim].profile, s.u.instances[victim].start};
        for (int j = victim + 1; j < s.u.instance_count; ++j) {
          s.u.instances[j - 1] = s.u.instances[j];
        }
        s.u.instances[--s.u.instance_count] = MigInstance{};
      }
      MigInstance& inst = s.u.instances[s.u.instance_count++];
      inst.profile = o.profile;
      inst.start = o.start;
      s.created[s.n_created++] = {o.profile, o.start};
    }
    for (int i = 0; i < s.u.instance_count; ++i) {
      MigInstance& inst = s.u.instances[i];
      if (inst.start == o.start && inst.profile == o.profile) {
        PRISM_CHECK(!inst.Busy());
        inst.state = InstanceState::kAssigned;
        break;
      }
    }
    mig::Add(model, &s.u.busy, o.profile, o.start);
    s.u.memory_used_mib += o.grant_memory;
    s.u.cores_used += o.grant_cores;
    ++s.u.tasks;
    s.mine |= static_cast<uint8_t>(1u << o.start);
    if (!init) s.mine_app |= static_cast<uint8_t>(1u << o.start);
  }

  bool PlaceMig(const Resolved& rp, int oi, int node) {
    const int ci = rp.order[oi];
    const ContainerRequest& c = rp.pod.containers[ci];
    const NodeInfo& n = cluster_.node(node);
    int needed = c.gpu.count;
    if (c.init) {
      // Init containers run before the others: they may use the pod's instances.
      for (int l = 0; l < n.gpu_count && needed > 0; ++l) {
        ScratchGpu& s = scratch_[l];
        if (!s.mine) continue;
        const GpuInfo& gi = cluster_.gpu(n.first_gpu + l);
        const mig::GpuModel& model = *gi.mig_model;
        for (int i = 0; i < s.u.instance_count && needed > 0; ++i) {
          const MigInstance& inst = s.u.instances[i];
          if (!((s.mine >> inst.start) & 1)) continue;
          const DeviceRec rec = MigRec(ci, l, n.first_gpu + l, s.u, inst);
          if (!SlotFits(model, inst.profile, rec.memory_mib, c.gpu, config_.mig_match_cores)) {
            continue;
          }
          bool taken = false;
          for (const DeviceRec& r : recs_) {
            taken = taken || (r.container == ci && r.gpu == l && r.start == inst.start);
          }
          if (taken) continue;
          recs_.push_back(rec);
          --needed;
        }
      }
    }
    for (int k = 0; k < needed; ++k) {
      int best_l = -1;
      MigOption best;
      GpuPref best_pref;
      // GPUs judged this round with nothing of the pod on them. A later GPU of the same class
      // and state gets the same option and preference, and the order below is strict, so it
      // cannot win: only its reason is copied (a node of 8 idle GPUs judges one, not 8).
      constexpr int kJudgedMax = 16;  // More distinct states on one node: judged each time.
      std::array<int16_t, kJudgedMax> judged{};
      int judged_count = 0;
      for (int l = 0; l < n.gpu_count; ++l) {
        const int g = n.first_gpu + l;
        const GpuInfo& gi = cluster_.gpu(g);
        if (gi.mode != GpuMode::kMig) continue;
        if (uint8_t r = CommonGpuCheck(rp, g, GpuMode::kMig); r != kNoReason) {
          reasons_[l] = r;
          continue;
        }
        uint8_t reason = kNoReason;
        const ScratchGpu& s = scratch_[l];
        if (s.Untouched()) {
          int same = -1;
          for (int j = 0; j < judged_count && same < 0; ++j) {
            const int lj = judged[j];
            const int gj = n.first_gpu + lj;
            if (SameMigClass(gi, cluster_.gpu_type_id(g), cluster_.gpu(gj),
                             cluster_.gpu_type_id(gj)) &&
                SameMigUsage(s.u, scratch_[lj].u)) {
              same = lj;
            }
          }
          if (same >= 0) {
            reasons_[l] = reasons_[same];
            continue;
          }
          if (judged_count < kJudgedMax) judged[judged_count++] = static_cast<int16_t>(l);
        }
        MigOption o = gi.template_mode ? BestTemplateOption(rp, oi, g, s, needed - k, &reason)
                                       : BestPlacementOption(rp, oi, g, s, &reason);
        if (!o.ok) {
          reasons_[l] = reason;
          continue;
        }
        reasons_[l] = kNoReason;
        const GpuPref pref = MigPref(rp.gpu_policy, g, s, o);
        // The smallest grant first (compute beyond the request, then memory), whatever the
        // policy: the policy chooses among GPUs that give the pod the same instance size, so a
        // grant never grows with other pods' shapes (see BestTemplateOption).
        bool better = best_l < 0;
        bool same_grant = false;
        if (!better && o.waste != best.waste) {
          better = o.waste < best.waste;
        } else if (!better && o.grant_memory != best.grant_memory) {
          better = o.grant_memory < best.grant_memory;
        } else if (!better) {
          same_grant = true;
          better = pref > best_pref;
        }
        if (!better && same_grant && pref == best_pref) {
          // Same GPU-level preference: the better within-GPU outcome, then fewer ops.
          if (o.usable_after != best.usable_after) {
            better = o.usable_after > best.usable_after;
          } else if (o.ops != best.ops) {
            better = o.ops < best.ops;
          }
        }
        if (better) {
          best_l = l;
          best = o;
          best_pref = pref;
        }
      }
      if (best_l < 0) return false;
      ScratchGpu& s = scratch_[best_l];
      ApplyMigOption(s, n.first_gpu + best_l, best, c.init);
      DeviceRec rec;
      rec.container = static_cast<int16_t>(ci);
      rec.gpu = static_cast<int16_t>(best_l);
      rec.mode = GpuMode::kMig;
      rec.memory_mib = best.grant_memory;
      rec.cores = best.grant_cores;
      rec.profile = best.profile;
      rec.start = best.start;
      rec.waste = static_cast<int32_t>(best.waste);
      recs_.push_back(rec);
    }
    return true;
  }

  DeviceRec MigRec(int ci, int l, int g, const GpuUsage& u, const MigInstance& inst) const {
    const GpuInfo& gi = cluster_.gpu(g);
    const mig::GpuModel& model = *gi.mig_model;
    DeviceRec rec;
    rec.container = static_cast<int16_t>(ci);
    rec.gpu = static_cast<int16_t>(l);
    rec.mode = GpuMode::kMig;
    rec.profile = inst.profile;
    rec.start = inst.start;
    rec.memory_mib = model.profiles[inst.profile].memory_mib;
    rec.cores = MigProfileCorePermille(model, inst.profile);
    if (gi.template_mode && u.template_index >= 0 && inst.entry >= 0) {
      for (const auto& slot :
           cluster_.template_sets()[gi.template_set].geometries[u.template_index].slots) {
        if (slot.entry == inst.entry) {
          rec.memory_mib = slot.memory_mib;
          rec.cores = slot.core_permille;
          break;
        }
      }
    }
    return rec;
  }

  // --- Node scores ----------------------------------------------------------

  double Utilization(int node, int64_t cpu_used, int64_t mem_used,
                     const std::vector<const GpuUsage*>& gpus) const {
    const NodeInfo& n = cluster_.node(node);
    const PolicyOptions& p = options_.policy;
    double sum = 0;
    double weights = 0;
    auto dim = [&](double weight, double used, double total) {
      if (total <= 0 || weight <= 0) return;
      sum += weight * used / total;
      weights += weight;
    };
    dim(p.weight_cpu, static_cast<double>(cpu_used), static_cast<double>(n.cpu_milli));
    dim(p.weight_memory, static_cast<double>(mem_used), static_cast<double>(n.memory_bytes));
    double mem_u = 0, mem_t = 0, core_u = 0, core_t = 0;
    for (int l = 0; l < n.gpu_count; ++l) {
      const GpuInfo& gi = cluster_.gpu(n.first_gpu + l);
      const GpuUsage& u = *gpus[l];
      if (gi.mode == GpuMode::kMig) {
        const mig::GpuModel& model = *gi.mig_model;
        mem_u += static_cast<double>(std::popcount(u.busy.memory_mask)) / model.memory_slices *
                 static_cast<double>(gi.memory_mib);
        core_u += static_cast<double>(u.busy.compute_used) / model.compute_slices * kPermille;
      } else {
        mem_u += static_cast<double>(u.memory_used_mib);
        core_u += u.cores_used;
      }
      mem_t += static_cast<double>(gi.memory_mib);
      core_t += gi.cores_total;
    }
    dim(p.weight_gpu_memory, mem_u, mem_t);
    dim(p.weight_gpu_cores, core_u, core_t);
    return weights > 0 ? sum / weights : 0;
  }

  // prism's score for a pod without GPUs: the least free GPU on the node, then
  // the least CPU left after placement (best fit on CPU), as one number:
  // -(free GPU units * 2^35 + CPU left), exact in a double (free units stay
  // under 2^18 for up to 256 GPUs; CPU left is clamped to 2^35 - 1 milli-CPU).
  // FGD scores most of these placements alike (the pod changes no GPU), so
  // first fit would put them on nodes with free GPUs and strand those GPUs
  // once their CPU is gone.
  double CpuPodScore(int node, int64_t cpu_after, const std::vector<const GpuUsage*>& gpus) const {
    const NodeInfo& n = cluster_.node(node);
    int64_t gpu_free = 0;
    for (int l = 0; l < n.gpu_count; ++l) {
      gpu_free += FreeUnits(cluster_.gpu(n.first_gpu + l), *gpus[l]);
    }
    constexpr int64_t kCpuSpan = int64_t{1} << 35;
    const int64_t cpu_left = std::clamp<int64_t>(n.cpu_milli - cpu_after, 0, kCpuSpan - 1);
    return -static_cast<double>(gpu_free * kCpuSpan + cpu_left);
  }

  // The local GPUs whose state in scratch_ the pod's choice changed, into changed_gpus_.
  void CollectChangedGpus(int gpus) {
    changed_gpus_.clear();
    for (int l = 0; l < gpus; ++l) {
      const ScratchGpu& s = scratch_[l];
      bool changed = s.app_tasks > 0 || s.init_any || s.mine != 0 || s.switched ||
                     s.n_created > 0 || s.n_destroyed > 0;
      for (size_t i = 0; i < recs_.size() && !changed; ++i) changed = recs_[i].gpu == l;
      if (changed) changed_gpus_.push_back(l);
    }
  }

  // NodeFrag of the node with the pod's choice: EvaluateNode's view `after`, whose GPUs
  // changed_gpus_ differ from the node as it is.
  double NodeFragAfter(int node, int64_t cpu_after, int64_t mem_after,
                       const std::vector<const GpuUsage*>& after) {
    const double frag =
        frag_->NodeFragWithChanges(node, cpu_after, mem_after, after, changed_gpus_);
    PRISM_DCHECK(frag == frag_->NodeFrag(node, cpu_after, mem_after, after));
    return frag;
  }

  // `waste`: internal waste of the pod's MIG grants (per-mille units), which
  // fragmentation-aware policies count as fragmentation created.
  double NodeScore(const Resolved& rp, int node, const std::vector<const GpuUsage*>& after,
                   double waste) {
    const NodeInfo& n = cluster_.node(node);
    const NodeUsage& nu = cluster_.node_usage(node);
    const int64_t cpu_after = nu.cpu_used + rp.cpu;
    const int64_t mem_after = nu.memory_used + rp.memory;
    const PolicyOptions& p = options_.policy;
    switch (rp.node_policy) {
      case NodePolicy::kBinpack:
        return Utilization(node, cpu_after, mem_after, after);
      case NodePolicy::kSpread:
        return 1.0 - Utilization(node, cpu_after, mem_after, after);
      case NodePolicy::kBestFit: {
        double gpu_free = 0;
        for (int l = 0; l < n.gpu_count; ++l) {
          gpu_free += FreeUnits(cluster_.gpu(n.first_gpu + l), *after[l]);
        }
        const double gpu_left = n.gpu_count > 0 ? gpu_free / (kPermille * n.gpu_count) : 0;
        const double cpu_left =
            n.cpu_milli > 0 ? static_cast<double>(n.cpu_milli - cpu_after) / n.cpu_milli : 0;
        return -(p.bestfit_cpu_share * cpu_left + (1 - p.bestfit_cpu_share) * gpu_left);
      }
      case NodePolicy::kFgd: {
        // The paper's FGD: no MIG waste term.
        const double delta =
            (NodeFragAfter(node, cpu_after, mem_after, after) - frag_->CurrentNodeFrag(node)) /
            kPermille;
        return FragTerm(delta);
      }
      case NodePolicy::kPrism: {
        if (!rp.wants_gpu && p.cpu_pods_on_busy_gpus) return CpuPodScore(node, cpu_after, after);
        double delta = (NodeFragAfter(node, cpu_after, mem_after, after) -
                        frag_->CurrentNodeFrag(node) + waste) /
                       kPermille;
        delta += frag_->BalanceTerms(node, nu.cpu_used, cpu_after, after, p.cpu_balance,
                                     p.type_balance);
        const double frag_term = p.frag_weight * FragTerm(delta);
        if (p.pack_weight == 0) return frag_term;
        return frag_term + p.pack_weight * Utilization(node, cpu_after, mem_after, after);
      }
    }
    return 0;
  }

  // --- Node evaluation -------------------------------------------------------

  // Scores `rp` on `node`; with `keep_choice`, fills best_recs_/best_scratch_ with the best
  // variant's choice (for BuildDecision).
  bool EvaluateNode(const Resolved& rp, int node, double* score, NodeFailure* failure,
                    bool keep_choice = false) {
    const NodeInfo& n = cluster_.node(node);
    const NodeUsage& nu = cluster_.node_usage(node);
    if (nu.cpu_used + rp.cpu > n.cpu_milli || n.removed) {
      if (failure) {
        failure->node_level = true;
        failure->node_reason = Reason::kNodeInsufficientCpu;
      }
      return false;
    }
    if (nu.memory_used + rp.memory > n.memory_bytes) {
      if (failure) {
        failure->node_level = true;
        failure->node_reason = Reason::kNodeInsufficientMemory;
      }
      return false;
    }
    recs_.clear();
    // Only grown: nodes of different sizes alternate, and a resize would construct entries.
    if (scratch_.size() < static_cast<size_t>(n.gpu_count)) scratch_.resize(n.gpu_count);
    view_.resize(n.gpu_count);
    if (!rp.wants_gpu) {
      for (int l = 0; l < n.gpu_count; ++l) view_[l] = &cluster_.gpu_usage(n.first_gpu + l);
      changed_gpus_.clear();
      *score = NodeScore(rp, node, view_, 0);
      best_scratch_.clear();
      best_recs_.clear();
      return true;
    }
    bool has_slice = false;
    bool has_mig = false;
    for (int l = 0; l < n.gpu_count; ++l) {
      const GpuMode mode = cluster_.gpu(n.first_gpu + l).mode;
      has_slice = has_slice || mode == GpuMode::kHamiCore;
      has_mig = has_mig || mode == GpuMode::kMig;
    }
    const bool slice_ok = has_slice && (rp.pod.modes & kModeHamiCore);
    const bool mig_ok = has_mig && (rp.pod.modes & kModeMig);
    if (!slice_ok && !mig_ok) {
      if (failure) {
        failure->gpus = n.gpu_count;
        if (n.gpu_count == 0) {
          failure->node_level = true;
          failure->node_reason = Reason::kNodeInsufficientDevice;
        } else {
          failure->gpu_counts[static_cast<int>(Reason::kCardTypeMismatch)] =
              static_cast<int16_t>(n.gpu_count);
        }
      }
      return false;
    }
    // Variants: containers prefer slices, or prefer MIG (when both are possible).
    GpuMode prefs[2];
    int variants = 0;
    if (slice_ok) prefs[variants++] = GpuMode::kHamiCore;
    if (mig_ok) prefs[variants++] = GpuMode::kMig;
    bool found = false;
    double best_score = kInfeasible;
    bool recorded_failure = false;
    for (int v = 0; v < variants; ++v) {
      const GpuMode first = prefs[v];
      for (int l = 0; l < n.gpu_count; ++l) scratch_[l].Reset(cluster_.gpu_usage(n.first_gpu + l));
      recs_.clear();
      bool ok = true;
      for (size_t oi = 0; oi < rp.order.size() && ok; ++oi) {
        const int ci = rp.order[oi];
        reasons_.assign(n.gpu_count, kNoReason);
        for (int l = 0; l < n.gpu_count; ++l) {
          scratch_[l].container_used = false;
          if (!(rp.pod.modes & ModeBit(cluster_.gpu(n.first_gpu + l).mode))) {
            reasons_[l] = static_cast<uint8_t>(Reason::kCardTypeMismatch);
          }
        }
        bool too_few = false;
        bool placed = false;
        for (int attempt = 0; attempt < 2 && !placed; ++attempt) {
          const GpuMode mode =
              attempt == 0 ? first : (first == GpuMode::kMig ? GpuMode::kHamiCore : GpuMode::kMig);
          if (mode == GpuMode::kHamiCore ? !slice_ok : !mig_ok) continue;
          const size_t recs_before = recs_.size();
          const bool saved = attempt == 0 && variants > 1;
          if (saved) saved_scratch_.assign(scratch_.begin(), scratch_.begin() + n.gpu_count);
          placed = mode == GpuMode::kHamiCore ? PlaceSlices(rp, ci, node, &too_few)
                                              : PlaceMig(rp, static_cast<int>(oi), node);
          if (!placed) {
            recs_.resize(recs_before);
            if (saved) std::copy(saved_scratch_.begin(), saved_scratch_.end(), scratch_.begin());
          }
        }
        if (!placed) {
          ok = false;
          if (failure && !recorded_failure) {
            recorded_failure = true;
            failure->gpus = n.gpu_count;
            failure->gpu_counts = {};
            int rejected = 0;
            for (int l = 0; l < n.gpu_count; ++l) {
              if (reasons_[l] == kNoReason) continue;
              ++failure->gpu_counts[reasons_[l]];
              ++rejected;
            }
            failure->too_few_cards = too_few || rejected < n.gpu_count;
            if (n.gpu_count == 0) {
              failure->node_level = true;
              failure->node_reason = Reason::kNodeInsufficientDevice;
            }
          }
        }
      }
      if (!ok) continue;
      for (int l = 0; l < n.gpu_count; ++l) {
        // Slice contributions fold into the usage for scoring.
        const ScratchGpu& s = scratch_[l];
        if (s.app_tasks > 0 || s.init_any) scratch_[l].u = SliceUsageAfter(s);
        view_[l] = &scratch_[l].u;
      }
      double waste = 0;
      for (const DeviceRec& r : recs_) waste += r.waste;
      CollectChangedGpus(n.gpu_count);
      const double sc = NodeScore(rp, node, view_, waste);
      if (!found || sc > best_score) {
        found = true;
        best_score = sc;
        if (keep_choice) {
          best_scratch_.assign(scratch_.begin(), scratch_.begin() + n.gpu_count);
          best_recs_ = recs_;
        }
      }
    }
    if (!found) return false;
    *score = best_score;
    return true;
  }

  // Builds the decision from best_scratch_/best_recs_ of EvaluateNode.
  Decision BuildDecision(const Resolved& rp, int node, double score) const {
    const NodeInfo& n = cluster_.node(node);
    Decision d;
    d.node = node;
    d.node_name = n.name;
    d.score = score;
    d.cpu_milli = rp.cpu;
    d.memory_bytes = rp.memory;
    d.containers.resize(rp.pod.containers.size());
    for (size_t i = 0; i < rp.pod.containers.size(); ++i) {
      d.containers[i].name = rp.pod.containers[i].name;
      d.containers[i].init = rp.pod.containers[i].init;
    }
    for (const DeviceRec& r : best_recs_) {
      const int g = n.first_gpu + r.gpu;
      const GpuInfo& gi = cluster_.gpu(g);
      DeviceAssignment a;
      a.gpu = g;
      a.gpu_index = gi.index;
      a.uuid = gi.uuid;
      a.mode = r.mode;
      a.memory_mib = r.memory_mib;
      a.cores_permille = r.cores;
      if (r.mode == GpuMode::kMig) {
        const mig::GpuModel& model = *gi.mig_model;
        a.profile = r.profile;
        a.profile_name = model.profiles[r.profile].Name();
        a.start = r.start;
        a.size = model.profiles[r.profile].memory_slices;
        const GpuUsage& u = best_scratch_[r.gpu].u;
        if (gi.template_mode && u.template_index >= 0) {
          a.template_index = u.template_index;
          const auto& slots =
              cluster_.template_sets()[gi.template_set].geometries[u.template_index].slots;
          for (size_t k = 0; k < slots.size(); ++k) {
            if (slots[k].start == r.start && slots[k].profile == r.profile) {
              a.template_slot = static_cast<int32_t>(k);
            }
          }
        }
      }
      d.containers[r.container].devices.push_back(std::move(a));
    }
    for (size_t l = 0; l < best_scratch_.size(); ++l) {
      const ScratchGpu& s = best_scratch_[l];
      if (s.n_created == 0 && s.n_destroyed == 0) continue;
      MigReconfiguration m;
      m.gpu = n.first_gpu + static_cast<int32_t>(l);
      m.gpu_index = static_cast<int32_t>(l);
      m.template_index = s.switched ? s.u.template_index : -1;
      m.destroy.assign(s.destroyed.begin(), s.destroyed.begin() + s.n_destroyed);
      m.create.assign(s.created.begin(), s.created.begin() + s.n_created);
      d.mig.push_back(std::move(m));
    }
    return d;
  }

  // --- Indexes -----------------------------------------------------------------

  double ScoreOrInfeasible(const Resolved& rp, int node, NodeFailure* failure = nullptr) {
    double score = 0;
    return EvaluateNode(rp, node, &score, failure) ? score : kInfeasible;
  }

  ShapeIndex* IndexFor(const Resolved& rp, const std::string& key) {
    // A shape new during a workload switch is built for the staged workload too.
    if (staged_workload_.has_value() && !indexes_.Contains(key)) staged_indexes_.Prepare(rp, key);
    return indexes_.Get(rp, key, [this](const Resolved& r, int n, NodeFailure* f) {
      return ScoreOrInfeasible(r, n, f);
    });
  }

  // Equal scores go to the node first by name (ClusterState::node_rank).
  bool Before(int a, int b) const { return cluster_.node_rank(a) < cluster_.node_rank(b); }

  int64_t MaintainIndexes(uint64_t max_backlog, int64_t max_evaluations) {
    // During a workload switch the current indexes are only kept caught up: what they lack
    // is built for the staged workload instead.
    const bool staged = staged_workload_.has_value();
    int64_t spent = indexes_.Maintain(
        [this](const Resolved& r, int n, NodeFailure* f) { return ScoreOrInfeasible(r, n, f); },
        max_backlog, max_evaluations, /*builds=*/!staged);
    if (staged && spent < max_evaluations) {
      spent += MaintainStaged(max_backlog, max_evaluations - spent);
    }
    return spent;
  }

  // --- Entry points ---------------------------------------------------------------

  // `index`: the shape's caught-up index (its failures are read, not recomputed), or null.
  void Explain(const Resolved& rp, const ShapeIndex* index, const std::vector<int32_t>* nodes,
               ScheduleResult* result) {
    auto one = [&](int node) {
      if (node < 0 || node >= cluster_.node_count()) return;
      if (index != nullptr) {
        if (index->score[node] == kInfeasible) {
          result->failures.emplace_back(node, indexes_.FailureOf(*index, node));
        }
        return;
      }
      NodeFailure f;
      double score = 0;
      if (!EvaluateNode(rp, node, &score, &f)) result->failures.emplace_back(node, f);
    };
    if (nodes == nullptr) {
      for (int node = 0; node < cluster_.node_count(); ++node) one(node);
    } else {
      for (int32_t node : *nodes) one(node);
    }
  }

  ScheduleResult Schedule(const PodRequest& pod, const std::vector<int32_t>* nodes, bool explain) {
    ScheduleResult result;
    auto rp = Resolve(pod);
    if (!rp.ok()) {
      result.status = rp.status();
      return result;
    }
    result.nodes_considered =
        nodes == nullptr ? cluster_.node_count() : static_cast<int32_t>(nodes->size());
    int best = -1;
    double best_score = kInfeasible;
    ShapeIndex* index = nullptr;
    if (options_.use_indexes) {
      index = IndexFor(*rp, pod.ShapeKey());
      if (nodes == nullptr) {
        best = index->tree.Best();
        if (best >= 0 && index->score[best] == kInfeasible) best = -1;
        if (best >= 0) best_score = index->score[best];
      } else {
        for (int32_t n : *nodes) {
          if (n < 0 || n >= cluster_.node_count()) continue;
          const double s = index->score[n];
          if (s == kInfeasible) continue;
          if (best < 0 || s > best_score || (s == best_score && Before(n, best))) {
            best = n;
            best_score = s;
          }
        }
      }
    } else {
      auto consider = [&](int n) {
        const double s = ScoreOrInfeasible(*rp, n);
        if (s == kInfeasible) return;
        if (best < 0 || s > best_score || (s == best_score && Before(n, best))) {
          best = n;
          best_score = s;
        }
      };
      if (nodes == nullptr) {
        for (int n = 0; n < cluster_.node_count(); ++n) consider(n);
      } else {
        for (int32_t n : *nodes) {
          if (n >= 0 && n < cluster_.node_count()) consider(n);
        }
      }
    }
    if (best < 0) {
      if (explain) Explain(*rp, index, nodes, &result);
      return result;
    }
    double score = 0;
    const bool ok = EvaluateNode(*rp, best, &score, nullptr, /*keep_choice=*/true);
    PRISM_CHECK(ok);
    result.scheduled = true;
    result.decision = BuildDecision(*rp, best, score);
    return result;
  }
};

// ---------------------------------------------------------------------------

Engine::Engine(ClusterState cluster, DeviceConfig config, EngineOptions options)
    : impl_(std::make_unique<Impl>(std::move(cluster), std::move(config), std::move(options))) {}
Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

const ClusterState& Engine::cluster() const { return impl_->cluster_; }
const DeviceConfig& Engine::config() const { return impl_->config_; }
const EngineOptions& Engine::options() const { return impl_->options_; }

void Engine::SetPolicy(const PolicyOptions& policy) {
  impl_->options_.policy = policy;
  impl_->InvalidateCaches();
}

void Engine::SetTargetWorkload(TargetWorkload workload) {
  impl_->workload_ = std::move(workload);
  impl_->RebuildShapes();
}

const TargetWorkload& Engine::target_workload() const { return impl_->workload_; }

void Engine::StageTargetWorkload(TargetWorkload workload) {
  if (!impl_->options_.use_indexes) {
    SetTargetWorkload(std::move(workload));  // No index to keep: the switch costs nothing.
    return;
  }
  impl_->StageTargetWorkload(std::move(workload));
}

bool Engine::CommitStagedWorkload() { return impl_->CommitStagedWorkload(); }

const TargetWorkload* Engine::staged_target_workload() const {
  return impl_->staged_workload_.has_value() ? &*impl_->staged_workload_ : nullptr;
}

absl::Status Engine::Validate(const PodRequest& pod) const { return impl_->Resolve(pod).status(); }

ScheduleResult Engine::Schedule(const PodRequest& pod, bool explain) {
  return impl_->Schedule(pod, nullptr, explain);
}

ScheduleResult Engine::ScheduleAmong(const PodRequest& pod, const std::vector<int32_t>& nodes,
                                     bool explain) {
  return impl_->Schedule(pod, &nodes, explain);
}

ScheduleResult Engine::Place(const PodRequest& pod, bool explain) {
  ScheduleResult result = Schedule(pod, explain);
  if (!result.scheduled) return result;
  absl::Status s = Apply(pod.Key(), result.decision);
  if (!s.ok()) {
    result.scheduled = false;
    result.status = s;
  }
  return result;
}

absl::StatusOr<std::vector<NodeVerdict>> Engine::Filter(const PodRequest& pod,
                                                        const std::vector<int32_t>& nodes) {
  auto rp = impl_->Resolve(pod);
  if (!rp.ok()) return rp.status();
  for (int32_t n : nodes) {
    if (n < 0 || n >= impl_->cluster_.node_count()) {
      return absl::InvalidArgumentError(StrCat("unknown node id ", n));
    }
  }
  std::vector<NodeVerdict> out;
  out.reserve(nodes.size());
  ShapeIndex* index = nullptr;
  if (impl_->options_.use_indexes) index = impl_->IndexFor(*rp, pod.ShapeKey());
  for (int32_t n : nodes) {
    NodeVerdict v;
    v.node = n;
    double score = kInfeasible;
    if (index != nullptr) {
      score = index->score[n];
    } else {
      score = impl_->ScoreOrInfeasible(*rp, n);
    }
    if (score != kInfeasible) {
      v.feasible = true;
      v.score = score;
    } else if (index != nullptr) {
      v.failure = impl_->indexes_.FailureOf(*index, n);
    } else {
      double ignored = 0;
      impl_->EvaluateNode(*rp, n, &ignored, &v.failure);
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<Decision> Engine::Decide(const PodRequest& pod, int32_t node) {
  ASSIGN_OR_RETURN(Resolved rp, impl_->Resolve(pod));
  if (node < 0 || node >= impl_->cluster_.node_count()) {
    return absl::InvalidArgumentError(StrCat("unknown node id ", node));
  }
  double score = 0;
  NodeFailure failure;
  if (!impl_->EvaluateNode(rp, node, &score, &failure, /*keep_choice=*/true)) {
    return absl::ResourceExhaustedError(StrCat("pod ", pod.Key(), " does not fit on node ",
                                               impl_->cluster_.node(node).name, ": ",
                                               failure.ToString()));
  }
  return impl_->BuildDecision(rp, node, score);
}

absl::Status Engine::Apply(std::string_view key, const Decision& decision) {
  return impl_->cluster_.Apply(key, decision);
}

absl::Status Engine::Release(std::string_view key) { return impl_->cluster_.Release(key); }

ClusterState::NodeSnapshot Engine::SaveNode(int32_t node) const {
  return impl_->cluster_.SaveNode(node);
}

absl::Status Engine::RestoreNode(const ClusterState::NodeSnapshot& snapshot) {
  return impl_->cluster_.RestoreNode(snapshot);
}

absl::StatusOr<std::vector<std::string>> Engine::UpsertNode(const NodeSpec& spec) {
  const size_t types = impl_->cluster_.gpu_types().size();
  const size_t sets = impl_->cluster_.template_sets().size();
  ASSIGN_OR_RETURN(std::vector<std::string> dropped,
                   impl_->cluster_.UpsertNode(spec, impl_->config_));
  if (impl_->cluster_.gpu_types().size() != types ||
      impl_->cluster_.template_sets().size() != sets) {
    impl_->ClusterVocabularyGrew();
  }
  return dropped;
}

std::vector<std::string> Engine::RemoveNode(std::string_view name) {
  return impl_->cluster_.RemoveNode(name);
}

double Engine::NodeFragmentation(int32_t node) {
  return impl_->frag_->CurrentNodeFrag(node) / kPermille;
}

double Engine::ClusterFragmentation() {
  double total = 0;
  for (int n = 0; n < impl_->cluster_.node_count(); ++n) total += impl_->frag_->CurrentNodeFrag(n);
  return total / kPermille;
}

size_t Engine::CacheMemoryBytes() const {
  size_t bytes = impl_->frag_->MemoryBytes() + impl_->indexes_.MemoryBytes();
  if (impl_->staged_frag_) bytes += impl_->staged_frag_->MemoryBytes();
  return bytes + impl_->staged_indexes_.MemoryBytes();
}

Engine::IndexCounts Engine::index_counts() const {
  IndexCounts counts;
  for (const engine_internal::ShapeIndexes* set : {&impl_->indexes_, &impl_->staged_indexes_}) {
    counts.nodes_scored += set->nodes_scored();
    counts.scores_copied += set->scores_copied();
  }
  return counts;
}

int64_t Engine::MaintainIndexes(int64_t max_evaluations) {
  if (!impl_->options_.use_indexes) return 0;
  return impl_->MaintainIndexes(impl_->options_.max_index_backlog, max_evaluations);
}

size_t Engine::index_count() const { return impl_->indexes_.size(); }

absl::StatusOr<bool> Engine::PrepareIndex(const PodRequest& pod) {
  if (!impl_->options_.use_indexes) {
    RETURN_IF_ERROR(impl_->Validate(pod));
    return false;
  }
  const std::string key = pod.ShapeKey();
  // During a workload switch, what is built is for the staged workload.
  engine_internal::ShapeIndexes& indexes =
      impl_->staged_workload_.has_value() ? impl_->staged_indexes_ : impl_->indexes_;
  // Indexed already (the common case for a pod of a running shape): no resolution needed.
  if (indexes.Contains(key)) return false;
  auto rp = impl_->Resolve(pod);
  if (!rp.ok()) return rp.status();
  return indexes.Prepare(*rp, key);
}

size_t Engine::pending_index_builds() const {
  return impl_->indexes_.pending_builds() + impl_->staged_indexes_.pending_builds();
}

}  // namespace prism::sched
