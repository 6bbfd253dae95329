#include "config/device_config_yaml.h"

#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "base/check.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "config/yaml_util.h"
#include "core/mig/gpu_model.h"
#include "core/sched/policy.h"

namespace prism::config {
namespace {

using sched::DeviceConfig;
using sched::GpuMode;
using sched::MigStrategy;

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

absl::StatusOr<MigStrategy> ParseMigStrategy(std::string_view text, std::string_view path) {
  const std::string v = AsciiLower(StripWhitespace(text));
  if (v == "auto") return MigStrategy::kAuto;
  if (v == "template" || v == "templates") return MigStrategy::kTemplate;
  if (v == "placement") return MigStrategy::kPlacement;
  return absl::InvalidArgumentError(
      StrCat(path, ": unknown MIG strategy '", text, "' (expected auto, template or placement)"));
}

absl::Status ParseGeometries(const YAML::Node& list, DeviceConfig& config) {
  if (!list.IsSequence()) {
    return absl::InvalidArgumentError("nvidia.knownMigGeometries: expected a list");
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = StrCat("nvidia.knownMigGeometries[", i, "]");
    const YAML::Node item = list[i];
    if (!item.IsMap()) return absl::InvalidArgumentError(StrCat(path, ": expected a map"));
    sched::KnownMigGeometries known;
    ASSIGN_OR_RETURN(known.models, ReadStringList(item["models"], StrCat(path, ".models")));
    if (known.models.empty()) {
      return absl::InvalidArgumentError(StrCat(path, ".models: must name at least one model"));
    }
    const YAML::Node geometries = item["allowedGeometries"];
    if (!geometries.IsSequence() || geometries.size() == 0) {
      return absl::InvalidArgumentError(
          StrCat(path, ".allowedGeometries: expected a non-empty list of geometries"));
    }
    for (size_t g = 0; g < geometries.size(); ++g) {
      const std::string gpath = StrCat(path, ".allowedGeometries[", g, "]");
      const YAML::Node geometry = geometries[g];
      if (!geometry.IsSequence() || geometry.size() == 0) {
        return absl::InvalidArgumentError(StrCat(gpath, ": expected a non-empty list of entries"));
      }
      sched::MigGeometry out;
      for (size_t e = 0; e < geometry.size(); ++e) {
        const std::string epath = StrCat(gpath, "[", e, "]");
        const YAML::Node entry = geometry[e];
        if (!entry.IsMap()) return absl::InvalidArgumentError(StrCat(epath, ": expected a map"));
        sched::MigTemplateEntry te;
        for (auto it = entry.begin(); it != entry.end(); ++it) {
          const std::string key = it->first.Scalar();
          const std::string kpath = StrCat(epath, ".", key);
          if (key == "name") {
            ASSIGN_OR_RETURN(te.name, ReadString(it->second, kpath));
          } else if (key == "memory") {
            ASSIGN_OR_RETURN(te.memory_mib, ReadInt(it->second, kpath, 1, int64_t{1} << 30));
          } else if (key == "core") {
            ASSIGN_OR_RETURN(int64_t core, ReadInt(it->second, kpath, 0, 100));
            te.core = static_cast<int32_t>(core);
          } else if (key == "count") {
            ASSIGN_OR_RETURN(int64_t count, ReadInt(it->second, kpath, 1, 8));
            te.count = static_cast<int32_t>(count);
          } else {
            return absl::InvalidArgumentError(StrCat(kpath, ": unknown key"));
          }
        }
        if (te.name.empty()) return absl::InvalidArgumentError(StrCat(epath, ".name: missing"));
        if (te.count == 0) return absl::InvalidArgumentError(StrCat(epath, ".count: missing"));
        out.push_back(te);
      }
      known.geometries.push_back(std::move(out));
    }
    config.known_mig_geometries.push_back(std::move(known));
  }
  return absl::OkStatus();
}

absl::Status ParseAllowlist(const YAML::Node& list, DeviceConfig& config) {
  if (!list.IsSequence()) {
    return absl::InvalidArgumentError("nvidia.migProfileAllowlist: expected a list");
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = StrCat("nvidia.migProfileAllowlist[", i, "]");
    if (!list[i].IsMap()) return absl::InvalidArgumentError(StrCat(path, ": expected a map"));
    sched::MigProfileAllowlist a;
    ASSIGN_OR_RETURN(a.models, ReadStringList(list[i]["models"], StrCat(path, ".models")));
    ASSIGN_OR_RETURN(a.profiles, ReadStringList(list[i]["profiles"], StrCat(path, ".profiles")));
    if (a.models.empty() || a.profiles.empty()) {
      return absl::InvalidArgumentError(StrCat(path, ": needs models and profiles"));
    }
    config.mig_profile_allowlist.push_back(std::move(a));
  }
  return absl::OkStatus();
}

absl::Status ParseNodeConfigs(const YAML::Node& list, DeviceConfig& config,
                              std::vector<std::string>& warnings) {
  if (!list.IsSequence()) return absl::InvalidArgumentError("nvidia.nodeconfig: expected a list");
  static const std::set<std::string> kHamiIgnored = {
      "libcudaloglevel", "enablenumatopology",           "migstrategy",
      "filterdevices",   "enablegetpreferredallocation", "preconfigureddevicememory"};
  std::set<std::string> names;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = StrCat("nvidia.nodeconfig[", i, "]");
    const YAML::Node item = list[i];
    if (!item.IsMap()) return absl::InvalidArgumentError(StrCat(path, ": expected a map"));
    sched::NodeDeviceConfig nc;
    for (auto it = item.begin(); it != item.end(); ++it) {
      const std::string key = it->first.Scalar();
      const std::string lower = AsciiLower(key);
      const std::string kpath = StrCat(path, ".", key);
      if (lower == "name") {
        ASSIGN_OR_RETURN(nc.name, ReadString(it->second, kpath));
      } else if (lower == "operatingmode") {
        ASSIGN_OR_RETURN(std::string mode, ReadString(it->second, kpath));
        ASSIGN_OR_RETURN(nc.mode, ParseGpuMode(mode, kpath));
      } else if (lower == "devicesplitcount") {
        ASSIGN_OR_RETURN(int64_t v, ReadInt(it->second, kpath, 1, 1000));
        nc.device_split_count = static_cast<int32_t>(v);
      } else if (lower == "devicememoryscaling") {
        ASSIGN_OR_RETURN(nc.device_memory_scaling, ReadDouble(it->second, kpath, 0.01, 100));
      } else if (lower == "devicecorescaling") {
        ASSIGN_OR_RETURN(nc.device_core_scaling, ReadDouble(it->second, kpath, 0.01, 100));
      } else if (lower == "prismmigstrategy") {
        ASSIGN_OR_RETURN(std::string s, ReadString(it->second, kpath));
        ASSIGN_OR_RETURN(nc.mig_strategy, ParseMigStrategy(s, kpath));
      } else if (lower == "gpus") {
        const YAML::Node gpus = it->second;
        if (!gpus.IsSequence())
          return absl::InvalidArgumentError(StrCat(kpath, ": expected a list"));
        for (size_t g = 0; g < gpus.size(); ++g) {
          const std::string gpath = StrCat(kpath, "[", g, "]");
          if (!gpus[g].IsMap())
            return absl::InvalidArgumentError(StrCat(gpath, ": expected a map"));
          sched::NodeDeviceConfig::GpuOverride o;
          ASSIGN_OR_RETURN(int64_t index,
                           ReadInt(gpus[g]["index"], StrCat(gpath, ".index"), 0, 255));
          o.index = static_cast<int32_t>(index);
          if (gpus[g]["operatingmode"]) {
            ASSIGN_OR_RETURN(std::string mode,
                             ReadString(gpus[g]["operatingmode"], StrCat(gpath, ".operatingmode")));
            ASSIGN_OR_RETURN(o.mode, ParseGpuMode(mode, StrCat(gpath, ".operatingmode")));
          }
          nc.gpus.push_back(o);
        }
      } else if (kHamiIgnored.count(lower)) {
        // HAMi device-plugin settings with no effect on placement.
      } else {
        warnings.push_back(StrCat(kpath, ": unknown key (ignored)"));
      }
    }
    if (nc.name.empty()) return absl::InvalidArgumentError(StrCat(path, ".name: missing"));
    if (!names.insert(nc.name).second) {
      return absl::InvalidArgumentError(StrCat(path, ": node ", nc.name, " is listed twice"));
    }
    config.node_configs.push_back(std::move(nc));
  }
  return absl::OkStatus();
}

// The extended-resource names a pod asks with: each must be a resource name Kubernetes accepts
// and they must differ, or one request would be read as another (gpumem as a GPU count).
absl::Status CheckResourceNames(const DeviceConfig& config) {
  const std::pair<const char*, const std::string*> names[] = {
      {"resourceCountName", &config.resource_count_name},
      {"resourceMemoryName", &config.resource_memory_name},
      {"resourceMemoryPercentageName", &config.resource_memory_percentage_name},
      {"resourceCoreName", &config.resource_core_name},
      {"resourcePriorityName", &config.resource_priority_name}};
  for (size_t i = 0; i < std::size(names); ++i) {
    const std::string& name = *names[i].second;
    const std::string path = StrCat("nvidia.", names[i].first);
    if (name.empty()) return absl::InvalidArgumentError(StrCat(path, ": must not be empty"));
    for (char c : name) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '-' || c == '_' || c == '/';
      if (!ok) {
        return absl::InvalidArgumentError(
            StrCat(path, ": '", name, "' is not a resource name (e.g. nvidia.com/gpu)"));
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (*names[j].second == name) {
        return absl::InvalidArgumentError(StrCat(path, ": '", name, "' is also nvidia.",
                                                 names[j].first, "; each resource needs its own"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ParseNvidia(const YAML::Node& nvidia, DeviceConfig& config,
                         std::vector<std::string>& warnings) {
  if (!nvidia.IsMap()) return absl::InvalidArgumentError("nvidia: expected a map");
  static const std::set<std::string> kHamiIgnored = {
      "overwriteEnv",    "disableCoreLimit",  "runtimeClassName", "preConfiguredDeviceMemory",
      "libCudaLogLevel", "enableNumaTopology"};
  for (auto it = nvidia.begin(); it != nvidia.end(); ++it) {
    const std::string key = it->first.Scalar();
    const std::string path = StrCat("nvidia.", key);
    const YAML::Node v = it->second;
    if (key == "resourceCountName") {
      ASSIGN_OR_RETURN(config.resource_count_name, ReadString(v, path));
    } else if (key == "resourceMemoryName") {
      ASSIGN_OR_RETURN(config.resource_memory_name, ReadString(v, path));
    } else if (key == "resourceMemoryPercentageName") {
      ASSIGN_OR_RETURN(config.resource_memory_percentage_name, ReadString(v, path));
    } else if (key == "resourceCoreName") {
      ASSIGN_OR_RETURN(config.resource_core_name, ReadString(v, path));
    } else if (key == "resourcePriorityName") {
      ASSIGN_OR_RETURN(config.resource_priority_name, ReadString(v, path));
    } else if (key == "defaultMemory") {
      ASSIGN_OR_RETURN(config.default_memory_mib, ReadInt(v, path, 0, int64_t{1} << 30));
    } else if (key == "defaultCores") {
      ASSIGN_OR_RETURN(int64_t c, ReadInt(v, path, 0, 100));
      config.default_cores = static_cast<int32_t>(c);
    } else if (key == "defaultGPUNum") {
      ASSIGN_OR_RETURN(int64_t n, ReadInt(v, path, 0, 128));
      config.default_gpu_num = static_cast<int32_t>(n);
    } else if (key == "memoryFactor") {
      ASSIGN_OR_RETURN(int64_t f, ReadInt(v, path, 1, kInt32Max));
      config.memory_factor = static_cast<int32_t>(f);
    } else if (key == "deviceSplitCount") {
      ASSIGN_OR_RETURN(int64_t n, ReadInt(v, path, 1, 1000));
      config.device_split_count = static_cast<int32_t>(n);
    } else if (key == "deviceMemoryScaling") {
      ASSIGN_OR_RETURN(config.device_memory_scaling, ReadDouble(v, path, 0.01, 100));
    } else if (key == "deviceCoreScaling") {
      ASSIGN_OR_RETURN(config.device_core_scaling, ReadDouble(v, path, 0.01, 100));
    } else if (key == "gpuCorePolicy") {
      ASSIGN_OR_RETURN(std::string p, ReadString(v, path));
      if (p != "default" && p != "force" && p != "disable") {
        return absl::InvalidArgumentError(
            StrCat(path, ": expected default, force or disable, got '", p, "'"));
      }
    } else if (key == "knownMigGeometries") {
      RETURN_IF_ERROR(ParseGeometries(v, config));
    } else if (key == "migProfileAllowlist") {
      RETURN_IF_ERROR(ParseAllowlist(v, config));
    } else if (key == "nodeconfig") {
      RETURN_IF_ERROR(ParseNodeConfigs(v, config, warnings));
    } else if (kHamiIgnored.count(key)) {
      // Container-side settings (HAMi-core env, runtime class): no effect on placement.
      if (key == "libCudaLogLevel") RETURN_IF_ERROR(ReadInt(v, path, 0, 10).status());
      if (key == "overwriteEnv" || key == "disableCoreLimit" || key == "enableNumaTopology") {
        RETURN_IF_ERROR(ReadBool(v, path).status());
      }
    } else {
      warnings.push_back(StrCat(path, ": unknown key (ignored)"));
    }
  }
  return CheckResourceNames(config);
}

// Bounds on `prism.migSharing` (far beyond any real config: the catalog has a few dozen models).
constexpr size_t kMaxMigSharingEntries = 32;
constexpr size_t kMaxMigSharingNames = 8;

// `prism.migSharing[]`: each model must be a MIG model of the catalog and have every profile of
// its entry as a plain profile; a model in two entries is an error (which one applies would
// depend on order).
absl::Status ParseMigSharing(const YAML::Node& list, DeviceConfig& config) {
  if (!list.IsSequence()) return absl::InvalidArgumentError("prism.migSharing: expected a list");
  if (list.size() > kMaxMigSharingEntries) {
    return absl::InvalidArgumentError(
        StrCat("prism.migSharing: ", list.size(), " entries, at most ", kMaxMigSharingEntries));
  }
  std::map<const mig::GpuModel*, size_t> entry_of_model;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = StrCat("prism.migSharing[", i, "]");
    const YAML::Node item = list[i];
    if (!item.IsMap()) return absl::InvalidArgumentError(StrCat(path, ": expected a map"));
    for (auto it = item.begin(); it != item.end(); ++it) {
      const std::string key = it->first.Scalar();
      if (key != "models" && key != "profiles") {
        return absl::InvalidArgumentError(
            StrCat(path, ".", key, ": unknown key (expected models and profiles)"));
      }
    }
    sched::MigSharing entry;
    for (const char* key : {"models", "profiles"}) {
      const std::string kpath = StrCat(path, ".", key);
      if (!item[key]) return absl::InvalidArgumentError(StrCat(kpath, ": missing"));
      ASSIGN_OR_RETURN(std::vector<std::string> names, ReadStringList(item[key], kpath));
      if (names.empty() || names.size() > kMaxMigSharingNames) {
        return absl::InvalidArgumentError(
            StrCat(kpath, ": expected 1 to ", kMaxMigSharingNames, " names, got ", names.size()));
      }
      (key[0] == 'm' ? entry.models : entry.profiles) = std::move(names);
    }
    std::vector<const mig::GpuModel*> models;
    for (size_t m = 0; m < entry.models.size(); ++m) {
      const std::string mpath = StrCat(path, ".models[", m, "]");
      const mig::GpuModel* model = mig::FindModel(entry.models[m]);
      if (model == nullptr) {
        return absl::InvalidArgumentError(
            StrCat(mpath, ": ", QuoteBounded(entry.models[m]),
                   " is not a MIG-capable model (a GPU without MIG has no instance to share); "
                   "known: ",
                   mig::ModelList()));
      }
      const auto [prev, inserted] = entry_of_model.emplace(model, i);
      if (!inserted) {
        return absl::InvalidArgumentError(StrCat(mpath, ": ", model->name,
                                                 " is already in prism.migSharing[", prev->second,
                                                 "]; a model may be in one entry only"));
      }
      models.push_back(model);
    }
    for (size_t p = 0; p < entry.profiles.size(); ++p) {
      const std::string ppath = StrCat(path, ".profiles[", p, "]");
      for (const mig::GpuModel* model : models) {
        const int index = model->FindProfile(entry.profiles[p]);
        if (index < 0 || model->profiles[index].Name() != entry.profiles[p]) {
          return absl::InvalidArgumentError(StrCat(ppath, ": profile ",
                                                   QuoteBounded(entry.profiles[p]),
                                                   " does not exist on ", model->name));
        }
        if (model->profiles[index].name.attrs != mig::kAttrNone) {
          return absl::InvalidArgumentError(
              StrCat(ppath, ": ", entry.profiles[p],
                     " has media-engine attributes; only plain profiles can be shared"));
        }
      }
    }
    config.mig_sharing.push_back(std::move(entry));
  }
  return absl::OkStatus();
}

absl::Status ParsePrism(const YAML::Node& prism, DeviceConfig& config,
                        std::vector<std::string>& warnings) {
  if (!prism.IsMap()) return absl::InvalidArgumentError("prism: expected a map");
  for (auto it = prism.begin(); it != prism.end(); ++it) {
    const std::string key = it->first.Scalar();
    const std::string path = StrCat("prism.", key);
    const YAML::Node v = it->second;
    if (key == "migStrategy") {
      ASSIGN_OR_RETURN(std::string s, ReadString(v, path));
      ASSIGN_OR_RETURN(config.mig_strategy, ParseMigStrategy(s, path));
    } else if (key == "migMatchCores") {
      ASSIGN_OR_RETURN(config.mig_match_cores, ReadBool(v, path));
    } else if (key == "defaultNodePolicy") {
      ASSIGN_OR_RETURN(config.default_node_policy, ReadString(v, path));
      RETURN_IF_ERROR(Annotate(sched::ParseNodePolicy(config.default_node_policy).status(), path));
    } else if (key == "defaultGpuPolicy") {
      ASSIGN_OR_RETURN(config.default_gpu_policy, ReadString(v, path));
      RETURN_IF_ERROR(Annotate(sched::ParseGpuPolicy(config.default_gpu_policy).status(), path));
    } else if (key == "migSharing") {
      RETURN_IF_ERROR(ParseMigSharing(v, config));
    } else {
      warnings.push_back(StrCat(path, ": unknown key (ignored)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ParsedDeviceConfig> ParseDocument(const YAML::Node& root, int depth) {
  if (!root.IsMap()) {
    return absl::InvalidArgumentError("device config: expected a map with an `nvidia` section");
  }
  // A whole ConfigMap: parse its device-config.yaml.
  if (root["kind"] && root["kind"].IsScalar() && root["kind"].Scalar() == "ConfigMap") {
    const YAML::Node data = root["data"];
    if (depth > 0 || !data || !data["device-config.yaml"]) {
      return absl::InvalidArgumentError("ConfigMap has no data.device-config.yaml");
    }
    ASSIGN_OR_RETURN(std::string inner,
                     ReadString(data["device-config.yaml"], "data.device-config.yaml"));
    ASSIGN_OR_RETURN(YAML::Node doc, LoadYaml(inner, "data.device-config.yaml"));
    return ParseDocument(doc, depth + 1);
  }
  static const std::set<std::string> kOtherVendors = {
      "metax",     "hygon", "cambricon", "mthreads", "iluvatars", "enflame",  "kunlun",
      "awsneuron", "amd",   "vastai",    "biren",    "vnpus",     "iluvatar", "ascend"};
  ParsedDeviceConfig out;
  bool has_nvidia = false;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (key == "nvidia") {
      has_nvidia = true;
      RETURN_IF_ERROR(ParseNvidia(it->second, out.config, out.warnings));
    } else if (key == "prism") {
      RETURN_IF_ERROR(ParsePrism(it->second, out.config, out.warnings));
    } else if (kOtherVendors.count(key)) {
      // Other vendors' sections: Prism schedules NVIDIA GPUs only.
    } else {
      out.warnings.push_back(StrCat(key, ": unknown key (ignored)"));
    }
  }
  if (!has_nvidia) out.warnings.push_back("no `nvidia` section: HAMi's built-in defaults apply");
  return out;
}

}  // namespace

absl::StatusOr<GpuMode> ParseGpuMode(std::string_view text, std::string_view path) {
  const std::string v = AsciiLower(StripWhitespace(text));
  if (v == "hami-core") return GpuMode::kHamiCore;
  if (v == "mig") return GpuMode::kMig;
  if (v == "mps") {
    return absl::InvalidArgumentError(
        StrCat(path, ": mode mps is not supported by Prism (use hami-core or mig)"));
  }
  return absl::InvalidArgumentError(
      StrCat(path, ": unknown mode '", text, "' (expected hami-core or mig)"));
}

absl::StatusOr<ParsedDeviceConfig> ParseDeviceConfigYaml(std::string_view text) {
  ASSIGN_OR_RETURN(YAML::Node root, LoadYaml(text, "device config"));
  if (root.IsNull()) return absl::InvalidArgumentError("device config is empty");
  try {
    return ParseDocument(root, 0);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat("device config: ", e.what()));
  }
}

sched::DeviceConfig DefaultDeviceConfig() {
  auto parsed = ParseDeviceConfigYaml(DefaultDeviceConfigYaml());
  PRISM_CHECK(parsed.ok());
  return parsed->config;
}

}  // namespace prism::config
