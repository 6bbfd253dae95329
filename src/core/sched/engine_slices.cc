// The engine's placement of software slices (HAMi-style shares of memory and SMs) on one
// node's GPUs. Part of Engine::Impl (engine_impl.h).
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

uint8_t Engine::Impl::CommonGpuCheck(const Resolved& rp, int g, GpuMode mode) const {
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

uint8_t Engine::Impl::CheckSlice(const Resolved& rp, const ContainerRequest& c, int g,
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

GpuUsage Engine::Impl::SliceUsageAfter(const ScratchGpu& s) {
  GpuUsage u = s.u;
  u.memory_used_mib += std::max(s.app_mem, s.init_mem);
  u.cores_used += std::max(s.app_cores, s.init_cores);
  u.tasks = static_cast<int16_t>(u.tasks + std::max<int>(s.app_tasks, s.init_any ? 1 : 0));
  return u;
}

GpuPref Engine::Impl::SlicePref(GpuPolicy policy, int g, const ScratchGpu& before,
                                const ScratchGpu& after) {
  const GpuInfo& gi = cluster_.gpu(g);
  const GpuUsage ua = SliceUsageAfter(after);
  const double load = static_cast<double>(ua.tasks) / gi.split_count +
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

GpuPref Engine::Impl::FgdGpuPref(const Resolved& rp, double delta, int g, const ScratchGpu& before,
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

double Engine::Impl::FragTerm(double delta) const {
  const PolicyOptions& p = options_.policy;
  if (p.frag_resolution > 0) {
    return -p.frag_resolution * std::floor(delta / p.frag_resolution + 1e-9);
  }
  if (p.fgd_quantize) return std::floor(100.0 * Sigmoid(-delta));
  return -delta;
}

void Engine::Impl::AddSlice(ScratchGpu& s, const ContainerRequest& c, int64_t need) {
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

bool Engine::Impl::ScratchIsPristine(int gpus) const {
  for (int l = 0; l < gpus; ++l) {
    const ScratchGpu& s = scratch_[l];
    if (s.app_tasks > 0 || s.init_any || s.mine != 0 || s.switched || s.n_created > 0 ||
        s.n_destroyed > 0 || s.joined > 0) {
      return false;
    }
  }
  return true;
}

bool Engine::Impl::ChooseSliceGpus(const Resolved& rp, const ContainerRequest& c, int node) {
  const TopologyRequest& want = rp.pod.topology;
  const int count = c.gpu.count;
  // One GPU meets every tier and is on one NUMA node; but a DRA numaNode constraint needs the
  // node known even for one (numa_match).
  const bool constrained =
      c.gpu.numa_match || (count > 1 && (want.required != topo::Tier::kAny || want.numa_bind));
  const topo::NodeTopology* topology = cluster_.topology(node);
  chosen_gpus_.clear();
  if (topology == nullptr && !constrained) {
    // Topology-blind: the engine's first `count`.
    for (int k = 0; k < count; ++k) chosen_gpus_.push_back(ranked_[k].second);
    return true;
  }
  if (topology != nullptr) {
    const NodeInfo& n = cluster_.node(node);
    set_request_.count = count;
    set_request_.candidates.clear();
    set_request_.pref_class.clear();
    int pref_class = 0;
    for (size_t k = 0; k < ranked_.size(); ++k) {
      if (k > 0 && ranked_[k].first != ranked_[k - 1].first) ++pref_class;
      // A GPU whose NUMA node is unknown never matches a numaNode constraint.
      if (c.gpu.numa_match && topology->NumaNode(ranked_[k].second) == topo::kNumaUnknown) {
        continue;
      }
      set_request_.candidates.push_back(ranked_[k].second);
      set_request_.pref_class.push_back(pref_class);
    }
    set_request_.idle.assign(n.gpu_count, false);
    for (int l = 0; l < n.gpu_count; ++l) {
      if (cluster_.gpu(n.first_gpu + l).mode != GpuMode::kHamiCore) continue;
      const GpuUsage u = SliceUsageAfter(scratch_[l]);
      set_request_.idle[l] = u.tasks == 0 && u.memory_used_mib == 0 && u.cores_used == 0;
    }
    set_request_.topology_first = want.preferred;
    set_request_.required = want.required;
    set_request_.same_numa = want.numa_bind || c.gpu.numa_match;
    chosen_gpus_ = topo::ChooseGpuSet(*topology, set_request_);
    if (!chosen_gpus_.empty()) return true;
  }
  // No set meets the pod's interconnect (or the node's wiring is unknown, which meets none).
  const Reason why =
      want.required == topo::Tier::kAny ? Reason::kNumaNotFit : Reason::kTopologyNotFit;
  for (const auto& [pref, l] : ranked_) reasons_[l] = static_cast<uint8_t>(why);
  return false;
}

double Engine::Impl::FragWithGpuOnce(int node, int64_t cpu_after, int64_t mem_after, int l,
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

bool Engine::Impl::PlaceSlices(const Resolved& rp, int ci, int node, bool* too_few) {
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
      double delta = (FragWithGpuOnce(node, cpu_after, mem_after, l, s, changed) -
                      frag_->CurrentNodeFrag(node)) /
                     kPermille;
      if (rp.node_policy == NodePolicy::kPrism && options_.policy.complement != 0) {
        // The node's score counts it too (NodeScore); here it picks the GPU.
        const GpuInfo& gi = cluster_.gpu(g);
        delta +=
            options_.policy.complement *
            frag_->ComplementChange(FreeUnits(gi, SliceUsageAfter(s)), FreeUnits(gi, changed)) /
            kPermille;
      }
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
  if (!ChooseSliceGpus(rp, c, node)) return false;
  for (const int l : chosen_gpus_) {
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

}  // namespace prism::sched
