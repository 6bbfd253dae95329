// Two peers' topology-aware GPU choices on software-shared GPUs, reimplemented from their
// published rules for `prism sim --topology` (docs/results/topology.md says what was followed and
// what simplified):
//
// hami-topology: HAMi's `hami.io/gpu-scheduler-policy: topology-aware`
//   (../shared/reference/hami.md §5.4; pkg/device/nvidia/calculate_score.go, links.go) under its
//   default node policy, binpack (§5.5): the node whose GPUs are most used,
//   10 * (Σused pods / Σslots + Σused cores / Σcores + Σused memory / Σmemory), before the pod.
//   On that node, of the GPUs that fit (a free slot of deviceSplitCount 10 and the share free):
//   one GPU -> the one with the lowest summed link score to the other fitting GPUs (keep
//   well-connected groups whole); k > 1 -> the k-set with the highest summed pairwise score,
//   over every C(n, k). Ties: HAMi's default GPU order, spread (least used first), then index.
// nvidia-besteffort: NVIDIA's device plugin, whose GetPreferredAllocation asks
//   go-gpuallocator's best-effort policy (gpuallocator/besteffort_policy.go, Allocate): of the
//   available GPUs, the partition of all of them into sets of `size` (padded) with the highest
//   summed set score, then that partition's highest-scoring set; one GPU -> the first available.
//   The node is kube-scheduler's: NodeResourcesFit LeastAllocated + BalancedAllocation over CPU
//   and memory, among the nodes with enough fitting GPUs.
//
// Both score pairs with topo::LinkScore (HAMi's and go-gpuallocator's table: NVLink 100 per
// link, board 60, switch 50, switches 40, host bridge 30, NUMA node 20, sockets 10). Pods
// without GPUs go where kube-scheduler's defaults put them.
#include <algorithm>

#include "base/strings.h"
#include "core/topo/gpu_sets.h"
#include "sim/builtin_policies.h"
#include "sim/policy_util.h"
#include "sim/wiring.h"

namespace prism::sim {
namespace {

constexpr int kHamiSplitCount = 10;  // HAMi's deviceSplitCount default.

int PairScore(const topo::NodeTopology* topology, int a, int b) {
  if (topology == nullptr || a < 0 || b < 0) return 0;  // -1: go-gpuallocator's padding.
  return topo::LinkScore(topology->Link(a, b));
}

int SetScore(const topo::NodeTopology* topology, absl::Span<const int> set) {
  int score = 0;
  for (size_t i = 0; i < set.size(); ++i) {
    for (size_t j = i + 1; j < set.size(); ++j) score += PairScore(topology, set[i], set[j]);
  }
  return score;
}

// kube-scheduler's default scores for the nodes `fits` accepts; -1 when none does.
template <typename Fits>
int KubeSchedulerNode(const ClusterState& state, const PodRequest& pod,
                      const std::vector<int>& node_rank, Fits&& fits) {
  int best = -1;
  int64_t best_score = 0;
  for (int n = 0; n < state.cluster().node_count(); ++n) {
    if (!fits(n)) continue;
    const NodeSpec& spec = state.cluster().node(n);
    KubeSchedulerNodeLoad load;
    load.allocatable_milli_cpu = spec.milli_cpu;
    load.allocatable_memory_mib = spec.memory_mib;
    load.requested_milli_cpu = load.nonzero_milli_cpu = spec.milli_cpu - state.cpu_left(n);
    load.requested_memory_mib = load.nonzero_memory_mib = spec.memory_mib - state.memory_left(n);
    const int64_t score = KubeSchedulerNodeScore(load, pod.milli_cpu, pod.memory_mib);
    if (best < 0 || score > best_score ||
        (score == best_score && node_rank[n] < node_rank[best])) {
      best = n;
      best_score = score;
    }
  }
  return best;
}

class HamiTopologyPolicy : public Policy {
 public:
  std::string_view name() const override { return "hami-topology"; }

  absl::Status Begin(const RunContext& context) override {
    node_rank_ = &context.workload->node_rank;
    pods_.assign(context.cluster->total_gpus(), 0);
    return RequireSharedGpus(context, name());
  }

