// The online MIG scheduler of Zambianco, Fasol, Doriguzzi-Corin, "An Online
// Fragmentation-Aware GPU Scheduler for Multi-Tenant MIG-based Clouds" (arXiv
// 2511.18906, 2025) as a placement policy on MIG GPUs (docs/simulator.md,
// "Zambianco baseline", which also lists what the paper leaves open and what
// this reimplementation chose there). Only the paper's abstract was at hand:
// the metric below is reconstructed from its description, not its equations.
//
// Fragmentation of one GPU (ZambiancoUnusableSlices): per profile of the
// scheduler's profile set, the free memory slices that no instance of that
// profile can still cover, averaged over the set with equal weights (the
// scheduler is workload-agnostic: it does not learn which profiles arrive
// most). A cluster's fragmentation is the sum over its GPUs, so placing a pod
// changes it only on the GPUs the pod lands on.
//
// Greedy, online, no migration: a pod asks for the smallest profile of the set
// that serves its share under the run's mapping. Every GPU of every node that
// fits the pod (CPU, memory, GPU model) is a candidate, with every free legal
// start of that profile; the pod takes the (GPU, start) whose fragmentation
// grows least. Ties: the lowest node rank (the simulator's seeded order), then
// the lowest GPU index, then the lowest start. A pod of k GPUs takes, on each
// node, the k GPUs of least growth, and the node whose summed growth is least.
// Instances are created for their pod and destroyed when it leaves. A pod
// without GPUs changes no GPU's fragmentation: every node with room ties, and
// the lowest rank wins.
#include <algorithm>
#include <bit>
#include <limits>

#include "base/strings.h"
#include "sim/builtin_policies.h"

namespace prism::sim {

std::vector<int> ZambiancoProfiles(const mig::GpuModel& model) {
  std::vector<int> set;
  for (int i = 0; i < static_cast<int>(model.profiles.size()); ++i) {
    const mig::GpuInstanceProfile& candidate = model.profiles[i];
    if (candidate.name.attrs != mig::kAttrNone) continue;  // +me, -me, +me.all, +gfx.
    auto same_size = std::find_if(set.begin(), set.end(), [&](int kept) {
      return model.profiles[kept].compute_slices == candidate.compute_slices;
    });
    if (same_size == set.end()) {
      set.push_back(i);
    } else if (candidate.memory_mib < model.profiles[*same_size].memory_mib) {
      *same_size = i;
    }
  }
  std::sort(set.begin(), set.end(), [&](int a, int b) {
    return model.profiles[a].compute_slices < model.profiles[b].compute_slices;
  });
  return set;
}

int ZambiancoUnusableSlices(const mig::GpuModel& model, const mig::Occupancy& busy,
                            const std::vector<int>& profiles) {
  const uint32_t all_slices =
      model.memory_slices >= 32 ? ~0u : (uint32_t{1} << model.memory_slices) - 1;
  const uint32_t free_slices = all_slices & ~busy.memory_mask;
  int unusable = 0;
  for (int profile : profiles) {
    uint32_t reachable = 0;
    for (int start : model.profiles[profile].starts) {
      if (mig::CanAdd(model, busy, profile, start)) {
        reachable |= mig::PlacementMask(model, profile, start);
      }
    }
    unusable += std::popcount(free_slices & ~reachable);
  }
  return unusable;
}

namespace {

constexpr int kNoRoom = std::numeric_limits<int>::max();

class ZambiancoPolicy : public Policy {
 public:
  std::string_view name() const override { return "zambianco"; }

  absl::Status Begin(const RunContext& context) override {
    auto model = TheMigModel(context, name());
    if (!model.ok()) return model.status();
    model_ = *model;
    profiles_ = ZambiancoProfiles(*model_);
    if (profiles_.empty()) {
      return absl::InvalidArgumentError(StrCat(model_->name, " has no plain MIG profile"));
    }
    mapping_ = context.mig_mapping;
    node_rank_ = &context.workload->node_rank;
    cached_state_ = nullptr;
    return absl::OkStatus();
  }

