#include "sim/packing_check.h"

#include <algorithm>
#include <vector>

#include "base/strings.h"
#include "core/mig/layout.h"

namespace prism::sim {

absl::StatusOr<int64_t> CheckPacking(const Cluster& cluster, std::span<const PodRequest> pods,
                                     std::span<const std::pair<size_t, Placement>> placements,
                                     MigMapping mapping) {
  const int nodes = cluster.node_count();
  std::vector<int64_t> cpu(nodes, 0), memory(nodes, 0);
  std::vector<int64_t> gpu_milli(cluster.total_gpus(), 0);
  std::vector<mig::Layout> instances(cluster.total_gpus());
  std::vector<bool> placed(pods.size(), false);
  int64_t total = 0;
  for (const auto& [i, p] : placements) {
    if (i >= pods.size()) return absl::InvalidArgumentError(StrCat("no pod #", i));
    const PodRequest& pod = pods[i];
    const size_t index = i;  // A lambda may not capture a structured binding (clang, C++20).
    auto fail = [&pod, index](std::string_view what) {
      return absl::FailedPreconditionError(StrCat("pod #", index, " (", pod.name, "): ", what));
    };
    if (placed[i]) return fail("placed twice");
    placed[i] = true;
    if (p.node < 0 || p.node >= nodes) return fail(StrCat("no node #", p.node));
    const NodeSpec& node = cluster.node(p.node);
    if (pod.gpu_count > 0 && (node.model < 0 || ((pod.model_mask >> node.model) & 1) == 0)) {
      return fail(StrCat("node ", node.name, " has no GPU model the pod allows"));
    }
    const size_t given = node.mig_model == nullptr ? p.gpus.size() : p.mig.size();
    if (given != static_cast<size_t>(pod.gpu_count) || p.gpus.size() + p.mig.size() != given) {
      return fail(StrCat(p.gpus.size(), " shared and ", p.mig.size(), " MIG GPUs given on ",
                         node.name, ", the pod asks for ", pod.gpu_count));
    }
    std::vector<int> gpus = p.gpus;
    for (const MigAssignment& a : p.mig) gpus.push_back(a.gpu);
    std::sort(gpus.begin(), gpus.end());
    if (std::adjacent_find(gpus.begin(), gpus.end()) != gpus.end()) {
      return fail("the same GPU twice");
    }
    for (int g : gpus) {
      if (g < 0 || g >= node.gpu_count) return fail(StrCat(node.name, " has no GPU ", g));
    }
    cpu[p.node] += pod.milli_cpu;
    memory[p.node] += pod.memory_mib;
    const int base = cluster.gpu_offset(p.node);
    for (int g : p.gpus) gpu_milli[base + g] += pod.gpu_milli;
    for (const MigAssignment& a : p.mig) {
      const mig::GpuModel& model = *node.mig_model;
      const int profile = a.use.profile;
      if (profile < 0 || profile >= static_cast<int>(model.profiles.size())) {
        return fail(StrCat("no MIG profile #", profile));
      }
      if (!ProfileServes(model, profile, pod.gpu_milli, mapping)) {
        return fail(StrCat(model.profiles[profile].Name(), " does not serve ", pod.gpu_milli,
                           " milli-GPU"));
      }
      mig::Layout& layout = instances[base + a.gpu];
      if (std::any_of(layout.begin(), layout.end(),
                      [&](const mig::Instance& x) { return x.SamePlacement(a.use); })) {
        return fail(StrCat("instance ", model.profiles[profile].Name(), "@", a.use.start,
                           " of GPU ", a.gpu, " on ", node.name, " taken twice"));
      }
      layout.push_back(mig::Instance{profile, a.use.start, true, -1});
    }
    total += pod.TotalGpuMilli();
  }
  for (int n = 0; n < nodes; ++n) {
    const NodeSpec& node = cluster.node(n);
    if (cpu[n] > node.milli_cpu || memory[n] > node.memory_mib) {
      return absl::FailedPreconditionError(
          StrCat("node ", node.name, ": pods ask for ", cpu[n], " milli-CPU and ", memory[n],
                 " MiB, it has ", node.milli_cpu, " and ", node.memory_mib));
    }
    for (int g = 0; g < node.gpu_count; ++g) {
      const int flat = cluster.gpu_offset(n) + g;
      if (gpu_milli[flat] > kMilliPerGpu) {
        return absl::FailedPreconditionError(
            StrCat("node ", node.name, " GPU ", g, ": ", gpu_milli[flat], " milli-GPU placed"));
      }
      if (node.mig_model != nullptr && !instances[flat].empty()) {
        absl::Status s = mig::ValidateLayout(*node.mig_model, instances[flat]);
        if (!s.ok()) {
          return absl::FailedPreconditionError(
              StrCat("node ", node.name, " GPU ", g, ": ", s.message()));
        }
      }
    }
  }
  return total;
}

}  // namespace prism::sim
