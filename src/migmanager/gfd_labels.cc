#include "migmanager/gfd_labels.h"

#include <algorithm>
#include <cctype>

#include "base/status_macros.h"
#include "base/strings.h"
#include "core/mig/gpu_model.h"
#include "nvml/gpu_state.h"

namespace prism::migmanager {
namespace {

constexpr char kGpuPrefix[] = "nvidia.com/gpu.";
constexpr char kMigPrefix[] = "nvidia.com/mig-";

// Suffixes of the per-resource labels GFD writes for MIG devices.
constexpr std::string_view kMigAttributeSuffixes[] = {
    "memory",          "multiprocessors", "slices.gi",    "slices.ci",  "engines.copy",
    "engines.decoder", "engines.encoder", "engines.jpeg", "engines.ofa"};
constexpr std::string_view kResourceSuffixes[] = {"product", "count", "replicas",
                                                  "sharing-strategy"};
constexpr std::string_view kFullGpuOnlySuffixes[] = {"family"};

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

template <typename Range>
bool Contains(const Range& range, std::string_view value) {
  return std::find(std::begin(range), std::end(range), value) != std::end(range);
}

// The product label GFD builds from parts: spaces become '-', parts joined with '-'.
std::string Product(std::initializer_list<std::string_view> parts) {
  std::vector<std::string> kept;
  for (std::string_view p : parts) {
    if (!p.empty()) kept.push_back(std::string(p));
  }
  return SanitizeLabelValue(StrJoin(kept, "-"));
}

void AddMigAttributes(const std::string& prefix, const MigDeviceInfo& d, Labels* labels) {
  (*labels)[prefix + "memory"] = StrCat(d.memory_mib);
  (*labels)[prefix + "multiprocessors"] = StrCat(d.multiprocessors);
  (*labels)[prefix + "slices.gi"] = StrCat(d.gi_slices);
  (*labels)[prefix + "slices.ci"] = StrCat(d.ci_slices);
  (*labels)[prefix + "engines.copy"] = StrCat(d.engines.copy);
  (*labels)[prefix + "engines.decoder"] = StrCat(d.engines.decoder);
  (*labels)[prefix + "engines.encoder"] = StrCat(d.engines.encoder);
  (*labels)[prefix + "engines.jpeg"] = StrCat(d.engines.jpeg);
  (*labels)[prefix + "engines.ofa"] = StrCat(d.engines.ofa);
}

// A MIG resource: one profile, the first device seen (lowest GPU index) and how many there are.
struct MigResource {
  std::string model;  // Parent GPU's product name.
  MigDeviceInfo device;
  int count = 0;
};

std::map<std::string, MigResource> CollectMigResources(const std::vector<GpuSnapshot>& gpus) {
  std::map<std::string, MigResource> out;
  for (const GpuSnapshot& g : gpus) {
    if (!g.mig_enabled) continue;
    for (const MigDeviceInfo& d : g.mig_devices) {
      auto [it, inserted] = out.try_emplace(d.profile);
      if (inserted) {
        it->second.model = g.product;
        it->second.device = d;
      }
      ++it->second.count;
    }
  }
  return out;
}

// GFD's full-GPU labels: product, count, replicas, sharing, memory, family for one GPU name.
// GPUs with MIG off win over MIG-enabled ones (GFD applies them last).
void AddFullGpuLabels(const std::vector<GpuSnapshot>& gpus, Labels* labels) {
  const GpuSnapshot* chosen = nullptr;
  for (const GpuSnapshot& g : gpus) {
    if (!g.mig_enabled) {
      chosen = &g;
      break;
    }
  }
  if (chosen == nullptr) chosen = &gpus.front();
  const int count =
      static_cast<int>(std::count_if(gpus.begin(), gpus.end(), [&](const GpuSnapshot& g) {
        return g.product == chosen->product;
      }));
  (*labels)["nvidia.com/gpu.product"] = Product({chosen->product});
  (*labels)["nvidia.com/gpu.count"] = StrCat(count);
  // A MIG-enabled GPU is not shared as a whole (GFD labels it without a sharing config).
  (*labels)["nvidia.com/gpu.replicas"] = chosen->mig_enabled ? "0" : "1";
  (*labels)["nvidia.com/gpu.sharing-strategy"] = "none";
  if (chosen->memory_mib > 0) (*labels)["nvidia.com/gpu.memory"] = StrCat(chosen->memory_mib);
  if (!chosen->family.empty()) (*labels)["nvidia.com/gpu.family"] = chosen->family;
}

void AddSingleStrategyLabels(const std::vector<GpuSnapshot>& gpus, Labels* labels) {
  std::vector<const GpuSnapshot*> enabled;
  bool any_disabled = false;
  for (const GpuSnapshot& g : gpus) {
    if (g.mig_enabled) {
      enabled.push_back(&g);
    } else {
      any_disabled = true;
    }
  }
  if (enabled.empty()) return;  // Same as the `none` strategy.
  const auto resources = CollectMigResources(gpus);
  const bool any_empty = std::any_of(enabled.begin(), enabled.end(),
                                     [](const GpuSnapshot* g) { return g->mig_devices.empty(); });
  if (any_empty || any_disabled || resources.size() != 1) {
    (*labels)["nvidia.com/gpu.product"] = Product({enabled.front()->product, "MIG", "INVALID"});
    (*labels)["nvidia.com/gpu.count"] = "0";
    (*labels)["nvidia.com/gpu.replicas"] = "0";
    (*labels)["nvidia.com/gpu.memory"] = "0";
    return;
  }
  const auto& [profile, r] = *resources.begin();
  (*labels)["nvidia.com/gpu.product"] = Product({r.model, "MIG", ProfileLabelName(profile)});
  (*labels)["nvidia.com/gpu.count"] = StrCat(r.count);
  (*labels)["nvidia.com/gpu.replicas"] = "1";
  (*labels)["nvidia.com/gpu.sharing-strategy"] = "none";
  AddMigAttributes(kGpuPrefix, r.device, labels);
}

void AddMixedStrategyLabels(const std::vector<GpuSnapshot>& gpus, Labels* labels) {
  for (const auto& [profile, r] : CollectMigResources(gpus)) {
    const std::string name = ProfileLabelName(profile);
    const std::string prefix = StrCat(kMigPrefix, name, ".");
    (*labels)[prefix + "product"] = Product({r.model, "MIG", name});
    (*labels)[prefix + "count"] = StrCat(r.count);
    (*labels)[prefix + "replicas"] = "1";
    (*labels)[prefix + "sharing-strategy"] = "none";
    AddMigAttributes(prefix, r.device, labels);
  }
}

}  // namespace

absl::StatusOr<MigStrategy> ParseMigStrategy(std::string_view text) {
  if (text == "none") return MigStrategy::kNone;
  if (text == "single") return MigStrategy::kSingle;
  if (text == "mixed") return MigStrategy::kMixed;
  return absl::InvalidArgumentError(
      StrCat("unknown MIG strategy '", text, "' (expected none, single or mixed)"));
}

std::string_view MigStrategyName(MigStrategy strategy) {
  switch (strategy) {
    case MigStrategy::kNone:
      return "none";
    case MigStrategy::kSingle:
      return "single";
    case MigStrategy::kMixed:
      return "mixed";
  }
  return "none";
}

std::string SanitizeLabelValue(std::string_view value) {
  std::string out;
  for (char c : value) {
    out.push_back(IsAlnum(c) || c == '-' || c == '_' || c == '.' ? c : '-');
  }
  if (out.size() > 63) out.resize(63);
  size_t begin = 0;
  while (begin < out.size() && !IsAlnum(out[begin])) ++begin;
  size_t end = out.size();
  while (end > begin && !IsAlnum(out[end - 1])) --end;
  return out.substr(begin, end - begin);
}

std::string ProfileLabelName(std::string_view profile) {
  std::string out(profile);
  std::replace(out.begin(), out.end(), '+', '.');
  return out;
}

Labels BuildGfdLabels(const std::vector<GpuSnapshot>& gpus, MigStrategy strategy) {
  Labels labels;
  if (gpus.empty()) return labels;
  const bool capable =
      std::any_of(gpus.begin(), gpus.end(), [](const GpuSnapshot& g) { return g.mig_capable; });
  labels["nvidia.com/mig.capable"] = capable ? "true" : "false";
  labels["nvidia.com/mps.capable"] = "false";
  AddFullGpuLabels(gpus, &labels);
  switch (strategy) {
    case MigStrategy::kNone:
      break;
    case MigStrategy::kSingle:
      labels["nvidia.com/mig.strategy"] = "single";
      AddSingleStrategyLabels(gpus, &labels);
      break;
    case MigStrategy::kMixed:
      labels["nvidia.com/mig.strategy"] = "mixed";
      AddMixedStrategyLabels(gpus, &labels);
      break;
  }
  return labels;
}

bool IsGfdLabelKey(std::string_view key) {
  if (key == "nvidia.com/mig.capable" || key == "nvidia.com/mig.strategy" ||
      key == "nvidia.com/mps.capable") {
    return true;
  }
  if (key.rfind(kGpuPrefix, 0) == 0) {
    const std::string_view suffix = key.substr(std::string_view(kGpuPrefix).size());
    return Contains(kResourceSuffixes, suffix) || Contains(kMigAttributeSuffixes, suffix) ||
           Contains(kFullGpuOnlySuffixes, suffix);
  }
  if (key.rfind(kMigPrefix, 0) == 0) {
    // nvidia.com/mig-<profile>.<suffix>, where the profile itself contains dots.
    const std::string_view rest = key.substr(std::string_view(kMigPrefix).size());
    auto ends_with = [&rest](std::string_view suffix) {
      return rest.size() > suffix.size() + 1 &&
             rest.substr(rest.size() - suffix.size()) == suffix &&
             rest[rest.size() - suffix.size() - 1] == '.';
    };
    for (std::string_view s : kResourceSuffixes) {
      if (ends_with(s)) return true;
    }
    for (std::string_view s : kMigAttributeSuffixes) {
      if (ends_with(s)) return true;
    }
  }
  return false;
}

absl::StatusOr<std::vector<GpuSnapshot>> ReadGpuSnapshots(nvml::Nvml& nvml,
                                                          const std::set<int>& skip) {
  ASSIGN_OR_RETURN(std::vector<nvml::GpuInfo> gpus, nvml.ListGpus());
  std::vector<GpuSnapshot> out;
  for (const nvml::GpuInfo& gpu : gpus) {
    if (skip.count(gpu.index)) continue;
    GpuSnapshot s;
    s.index = gpu.index;
    s.product = gpu.name;
    s.memory_mib = gpu.memory_total_mib;
    s.mig_capable = gpu.mig_capable;
    const mig::GpuModel* known = mig::FindModelByPciId(gpu.pci_device_id);
    if (known == nullptr) known = mig::FindModel(gpu.name);
    if (known != nullptr) s.family = std::string(mig::ArchitectureName(known->architecture));
    if (gpu.mig_capable) {
      ASSIGN_OR_RETURN(nvml::GpuMigState state, nvml::ReadGpuMigState(nvml, gpu));
      s.mig_enabled = state.mode.current;
      for (const nvml::GpuInstanceInfo& gi : state.instances) {
        const int p = state.model.FindProfileById(gi.profile_id);
        if (p < 0) continue;
        const mig::GpuInstanceProfile& profile = state.model.profiles[p];
        for (const nvml::ComputeInstanceInfo& ci : gi.compute_instances) {
          MigDeviceInfo d;
          mig::ProfileName name = profile.name;
          name.compute_slices = ci.slice_count;
          d.profile = name.ToString();
          d.memory_mib = profile.memory_mib;
          // A compute instance smaller than its GPU instance gets its share of the SMs (NVML's
          // CI profile reports it; Nvml does not expose CI profiles).
          d.multiprocessors =
              profile.compute_slices > 0
                  ? profile.multiprocessors * ci.slice_count / profile.compute_slices
                  : profile.multiprocessors;
          d.gi_slices = profile.compute_slices;
          d.ci_slices = ci.slice_count;
          d.engines =
              nvml::EngineInfo{profile.engines.copy, profile.engines.decoder,
                               profile.engines.encoder, profile.engines.jpeg, profile.engines.ofa};
          s.mig_devices.push_back(std::move(d));
        }
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace prism::migmanager
