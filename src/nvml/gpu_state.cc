#include "nvml/gpu_state.h"

#include <algorithm>

#include "base/status_macros.h"
#include "base/strings.h"

namespace prism::nvml {
namespace {

// Attribute of a GPU-instance profile by its NVML index (mig.md §1.3).
uint8_t AttrsForIndex(int index) {
  switch (index) {
    case 7:  // 1_SLICE_REV1
    case 8:  // 2_SLICE_REV1
      return mig::kAttrMediaExtensions;
    case 0xA:  // *_GFX
    case 0xB:
    case 0xC:
    case 0x11:
      return mig::kAttrGraphics;
    case 0xD:  // *_NO_ME
    case 0xE:
      return mig::kAttrNoMediaExtensions;
    case 0xF:  // *_ALL_ME
    case 0x10:
      return mig::kAttrAllMediaExtensions;
    default:
      return mig::kAttrNone;
  }
}

}  // namespace

absl::StatusOr<mig::GpuModel> ModelForGpu(Nvml& nvml, const GpuInfo& gpu) {
  if (!gpu.mig_capable) {
    return absl::UnimplementedError(
        StrCat("GPU ", gpu.index, " (", gpu.name, ") does not support MIG"));
  }
  const mig::GpuModel* known = mig::FindModelByPciId(gpu.pci_device_id);
  if (known == nullptr) known = mig::FindModel(gpu.name);
  ASSIGN_OR_RETURN(auto live, nvml.ListGpuInstanceProfiles(gpu.index));
  mig::GpuModel model;
  if (known != nullptr) {
    model = *known;
  } else {
    model.name = gpu.name;
    model.product_names = {gpu.name};
    model.pci_device_id = gpu.pci_device_id;
    model.architecture =
        mig::Architecture::kHopper;  // Unknown: mode changes are judged by the pending state.
    model.unverified = "not in Prism's catalog; modelled from NVML";
  }
  if (gpu.memory_total_mib > 0) model.memory_mib = gpu.memory_total_mib;
  if (live.empty()) return model;  // Old drivers list no profiles while MIG is off: keep the table.
  std::vector<mig::GpuInstanceProfile> profiles;
  int compute_slices = 0;
  int memory_slices = 0;
  for (const GpuInstanceProfileInfo& info : live) {
    mig::GpuInstanceProfile p;
    p.nvml_index = info.index;
    p.id = info.id;
    p.compute_slices = info.slice_count;
    p.memory_slices = info.placement_size;
    p.memory_mib = info.memory_mib;
    p.multiprocessors = info.multiprocessors;
    p.engines = mig::EngineCounts{info.engines.copy, info.engines.decoder, info.engines.encoder,
                                  info.engines.jpeg, info.engines.ofa};
    p.max_count = info.instance_count;
    p.starts = info.placement_starts;
    std::sort(p.starts.begin(), p.starts.end());
    p.name = mig::ProfileName{info.slice_count, info.slice_count,
                              mig::MigMemorySizeGb(info.memory_mib, model.memory_mib),
                              AttrsForIndex(info.index)};
    // NVML reports wrong instance counts on the A30 (mig-parted hard-codes
    // them): keep the table's count for a profile the table knows.
    if (known != nullptr && known->pci_device_id == 0x20B710DE) {
      const int k = known->FindProfile(p.name);
      if (k >= 0) p.max_count = known->profiles[k].max_count;
    }
    compute_slices = std::max(compute_slices, p.compute_slices);
    for (int s : p.starts) memory_slices = std::max(memory_slices, s + p.memory_slices);
    profiles.push_back(std::move(p));
  }
  model.profiles = std::move(profiles);
  model.compute_slices = compute_slices;
  model.memory_slices = memory_slices;
  return model;
}

absl::StatusOr<GpuMigState> ReadGpuMigState(Nvml& nvml, const GpuInfo& gpu) {
  GpuMigState state;
  state.info = gpu;
  ASSIGN_OR_RETURN(state.mode, nvml.GetMigMode(gpu.index));
  ASSIGN_OR_RETURN(state.model, ModelForGpu(nvml, gpu));
  if (!state.mode.current) return state;
  ASSIGN_OR_RETURN(state.instances, nvml.ListGpuInstances(gpu.index));
  ASSIGN_OR_RETURN(auto processes, nvml.ListProcesses(gpu.index));
  for (const GpuInstanceInfo& gi : state.instances) {
    mig::Instance inst;
    inst.profile = state.model.FindProfileById(gi.profile_id);
    if (inst.profile < 0) {
      return absl::InternalError(StrCat("GPU ", gpu.index, " has GPU instance ", gi.id,
                                        " of unknown profile ID ", gi.profile_id));
    }
    inst.start = gi.start;
    inst.gpu_instance_id = gi.id;
    inst.busy = std::any_of(processes.begin(), processes.end(),
                            [&gi](const ProcessInfo& p) { return p.gpu_instance_id == gi.id; });
    state.layout.push_back(inst);
  }
  return state;
}

}  // namespace prism::nvml
