#include "core/sched/workload_fragmentation.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "core/mig/gpu_model.h"

namespace prism::sched::engine_internal {

namespace {

// Whether a shape may use GPUs of `type` (its types are substrings; none: any).
bool ShapeAllowsType(const WorkloadShape& s, std::string_view type) {
  if (s.types.empty()) return true;
  for (const std::string& t : s.types) {
    if (TypeContains(type, t)) return true;
  }
  return false;
}

// Units (per-mille) of one device a request takes: its compute share, else its memory share,
// else the whole device (a share given in MiB is not known before a GPU is chosen).
double ShareUnits(const GpuRequest& r) {
  if (r.cores_permille > 0) return std::min<int32_t>(r.cores_permille, kPermille);
  if (r.memory_permille > 0) return std::min<int32_t>(r.memory_permille, kPermille);
  return kPermille;
}

}  // namespace

void WorkloadFragmentation::SetWorkload(const TargetWorkload& workload,
                                        const CompletionOptions& completion) {
  shapes_.clear();
  weight_total_ = 0;
  double total = 0;
  for (const WorkloadShape& s : workload.shapes) total += std::max(0.0, s.weight);
  const auto& catalog = mig::Catalog();
  for (const WorkloadShape& s : workload.shapes) {
    if (s.weight <= 0 || total <= 0) continue;
    ShapeData d;
    d.shape = s;
    d.weight = s.weight / total;
    weight_total_ += d.weight;
    for (const std::string& type : cluster_->gpu_types()) {
      d.type_ok.push_back(ShapeAllowsType(s, type) ? 1 : 0);
    }
    for (const mig::GpuModel& model : catalog) {
      d.mig_candidates.push_back(MigCandidates(model, s.gpu, config_->mig_match_cores));
      uint32_t fit = 0;
      for (int8_t p : d.mig_candidates.back()) fit |= 1u << p;
      d.profile_fit.push_back(fit);
    }
    for (const TemplateSet& ts : cluster_->template_sets()) {
      std::vector<uint32_t> per_geometry;
      int32_t best_usable = 0;
      int32_t best_capacity = 0;
      for (const PlacedGeometry& geo : ts.geometries) {
        uint32_t mask = 0;
        int32_t usable = 0;
        int32_t capacity = 0;
        for (const PlacedGeometry::Slot& slot : geo.slots) {
          if (SlotFits(*ts.model, slot.profile, slot.memory_mib, s.gpu, config_->mig_match_cores)) {
            mask |= 1u << slot.entry;
            usable += MigProfileCorePermille(*ts.model, slot.profile);
            ++capacity;
          }
        }
        per_geometry.push_back(mask);
        if (usable > best_usable || (usable == best_usable && capacity > best_capacity)) {
          best_usable = usable;
          best_capacity = capacity;
        }
      }
      d.entry_fit.push_back(std::move(per_geometry));
      d.idle_usable.push_back(std::min(best_usable, kPermille));
      d.idle_capacity.push_back(best_capacity);
    }
    shapes_.push_back(std::move(d));
  }
  AssignShapeGroups();
  ComputeBalanceMeasures(workload);
  ComputeFillable(completion);
  Invalidate();
}

void WorkloadFragmentation::ComputeBalanceMeasures(const TargetWorkload& workload) {
  // From the workload alone (its shapes and its GPUs per type name), not from the cluster's
  // GPU type ids, which a long-running engine and a rebuilt one may number differently.
  const auto& by_type = workload.gpus_by_type;
  // A shape's demand spread over the GPUs it may use: a shape allowed one small type presses
  // hard on it, a shape allowed every type presses on each a little.
  std::vector<double> pressure(by_type.size(), 0);
  double cpu = 0;
  double units = 0;
  for (const ShapeData& d : shapes_) {
    if (d.shape.gpu_count <= 0) continue;
    const double shape_units = d.shape.gpu_count * ShareUnits(d.shape.gpu);
    cpu += d.weight * static_cast<double>(d.shape.cpu_milli);
    units += d.weight * shape_units;
    double allowed = 0;
    for (const auto& [type, gpus] : by_type) {
      if (gpus > 0 && ShapeAllowsType(d.shape, type)) {
        allowed += static_cast<double>(gpus) * kPermille;
      }
    }
    if (allowed <= 0) continue;
    for (size_t i = 0; i < by_type.size(); ++i) {
      if (by_type[i].second > 0 && ShapeAllowsType(d.shape, by_type[i].first)) {
        pressure[i] += d.weight * shape_units / allowed;
      }
    }
  }
  cpu_per_gpu_unit_ = units > 0 ? cpu / units : 0;
  double least = 0;
  for (size_t i = 0; i < by_type.size(); ++i) {
    if (by_type[i].second > 0 && (least == 0 || pressure[i] < least)) least = pressure[i];
  }
  const std::vector<std::string>& names = cluster_->gpu_types();
  type_scarcity_.assign(names.size(), 0);
  for (size_t i = 0; i < by_type.size(); ++i) {
    auto it = std::find(names.begin(), names.end(), by_type[i].first);
    if (it == names.end() || by_type[i].second <= 0 || least <= 0) continue;
    type_scarcity_[it - names.begin()] = pressure[i] / least - 1;
  }
}

void WorkloadFragmentation::ComputeFillable(const CompletionOptions& completion) {
  // The shares and what their shapes weigh together.
  std::vector<std::pair<int32_t, double>> shares;
  for (const ShapeData& d : shapes_) {
    const GpuRequest& r = d.shape.gpu;
    // A share given in MiB has no size before a GPU is chosen: it fills nothing here.
    if (d.shape.gpu_count <= 0 || (r.memory_mib > 0 && r.cores_permille <= 0)) continue;
    const int32_t share = static_cast<int32_t>(ShareUnits(r));
    if (share <= 0) continue;
    auto it = std::find_if(shares.begin(), shares.end(),
                           [share](const auto& s) { return s.first == share; });
    if (it == shares.end()) {
      shares.emplace_back(share, d.weight);
    } else {
      it->second += d.weight;
    }
  }
  // The fewest shares (each as often as it likes) that sum to exactly u units, 1,000 x distinct
  // shares steps, once per workload; sums of more than `max_pods` do not count.
  constexpr int kNever = kPermille + 1;
  std::vector<int> fewest(kPermille + 1, kNever);
  fewest[0] = 0;
  for (const auto& [share, weight] : shares) {
    if (weight < completion.min_share) continue;
    for (int32_t u = share; u <= kPermille; ++u) {
      fewest[u] = std::min(fewest[u], fewest[u - share] + 1);
    }
  }
  const int limit = completion.max_pods > 0 ? completion.max_pods : kPermille;
  any_share_ = false;
  for (const auto& [share, weight] : shares)
    any_share_ = any_share_ || weight >= completion.min_share;
  for (int32_t u = 0, best = 0; u <= kPermille; ++u) {
    if (fewest[u] <= limit) best = u;
    fillable_[u] = best;
  }
  for (int32_t s = 0; s <= kPermille; ++s) {
    int32_t worst = 0;
    for (int32_t f = s; f < kPermille; ++f) {
      worst = std::max(worst, CompletionWaste(f - s) - CompletionWaste(f));
    }
    const int32_t plain = CompletionWaste(kPermille - s) - CompletionWaste(kPermille);
    worst_change_[s] =
        static_cast<int32_t>(std::lround(completion.idle * worst + (1 - completion.idle) * plain));
  }
}

double WorkloadFragmentation::BalanceTerms(int node, int64_t cpu_before, int64_t cpu_after,
                                           const std::vector<const GpuUsage*>& after,
                                           double cpu_weight, double type_weight) {
  // Without shapes both measures are 0.
  if ((cpu_weight == 0 && type_weight == 0) || shapes_.empty()) return 0;
  const NodeInfo& n = cluster_->node(node);
  const NodeParts& parts = CurrentParts(node);  // Free units as the node is, cached.
  const int64_t free_before = parts.total_free;
  int64_t free_after = 0;
  double scarce_taken = 0;
  for (int l = 0; l < n.gpu_count; ++l) {
    const int g = n.first_gpu + l;
    const int32_t now = FreeUnits(cluster_->gpu(g), *after[l]);
    free_after += now;
    scarce_taken += type_scarcity(cluster_->gpu_type_id(g)) * (parts.free(l) - now);
  }
  double terms = type_weight * scarce_taken;
  if (cpu_weight != 0 && cpu_per_gpu_unit_ > 0) {
    auto short_units = [&](int64_t free, int64_t cpu_used) {
      const double servable = static_cast<double>(n.cpu_milli - cpu_used) / cpu_per_gpu_unit_;
      return std::max(0.0, static_cast<double>(free) - servable);
    };
    terms +=
        cpu_weight * (short_units(free_after, cpu_after) - short_units(free_before, cpu_before));
  }
  return terms / kPermille;
}

double WorkloadFragmentation::ComplementTerm(int node, const std::vector<const GpuUsage*>& after,
                                             const std::vector<int>& changed, double weight) {
  if (weight == 0 || !any_share_) return 0;
  const NodeInfo& n = cluster_->node(node);
  const NodeParts& parts = CurrentParts(node);  // Free units as the node is, cached.
  int64_t change = 0;
  for (const int l : changed) {
    const GpuInfo& gi = cluster_->gpu(n.first_gpu + l);
    if (gi.mode != GpuMode::kHamiCore) continue;
    change += ComplementChange(parts.free(l), FreeUnits(gi, *after[l]));
  }
  return weight * static_cast<double>(change) / kPermille;
}

// Groups the GPU shapes by per-device request and type filter (everything UsableFor reads
// of a shape); a shape without GPUs keeps group -1.
void WorkloadFragmentation::AssignShapeGroups() {
  group_first_.clear();
  for (size_t k = 0; k < shapes_.size(); ++k) {
    ShapeData& d = shapes_[k];
    d.group = -1;
    if (d.shape.gpu_count == 0) continue;
    for (size_t g = 0; g < group_first_.size(); ++g) {
      const WorkloadShape& first = shapes_[group_first_[g]].shape;
      if (first.gpu == d.shape.gpu && first.types == d.shape.types) {
        d.group = static_cast<int32_t>(g);
        break;
      }
    }
    if (d.group < 0) {
      d.group = static_cast<int32_t>(group_first_.size());
      group_first_.push_back(static_cast<int32_t>(k));
    }
  }
  terms_.clear();
  for (const ShapeData& d : shapes_) {
    terms_.push_back(
        {d.weight, d.shape.cpu_milli, d.shape.memory_bytes, d.shape.gpu_count, d.group});
  }
  group_done_.assign(group_first_.size(), 0);
  group_unusable_.assign(group_first_.size(), 0);
  group_capacity_.assign(group_first_.size(), 0);
  group_usable_.assign(group_first_.size(), 0);
}

void WorkloadFragmentation::Invalidate() {
  occ_cache_.clear();
  last_occ_ = nullptr;
  frag_cache_.assign(cluster_->node_count(), {0, 0});
  parts_cache_.assign(cluster_->node_count(), NodeParts{});
  base_node_ = -1;
}

// --- Per-GPU measures ----------------------------------------------------------

const OccEntry& WorkloadFragmentation::Occ(int type_id, const mig::GpuModel& model,
                                           const mig::Occupancy& occ) {
  OccKey key{type_id, occ};
  // The groups of one NodeFrag ask for one GPU state in a row.
  if (last_occ_ != nullptr && last_occ_->first == key) return last_occ_->second;
  auto it = occ_cache_.find(key);
  if (it != occ_cache_.end()) {
    last_occ_ = &*it;
    return it->second;
  }
  OccEntry e;
  for (size_t p = 0; p < model.profiles.size(); ++p) {
    e.max_add[p] = static_cast<int8_t>(mig::MaxAdditional(model, occ, static_cast<int>(p)));
  }
  e.free_space_utility = mig::FreeSpaceUtility(model, occ);
  const int32_t free = (model.compute_slices - occ.compute_used) * kPermille / model.compute_slices;
  std::vector<int8_t> scratch;
  for (const ShapeData& s : shapes_) {
    if (s.shape.gpu_count == 0 || !s.type_ok[type_id]) continue;
    for (int8_t p :
         CandidatesOf(s.mig_candidates, model, s.shape.gpu, config_->mig_match_cores, &scratch)) {
      const int n = e.max_add[p];
      if (n <= 0) continue;
      e.workload_usable += s.weight * std::min(free, n * MigProfileCorePermille(model, p));
      break;
    }
  }
  last_occ_ = &*occ_cache_.emplace(key, e).first;
  return last_occ_->second;
}

int32_t FreeUnits(const GpuInfo& gi, const GpuUsage& u) {
  if (!gi.healthy) return 0;
  if (gi.mode == GpuMode::kMig) {
    const int cs = gi.mig_model->compute_slices;
    return (cs - u.busy.compute_used) * kPermille / cs;
  }
  if (u.tasks >= gi.split_count) return 0;
  const int64_t mem_free = (gi.memory_mib - u.memory_used_mib) * kPermille / gi.memory_mib;
  const int64_t core_free =
      static_cast<int64_t>(gi.cores_total - u.cores_used) * kPermille / gi.cores_total;
  return static_cast<int32_t>(std::max<int64_t>(0, std::min(mem_free, core_free)));
}

std::pair<int32_t, int32_t> WorkloadFragmentation::UsableFor(const ShapeData& s, int g,
                                                             const GpuUsage& u, int32_t free) {
  const GpuInfo& gi = cluster_->gpu(g);
  if (free <= 0 || !s.type_ok[cluster_->gpu_type_id(g)]) return {0, 0};
  const GpuRequest& r = s.shape.gpu;
  if (gi.mode == GpuMode::kHamiCore) {
    const int64_t need = DeviceMemoryNeed(r, gi.memory_mib);
    if (u.memory_used_mib + need > gi.memory_mib) return {0, 0};
    if (r.cores_permille > 0) {
      if (u.cores_used + r.cores_permille > gi.cores_total) return {0, 0};
    } else if (u.cores_used >= gi.cores_total) {
      return {0, 0};
    }
    if (r.cores_permille >= kPermille && gi.cores_total == kPermille && u.tasks > 0) {
      return {0, 0};
    }
    return {free, 1};
  }
  const mig::GpuModel& model = *gi.mig_model;
  const int cat = CatalogIndex(&model);
  std::vector<int8_t> scratch;
  const std::vector<int8_t>& candidates =
      CandidatesOf(s.mig_candidates, model, r, config_->mig_match_cores, &scratch);
  if (!gi.template_mode && !gi.fixed_layout) {
    const OccEntry& e = Occ(cluster_->gpu_type_id(g), model, u.busy);
    for (int8_t p : candidates) {
      if (!(gi.allowed_profiles & (1u << p))) continue;
      const int n = e.max_add[p];
      if (n <= 0) continue;
      return {std::min(free, n * MigProfileCorePermille(model, p)), n};
    }
    return {0, 0};
  }
  if (!u.HasBusyInstance() && !gi.fixed_layout) {
    return {std::min(free, s.idle_usable[gi.template_set]), s.idle_capacity[gi.template_set]};
  }
  int32_t usable = 0;
  int32_t capacity = 0;
  for (int i = 0; i < u.instance_count; ++i) {
    const MigInstance& inst = u.instances[i];
    if (inst.Busy()) continue;
    const bool fits = (u.template_index >= 0 && inst.entry >= 0)
                          ? (s.entry_fit[gi.template_set][u.template_index] >> inst.entry) & 1
                          : (cat >= 0 ? (s.profile_fit[cat] >> inst.profile) & 1
                                      : std::find(candidates.begin(), candidates.end(),
                                                  inst.profile) != candidates.end());
    if (!fits) continue;
    usable += MigProfileCorePermille(model, inst.profile);
    ++capacity;
  }
  return {std::min(free, usable), capacity};
}

int32_t WorkloadFragmentation::GroupUsable(const ShapeData& s, int g, const GpuUsage& u,
                                           int32_t free) {
  if (!group_done_[s.group]) {
    group_done_[s.group] = 1;
    group_usable_[s.group] = UsableFor(s, g, u, free).first;
  }
  return group_usable_[s.group];
}

double WorkloadFragmentation::GpuFrag(int g, const GpuUsage& u) {
  if (shapes_.empty()) return 0;
  const int32_t free = FreeUnits(cluster_->gpu(g), u);
  if (free <= 0) return 0;
  std::fill(group_done_.begin(), group_done_.end(), 0);
  double frag = 0;
  for (const ShapeData& s : shapes_) {
    if (s.shape.gpu_count == 0) {
      frag += s.weight * free;
      continue;
    }
    frag += s.weight * (free - GroupUsable(s, g, u, free));
  }
  return frag;
}

double WorkloadFragmentation::TemplateUsable(int g, const GpuUsage& u) {
  if (shapes_.empty()) return 0;
  const int32_t free = FreeUnits(cluster_->gpu(g), u);
  std::fill(group_done_.begin(), group_done_.end(), 0);
  double total = 0;
  for (const ShapeData& s : shapes_) {
    if (s.shape.gpu_count == 0) continue;
    total += s.weight * GroupUsable(s, g, u, free);
  }
  return total;
}

// --- Per-node measures ----------------------------------------------------------

template <typename ComputeGroup>
double WorkloadFragmentation::SumOverShapes(int64_t total_free, int64_t cpu_free, int64_t mem_free,
                                            ComputeGroup compute_group) {
  std::fill(group_done_.begin(), group_done_.end(), 0);
  double frag = 0;
  for (const ShapeTerm& t : terms_) {
    if (t.gpu_count == 0 || cpu_free < t.cpu_milli || mem_free < t.memory_bytes) {
      frag += t.weight * static_cast<double>(total_free);
      continue;
    }
    const int k = t.group;
    if (!group_done_[k]) {
      group_done_[k] = 1;
      // Sets group_unusable_[k] and group_capacity_[k].
      compute_group(k, shapes_[group_first_[k]]);
    }
    frag += t.weight * static_cast<double>(group_capacity_[k] >= t.gpu_count ? group_unusable_[k]
                                                                             : total_free);
  }
  return frag;
}

double WorkloadFragmentation::NodeFrag(int node, int64_t cpu_used, int64_t mem_used,
                                       const std::vector<const GpuUsage*>& gpus) {
  if (shapes_.empty()) return 0;
  const NodeInfo& n = cluster_->node(node);
  int32_t free[256];
  const int count = std::min<int>(n.gpu_count, 256);
  int64_t total_free = 0;
  for (int l = 0; l < count; ++l) {
    free[l] = FreeUnits(cluster_->gpu(n.first_gpu + l), *gpus[l]);
    total_free += free[l];
  }
  if (total_free == 0) return 0;
  return SumOverShapes(total_free, n.cpu_milli - cpu_used, n.memory_bytes - mem_used,
                       [&](int k, const ShapeData& s) {
                         int64_t unusable = 0;
                         int32_t capacity = 0;
                         for (int l = 0; l < count; ++l) {
                           const auto [usable, cap] =
                               UsableFor(s, n.first_gpu + l, *gpus[l], free[l]);
                           unusable += free[l] - usable;
                           capacity += cap;
                         }
                         group_unusable_[k] = unusable;
                         group_capacity_[k] = capacity;
                       });
}

void WorkloadFragmentation::ComputeParts(int node, const std::vector<const GpuUsage*>& gpus,
                                         NodeParts* parts) {
  const NodeInfo& n = cluster_->node(node);
  const int count = n.gpu_count;
  const int k_count = groups();
  parts->gpus = count;
  parts->per_gpu.assign(static_cast<size_t>(count) * (1 + 2 * k_count), 0);
  parts->per_group.assign(2 * static_cast<size_t>(k_count), 0);
  parts->total_free = 0;
  for (int l = 0; l < count; ++l) {
    const int32_t free = FreeUnits(cluster_->gpu(n.first_gpu + l), *gpus[l]);
    parts->per_gpu[l] = free;
    parts->total_free += free;
  }
  for (int k = 0; k < k_count; ++k) {
    const ShapeData& s = shapes_[group_first_[k]];
    int64_t unusable = 0;
    int64_t capacity = 0;
    for (int l = 0; l < count; ++l) {
      const int32_t free = parts->per_gpu[l];
      const auto [usable, cap] = UsableFor(s, n.first_gpu + l, *gpus[l], free);
      parts->per_gpu[static_cast<size_t>(count) * (1 + k) + l] = usable;
      parts->per_gpu[static_cast<size_t>(count) * (1 + k_count + k) + l] = cap;
      unusable += free - usable;
      capacity += cap;
    }
    parts->per_group[k] = unusable;
    parts->per_group[k_count + k] = capacity;
  }
}

const WorkloadFragmentation::NodeParts& WorkloadFragmentation::CurrentParts(int node) {
  if (parts_cache_.size() != static_cast<size_t>(cluster_->node_count())) {
    parts_cache_.resize(cluster_->node_count());  // Nodes were added.
  }
  NodeParts& parts = parts_cache_[node];
  const uint64_t now = cluster_->node_usage(node).version + 1;
  if (parts.version == now) return parts;
  const NodeInfo& n = cluster_->node(node);
  current_view_.resize(n.gpu_count);
  for (int l = 0; l < n.gpu_count; ++l) current_view_[l] = &cluster_->gpu_usage(n.first_gpu + l);
  ComputeParts(node, current_view_, &parts);
  parts.version = now;
  return parts;
}

double WorkloadFragmentation::CurrentNodeFrag(int node) {
  if (frag_cache_.size() != static_cast<size_t>(cluster_->node_count())) {
    frag_cache_.resize(cluster_->node_count(), {0, 0});  // Nodes were added.
  }
  auto& [version, value] = frag_cache_[node];
  const uint64_t now = cluster_->node_usage(node).version + 1;
  if (version == now) return value;
  const NodeUsage& nu = cluster_->node_usage(node);
  static const std::vector<int> kNoChange;
  value = NodeFragWithChanges(node, nu.cpu_used, nu.memory_used, current_view_, kNoChange);
  version = now;
  return value;
}

double WorkloadFragmentation::NodeFragWithChanges(int node, int64_t cpu_used, int64_t mem_used,
                                                  const std::vector<const GpuUsage*>& gpus,
                                                  const std::vector<int>& changed) {
  if (shapes_.empty()) return 0;
  const NodeParts& parts = CurrentParts(node);
  const NodeInfo& n = cluster_->node(node);
  const int k_count = groups();
  changed_free_.resize(changed.size());
  int64_t total_free = parts.total_free;
  for (size_t i = 0; i < changed.size(); ++i) {
    const int l = changed[i];
    changed_free_[i] = FreeUnits(cluster_->gpu(n.first_gpu + l), *gpus[l]);
    total_free += changed_free_[i] - parts.free(l);
  }
  if (total_free == 0) return 0;
  return SumOverShapes(total_free, n.cpu_milli - cpu_used, n.memory_bytes - mem_used,
                       [&](int k, const ShapeData& s) {
                         int64_t unusable = parts.unusable(k);
                         int32_t capacity = parts.capacity_sum(k, k_count);
                         for (size_t i = 0; i < changed.size(); ++i) {
                           const int l = changed[i];
                           const int32_t free = changed_free_[i];
                           const auto [usable, cap] = UsableFor(s, n.first_gpu + l, *gpus[l], free);
                           unusable += (free - usable) - (parts.free(l) - parts.usable(k, l));
                           capacity += cap - parts.capacity(k, l, k_count);
                         }
                         group_unusable_[k] = unusable;
                         group_capacity_[k] = capacity;
                       });
}

void WorkloadFragmentation::FragBase(int node, const std::vector<const GpuUsage*>& gpus) {
  ComputeParts(node, gpus, &view_parts_);
  base_node_ = -1;
}

void WorkloadFragmentation::FragBaseCurrent(int node) {
  CurrentParts(node);
  base_node_ = node;
}

const WorkloadFragmentation::NodeParts& WorkloadFragmentation::base() const {
  return base_node_ >= 0 ? parts_cache_[base_node_] : view_parts_;
}

double WorkloadFragmentation::FragWithGpu(int node, int64_t cpu_after, int64_t mem_after, int l,
                                          const GpuUsage& changed) {
  const NodeParts& parts = base();
  const NodeInfo& n = cluster_->node(node);
  const int g = n.first_gpu + l;
  const int k_count = groups();
  const int32_t free = FreeUnits(cluster_->gpu(g), changed);
  const int64_t total_free = parts.total_free - parts.free(l) + free;
  if (total_free == 0) return 0;
  return SumOverShapes(
      total_free, n.cpu_milli - cpu_after, n.memory_bytes - mem_after,
      [&](int k, const ShapeData& s) {
        const auto [usable, cap] = UsableFor(s, g, changed, free);
        group_unusable_[k] =
            parts.unusable(k) - (parts.free(l) - parts.usable(k, l)) + (free - usable);
        group_capacity_[k] = parts.capacity_sum(k, k_count) - parts.capacity(k, l, k_count) + cap;
      });
}

size_t WorkloadFragmentation::MemoryBytes() const {
  size_t bytes = frag_cache_.capacity() * sizeof(std::pair<uint64_t, double>);
  bytes += occ_cache_.size() * (sizeof(OccKey) + sizeof(OccEntry) + 2 * sizeof(void*));
  bytes += parts_cache_.capacity() * sizeof(NodeParts);
  for (const NodeParts& p : parts_cache_) {
    bytes += p.per_gpu.capacity() * sizeof(int32_t) + p.per_group.capacity() * sizeof(int64_t);
  }
  return bytes;
}

}  // namespace prism::sched::engine_internal
