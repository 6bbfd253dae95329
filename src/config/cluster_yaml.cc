#include "config/cluster_yaml.h"

#include <optional>
#include <set>

#include "base/status_macros.h"
#include "base/strings.h"
#include "config/device_config_yaml.h"
#include "config/pod_yaml.h"
#include "config/quantity.h"
#include "config/yaml_util.h"
#include "nvml/sim/sim_topology.h"

namespace prism::config {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

void Unknown(std::vector<std::string>& warnings, const std::string& path) {
  warnings.push_back(StrCat(path, ": unknown key (ignored)"));
}

absl::StatusOr<std::vector<sched::GpuSpec>> ParseGpu(const YAML::Node& g, const std::string& path,
                                                     std::vector<std::string>& warnings) {
  if (!g.IsMap()) return absl::InvalidArgumentError(StrCat(path, ": expected a map"));
  sched::GpuSpec spec;
  int64_t count = 1;
  for (auto it = g.begin(); it != g.end(); ++it) {
    const std::string key = it->first.Scalar();
    const std::string kpath = StrCat(path, ".", key);
    const YAML::Node v = it->second;
    if (key == "model" || key == "type") {
      ASSIGN_OR_RETURN(spec.model, ReadString(v, kpath));
    } else if (key == "mode") {
      ASSIGN_OR_RETURN(std::string mode, ReadString(v, kpath));
      ASSIGN_OR_RETURN(spec.mode, ParseGpuMode(mode, kpath));
    } else if (key == "count") {
      ASSIGN_OR_RETURN(count, ReadInt(v, kpath, 1, 64));
    } else if (key == "memory") {
      ASSIGN_OR_RETURN(std::string text, ReadString(v, kpath));
      auto bytes = ParseQuantity(text);
      if (!bytes.ok()) return Annotate(bytes.status(), kpath);
      spec.memory_mib = *bytes / kMiB;
      if (spec.memory_mib <= 0) {
        return absl::InvalidArgumentError(StrCat(kpath, ": less than 1 MiB"));
      }
    } else if (key == "memoryMiB") {
      ASSIGN_OR_RETURN(spec.memory_mib, ReadInt(v, kpath, 1, int64_t{1} << 30));
    } else if (key == "uuid") {
      ASSIGN_OR_RETURN(spec.uuid, ReadString(v, kpath));
    } else if (key == "healthy") {
      ASSIGN_OR_RETURN(spec.healthy, ReadBool(v, kpath));
    } else if (key == "template") {
      ASSIGN_OR_RETURN(int64_t t, ReadInt(v, kpath, 0, 64));
      spec.template_index = static_cast<int32_t>(t);
    } else if (key == "instances") {
      if (!v.IsSequence()) return absl::InvalidArgumentError(StrCat(kpath, ": expected a list"));
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string ipath = StrCat(kpath, "[", i, "]");
        const YAML::Node inst = v[i];
        if (!inst.IsMap()) return absl::InvalidArgumentError(StrCat(ipath, ": expected a map"));
        sched::MigInstanceSpec is;
        bool has_profile = false;
        bool has_start = false;
        for (auto jt = inst.begin(); jt != inst.end(); ++jt) {
          const std::string ikey = jt->first.Scalar();
          const std::string ikpath = StrCat(ipath, ".", ikey);
          if (ikey == "profile") {
            ASSIGN_OR_RETURN(is.profile, ReadString(jt->second, ikpath));
            has_profile = true;
          } else if (ikey == "start") {
            ASSIGN_OR_RETURN(int64_t s, ReadInt(jt->second, ikpath, 0, 7));
            is.start = static_cast<int32_t>(s);
            has_start = true;
          } else if (ikey == "inUse") {
            ASSIGN_OR_RETURN(is.in_use, ReadBool(jt->second, ikpath));
          } else {
            Unknown(warnings, ikpath);
          }
        }
        if (!has_profile || !has_start) {
          return absl::InvalidArgumentError(StrCat(ipath, ": needs profile and start"));
        }
        spec.instances.push_back(is);
      }
    } else {
      Unknown(warnings, kpath);
    }
  }
  if (spec.model.empty()) return absl::InvalidArgumentError(StrCat(path, ".model: missing"));
  if (count > 1 && !spec.instances.empty()) {
    return absl::InvalidArgumentError(
        StrCat(path, ": instances describe one GPU; list GPUs with instances one by one"));
  }
  std::vector<sched::GpuSpec> out;
  for (int64_t i = 0; i < count; ++i) {
    sched::GpuSpec copy = spec;
    if (count > 1 && !spec.uuid.empty()) copy.uuid = StrCat(spec.uuid, "-", i);
    out.push_back(std::move(copy));
  }
  return out;
}

