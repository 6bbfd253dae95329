// HAMi's two dynamic-MIG generations as placement policies on MIG GPUs
// (../shared/reference/hami.md §3, §5; docs/simulator.md "HAMi baselines").
//
// Both use HAMi's default scheduler policies: node binpack (the node whose
// devices are most used) and GPU spread (the least-used GPU that fits), with
// HAMi's usage score  used_pods / split_count + used_cores / 100 + used_mem /
// total_mem  per GPU (summed over the node's GPUs for the node score). Pods
// without GPUs are not HAMi's: kube-scheduler's defaults place them
// (LeastAllocated + BalancedAllocation).
//
// Memory is compared in memory slices (MigMapping::kMemory), so that every
// policy agrees on which instance serves a share.
//
// hami-legacy (v2.4-v2.9, `knownMigGeometries`): an idle GPU takes the first
//   geometry (in config order) with a template whose memory >= the request and
//   the pod gets the first such slot; a GPU with an instance in use keeps its
//   geometry and hands out its first free slot with enough memory. Changing an
//   idle GPU's geometry destroys all its instances and creates the new ones;
//   instances outlive their pods.
// hami-v2.10 (`migProfileAllowlist`, reservation-first): the smallest allowed
//   profile (by memory, then slices) with memory >= the request that has a free
//   legal placement, trying 1g/3g from the highest start down and the others
//   from the lowest up; the instance is created for the pod and destroyed when
//   it leaves.
#include <algorithm>
#include <cmath>

#include "base/strings.h"
#include "sim/builtin_policies.h"
#include "sim/policy_util.h"

namespace prism::sim {
namespace {

constexpr double kSplitCount = 10;  // HAMi's deviceSplitCount default.

struct Slot {
  int profile = -1;
  int start = 0;
};
using Geometry = std::vector<Slot>;  // Flattened in config order.

// The base profile (no media extensions, least memory) with `slices` slices.
int BaseProfile(const mig::GpuModel& model, int slices) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(model.profiles.size()); ++i) {
    const auto& p = model.profiles[i];
    if (p.compute_slices != slices || p.HasMediaExtensions() || p.name.attrs != mig::kAttrNone) {
      continue;
    }
    if (best < 0 || p.memory_mib < model.profiles[best].memory_mib) best = i;
  }
  return best;
}

// HAMi's chart geometries for 7-slice GPUs: [7 x 1g], [1 x 1g + 3 x 2g],
// [2 x 3g], [1 x 7g]; placed the way NVML's default placements do.
absl::StatusOr<std::vector<Geometry>> LegacyGeometries(const mig::GpuModel& model) {
  const int p1 = BaseProfile(model, 1), p2 = BaseProfile(model, 2), p3 = BaseProfile(model, 3),
            p7 = BaseProfile(model, 7);
  if (model.compute_slices != 7 || p1 < 0 || p2 < 0 || p3 < 0 || p7 < 0) {
    return absl::InvalidArgumentError(
        StrCat("HAMi's legacy MIG geometries are defined for 7-slice GPUs; ", model.name, " has ",
               model.compute_slices, " compute slices"));
  }
  const std::vector<std::vector<int>> configs = {
      {p1, p1, p1, p1, p1, p1, p1}, {p1, p2, p2, p2}, {p3, p3}, {p7}};
  std::vector<Geometry> out;
  for (const std::vector<int>& config : configs) {
    auto placed = mig::PlaceProfiles(model, {}, config);
    if (!placed.ok()) return placed.status();
    std::vector<mig::Instance> pool = *placed;
    std::sort(pool.begin(), pool.end(),
              [](const mig::Instance& a, const mig::Instance& b) { return a.start < b.start; });
    Geometry g;
    for (int profile : config) {
      auto it = std::find_if(pool.begin(), pool.end(),
                             [&](const mig::Instance& i) { return i.profile == profile; });
      g.push_back(Slot{profile, it->start});
      pool.erase(it);
    }
    out.push_back(std::move(g));
  }
  return out;
}

int CorePercent(const mig::GpuModel& model, int profile) {
  int max_sms = 1;
  for (const auto& p : model.profiles) max_sms = std::max(max_sms, p.multiprocessors);
  return (model.profiles[profile].multiprocessors * 100 + max_sms - 1) / max_sms;
}

class HamiMigPolicy : public Policy {
 public:
  explicit HamiMigPolicy(bool gpu_binpack) : gpu_binpack_(gpu_binpack) {}