  std::optional<Placement> Place(const ClusterState& state, const PodRequest& pod) override {
    const Cluster& cluster = state.cluster();
    if (pod.gpu_count == 0) {
      const int n = KubeSchedulerNode(state, pod, *node_rank_,
                                      [&](int node) { return state.CpuMemoryFit(node, pod); });
      if (n < 0) return std::nullopt;
      return Placement{n, {}, {}};
    }
    int best = -1;
    double best_score = 0;
    for (int n = 0; n < cluster.node_count(); ++n) {
      if (!SharedFits(state, n, pod) || Fitting(state, n, pod).size() < size_t(pod.gpu_count)) {
        continue;
      }
      const NodeSpec& spec = cluster.node(n);
      int64_t pods = 0;
      for (int g = 0; g < spec.gpu_count; ++g) pods += pods_[cluster.gpu_offset(n) + g];
      const double capacity = static_cast<double>(spec.gpu_count) * kMilliPerGpu;
      const double used = capacity - static_cast<double>(state.gpu_left_total(n));
      // Cores and memory: a share asks both (sim::PodRequest), so the two terms are equal.
      const double score =
          10 * (static_cast<double>(pods) / (kHamiSplitCount * spec.gpu_count) +
                2 * used / capacity);
      if (best < 0 || score > best_score ||
          (score == best_score && (*node_rank_)[n] < (*node_rank_)[best])) {
        best = n;
        best_score = score;
      }
    }
    if (best < 0) return std::nullopt;
    const std::vector<int> fitting = Fitting(state, best, pod);
    const topo::NodeTopology* topology = cluster.topology(best);
    Placement p;
    p.node = best;
    if (pod.gpu_count == 1) {
      int chosen = -1, chosen_sum = 0;
      for (int g : fitting) {
        int sum = 0;
        for (int o : fitting) sum += o == g ? 0 : PairScore(topology, g, o);
        if (chosen < 0 || sum < chosen_sum) chosen = g, chosen_sum = sum;
      }
      p.gpus.push_back(chosen);
      return p;
    }
    int best_sum = -1;
    ForEachSubset(fitting, pod.gpu_count, [&](absl::Span<const int> set) {
      const int sum = SetScore(topology, set);
      if (sum > best_sum) {
        best_sum = sum;
        p.gpus.assign(set.begin(), set.end());
      }
      return true;
    });
    return p;
  }

  absl::Status Placed(const ClusterState& state, const PodRequest& pod,
                      const Placement& placement) override {
    (void)pod;
    for (int g : placement.gpus) ++pods_[state.cluster().gpu_offset(placement.node) + g];
    return absl::OkStatus();
  }
  absl::Status Released(const ClusterState& state, const PodRequest& pod,
                        const Placement& placement) override {
    (void)pod;
    for (int g : placement.gpus) --pods_[state.cluster().gpu_offset(placement.node) + g];
    return absl::OkStatus();
  }

 private:
  // The node's GPUs that take the pod, in HAMi's spread order (least used first, then index).
  std::vector<int> Fitting(const ClusterState& state, int n, const PodRequest& pod) const {
    const int base = state.cluster().gpu_offset(n);
    std::span<const int> left = state.gpu_left(n);
    std::vector<int> out;
    for (int g = 0; g < static_cast<int>(left.size()); ++g) {
      if (left[g] >= pod.gpu_milli && pods_[base + g] < kHamiSplitCount) out.push_back(g);
    }
    std::stable_sort(out.begin(), out.end(), [&](int a, int b) {
      const double ua = static_cast<double>(pods_[base + a]) / kHamiSplitCount +
                        2.0 * (kMilliPerGpu - left[a]) / kMilliPerGpu;
      const double ub = static_cast<double>(pods_[base + b]) / kHamiSplitCount +
                        2.0 * (kMilliPerGpu - left[b]) / kMilliPerGpu;
      return ua < ub;
    });
    return out;
  }

