// The allocator a cluster gets from Dynamic Resource Allocation without Prism
// (docs/simulator.md "DRA first-fit baseline", docs/dra-design.md §2.1): kube-scheduler
// chooses the node with its default scoring, and the DRA plugin's allocator takes
// the first devices of that node that satisfy the claim, in name order.
//
// Node choice (kube-scheduler 1.34/1.35, read in upstream source):
//   - Sampling: numFeasibleNodesToFind (pkg/scheduler/schedule_one.go): with the
//     default percentageOfNodesToScore (0 = adaptive) a cluster of n >= 100 nodes
//     stops filtering after max(100, n * max(5, 50 - n/125) / 100) feasible nodes,
//     starting at nextStartNodeIndex, which then advances by the nodes examined
//     (findNodesThatFitPod). Nodes are examined in the snapshot's order; here the
//     workload's seeded node order (Workload::node_rank).
//   - Scores that differ between nodes for these pods: NodeResourcesFit (weight 1,
//     getDefaultPlugins in pkg/scheduler/apis/config/v1/default_plugins.go) with its
//     default strategy LeastAllocated over cpu and memory, weight 1 each
//     (least_allocated.go leastResourceScorer; requests via resource_allocation.go
//     calculateResourceAllocatableRequest with NonZeroRequested: a container without
//     requests counts 100 millicores and 200 MiB), and NodeResourcesBalancedAllocation
//     (weight 1; balanced_allocation.go balancedResourceScorer: (1 - std of the
//     requested/allocatable fractions) * 100, with actual requests; skipped for a pod
//     without cpu and memory requests). TaintToleration, NodeAffinity,
//     PodTopologySpread, InterPodAffinity and ImageLocality give every node the same
//     score for these pods (no taints, affinities, spread constraints, owners or
//     images), and DynamicResources scores only claims with firstAvailable
//     (computeScore), so 0 for the claims here.
//   - Ties: selectHost's reservoir sampling, uniform among the best; here with the
//     run's seed.
// Device choice (structured/internal/stable/allocator_stable.go: the first full
// solution, device by device in slice order): the node's devices in byte-wise
// order of their published names (config/dra_names.h), the first that satisfy the
// request, one per GPU for a pod of several GPUs (the simulator's pods take
// distinct GPUs, as a `distinctAttribute` constraint on the parent GPU would).
//   - MIG GPUs: every profile x legal start is a device (as src/deviceplugin/
//     dra_mig.* publishes, NVIDIA's names), "gpu-<minor>-mig-<profile>-<id>-<start>";
//     the claim selects the smallest plain profile that serves the share (memory
//     slices, then compute slices); a device is usable when its partition fits
//     beside the GPU's instances (the counters = the MIG placement rules,
//     mig::CanAdd).
//   - Software-shared GPUs: one device per GPU, "gpu-<minor>", HAMi-DRA style with
//     allowMultipleAllocations and consumable capacity (memory and cores, both
//     proportional to the share here): the first GPU whose remaining capacity covers
//     the share; a whole-GPU pod needs all of it, i.e. an unshared GPU.
//   - The GPU model of the trace (gpu_spec) is a device selector on the model.
#include <algorithm>
#include <cmath>
#include <map>

#include "base/strings.h"
#include "config/dra_names.h"
#include "sim/builtin_policies.h"
#include "sim/rng.h"

