#include "sim/offline_packing.h"

#include <algorithm>
#include <optional>
#include <set>

#include "sim/policy_util.h"

namespace prism::sim {
namespace {

// Free GPUs indexed per bucket of nodes: the LP's node groups, or GPU models.
class Packer {
 public:
  // `node_bucket`: per node, its bucket (-1: never used).
  Packer(const Cluster& cluster, std::vector<int> node_bucket)
      : cluster_(cluster), state_(&cluster), node_bucket_(std::move(node_bucket)) {
    int buckets = 0;
    for (int b : node_bucket_) buckets = std::max(buckets, b + 1);
    free_gpus_.resize(buckets);
    idle_nodes_.resize(buckets);
    bucket_model_.assign(buckets, -1);
    gpu_node_.resize(cluster.total_gpus());
    for (int n = 0; n < cluster.node_count(); ++n) {
      const NodeSpec& node = cluster.node(n);
      for (int g = 0; g < node.gpu_count; ++g) gpu_node_[cluster.gpu_offset(n) + g] = n;
      if (node.gpu_count > 0 && node.mig_model == nullptr && node_bucket_[n] >= 0) {
        bucket_model_[node_bucket_[n]] = node.model;
        Index(n);
      }
    }
  }

  int buckets() const { return static_cast<int>(free_gpus_.size()); }
  int bucket_of(int node) const { return node_bucket_[node]; }

  // Where `pod` goes, in one of the buckets `allowed` says yes to.
  template <typename Allowed>
  std::optional<Placement> Choose(const PodRequest& pod, Allowed allowed) const {
    if (pod.gpu_count == 0) return std::nullopt;
    std::vector<int> buckets;
    for (int b = 0; b < this->buckets(); ++b) {
      const int model = bucket_model_[b];
      if (model >= 0 && ((pod.model_mask >> model) & 1) != 0 && allowed(b)) buckets.push_back(b);
    }
    if (buckets.empty()) return std::nullopt;
    if (pod.gpu_milli >= kMilliPerGpu) return WholeGpus(pod, buckets);
    if (pod.gpu_count == 1) return Share(pod, buckets);
    return SharesOnSeveralGpus(pod, buckets);
  }

  bool Place(const PodRequest& pod, const Placement& placement) {
    Unindex(placement.node);
    const bool ok = state_.Place(pod, placement).ok();
    Index(placement.node);
    return ok;
  }

 private:
  int Idle(int node) const {
    int idle = 0;
    for (int left : state_.gpu_left(node)) idle += left >= kMilliPerGpu;
    return idle;
  }

  void Index(int node) {
    const int b = node_bucket_[node];
    std::span<const int> left = state_.gpu_left(node);
    for (int g = 0; g < static_cast<int>(left.size()); ++g) {
      if (left[g] > 0) free_gpus_[b].emplace(left[g], cluster_.gpu_offset(node) + g);
    }
    if (Idle(node) > 0) idle_nodes_[b].emplace(-CpuPerFreeGpu(node), node);
  }

  void Unindex(int node) {
    const int b = node_bucket_[node];
    std::span<const int> left = state_.gpu_left(node);
    for (int g = 0; g < static_cast<int>(left.size()); ++g) {
      free_gpus_[b].erase({left[g], cluster_.gpu_offset(node) + g});
    }
    idle_nodes_[b].erase({-CpuPerFreeGpu(node), node});
  }

  // The tightest partly used GPU with room for the share; else an idle GPU, on the node
  // WholeGpus would pick.
  std::optional<Placement> Share(const PodRequest& pod, const std::vector<int>& buckets) const {
    std::optional<std::pair<int, int>> best;  // (free, flat GPU)
    for (int b : buckets) {
      for (auto it = free_gpus_[b].lower_bound({pod.gpu_milli, -1});
           it != free_gpus_[b].end() && it->first < kMilliPerGpu; ++it) {
        if (best && *it >= *best) break;
        if (state_.CpuMemoryFit(gpu_node_[it->second], pod)) {
          best = *it;
          break;
        }
      }
    }
    if (!best) return WholeGpus(pod, buckets);
    Placement p;
    p.node = gpu_node_[best->second];
    p.gpus.push_back(best->second - cluster_.gpu_offset(p.node));
    return p;
  }