  const std::vector<int>* node_rank_ = nullptr;
  std::vector<int> pods_;  // Pods per GPU (flat index): HAMi's slot count.
};

// go-gpuallocator's iterateGPUPartitions: every partition of `devices` (padded with -1 to a
// multiple of `size`) into sets of `size`, each set holding no padding or all of it.
class Partitions {
 public:
  Partitions(const topo::NodeTopology* topology, int size) : topology_(topology), size_(size) {}

  // The best set of the best partition of `available` (empty when none).
  std::vector<int> Allocate(std::vector<int> available) {
    while (available.size() % size_ != 0) available.push_back(-1);
    padding_ = static_cast<int>(std::count(available.begin(), available.end(), -1));
    best_score_ = -1;
    best_.clear();
    accum_.clear();
    Iterate(available);
    std::vector<int> chosen;
    int chosen_score = -1;
    for (const std::vector<int>& set : best_) {
      // Simplified: a padded set (fewer GPUs than asked) is never returned.
      if (std::count(set.begin(), set.end(), -1) > 0) continue;
      const int score = SetScore(topology_, set);
      if (score > chosen_score) chosen = set, chosen_score = score;
    }
    return chosen;
  }

 private:
  void Iterate(const std::vector<int>& devices) {
    if (static_cast<int>(devices.size()) == size_) {
      accum_.push_back(devices);
      Consider();
      accum_.pop_back();
      return;
    }
    std::vector<int> rest(devices.begin() + 1, devices.end());
    std::vector<int> positions(rest.size());
    for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int>(i);
    ForEachSubset(positions, size_ - 1, [&](absl::Span<const int> picked) {
      std::vector<int> set = {devices[0]};
      for (int i : picked) set.push_back(rest[i]);
      const int pad = static_cast<int>(std::count(set.begin(), set.end(), -1));
      if (pad != 0 && pad != padding_) return true;
      std::vector<int> remaining;
      for (int d : devices) {
        if (std::find(set.begin(), set.end(), d) == set.end()) remaining.push_back(d);
      }
      accum_.push_back(std::move(set));
      Iterate(remaining);
      accum_.pop_back();
      return true;
    });
  }

  void Consider() {
    bool whole = false;
    int score = 0;
    for (const std::vector<int>& set : accum_) {
      whole |= std::count(set.begin(), set.end(), -1) == 0;
      score += SetScore(topology_, set);
    }
    if (!whole) return;
    if (score > best_score_ || best_.empty()) {
      best_score_ = score;
      best_ = accum_;
    }
  }

  const topo::NodeTopology* topology_;
  int size_;
  int padding_ = 0;
  int best_score_ = -1;
  std::vector<std::vector<int>> best_;
  std::vector<std::vector<int>> accum_;
};

class NvidiaBestEffortPolicy : public Policy {
 public:
  std::string_view name() const override { return "nvidia-besteffort"; }

  absl::Status Begin(const RunContext& context) override {
    node_rank_ = &context.workload->node_rank;
    return RequireSharedGpus(context, name());
  }

  std::optional<Placement> Place(const ClusterState& state, const PodRequest& pod) override {
    const int n = KubeSchedulerNode(state, pod, *node_rank_,
                                    [&](int node) { return SharedFits(state, node, pod); });
    if (n < 0) return std::nullopt;
    Placement p;
    p.node = n;
    if (pod.gpu_count == 0) return p;
    std::vector<int> available;
    std::span<const int> left = state.gpu_left(n);
    for (int g = 0; g < static_cast<int>(left.size()); ++g) {
      if (left[g] >= pod.gpu_milli) available.push_back(g);
    }
    if (pod.gpu_count == 1) {
      p.gpus.push_back(available[0]);  // One GPU: every partition scores 0; the first wins.
      return p;
    }
    p.gpus = Partitions(state.cluster().topology(n), pod.gpu_count).Allocate(available);
    std::sort(p.gpus.begin(), p.gpus.end());
    return p;
  }

 private:
  const std::vector<int>* node_rank_ = nullptr;
};

}  // namespace

std::unique_ptr<Policy> MakeHamiTopologyPolicy() { return std::make_unique<HamiTopologyPolicy>(); }
std::unique_ptr<Policy> MakeNvidiaBestEffortPolicy() {
  return std::make_unique<NvidiaBestEffortPolicy>();
}

}  // namespace prism::sim