namespace prism::sim {

namespace {

// pkg/scheduler/util/pod_resources.go: DefaultMilliCPURequest, DefaultMemoryRequest.
constexpr int64_t kDefaultMilliCpu = 100;
constexpr int64_t kDefaultMemoryMib = 200;
// schedule_one.go: minFeasibleNodesToFind, minFeasibleNodesPercentageToFind,
// and the adaptive base percentage.
constexpr int kMinFeasibleNodesToFind = 100;
constexpr int kMinFeasibleNodesPercentageToFind = 5;
constexpr int kBasePercentageOfNodesToScore = 50;
constexpr int64_t kMaxNodeScore = 100;

int64_t LeastRequestedScore(int64_t requested, int64_t capacity) {
  if (capacity == 0 || requested > capacity) return 0;
  return (capacity - requested) * kMaxNodeScore / capacity;
}

}  // namespace

int KubeSchedulerNodesToFind(int nodes) {
  if (nodes < kMinFeasibleNodesToFind) return nodes;
  const int percentage =
      std::max(kMinFeasibleNodesPercentageToFind, kBasePercentageOfNodesToScore - nodes / 125);
  return std::max(kMinFeasibleNodesToFind, nodes * percentage / 100);
}

int64_t KubeSchedulerNodeScore(const KubeSchedulerNodeLoad& node, int64_t pod_milli_cpu,
                               int64_t pod_memory_mib) {
  // LeastAllocated over NonZeroRequested + the pod's non-zero request.
  const int64_t nz_cpu = pod_milli_cpu > 0 ? pod_milli_cpu : kDefaultMilliCpu;
  const int64_t nz_mem = pod_memory_mib > 0 ? pod_memory_mib : kDefaultMemoryMib;
  int64_t least = 0, weights = 0;
  for (const auto& [requested, capacity] :
       {std::pair{node.nonzero_milli_cpu + nz_cpu, node.allocatable_milli_cpu},
        std::pair{node.nonzero_memory_mib + nz_mem, node.allocatable_memory_mib}}) {
    if (capacity == 0) continue;
    least += LeastRequestedScore(requested, capacity);
    ++weights;
  }
  least = weights == 0 ? 0 : least / weights;
  // BalancedAllocation over Requested + the pod's request; skipped (0) for a pod
  // with neither.
  int64_t balanced = 0;
  if (pod_milli_cpu != 0 || pod_memory_mib != 0) {
    std::vector<double> fractions;
    for (const auto& [requested, capacity] :
         {std::pair{node.requested_milli_cpu + pod_milli_cpu, node.allocatable_milli_cpu},
          std::pair{node.requested_memory_mib + pod_memory_mib, node.allocatable_memory_mib}}) {
      if (capacity == 0) continue;
      fractions.push_back(
          std::min(1.0, static_cast<double>(requested) / static_cast<double>(capacity)));
    }
    const double std_dev = fractions.size() == 2 ? std::abs((fractions[0] - fractions[1]) / 2) : 0;
    balanced = static_cast<int64_t>((1 - std_dev) * static_cast<double>(kMaxNodeScore));
  }
  return least + balanced;  // Both weight 1.
}

int DraFirstFitProfile(const mig::GpuModel& model, int gpu_milli, MigMapping mapping) {
  int best = -1;
  for (int p = 0; p < static_cast<int>(model.profiles.size()); ++p) {
    const mig::GpuInstanceProfile& prof = model.profiles[p];
    if (prof.name.attrs != mig::kAttrNone || !ProfileServes(model, p, gpu_milli, mapping)) continue;
    if (best < 0) {
      best = p;
      continue;
    }
    const mig::GpuInstanceProfile& b = model.profiles[best];
    if (prof.memory_slices < b.memory_slices ||
        (prof.memory_slices == b.memory_slices && prof.compute_slices < b.compute_slices)) {
      best = p;
    }
  }
  return best;
}

std::vector<DraMigDevice> DraMigDevicesInNameOrder(const mig::GpuModel& model, int gpu_count) {
  std::vector<DraMigDevice> out;
  for (int g = 0; g < gpu_count; ++g) {
    for (int p = 0; p < static_cast<int>(model.profiles.size()); ++p) {
      for (int start : model.profiles[p].starts) {
        out.push_back(DraMigDevice{
            config::DraMigDeviceName(static_cast<uint32_t>(g), model.profiles[p], start), g, p,
            start});
      }
    }
  }
  std::sort(out.begin(), out.end(),
            [](const DraMigDevice& a, const DraMigDevice& b) { return a.name < b.name; });
  return out;
}

namespace {

class DraFirstFitPolicy : public Policy {
 public:
  std::string_view name() const override { return "dra-first-fit"; }

