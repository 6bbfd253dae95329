// The engine's evaluation of one node for a pod: its containers placed on the GPUs, the node
// scored, and the decision built. Part of Engine::Impl (engine_impl.h).
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
#include "core/sched/engine_impl.h"

namespace prism::sched {

double Engine::Impl::Utilization(int node, int64_t cpu_used, int64_t mem_used,
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

double Engine::Impl::CpuPodScore(int node, int64_t cpu_after,
                                 const std::vector<const GpuUsage*>& gpus) const {
  const NodeInfo& n = cluster_.node(node);
  int64_t gpu_free = 0;
  for (int l = 0; l < n.gpu_count; ++l) {
    gpu_free += FreeUnits(cluster_.gpu(n.first_gpu + l), *gpus[l]);
  }
  constexpr int64_t kCpuSpan = int64_t{1} << 35;
  const int64_t cpu_left = std::clamp<int64_t>(n.cpu_milli - cpu_after, 0, kCpuSpan - 1);
  return -static_cast<double>(gpu_free * kCpuSpan + cpu_left);
}

void Engine::Impl::CollectChangedGpus(int gpus) {
  changed_gpus_.clear();
  for (int l = 0; l < gpus; ++l) {
    const ScratchGpu& s = scratch_[l];
    bool changed = s.app_tasks > 0 || s.init_any || s.mine != 0 || s.switched || s.n_created > 0 ||
                   s.n_destroyed > 0 || s.joined > 0;
    for (size_t i = 0; i < recs_.size() && !changed; ++i) changed = recs_[i].gpu == l;
    if (changed) changed_gpus_.push_back(l);
  }
}

double Engine::Impl::NodeFragAfter(int node, int64_t cpu_after, int64_t mem_after,
                                   const std::vector<const GpuUsage*>& after) {
  const double frag = frag_->NodeFragWithChanges(node, cpu_after, mem_after, after, changed_gpus_);
  PRISM_DCHECK(frag == frag_->NodeFrag(node, cpu_after, mem_after, after));
  return frag;
}

double Engine::Impl::NodeScore(const Resolved& rp, int node,
                               const std::vector<const GpuUsage*>& after, double waste) {
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
      delta +=
          frag_->BalanceTerms(node, nu.cpu_used, cpu_after, after, p.cpu_balance, p.type_balance);
      delta += frag_->ComplementTerm(node, after, changed_gpus_, p.complement);
      const double frag_term = p.frag_weight * FragTerm(delta);
      if (p.pack_weight == 0) return frag_term;
      return frag_term + p.pack_weight * Utilization(node, cpu_after, mem_after, after);
    }
  }
  return 0;
}

int Engine::Impl::TopologyGrade(int node) const {
  const topo::NodeTopology* topology = cluster_.topology(node);
  if (topology == nullptr) return 0;
  int grade = -1;  // No multi-GPU container yet.
  std::vector<int> gpus;
  for (size_t i = 0; i < recs_.size(); ++i) {
    // recs_ holds each container's devices together.
    if (i > 0 && recs_[i].container == recs_[i - 1].container) continue;
    gpus.clear();
    for (size_t j = i; j < recs_.size() && recs_[j].container == recs_[i].container; ++j) {
      if (std::find(gpus.begin(), gpus.end(), recs_[j].gpu) == gpus.end()) {
        gpus.push_back(recs_[j].gpu);
      }
    }
    if (gpus.size() < 2) continue;
    bool one_numa = true;
    for (int g : gpus) {
      one_numa = one_numa && topology->NumaNode(g) != topo::kNumaUnknown &&
                 topology->NumaNode(g) == topology->NumaNode(gpus[0]);
    }
    const int container_grade =
        2 * static_cast<int>(topo::SetTier(*topology, gpus)) + (one_numa ? 1 : 0);
    grade = grade < 0 ? container_grade : std::min(grade, container_grade);
  }
  return std::max(grade, 0);
}

namespace {

bool MultiGpu(const Resolved& rp) {
  for (int ci : rp.order) {
    if (rp.pod.containers[ci].gpu.count > 1) return true;
  }
  return false;
}

}  // namespace

double Engine::Impl::TopologyTerms(const Resolved& rp, int node) const {
  const PolicyOptions& p = options_.policy;
  if (!MultiGpu(rp)) return p.topology_harm == 0 ? 0 : -p.topology_harm * BrokenNvLinkPairs(node);
  if (p.topology_weight == 0) return 0;
  const int grade = TopologyGrade(node);
  if (grade > 0 && (!p.topology_whole_node || p.topology_whole_weight != 1.0)) {
    // A pod taking every GPU of the node chooses no set, only the machine (PolicyOptions).
    const NodeInfo& n = cluster_.node(node);
    int taken = 0;
    for (int l = 0; l < n.gpu_count; ++l) {
      taken += std::any_of(recs_.begin(), recs_.end(), [l](const DeviceRec& r) { return r.gpu == l; });
    }
    if (taken == n.gpu_count) {
      return p.topology_whole_node ? p.topology_whole_weight * p.topology_weight * grade : 0;
    }
  }
  return p.topology_weight * grade;
}

int Engine::Impl::BrokenNvLinkPairs(int node) const {
  const topo::NodeTopology* topology = cluster_.topology(node);
  const NodeInfo& n = cluster_.node(node);
  if (topology == nullptr) return 0;
  auto idle = [](const GpuUsage& u) {
    return u.tasks == 0 && u.memory_used_mib == 0 && u.cores_used == 0;
  };
  int broken = 0;
  for (int l = 0; l < n.gpu_count; ++l) {
    const GpuInfo& gi = cluster_.gpu(n.first_gpu + l);
    if (gi.mode != GpuMode::kHamiCore || !idle(cluster_.gpu_usage(n.first_gpu + l)) ||
        idle(*view_[l])) {
      continue;  // Not a GPU this pod takes from idle.
    }
    for (int m = 0; m < n.gpu_count; ++m) {
      if (m != l && cluster_.gpu(n.first_gpu + m).mode == GpuMode::kHamiCore &&
          idle(*view_[m]) && topology->Link(l, m).nvlink()) {
        ++broken;
        break;
      }
    }
  }
  return broken;
}

bool Engine::Impl::EvaluateNode(const Resolved& rp, int node, double* score, NodeFailure* failure,
                                bool keep_choice) {
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
    double sc = NodeScore(rp, node, view_, waste);
    // Interconnect over packing when the pod asks (TopologyRequest::preferred): scores of one
    // pod stay far below this weight (fragmentation in GPUs, utilization in [0, 1]).
    if (rp.pod.topology.preferred) {
      sc += kTopologyGradeWeight * TopologyGrade(node);
    } else if (rp.node_policy == NodePolicy::kPrism && cluster_.topology(node) != nullptr) {
      sc += TopologyTerms(rp, node);
    }
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

Decision Engine::Impl::BuildDecision(const Resolved& rp, int node, double score) const {
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
    a.shared = r.shared;
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

}  // namespace prism::sched
