#include "sim/yaml_input.h"

#include <algorithm>
#include <map>
#include <set>

#include "base/status_macros.h"
#include "base/strings.h"
#include "config/cluster_yaml.h"
#include "config/pod_request.h"
#include "config/pod_yaml.h"
#include "core/sched/cluster.h"

namespace prism::sim {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

sched::GpuMode ModeOf(const sched::NodeSpec& node, int index, const sched::GpuSpec& gpu,
                      const sched::DeviceConfig& config) {
  if (gpu.mode) return *gpu.mode;
  if (const sched::NodeDeviceConfig* nc = config.FindNode(node.name)) {
    for (const auto& o : nc->gpus) {
      if (o.index == index && o.mode) return *o.mode;
    }
    if (nc->mode) return *nc->mode;
  }
  return sched::GpuMode::kHamiCore;
}

}  // namespace

absl::StatusOr<YamlCluster> ClusterFromYaml(std::string_view text,
                                            const sched::DeviceConfig& config) {
  ASSIGN_OR_RETURN(config::ClusterFile file, config::ParseClusterYaml(text));
  YamlCluster out;
  out.warnings = file.warnings;
  if (!file.running.empty()) {
    out.warnings.push_back(StrCat("the simulator starts from an empty cluster: ",
                                  file.running.size(), " running pod(s) ignored"));
  }
  std::vector<NodeSpec> nodes;
  std::vector<std::string> models;
  std::vector<const mig::GpuModel*> node_mig;
  std::map<std::string, int> model_index;
  std::set<int64_t> memories;
  for (const sched::NodeSpec& n : file.nodes) {
    NodeSpec s;
    s.name = n.name;
    s.milli_cpu = n.cpu_milli;
    s.memory_mib = n.memory_bytes / kMiB;
    s.gpu_count = static_cast<int>(n.gpus.size());
    const mig::GpuModel* mig_model = nullptr;
    bool instances = false;
    for (size_t g = 0; g < n.gpus.size(); ++g) {
      const sched::GpuSpec& gpu = n.gpus[g];
      const sched::GpuSpec& first = n.gpus.front();
      const sched::GpuMode mode = ModeOf(n, static_cast<int>(g), gpu, config);
      if (gpu.model != first.model || mode != ModeOf(n, 0, first, config)) {
        return absl::InvalidArgumentError(
            StrCat("node ", n.name, ": GPU ", g, " (", gpu.model, ", ", sched::GpuModeName(mode),
                   ") differs from GPU 0; the simulator needs one GPU model and mode per node"));
      }
      instances |= !gpu.instances.empty();
      int64_t memory = gpu.memory_mib;
      const mig::GpuModel* catalog = mig::FindModel(gpu.model);
      if (mode == sched::GpuMode::kMig) {
        if (catalog == nullptr) {
          return absl::InvalidArgumentError(
              StrCat("node ", n.name, ": GPU model '", gpu.model,
                     "' is not a MIG-capable model (known: ", mig::ModelList(), ")"));
        }
        mig_model = catalog;
      }
      if (memory == 0 && catalog != nullptr) memory = catalog->memory_mib;
      if (memory > 0) memories.insert(memory);
    }
    if (instances) {
      out.warnings.push_back(
          StrCat("node ", n.name, ": existing MIG instances ignored (GPUs start empty)"));
    }
    if (s.gpu_count > 0) {
      auto [it, inserted] = model_index.emplace(n.gpus.front().model, models.size());
      if (inserted) models.push_back(n.gpus.front().model);
      s.model = static_cast<int>(it->second);
    }
    node_mig.push_back(mig_model);
    nodes.push_back(std::move(s));
  }
  ASSIGN_OR_RETURN(out.cluster, Cluster::FromNodes(std::move(nodes), std::move(models)));
  for (int i = 0; i < out.cluster.node_count(); ++i) {
    if (node_mig[i] != nullptr) out.cluster.SetNodeMig(i, node_mig[i]);
  }
  if (memories.size() == 1) out.gpu_memory_mib = *memories.begin();
  return out;
}

absl::StatusOr<std::vector<TracePod>> PodsFromYaml(std::string_view text, std::string_view where,
                                                   const sched::DeviceConfig& config,
                                                   const std::vector<std::string>& models,
                                                   int64_t gpu_memory_mib) {
  ASSIGN_OR_RETURN(std::vector<config::PodManifest> manifests, config::ParsePodYaml(text, where));
  std::vector<TracePod> pods;
  for (const config::PodManifest& m : manifests) {
    ASSIGN_OR_RETURN(sched::PodRequest r, config::BuildPodRequest(m, config));
    TracePod p;
    p.name = m.Key();
    p.milli_cpu = r.EffectiveCpuMilli();
    p.memory_mib = (r.EffectiveMemoryBytes() + kMiB - 1) / kMiB;
    const sched::ContainerRequest* gpu = nullptr;
    for (const sched::ContainerRequest& c : r.containers) {
      if (c.gpu.count == 0) continue;
      if (gpu != nullptr) {
        return absl::InvalidArgumentError(
            StrCat("pod ", m.Key(), ": containers ", gpu->name, " and ", c.name,
                   " both ask for GPUs; the simulator takes one GPU request per pod"));
      }
      gpu = &c;
    }
    if (gpu != nullptr) {
      const sched::GpuRequest& g = gpu->gpu;
      int64_t milli = 0;
      if (g.memory_mib > 0) {
        if (gpu_memory_mib <= 0) {
          return absl::InvalidArgumentError(
              StrCat("pod ", m.Key(), ", container ", gpu->name, ": asks for ", g.memory_mib,
                     " MiB of GPU memory, but the cluster's GPUs do not all have the same "
                     "memory; ask for a share (gpumem-percentage or gpucores) instead"));
        }
        milli = (g.memory_mib * 1000 + gpu_memory_mib - 1) / gpu_memory_mib;
      } else if (g.memory_permille > 0) {
        milli = g.memory_permille;
      } else {
        milli = g.cores_permille;
      }
      milli = std::max<int64_t>(milli, g.cores_permille);
      if (milli <= 0 || milli > 1000) {
        return absl::InvalidArgumentError(StrCat("pod ", m.Key(), ", container ", gpu->name,
                                                 ": a GPU share of ", milli,
                                                 " milli-GPU is outside 1..1000"));
      }
      p.num_gpu = g.count;
      p.gpu_milli = static_cast<int>(milli);
      if (!r.use_types.empty() || !r.nouse_types.empty()) {
        std::vector<std::string> allowed;
        for (const std::string& model : models) {
          auto matches = [&](const std::vector<std::string>& patterns) {
            return std::any_of(patterns.begin(), patterns.end(), [&](const std::string& pat) {
              return sched::TypeContains(model, pat);
            });
          };
          if ((r.use_types.empty() || matches(r.use_types)) && !matches(r.nouse_types)) {
            allowed.push_back(model);
          }
        }
        // No model left: a name no GPU has (the pod fits nowhere).
        p.gpu_spec = allowed.empty() ? "(none)" : StrJoin(allowed, "|");
      }
    }
    pods.push_back(std::move(p));
  }
  if (pods.empty()) return absl::InvalidArgumentError(StrCat(where, ": no pods"));
  return pods;
}

}  // namespace prism::sim
