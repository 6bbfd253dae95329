#include "core/sched/policy.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "base/strings.h"

namespace prism::sched {

std::string_view NodePolicyName(NodePolicy policy) {
  switch (policy) {
    case NodePolicy::kBinpack:
      return "binpack";
    case NodePolicy::kSpread:
      return "spread";
    case NodePolicy::kBestFit:
      return "bestfit";
    case NodePolicy::kFgd:
      return "fgd";
    case NodePolicy::kPrism:
      return "prism";
  }
  return "unknown";
}

std::string_view GpuPolicyName(GpuPolicy policy) {
  switch (policy) {
    case GpuPolicy::kBinpack:
      return "binpack";
    case GpuPolicy::kSpread:
      return "spread";
    case GpuPolicy::kFgd:
      return "fgd";
  }
  return "unknown";
}

absl::StatusOr<NodePolicy> ParseNodePolicy(std::string_view name) {
  const std::string n = AsciiLower(StripWhitespace(name));
  if (n == "binpack") return NodePolicy::kBinpack;
  if (n == "spread") return NodePolicy::kSpread;
  if (n == "bestfit" || n == "best-fit") return NodePolicy::kBestFit;
  if (n == "fgd") return NodePolicy::kFgd;
  if (n == "prism") return NodePolicy::kPrism;
  return absl::InvalidArgumentError(StrCat("unknown node scheduler policy '", name,
                                           "' (expected binpack, spread, bestfit, fgd or prism)"));
}

absl::StatusOr<GpuPolicy> ParseGpuPolicy(std::string_view name) {
  bool any = false;
  for (std::string_view part : StrSplit(name, ',', true)) {
    const std::string p = AsciiLower(StripWhitespace(part));
    if (p.empty()) continue;
    any = true;
    if (p == "binpack") return GpuPolicy::kBinpack;
    if (p == "spread") return GpuPolicy::kSpread;
    if (p == "fgd" || p == "prism") return GpuPolicy::kFgd;
    // topology-aware is read beside this (PodRequest::topology); numa and mutex are ignored.
    if (p == "topology-aware" || p == "numa" || p == "mutex") continue;
    return absl::InvalidArgumentError(
        StrCat("unknown GPU scheduler policy '", part,
               "' (expected binpack, spread or fgd; HAMi's topology-aware prefers well-connected "
               "GPUs, numa and mutex are accepted and ignored)"));
  }
  if (!any) return absl::InvalidArgumentError("empty GPU scheduler policy");
  return GpuPolicy::kSpread;
}

GpuPolicy PolicyOptions::GpuPolicyFor(NodePolicy node_policy) const {
  if (!gpu_from_node) return gpu;
  switch (node_policy) {
    case NodePolicy::kFgd:
    case NodePolicy::kPrism:
      return GpuPolicy::kFgd;
    case NodePolicy::kSpread:
      return GpuPolicy::kSpread;
    case NodePolicy::kBinpack:
    case NodePolicy::kBestFit:
      return GpuPolicy::kBinpack;
  }
  return GpuPolicy::kBinpack;
}

WorkloadShape ShapeOfPod(const PodRequest& pod) {
  WorkloadShape s;
  s.cpu_milli = pod.EffectiveCpuMilli();
  s.memory_bytes = pod.EffectiveMemoryBytes();
  int32_t app = 0;
  int32_t init = 0;
  for (const ContainerRequest& c : pod.containers) {
    if (c.gpu.count <= 0) continue;
    if (c.init) {
      init = std::max(init, c.gpu.count);
    } else {
      app += c.gpu.count;
    }
    // The largest per-device share stands for the pod.
    if (s.gpu.memory_mib == 0 && s.gpu.memory_permille == 0 && s.gpu.cores_permille == 0) {
      s.gpu = c.gpu;
    } else if (c.gpu.memory_permille > s.gpu.memory_permille ||
               c.gpu.memory_mib > s.gpu.memory_mib) {
      s.gpu = c.gpu;
    }
  }
  s.gpu_count = std::max(app, init);
  s.gpu.count = 0;
  s.types = pod.use_types;
  return s;
}

TargetWorkload TargetWorkload::FromPods(const std::vector<PodRequest>& pods, double coverage,
                                        size_t max_shapes) {
  using Key =
      std::tuple<int64_t, int64_t, int32_t, int64_t, int32_t, int32_t, std::vector<std::string>>;
  std::map<Key, std::pair<size_t, WorkloadShape>> counts;  // Ordered: deterministic.
  for (const PodRequest& pod : pods) {
    WorkloadShape s = ShapeOfPod(pod);
    // As FGD: shapes are (CPU, GPU share, GPU count, GPU type); host memory
    // neither splits shapes nor decides whether one fits.
    s.memory_bytes = 0;
    Key key{s.cpu_milli,           s.memory_bytes,       s.gpu_count, s.gpu.memory_mib,
            s.gpu.memory_permille, s.gpu.cores_permille, s.types};
    auto& entry = counts[key];
    if (entry.first++ == 0) entry.second = std::move(s);
  }
  std::vector<std::pair<size_t, WorkloadShape>> sorted;
  for (auto& [key, entry] : counts) sorted.push_back(std::move(entry));
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  TargetWorkload out;
  size_t covered = 0;
  const double total = static_cast<double>(pods.size());
  for (auto& [count, shape] : sorted) {
    if (out.shapes.size() >= max_shapes) break;
    if (total > 0 && static_cast<double>(covered) >= coverage * total) break;
    shape.weight = static_cast<double>(count) / std::max(total, 1.0);
    covered += count;
    out.shapes.push_back(std::move(shape));
  }
  return out;
}

}  // namespace prism::sched
