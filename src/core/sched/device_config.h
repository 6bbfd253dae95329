// src/core/sched/device_config.h: the scheduler-side device configuration
// (HAMi's `hami-scheduler-device` ConfigMap, NVIDIA section, plus Prism's
// extensions), as plain values.
//
// Pure: src/config/device_config_yaml.h parses the YAML into this struct and
// validates it. Thread-compatible; immutable once the engine holds it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/sched/request.h"

namespace prism::sched {

// One entry of a legacy MIG geometry ("template"): `count` instances of `name`.
struct MigTemplateEntry {
  std::string name;        // Profile name, e.g. "2g.10gb".
  int64_t memory_mib = 0;  // HAMi's declared memory (what the slot grants).
  int32_t core = 0;        // HAMi's declared core percent (0 = derived from the profile).
  int32_t count = 0;
};
using MigGeometry = std::vector<MigTemplateEntry>;

// `knownMigGeometries[]`: geometries allowed for GPUs whose type matches one of `models`.
struct KnownMigGeometries {
  std::vector<std::string> models;
  std::vector<MigGeometry> geometries;  // Config order matters for ties.
};

// `migProfileAllowlist[]` (HAMi v2.10): profiles placement mode may create.
struct MigProfileAllowlist {
  std::vector<std::string> models;
  std::vector<std::string> profiles;
};

// `prism.migSharing[]`: MIG profiles whose instances software slices may share, on GPUs of
// `models` (docs/mig-slices.md). Validated when read: every model is a MIG catalog model and has
// every profile (plain profiles only).
struct MigSharing {
  std::vector<std::string> models;
  std::vector<std::string> profiles;
};

// How a MIG GPU decides its layout.
enum class MigStrategy : uint8_t {
  kAuto = 0,   // Templates when the model has knownMigGeometries, else placement.
  kTemplate,   // Templates only (a model without geometries cannot host MIG pods).
  kPlacement,  // Any legal layout, instance by instance (templates ignored).
};

// Per-node overrides (HAMi `nodeconfig[]`), with a per-GPU mode extension.
struct NodeDeviceConfig {
  std::string name;
  std::optional<GpuMode> mode;                // operatingmode.
  std::optional<int32_t> device_split_count;  // devicesplitcount.
  std::optional<double> device_memory_scaling;
  std::optional<double> device_core_scaling;
  std::optional<MigStrategy> mig_strategy;
  struct GpuOverride {
    int32_t index = 0;
    std::optional<GpuMode> mode;
  };
  std::vector<GpuOverride> gpus;
};

struct DeviceConfig {
  // Resource names (pod requests are read under these names).
  std::string resource_count_name = "nvidia.com/gpu";
  std::string resource_memory_name = "nvidia.com/gpumem";
  std::string resource_memory_percentage_name = "nvidia.com/gpumem-percentage";
  std::string resource_core_name = "nvidia.com/gpucores";
  std::string resource_priority_name = "nvidia.com/priority";

  int64_t default_memory_mib = 0;  // 0 = the whole GPU when nothing is asked.
  int32_t default_cores = 0;       // Percent.
  int32_t default_gpu_num = 1;
  int32_t memory_factor = 1;  // Multiplies nvidia.com/gpumem.
  int32_t device_split_count = 10;
  double device_memory_scaling = 1.0;
  double device_core_scaling = 1.0;

  std::vector<KnownMigGeometries> known_mig_geometries;
  std::vector<MigProfileAllowlist> mig_profile_allowlist;
  std::vector<NodeDeviceConfig> node_configs;

  // Prism extensions (top-level `prism:` section of device-config.yaml).
  MigStrategy mig_strategy = MigStrategy::kAuto;
  // Whether a MIG instance must also cover the requested compute share
  // (gpucores); HAMi matches memory only.
  bool mig_match_cores = true;
  std::string default_node_policy;  // Empty = engine default.
  std::string default_gpu_policy;
  // Empty: no MIG instance is shared (every MIG container gets whole instances).
  std::vector<MigSharing> mig_sharing;

  // The entry for `node`, or nullptr.
  const NodeDeviceConfig* FindNode(const std::string& node) const;
};

}  // namespace prism::sched