  absl::Status Begin(const RunContext& context) override {
    node_rank_ = &context.workload->node_rank;
    auto model = TheMigModel(context, name());
    if (!model.ok()) return model.status();
    model_ = *model;
    if (context.mig_mapping != MigMapping::kMemory) {
      return absl::InvalidArgumentError(StrCat(
          "HAMi matches MIG instances by memory only; use the memory mapping for '", name(), "'"));
    }
    cores_.clear();
    for (int p = 0; p < static_cast<int>(model_->profiles.size()); ++p) {
      cores_.push_back(CorePercent(*model_, p));
    }
    total_memory_ = static_cast<double>(model_->memory_mib);
    return BeginModel();
  }

  std::optional<Placement> Place(const ClusterState& state, const PodRequest& pod) override {
    const Cluster& cluster = state.cluster();
    if (pod.gpu_count == 0) return PlaceWithoutGpu(state, pod);
    const int memory = MemorySlicesNeeded(*model_, pod.gpu_milli);
    int best_node = -1;
    double best_score = 0;
    for (int n = 0; n < cluster.node_count(); ++n) {
      const NodeSpec& spec = cluster.node(n);
      if (spec.gpu_count < pod.gpu_count || !state.CpuMemoryFit(n, pod) ||
          !state.ModelAllowed(n, pod)) {
        continue;
      }
      int fitting = 0;
      for (int g = 0; g < spec.gpu_count && fitting < pod.gpu_count; ++g) {
        fitting += FitGpu(state, n, g, memory).has_value();
      }
      if (fitting < pod.gpu_count) continue;
      double score = 0;
      for (int g = 0; g < spec.gpu_count; ++g) score += GpuLoad(state.layout(n, g));
      if (best_node < 0 || score > best_score ||
          (score == best_score && (*node_rank_)[n] < (*node_rank_)[best_node])) {
        best_node = n;
        best_score = score;
      }
    }
    if (best_node < 0) return std::nullopt;
    // GPUs of the node in HAMi's GPU-policy order: spread = least used first.
    const NodeSpec& spec = cluster.node(best_node);
    std::vector<std::pair<double, int>> order;
    for (int g = 0; g < spec.gpu_count; ++g) {
      if (!FitGpu(state, best_node, g, memory)) continue;
      const double load = GpuLoad(state.layout(best_node, g));
      order.emplace_back(gpu_binpack_ ? -load : load, g);
    }
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    Placement p;
    p.node = best_node;
    for (int i = 0; i < pod.gpu_count; ++i) {
      MigAssignment a = *FitGpu(state, best_node, order[i].second, memory);
      a.gpu = order[i].second;
      p.mig.push_back(std::move(a));
    }
    return p;
  }

 protected:
  virtual absl::Status BeginModel() = 0;
  // How the pod's instance would be found or made on a GPU with `layout`.
  virtual std::optional<MigAssignment> FitGpu(const ClusterState& state, int node, int gpu,
                                              int memory) const = 0;

  const mig::GpuModel* model_ = nullptr;

 private:
  double GpuLoad(const mig::Layout& layout) const {
    double pods = 0, cores = 0, memory = 0;
    for (const mig::Instance& i : layout) {
      if (!i.busy) continue;
      pods += 1;
      cores += cores_[i.profile];
      memory += static_cast<double>(model_->profiles[i.profile].memory_mib);
    }
    return pods / kSplitCount + cores / 100 + memory / total_memory_;
  }