  std::optional<Placement> Place(const ClusterState& state, const PodRequest& pod) override {
    const Cluster& cluster = state.cluster();
    if (pod.gpu_count == 0) return PlaceWithoutGpu(state, pod);
    const int wanted = RequestedProfile(pod.gpu_milli);
    if (wanted < 0) return std::nullopt;
    if (cached_state_ != &state) {
      cached_state_ = &state;
      cache_.assign(cluster.node_count(), NodeOptions{});
    }
    int best_node = -1;
    int64_t best_growth = 0;
    std::vector<int> best_gpus;
    for (int n = 0; n < cluster.node_count(); ++n) {
      const NodeSpec& spec = cluster.node(n);
      if (spec.mig_model == nullptr || spec.gpu_count < pod.gpu_count ||
          !state.CpuMemoryFit(n, pod) || !state.ModelAllowed(n, pod)) {
        continue;
      }
      const NodeOptions& options = Options(state, n);
      // The node's GPUs by growth, then index; the pod takes the first gpu_count.
      scratch_.clear();
      for (int g = 0; g < spec.gpu_count; ++g) {
        if (options.Of(g, wanted, profiles_.size()).growth != kNoRoom) scratch_.push_back(g);
      }
      if (static_cast<int>(scratch_.size()) < pod.gpu_count) continue;
      auto by_growth = [&](int a, int b) {
        const int ga = options.Of(a, wanted, profiles_.size()).growth;
        const int gb = options.Of(b, wanted, profiles_.size()).growth;
        return ga != gb ? ga < gb : a < b;
      };
      std::partial_sort(scratch_.begin(), scratch_.begin() + pod.gpu_count, scratch_.end(),
                        by_growth);
      int64_t growth = 0;
      for (int i = 0; i < pod.gpu_count; ++i) {
        growth += options.Of(scratch_[i], wanted, profiles_.size()).growth;
      }
      if (best_node < 0 || growth < best_growth ||
          (growth == best_growth && (*node_rank_)[n] < (*node_rank_)[best_node])) {
        best_node = n;
        best_growth = growth;
        best_gpus.assign(scratch_.begin(), scratch_.begin() + pod.gpu_count);
      }
    }
    if (best_node < 0) return std::nullopt;
    Placement placement;
    placement.node = best_node;
    const int profile = profiles_[wanted];
    for (int g : best_gpus) {
      MigAssignment a;
      a.gpu = g;
      // Idle leftovers (none unless another policy left them) are cleared first.
      for (const mig::Instance& i : state.layout(best_node, g)) {
        if (!i.busy) a.destroy.push_back(i);
      }
      const int start = Options(state, best_node).Of(g, wanted, profiles_.size()).start;
      a.create.push_back(mig::Instance{profile, start});
      a.use = mig::Instance{profile, start};
      placement.mig.push_back(std::move(a));
    }
    return placement;
  }

 private:
  // The best start of one profile on one GPU and the fragmentation growth it
  // causes (in the units of ZambiancoUnusableSlices); kNoRoom when none fits.
  struct Option {
    int growth = kNoRoom;
    int start = -1;
  };
  // Per node, valid while the node's version is unchanged.
  struct NodeOptions {
    bool valid = false;
    uint64_t version = 0;
    std::vector<Option> options;  // [gpu * profiles + profile index]

    const Option& Of(int gpu, int profile, size_t profiles) const {
      return options[gpu * profiles + profile];
    }
  };

  // Index into profiles_ of the smallest profile that serves `gpu_milli`, or -1.
  int RequestedProfile(int gpu_milli) const {
    for (int k = 0; k < static_cast<int>(profiles_.size()); ++k) {
      if (ProfileServes(*model_, profiles_[k], gpu_milli, mapping_)) return k;
    }
    return -1;
  }

  const NodeOptions& Options(const ClusterState& state, int node) {
    NodeOptions& cached = cache_[node];
    if (cached.valid && cached.version == state.version(node)) return cached;
    const int gpus = state.cluster().node(node).gpu_count;
    cached.options.assign(static_cast<size_t>(gpus) * profiles_.size(), Option{});
    for (int g = 0; g < gpus; ++g) {
      const std::optional<mig::Occupancy> busy = BusyOccupancy(state, node, g);
      if (!busy) continue;
      const int before = ZambiancoUnusableSlices(*model_, *busy, profiles_);
      for (size_t k = 0; k < profiles_.size(); ++k) {
        Option& best = cached.options[g * profiles_.size() + k];
        for (int start : model_->profiles[profiles_[k]].starts) {
          if (!mig::CanAdd(*model_, *busy, profiles_[k], start)) continue;
          mig::Occupancy after = *busy;
          mig::Add(*model_, &after, profiles_[k], start);
          const int growth = ZambiancoUnusableSlices(*model_, after, profiles_) - before;
          if (growth < best.growth) best = Option{growth, start};  // Starts ascend.
        }
      }
    }
    cached.valid = true;
    cached.version = state.version(node);
    return cached;
  }

  // What the GPU's instances in use occupy: the state's occupancy, unless idle
  // instances (which this policy destroys before placing) are on it.
  std::optional<mig::Occupancy> BusyOccupancy(const ClusterState& state, int node, int gpu) const {
    const mig::Layout& layout = state.layout(node, gpu);
    mig::Layout busy;
    for (const mig::Instance& i : layout) {
      if (i.busy) busy.push_back(i);
    }
    if (busy.size() == layout.size()) return state.occupancy(node, gpu);
    auto occupancy = mig::Occupy(*model_, busy);
    if (!occupancy.ok()) return std::nullopt;
    return *occupancy;
  }

  std::optional<Placement> PlaceWithoutGpu(const ClusterState& state, const PodRequest& pod) {
    int best = -1;
    for (int n = 0; n < state.cluster().node_count(); ++n) {
      if (!state.CpuMemoryFit(n, pod)) continue;
      if (best < 0 || (*node_rank_)[n] < (*node_rank_)[best]) best = n;
    }
    if (best < 0) return std::nullopt;
    Placement p;
    p.node = best;
    return p;
  }

  const mig::GpuModel* model_ = nullptr;
  MigMapping mapping_ = MigMapping::kMemory;
  std::vector<int> profiles_;
  const std::vector<int>* node_rank_ = nullptr;
  const ClusterState* cached_state_ = nullptr;
  std::vector<NodeOptions> cache_;
  std::vector<int> scratch_;
};

}  // namespace

std::unique_ptr<Policy> MakeZambiancoPolicy() { return std::make_unique<ZambiancoPolicy>(); }

}  // namespace prism::sim