absl::StatusOr<sched::NodeSpec> ParseNode(const YAML::Node& n, const std::string& path,
                                          std::vector<std::string>& warnings) {
  if (!n.IsMap()) return absl::InvalidArgumentError(StrCat(path, ": expected a map"));
  sched::NodeSpec spec;
  bool has_cpu = false;
  bool has_memory = false;
  std::optional<YAML::Node> topology;  // A default YAML::Node converts to true: not "absent".
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string key = it->first.Scalar();
    const std::string kpath = StrCat(path, ".", key);
    const YAML::Node v = it->second;
    if (key == "name") {
      ASSIGN_OR_RETURN(spec.name, ReadString(v, kpath));
    } else if (key == "cpu") {
      ASSIGN_OR_RETURN(std::string text, ReadString(v, kpath));
      auto milli = ParseQuantityMilli(text);
      if (!milli.ok()) return Annotate(milli.status(), kpath);
      spec.cpu_milli = *milli;
      has_cpu = true;
    } else if (key == "memory") {
      ASSIGN_OR_RETURN(std::string text, ReadString(v, kpath));
      auto bytes = ParseQuantity(text);
      if (!bytes.ok()) return Annotate(bytes.status(), kpath);
      spec.memory_bytes = *bytes;
      has_memory = true;
    } else if (key == "topology") {
      topology = v;  // Read once the GPUs are known, whatever the key order.
    } else if (key == "gpus") {
      if (!v.IsSequence()) return absl::InvalidArgumentError(StrCat(kpath, ": expected a list"));
      for (size_t i = 0; i < v.size(); ++i) {
        ASSIGN_OR_RETURN(std::vector<sched::GpuSpec> gpus,
                         ParseGpu(v[i], StrCat(kpath, "[", i, "]"), warnings));
        for (auto& g : gpus) spec.gpus.push_back(std::move(g));
      }
    } else {
      Unknown(warnings, kpath);
    }
  }
  if (spec.name.empty()) return absl::InvalidArgumentError(StrCat(path, ".name: missing"));
  if (!has_cpu) return absl::InvalidArgumentError(StrCat(path, ".cpu: missing"));
  if (!has_memory) return absl::InvalidArgumentError(StrCat(path, ".memory: missing"));
  if (spec.gpus.size() > 256) {
    return absl::InvalidArgumentError(StrCat(path, ": more than 256 GPUs"));
  }
  if (topology.has_value()) {
    // The NVML simulator's `topology:` (a machine, or the wiring spelled out), as the node
    // agent's discovery would read it (docs/topology.md, "Placement").
    absl::StatusOr<nvml::sim::SimTopology> wiring =
        nvml::sim::ParseSimTopology(*topology, spec.gpus.size());
    if (!wiring.ok()) return Annotate(wiring.status(), StrCat(path, ".topology"));
    spec.topology = nvml::sim::AsDiscovered(*wiring);
  }
  return spec;
}

}  // namespace

absl::StatusOr<ClusterFile> ParseClusterYaml(std::string_view text) {
  ASSIGN_OR_RETURN(YAML::Node root, LoadYaml(text, "cluster file"));
  try {
    if (!root.IsMap())
      return absl::InvalidArgumentError("cluster file: expected a map with `nodes`");
    ClusterFile out;
    bool has_nodes = false;
    std::set<std::string> names;
    for (auto it = root.begin(); it != root.end(); ++it) {
      const std::string key = it->first.Scalar();
      const YAML::Node v = it->second;
      if (key == "nodes") {
        has_nodes = true;
        if (!v.IsSequence()) return absl::InvalidArgumentError("nodes: expected a list");
        for (size_t i = 0; i < v.size(); ++i) {
          ASSIGN_OR_RETURN(sched::NodeSpec node,
                           ParseNode(v[i], StrCat("nodes[", i, "]"), out.warnings));
          if (!names.insert(node.name).second) {
            return absl::InvalidArgumentError(
                StrCat("nodes[", i, "]: node ", node.name, " is listed twice"));
          }
          out.nodes.push_back(std::move(node));
        }
      } else if (key == "pods") {
        if (!v.IsSequence()) return absl::InvalidArgumentError("pods: expected a list");
        for (size_t i = 0; i < v.size(); ++i) {
          ASSIGN_OR_RETURN(PodManifest pod, ParsePodNode(v[i], StrCat("pods[", i, "]")));
          if (pod.node_name.empty()) {
            return absl::InvalidArgumentError(
                StrCat("pods[", i, "] (", pod.Key(), "): a running pod needs spec.nodeName"));
          }
          out.running.push_back(std::move(pod));
        }
      } else if (key == "apiVersion" || key == "kind") {
        // Tolerated for files that carry a header.
      } else {
        Unknown(out.warnings, key);
      }
    }
    if (!has_nodes) return absl::InvalidArgumentError("cluster file: no `nodes` list");
    return out;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat("cluster file: ", e.what()));
  }
}

}  // namespace prism::config