  absl::Status Begin(const RunContext& context) override {
    cluster_ = context.cluster;
    mapping_ = context.mig_mapping;
    rng_ = Rng(context.seed ^ 0x6472612d6666ull);
    const int n = cluster_->node_count();
    const std::vector<int>& rank = context.workload->node_rank;
    if (static_cast<int>(rank.size()) != n) {
      return absl::InvalidArgumentError("the workload has no node order for every node");
    }
    order_.assign(n, 0);
    for (int i = 0; i < n; ++i) order_[rank[i]] = i;
    next_start_ = 0;
    to_find_ = KubeSchedulerNodesToFind(n);
    load_.assign(n, KubeSchedulerNodeLoad{});
    for (int i = 0; i < n; ++i) {
      load_[i].allocatable_milli_cpu = cluster_->node(i).milli_cpu;
      load_[i].allocatable_memory_mib = cluster_->node(i).memory_mib;
    }
    mig_devices_.clear();
    shared_order_.clear();
    for (const NodeSpec& s : cluster_->nodes()) {
      if (s.gpu_count == 0) continue;
      if (s.mig_model != nullptr) {
        // Per profile, the devices in name order (the allocator skips the others).
        auto& by_profile = mig_devices_[{s.mig_model, s.gpu_count}];
        if (!by_profile.empty()) continue;
        by_profile.resize(s.mig_model->profiles.size());
        for (DraMigDevice& d : DraMigDevicesInNameOrder(*s.mig_model, s.gpu_count)) {
          by_profile[d.profile].push_back(std::move(d));
        }
      } else {
        auto& gpus = shared_order_[s.gpu_count];
        if (!gpus.empty()) continue;
        std::vector<std::pair<std::string, int>> names;
        for (int g = 0; g < s.gpu_count; ++g) {
          names.emplace_back(config::DraGpuDeviceName(static_cast<uint32_t>(g)), g);
        }
        std::sort(names.begin(), names.end());
        for (const auto& [name, g] : names) gpus.push_back(g);
      }
    }
    return absl::OkStatus();
  }

  std::optional<Placement> Place(const ClusterState& state, const PodRequest& pod) override {
    const int n = cluster_->node_count();
    // Filter, from nextStartNodeIndex, until enough feasible nodes are found.
    feasible_.clear();
    allocations_.clear();
    int examined = 0;
    for (; examined < n && static_cast<int>(feasible_.size()) < to_find_; ++examined) {
      const int node = order_[(next_start_ + examined) % n];
      if (!state.CpuMemoryFit(node, pod)) continue;
      Placement p;
      p.node = node;
      if (pod.gpu_count > 0 && (!state.ModelAllowed(node, pod) || !Allocate(state, pod, &p))) {
        continue;
      }
      feasible_.push_back(node);
      allocations_.push_back(std::move(p));
    }
    if (n > 0) next_start_ = (next_start_ + examined) % n;
    if (feasible_.empty()) return std::nullopt;
    // Score, then selectHost: uniform among the best.
    int selected = 0;
    int64_t best = 0;
    int ties = 0;
    for (size_t i = 0; i < feasible_.size(); ++i) {
      const int64_t score =
          KubeSchedulerNodeScore(load_[feasible_[i]], pod.milli_cpu, pod.memory_mib);
      if (i == 0 || score > best) {
        best = score;
        selected = static_cast<int>(i);
        ties = 1;
      } else if (score == best && rng_.Uniform(static_cast<uint64_t>(++ties)) == 0) {
        selected = static_cast<int>(i);
      }
    }
    return std::move(allocations_[selected]);
  }

  absl::Status Placed(const ClusterState& state, const PodRequest& pod,
                      const Placement& placement) override {
    (void)state;
    Charge(pod, placement.node, +1);
    return absl::OkStatus();
  }
  absl::Status Released(const ClusterState& state, const PodRequest& pod,
                        const Placement& placement) override {
    (void)state;
    Charge(pod, placement.node, -1);
    return absl::OkStatus();
  }

