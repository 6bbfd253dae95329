#include "sim/waste.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "base/strings.h"

namespace prism::sim {
namespace {

struct Shape {
  int gpu_count, gpu_milli;
  int64_t cpu, memory;
  uint64_t model_mask;
  auto key() const { return std::tie(gpu_count, gpu_milli, cpu, memory, model_mask); }
};

std::vector<Shape> DistinctGpuShapes(std::span<const PodRequest> pods) {
  std::vector<Shape> shapes;
  for (const PodRequest& p : pods) {
    if (p.gpu_count <= 0) continue;
    shapes.push_back({p.gpu_count, p.gpu_milli, p.milli_cpu, p.memory_mib, p.model_mask});
  }
  std::sort(shapes.begin(), shapes.end(),
            [](const Shape& a, const Shape& b) { return a.key() < b.key(); });
  shapes.erase(std::unique(shapes.begin(), shapes.end(),
                           [](const Shape& a, const Shape& b) { return a.key() == b.key(); }),
               shapes.end());
  return shapes;
}

bool GpusFit(const ClusterState& state, int node, const Shape& s) {
  const NodeSpec& spec = state.cluster().node(node);
  if (spec.model < 0 || ((s.model_mask >> spec.model) & 1) == 0) return false;
  int fitting = 0;
  for (int left : state.gpu_left(node)) fitting += left >= s.gpu_milli;
  return fitting >= s.gpu_count;
}

}  // namespace

WasteBreakdown ComputeWaste(const ClusterState& state, std::span<const PodRequest> shapes,
                            std::span<const PodRequest* const> failed, int arrived_pct) {
  const Cluster& cluster = state.cluster();
  WasteBreakdown out;
  out.arrived_pct = arrived_pct;
  out.capacity_milli = cluster.total_gpu_milli();
  out.unallocated_milli = out.capacity_milli - state.used_gpu_milli();
  const std::vector<Shape> gpu_shapes = DistinctGpuShapes(shapes);
  for (int n = 0; n < cluster.node_count(); ++n) {
    const NodeSpec& spec = cluster.node(n);
    if (spec.gpu_count == 0) continue;
    if (spec.mig_model != nullptr) continue;  // Counted below.
    const int64_t free = state.gpu_left_total(n);
    if (free == 0) continue;
    bool gpus_fit = false, cpu_fit = false, all_fit = false;
    for (const Shape& s : gpu_shapes) {
      if (!GpusFit(state, n, s)) continue;
      gpus_fit = true;
      if (state.cpu_left(n) < s.cpu) continue;
      cpu_fit = true;
      if (state.memory_left(n) >= s.memory) {
        all_fit = true;
        break;
      }
    }
    if (gpus_fit && !all_fit) {
      (cpu_fit ? out.memory_stranded_milli : out.cpu_stranded_milli) += free;
      continue;
    }
    for (int left : state.gpu_left(n)) {
      const size_t bucket = left >= kMilliPerGpu    ? 3
                            : left >= kHoleBounds[1] ? 2
                            : left >= kHoleBounds[0] ? 1
                                                     : 0;
      out.holes_milli[bucket] += left;
    }
  }
  // MIG capacity is not broken down: what no category holds counts as idle.
  int64_t counted = out.cpu_stranded_milli + out.memory_stranded_milli;
  for (int64_t h : out.holes_milli) counted += h;
  out.holes_milli[3] += std::max<int64_t>(0, out.unallocated_milli - counted);
  std::map<std::string, FailedShape> by_shape;
  for (const PodRequest* p : failed) {
    const std::string shape =
        p->gpu_count == 0 ? std::string("cpu-only") : StrCat(p->gpu_count, "x", p->gpu_milli);
    FailedShape& f = by_shape[shape];
    f.shape = shape;
    ++f.pods;
    f.gpu_milli += p->TotalGpuMilli();
  }
  for (auto& [name, f] : by_shape) out.failed.push_back(f);
  std::sort(out.failed.begin(), out.failed.end(), [](const FailedShape& a, const FailedShape& b) {
    return a.gpu_milli != b.gpu_milli ? a.gpu_milli > b.gpu_milli : a.pods > b.pods;
  });
  return out;
}

}  // namespace prism::sim
