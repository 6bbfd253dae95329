#include "sim/mig_completion.h"

#include <algorithm>
#include <bit>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "core/mig/layout.h"

namespace prism::sim {
namespace {

// The best new instance for a share on one GPU: (profile memory slices, free memory
// slices left on the GPU, start), lowest first.
struct Option {
  std::tuple<int, int, int> rank;
  mig::Instance instance;
};

// The profiles of `model` that serve `milli`, smallest first (ProfileServes is not cheap).
std::vector<int> ServingProfiles(const mig::GpuModel& model, int milli, MigMapping mapping) {
  std::vector<int> out;
  for (int p = 0; p < static_cast<int>(model.profiles.size()); ++p) {
    if (ProfileServes(model, p, milli, mapping)) out.push_back(p);
  }
  std::stable_sort(out.begin(), out.end(), [&](int a, int b) {
    return model.profiles[a].memory_slices < model.profiles[b].memory_slices;
  });
  return out;
}

std::optional<Option> BestInstance(const mig::GpuModel& model, const mig::Occupancy& occ,
                                   const std::vector<int>& serving) {
  std::optional<Option> best;
  const int slices = model.memory_slices;
  const int free = slices - std::popcount(occ.memory_mask);
  for (int p : serving) {
    const mig::GpuInstanceProfile& profile = model.profiles[p];
    // Most GPUs are full by now: no start can fit where the free slices are too few.
    if (profile.memory_slices > free) break;
    if (best && profile.memory_slices > std::get<0>(best->rank)) break;
    for (int start : profile.starts) {
      if (!mig::CanAdd(model, occ, p, start)) continue;
      const uint32_t used = occ.memory_mask | mig::PlacementMask(model, p, start);
      const int left = slices - std::popcount(used);
      Option o{{profile.memory_slices, left, start}, mig::Instance{p, start, false, -1}};
      if (!best || o.rank < best->rank) best = o;
    }
  }
  return best;
}

}  // namespace

OfflinePacking CompleteMigPacking(const Cluster& cluster, std::span<const PodRequest> pods,
                                  const OfflinePacking& start, MigMapping mapping) {
  OfflinePacking out = start;
  ClusterState state(&cluster, mapping);
  std::vector<bool> placed(pods.size(), false), touched(cluster.node_count(), false);
  for (const auto& [i, p] : start.placements) {
    if (state.Place(pods[i], p).ok()) placed[i] = true;
    touched[p.node] = true;
  }
  std::vector<size_t> order;
  for (size_t i = 0; i < pods.size(); ++i) {
    if (!placed[i] && pods[i].gpu_count > 0) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return pods[a].TotalGpuMilli() > pods[b].TotalGpuMilli();
  });
  for (size_t i : order) {
    const PodRequest& pod = pods[i];
    const mig::GpuModel* serving_model = nullptr;
    std::vector<int> serving;
    // Untouched nodes of one kind offer the same; the first of them stands for all.
    std::set<std::tuple<const mig::GpuModel*, int, int64_t, int64_t>> untouched_seen;
    // (memory slices of the new instances, free slices they leave), lowest first.
    std::optional<std::pair<std::pair<int, int>, Placement>> best;
    for (int n = 0; n < cluster.node_count(); ++n) {
      const NodeSpec& node = cluster.node(n);
      if (node.mig_model == nullptr || node.gpu_count < pod.gpu_count ||
          !state.ModelAllowed(n, pod) || !state.CpuMemoryFit(n, pod)) {
        continue;
      }
      if (!touched[n] &&
          !untouched_seen.emplace(node.mig_model, node.gpu_count, node.milli_cpu, node.memory_mib)
               .second) {
        continue;
      }
      if (node.mig_model != serving_model) {
        serving_model = node.mig_model;
        serving = ServingProfiles(*serving_model, pod.gpu_milli, mapping);
      }
      std::vector<std::pair<Option, int>> options;  // (option, GPU)
      for (int g = 0; g < node.gpu_count; ++g) {
        auto o = BestInstance(*node.mig_model, state.occupancy(n, g), serving);
        if (o) options.emplace_back(*o, g);
      }
      if (static_cast<int>(options.size()) < pod.gpu_count) continue;
      std::stable_sort(options.begin(), options.end(),
                       [](const auto& a, const auto& b) { return a.first.rank < b.first.rank; });
      options.resize(pod.gpu_count);
      std::pair<int, int> rank{0, 0};
      Placement placement;
      placement.node = n;
      for (const auto& [o, g] : options) {
        rank.first += std::get<0>(o.rank);
        rank.second += std::get<1>(o.rank);
        MigAssignment a;
        a.gpu = g;
        a.create = {o.instance};
        a.use = o.instance;
        placement.mig.push_back(std::move(a));
      }
      if (!best || rank < best->first) best.emplace(rank, std::move(placement));
    }
    if (!best || !state.Place(pod, best->second).ok()) continue;
    touched[best->second.node] = true;
    out.gpu_milli += pod.TotalGpuMilli();
    ++out.placed;
    out.placements.emplace_back(i, std::move(best->second));
  }
  return out;
}

}  // namespace prism::sim