  // Cores left per free GPU: whole GPUs fill nodes fast, and going where this is highest
  // keeps CPU from running out before the GPUs do.
  double CpuPerFreeGpu(int node) const {
    return static_cast<double>(state_.cpu_left(node)) * kMilliPerGpu /
           static_cast<double>(std::max<int64_t>(1, state_.gpu_left_total(node)));
  }

  // Of the nodes with enough idle GPUs (and CPU and memory), the one with the most CPU
  // per free GPU.
  std::optional<Placement> WholeGpus(const PodRequest& pod, const std::vector<int>& buckets) const {
    const int idle_needed = pod.gpu_milli < kMilliPerGpu ? 1 : pod.gpu_count;
    std::optional<std::pair<double, int>> best;  // (-CPU per free GPU, node)
    for (int b : buckets) {
      for (const auto& entry : idle_nodes_[b]) {
        if (best && entry >= *best) break;
        if (Idle(entry.second) >= idle_needed && state_.CpuMemoryFit(entry.second, pod)) {
          best = entry;
          break;
        }
      }
    }
    if (!best) return std::nullopt;
    Placement p;
    p.node = best->second;
    p.gpus = TightestGpus(state_, p.node, pod);
    if (pod.gpu_milli < kMilliPerGpu) {  // A share on an idle GPU.
      std::span<const int> left = state_.gpu_left(p.node);
      p.gpus = {static_cast<int>(std::find(left.begin(), left.end(), kMilliPerGpu) - left.begin())};
    }
    return p;
  }

  // Rare (not in the Alibaba traces): the node whose chosen GPUs have the least room left.
  std::optional<Placement> SharesOnSeveralGpus(const PodRequest& pod,
                                               const std::vector<int>& buckets) const {
    std::optional<Placement> best;
    int64_t best_left = 0;
    for (int n = 0; n < cluster_.node_count(); ++n) {
      const int b = node_bucket_[n];
      if (b < 0 || std::find(buckets.begin(), buckets.end(), b) == buckets.end() ||
          !SharedFits(state_, n, pod)) {
        continue;
      }
      std::vector<int> gpus = TightestGpus(state_, n, pod);
      int64_t left = 0;
      for (int g : gpus) left += state_.gpu_left(n)[g];
      if (!best || left < best_left) {
        best = Placement{n, std::move(gpus), {}};
        best_left = left;
      }
    }
    return best;
  }