  // kube-scheduler 1.20 defaults for a pod HAMi does not handle:
  // NodeResourcesLeastAllocated + NodeResourcesBalancedAllocation.
  std::optional<Placement> PlaceWithoutGpu(const ClusterState& state, const PodRequest& pod) {
    const Cluster& cluster = state.cluster();
    int best = -1;
    int64_t best_score = 0;
    const int64_t cpu = pod.milli_cpu > 0 ? pod.milli_cpu : 100;
    const int64_t mem = pod.memory_mib > 0 ? pod.memory_mib : 200;
    for (int n = 0; n < cluster.node_count(); ++n) {
      if (!state.CpuMemoryFit(n, pod)) continue;
      const NodeSpec& spec = cluster.node(n);
      const int64_t cpu_cap = std::max<int64_t>(spec.milli_cpu, 1);
      const int64_t mem_cap = std::max<int64_t>(spec.memory_mib, 1);
      const int64_t cpu_used = spec.milli_cpu - state.cpu_left(n) + cpu;
      const int64_t mem_used = spec.memory_mib - state.memory_left(n) + mem;
      const int64_t least = ((cpu_cap - cpu_used) * 100 / cpu_cap +
                             std::max<int64_t>(0, mem_cap - mem_used) * 100 / mem_cap) /
                            2;
      const double cpu_fraction = static_cast<double>(cpu_used) / static_cast<double>(cpu_cap);
      const double mem_fraction = static_cast<double>(mem_used) / static_cast<double>(mem_cap);
      const int64_t balanced =
          (cpu_fraction >= 1 || mem_fraction >= 1)
              ? 0
              : static_cast<int64_t>((1 - std::abs(cpu_fraction - mem_fraction)) * 100);
      const int64_t score = least + balanced;
      if (best < 0 || score > best_score ||
          (score == best_score && (*node_rank_)[n] < (*node_rank_)[best])) {
        best = n;
        best_score = score;
      }
    }
    if (best < 0) return std::nullopt;
    Placement p;
    p.node = best;
    return p;
  }

  bool gpu_binpack_;
  const std::vector<int>* node_rank_ = nullptr;
  std::vector<int> cores_;
  double total_memory_ = 1;
};

class HamiLegacyPolicy : public HamiMigPolicy {
 public:
  explicit HamiLegacyPolicy(bool gpu_binpack)
      : HamiMigPolicy(gpu_binpack), name_(gpu_binpack ? "hami-legacy-binpack" : "hami-legacy") {}

  std::string_view name() const override { return name_; }
  // The geometry stays on the GPU until a pod needs another one.
  bool keeps_idle_instances() const override { return true; }

 protected:
  absl::Status BeginModel() override {
    auto geometries = LegacyGeometries(*model_);
    if (!geometries.ok()) return geometries.status();
    geometries_ = *std::move(geometries);
    return absl::OkStatus();
  }

  std::optional<MigAssignment> FitGpu(const ClusterState& state, int node, int gpu,
                                      int memory) const override {
    const mig::Layout& layout = state.layout(node, gpu);
    const bool in_use =
        std::any_of(layout.begin(), layout.end(), [](const mig::Instance& i) { return i.busy; });
    const int current = GeometryOf(layout);
    if (in_use) {
      if (current < 0) return std::nullopt;
      for (const Slot& s : geometries_[current]) {
        if (Memory(s) < memory) continue;
        auto it = std::find_if(layout.begin(), layout.end(), [&](const mig::Instance& i) {
          return i.profile == s.profile && i.start == s.start;
        });
        if (it != layout.end() && !it->busy) return Use(s);
      }
      return std::nullopt;
    }
    for (int g = 0; g < static_cast<int>(geometries_.size()); ++g) {
      for (const Slot& s : geometries_[g]) {
        if (Memory(s) < memory) continue;
        MigAssignment a = Use(s);
        if (g != current) {
          a.destroy = layout;
          for (const Slot& c : geometries_[g])
            a.create.push_back(mig::Instance{c.profile, c.start});
        }
        return a;
      }
    }
    return std::nullopt;
  }

 private:
  int Memory(const Slot& s) const { return model_->profiles[s.profile].memory_slices; }
  static MigAssignment Use(const Slot& s) {
    MigAssignment a;
    a.use = mig::Instance{s.profile, s.start};
    return a;
  }
  // The geometry whose instances `layout` holds exactly, or -1.
  int GeometryOf(const mig::Layout& layout) const {
    if (layout.empty()) return -1;
    for (int g = 0; g < static_cast<int>(geometries_.size()); ++g) {
      const Geometry& geo = geometries_[g];
      if (geo.size() != layout.size()) continue;
      const bool same = std::all_of(geo.begin(), geo.end(), [&](const Slot& s) {
        return std::any_of(layout.begin(), layout.end(), [&](const mig::Instance& i) {
          return i.profile == s.profile && i.start == s.start;
        });
      });
      if (same) return g;
    }
    return -1;
  }

  std::string name_;
  std::vector<Geometry> geometries_;
};

class HamiV210Policy : public HamiMigPolicy {
 public:
  explicit HamiV210Policy(bool gpu_binpack)
      : HamiMigPolicy(gpu_binpack), name_(gpu_binpack ? "hami-v2.10-binpack" : "hami-v2.10") {}