 private:
  void Charge(const PodRequest& pod, int node, int sign) {
    KubeSchedulerNodeLoad& l = load_[node];
    l.requested_milli_cpu += sign * pod.milli_cpu;
    l.requested_memory_mib += sign * pod.memory_mib;
    l.nonzero_milli_cpu += sign * (pod.milli_cpu > 0 ? pod.milli_cpu : kDefaultMilliCpu);
    l.nonzero_memory_mib += sign * (pod.memory_mib > 0 ? pod.memory_mib : kDefaultMemoryMib);
  }

  // The first devices of `p->node` in name order that satisfy the pod's claim.
  bool Allocate(const ClusterState& state, const PodRequest& pod, Placement* p) {
    const NodeSpec& spec = cluster_->node(p->node);
    if (spec.gpu_count < pod.gpu_count) return false;
    if (spec.mig_model == nullptr) {
      for (int g : shared_order_.at(spec.gpu_count)) {
        if (state.gpu_left(p->node)[g] >= pod.gpu_milli) p->gpus.push_back(g);
        if (static_cast<int>(p->gpus.size()) == pod.gpu_count) return true;
      }
      return false;
    }
    const mig::GpuModel& model = *spec.mig_model;
    const int profile = DraFirstFitProfile(model, pod.gpu_milli, mapping_);
    if (profile < 0) return false;
    std::vector<bool> taken(spec.gpu_count, false);
    std::vector<std::optional<mig::Occupancy>> busy(spec.gpu_count);
    for (const DraMigDevice& d : mig_devices_.at({&model, spec.gpu_count})[profile]) {
      if (taken[d.gpu]) continue;
      if (!busy[d.gpu]) busy[d.gpu] = BusyOccupancy(state, p->node, d.gpu, model);
      if (!busy[d.gpu] || !mig::CanAdd(model, *busy[d.gpu], profile, d.start)) continue;
      MigAssignment a;
      a.gpu = d.gpu;
      // Instances live with their pods under DRA (created at NodePrepareResources,
      // destroyed at unprepare); an idle leftover on the GPU goes first.
      for (const mig::Instance& i : state.layout(p->node, d.gpu)) {
        if (!i.busy) a.destroy.push_back(i);
      }
      a.create.push_back(mig::Instance{profile, d.start});
      a.use = mig::Instance{profile, d.start};
      p->mig.push_back(std::move(a));
      taken[d.gpu] = true;
      if (static_cast<int>(p->mig.size()) == pod.gpu_count) return true;
    }
    return false;
  }

  static std::optional<mig::Occupancy> BusyOccupancy(const ClusterState& state, int node, int gpu,
                                                     const mig::GpuModel& model) {
    const mig::Layout& layout = state.layout(node, gpu);
    if (std::all_of(layout.begin(), layout.end(), [](const mig::Instance& i) { return i.busy; })) {
      return state.occupancy(node, gpu);
    }
    mig::Layout in_use;
    for (const mig::Instance& i : layout) {
      if (i.busy) in_use.push_back(i);
    }
    auto occ = mig::Occupy(model, in_use);
    if (!occ.ok()) return std::nullopt;
    return *occ;
  }

  const Cluster* cluster_ = nullptr;
  MigMapping mapping_ = MigMapping::kMemory;
  Rng rng_{0};
  std::vector<int> order_;  // Node indices in the snapshot's order.
  int next_start_ = 0;
  int to_find_ = 0;
  std::vector<KubeSchedulerNodeLoad> load_;
  // (model, GPUs per node) -> per profile, its devices in name order.
  std::map<std::pair<const mig::GpuModel*, int>, std::vector<std::vector<DraMigDevice>>>
      mig_devices_;
  std::map<int, std::vector<int>> shared_order_;  // GPU count -> GPU indices in name order.
  std::vector<int> feasible_;
  std::vector<Placement> allocations_;
};

}  // namespace

std::unique_ptr<Policy> MakeDraFirstFitPolicy() { return std::make_unique<DraFirstFitPolicy>(); }

}  // namespace prism::sim
