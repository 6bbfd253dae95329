// src/migmanager/gfd_labels.h: node labels in GPU Feature Discovery's format.
//
// After every reconfiguration (and at start) the MIG manager labels its node the way NVIDIA's
// GFD does (k8s-device-plugin internal/lm, mig.md §8.3), so that nodeSelectors written for the
// GPU Operator keep working:
//   - always: nvidia.com/gpu.{product,count,replicas,sharing-strategy,memory,family},
//     nvidia.com/mig.capable, nvidia.com/mps.capable; strategy != none adds
//     nvidia.com/mig.strategy;
//   - mixed: per MIG profile nvidia.com/mig-<profile>.{product,count,replicas,sharing-strategy,
//     memory,multiprocessors,slices.gi,slices.ci,engines.{copy,decoder,encoder,jpeg,ofa}};
//   - single: the same under nvidia.com/gpu.* (count = MIG devices), or <model>-MIG-INVALID with
//     zero counts when the node breaks the single strategy's rules.
// Labels GFD derives from CUDA or PCI (cuda.*, gpu.compute.*, gpu.machine, gpu.mode,
// gfd.timestamp) are not produced. docs/mig-manager.md lists the differences.
// BuildGfdLabels and the key/value helpers are pure; ReadGpuSnapshots reads NVML.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "nvml/nvml.h"

namespace prism::migmanager {

enum class MigStrategy { kNone, kSingle, kMixed };
// "none", "single", "mixed"; InvalidArgument otherwise.
absl::StatusOr<MigStrategy> ParseMigStrategy(std::string_view text);
std::string_view MigStrategyName(MigStrategy strategy);

// One MIG device (a compute instance), as nvmlDeviceGetAttributes describes it.
struct MigDeviceInfo {
  std::string profile;  // e.g. "1g.10gb", "1c.3g.40gb", "1g.10gb+me".
  int64_t memory_mib = 0;
  int multiprocessors = 0;
  int gi_slices = 0;
  int ci_slices = 0;
  nvml::EngineInfo engines;
};

struct GpuSnapshot {
  int index = 0;
  std::string product;  // nvmlDeviceGetName, e.g. "NVIDIA H100 80GB HBM3".
  int64_t memory_mib = 0;
  std::string family;  // "ampere", "hopper", "blackwell"; empty when unknown.
  bool mig_capable = false;
  bool mig_enabled = false;
  std::vector<MigDeviceInfo> mig_devices;
};

using Labels = std::map<std::string, std::string>;

// The GFD labels for `gpus` (empty: no labels). Deterministic: where GFD picks from a map
// (several GPU names on one node, one profile on several models), the lowest GPU index wins.
Labels BuildGfdLabels(const std::vector<GpuSnapshot>& gpus, MigStrategy strategy);

// Whether BuildGfdLabels may produce `key` for some node: the labels the manager owns, and so
// removes when a reconfiguration makes them stale.
bool IsGfdLabelKey(std::string_view key);

// A valid label value: characters outside [A-Za-z0-9._-] become '-', at most 63 characters,
// starting and ending with an alphanumeric (GFD replaces spaces only).
std::string SanitizeLabelValue(std::string_view value);
// A MIG profile as it appears in label keys: '+' becomes '.' ("1g.10gb+me" -> "1g.10gb.me"),
// as in the device plugin's resource names.
std::string ProfileLabelName(std::string_view profile);

// Reads every GPU except those in `skip` (GPU indices).
absl::StatusOr<std::vector<GpuSnapshot>> ReadGpuSnapshots(nvml::Nvml& nvml,
                                                          const std::set<int>& skip = {});

}  // namespace prism::migmanager