  std::string_view name() const override { return name_; }

 protected:
  absl::Status BeginModel() override {
    // The chart's allowlist: 1g, 2g, 3g and 7g base profiles for 7-slice GPUs
    // (no 4g, 1g.20gb or +me); every base profile otherwise.
    allowed_.clear();
    const std::vector<int> slices = model_->compute_slices == 7
                                        ? std::vector<int>{1, 2, 3, 7}
                                        : std::vector<int>{1, 2, 3, 4, 6, 7, 8};
    for (int s : slices) {
      if (int p = BaseProfile(*model_, s); p >= 0) allowed_.push_back(p);
    }
    std::stable_sort(allowed_.begin(), allowed_.end(), [&](int a, int b) {
      const auto& pa = model_->profiles[a];
      const auto& pb = model_->profiles[b];
      if (pa.memory_mib != pb.memory_mib) return pa.memory_mib < pb.memory_mib;
      return pa.compute_slices < pb.compute_slices;
    });
    if (allowed_.empty()) return absl::InvalidArgumentError("no MIG profile to allow");
    starts_.clear();
    for (int p : allowed_) {
      std::vector<int> starts = model_->profiles[p].starts;
      const int compute_slices = model_->profiles[p].compute_slices;
      if (compute_slices == 1 || compute_slices == 3) std::reverse(starts.begin(), starts.end());
      starts_.push_back(std::move(starts));
    }
    return absl::OkStatus();
  }

  std::optional<MigAssignment> FitGpu(const ClusterState& state, int node, int gpu,
                                      int memory) const override {
    const mig::Layout& layout = state.layout(node, gpu);
    // Instances live as long as their pods: the layout is normally all busy and
    // the state's occupancy is the busy one. Otherwise recompute it.
    const bool all_busy =
        std::all_of(layout.begin(), layout.end(), [](const mig::Instance& i) { return i.busy; });
    mig::Occupancy busy_occ = state.occupancy(node, gpu);
    if (!all_busy) {
      mig::Layout busy;
      for (const mig::Instance& i : layout) {
        if (i.busy) busy.push_back(i);
      }
      auto occ = mig::Occupy(*model_, busy);
      if (!occ.ok()) return std::nullopt;
      busy_occ = *occ;
    }
    const mig::Occupancy* occ = &busy_occ;
    for (size_t k = 0; k < allowed_.size(); ++k) {
      const int p = allowed_[k];
      if (model_->profiles[p].memory_slices < memory) continue;
      for (int start : starts_[k]) {
        if (!mig::CanAdd(*model_, *occ, p, start)) continue;
        MigAssignment a;
        // Idle leftovers (none unless another policy left them) are cleared first.
        for (const mig::Instance& i : layout) {
          if (!i.busy) a.destroy.push_back(i);
        }
        a.create.push_back(mig::Instance{p, start});
        a.use = mig::Instance{p, start};
        return a;
      }
    }
    return std::nullopt;
  }

 private:
  std::string name_;
  std::vector<int> allowed_;              // Sorted by memory, then slices.
  std::vector<std::vector<int>> starts_;  // Per allowed profile, in HAMi's try order.
};

}  // namespace

absl::StatusOr<const mig::GpuModel*> TheMigModel(const RunContext& context,
                                                 std::string_view policy) {
  const mig::GpuModel* model = nullptr;
  for (const NodeSpec& n : context.cluster->nodes()) {
    if (n.gpu_count == 0) continue;
    if (n.mig_model == nullptr) {
      return absl::InvalidArgumentError(StrCat("policy '", policy, "' needs MIG GPUs; node ",
                                               n.name, " shares its GPUs in software"));
    }
    if (model != nullptr && n.mig_model != model) {
      return absl::InvalidArgumentError(
          StrCat("policy '", policy, "' supports one MIG GPU model per cluster"));
    }
    model = n.mig_model;
  }
  if (model == nullptr) return absl::InvalidArgumentError("the cluster has no MIG GPUs");
  return model;
}

std::unique_ptr<Policy> MakeHamiLegacyPolicy(bool gpu_binpack) {
  return std::make_unique<HamiLegacyPolicy>(gpu_binpack);
}
std::unique_ptr<Policy> MakeHamiV210Policy(bool gpu_binpack) {
  return std::make_unique<HamiV210Policy>(gpu_binpack);
}

}  // namespace prism::sim