  const Cluster& cluster_;
  ClusterState state_;
  std::vector<int> node_bucket_;
  std::vector<int> bucket_model_;
  std::vector<int> gpu_node_;
  // Per bucket: (milli free, flat GPU) of GPUs with room; (-CPU per free GPU, node) of
  // nodes with an idle GPU.
  std::vector<std::set<std::pair<int, int>>> free_gpus_;
  std::vector<std::set<std::pair<double, int>>> idle_nodes_;
};

bool UsableGuide(const CeilingBound* guide, const Cluster& cluster, size_t pods) {
  return guide != nullptr && guide->node_group.size() == static_cast<size_t>(cluster.node_count()) &&
         guide->pod_class.size() == pods;
}

// Best fit, pods largest first if `decreasing` (else in arrival order), guided by the LP's
// solution if `guide`.
// With `start` (and no guide), on top of its placements, which are kept.
OfflinePacking BestFit(const Cluster& cluster, std::span<const PodRequest> pods,
                       const CeilingBound* guide, bool decreasing,
                       const OfflinePacking* start = nullptr) {
  std::vector<bool> placed(pods.size(), false);
  if (start != nullptr) {
    for (const auto& [i, p] : start->placements) placed[i] = true;
  }
  std::vector<size_t> order;
  for (size_t i = 0; i < pods.size(); ++i) {
    if (pods[i].gpu_count > 0 && !placed[i]) order.push_back(i);
  }
  if (decreasing) std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const PodRequest& x = pods[a];
    const PodRequest& y = pods[b];
    if (x.TotalGpuMilli() != y.TotalGpuMilli()) return x.TotalGpuMilli() > y.TotalGpuMilli();
    if (x.gpu_milli != y.gpu_milli) return x.gpu_milli > y.gpu_milli;
    return x.milli_cpu > y.milli_cpu;
  });
  OfflinePacking out;
  auto place = [&](Packer& packer, size_t i, const std::optional<Placement>& p) {
    if (!p || !packer.Place(pods[i], *p)) return false;
    out.gpu_milli += pods[i].TotalGpuMilli();
    ++out.placed;
    out.placements.emplace_back(i, *p);
    return true;
  };
  auto anywhere = [](int) { return true; };
  if (guide == nullptr) {
    std::vector<int> node_model;
    for (const NodeSpec& n : cluster.nodes()) node_model.push_back(n.gpu_count > 0 ? n.model : -1);
    Packer packer(cluster, std::move(node_model));
    if (start != nullptr) {
      for (const auto& [i, p] : start->placements) place(packer, i, p);
    }
    for (size_t i : order) place(packer, i, packer.Choose(pods[i], anywhere));
    return out;
  }
  // The LP's pods per class and group, consumed as pods are placed.
  std::vector<std::vector<double>> room = guide->class_group_pods;
  Packer packer(cluster, guide->node_group);
  std::vector<size_t> deferred;
  for (size_t i : order) {
    const int c = guide->pod_class[i];
    if (c < 0 || c >= static_cast<int>(room.size())) {
      deferred.push_back(i);
      continue;
    }
    std::vector<double>& r = room[c];
    double total = 0;
    for (double v : r) total += v;
    if (total < 0.5) {  // The LP leaves this pod out: others first.
      deferred.push_back(i);
      continue;
    }
    auto in_plan = [&](int b) { return b < static_cast<int>(r.size()) && r[b] >= 0.5; };
    std::optional<Placement> p = packer.Choose(pods[i], in_plan);
    if (!p) p = packer.Choose(pods[i], anywhere);
    if (!place(packer, i, p)) continue;
    // Taken from the group it went to, or (outside the plan) from the group with the most room.
    const int b = packer.bucket_of(p->node);
    int from = b < static_cast<int>(r.size()) && r[b] >= 0.5
                   ? b
                   : static_cast<int>(std::max_element(r.begin(), r.end()) - r.begin());
    r[from] -= 1;
  }
  for (size_t i : deferred) place(packer, i, packer.Choose(pods[i], anywhere));
  return out;
}

}  // namespace

OfflinePacking CompletePacking(const Cluster& cluster, std::span<const PodRequest> pods,
                               const OfflinePacking& start) {
  return BestFit(cluster, pods, nullptr, true, &start);
}

OfflinePacking PackOffline(const Cluster& cluster, std::span<const PodRequest> pods,
                           const CeilingBound* guide) {
  // None always wins: node-level CPU makes the LP's solution hard to round, and sorting by
  // size packs GPUs tight but piles CPU-heavy pods together.
  OfflinePacking best;
  for (const CeilingBound* g : {static_cast<const CeilingBound*>(nullptr), guide}) {
    if (g != nullptr && !UsableGuide(g, cluster, pods.size())) continue;
    for (bool decreasing : {true, false}) {
      OfflinePacking p = BestFit(cluster, pods, g, decreasing);
      if (p.gpu_milli > best.gpu_milli) best = std::move(p);
    }
  }
  return best;
}

}  // namespace prism::sim
