#include "deviceplugin/container_edits.h"

#include <filesystem>

#include "base/strings.h"
#include "intercept/region.h"

namespace prism::deviceplugin {

bool RealizedDevice::Limited() const {
  if (IsMig()) return shared;
  const bool memory_limited = memory_mib > 0 && memory_mib < gpu_memory_mib;
  const bool cores_limited = cores_permille > 0 && cores_permille < sched::kPermille;
  return memory_limited || cores_limited;
}

int SmLimitPercent(int32_t cores_permille) {
  const int percent = (cores_permille + 9) / 10;
  return percent < 1 ? 1 : (percent > 100 ? 100 : percent);
}

std::string RegionDir(const VgpuOptions& options) {
  return (std::filesystem::path(options.host_dir) / "regions").string();
}

std::string RegionFileName(std::string_view pod_uid, std::string_view container) {
  return StrCat(pod_uid, "_", container);
}

std::string RegionHostFile(const VgpuOptions& options, std::string_view pod_uid,
                           std::string_view container) {
  return (std::filesystem::path(RegionDir(options)) / RegionFileName(pod_uid, container)).string();
}

uint64_t RegionFileBytes() { return sizeof(vgpu::RegionLayout); }

std::string LegacyRunDirs(const VgpuOptions& options) {
  return (std::filesystem::path(options.host_dir) / "containers").string();
}

std::string PreloadFile(const VgpuOptions& options) {
  return (std::filesystem::path(options.host_dir) / "ld.so.preload").string();
}

namespace {

// A slice's limits, region file and library (nothing for devices granted whole).
void AddSliceLimits(const std::vector<RealizedDevice>& devices, const ContainerIdentity& container,
                    const VgpuOptions& options, ContainerEdits& edits) {

  bool any_limited = false;
  bool same_sm = true;
  int first_sm = -1;
  for (size_t i = 0; i < devices.size(); ++i) {
    const RealizedDevice& d = devices[i];
    if (!d.Limited()) continue;
    any_limited = true;
    const int64_t memory = d.memory_mib > 0 ? d.memory_mib : d.gpu_memory_mib;
    edits.env.emplace_back(StrCat("CUDA_DEVICE_MEMORY_LIMIT_", i), StrCat(memory, "m"));
    // No SM limit inside a MIG instance: the limiter needs NVML's per-process utilization,
    // which MIG mode does not report (docs/mig-slices.md).
    const int sm = d.cores_permille > 0 && !d.IsMig() ? SmLimitPercent(d.cores_permille) : 100;
    edits.env.emplace_back(StrCat("CUDA_DEVICE_SM_LIMIT_", i), StrCat(sm));
    if (first_sm < 0) first_sm = sm;
    same_sm = same_sm && sm == first_sm;
  }
  if (!any_limited) return;
  if (same_sm) edits.env.emplace_back("CUDA_DEVICE_SM_LIMIT", StrCat(first_sm));
  edits.env.emplace_back("CUDA_DEVICE_MEMORY_SHARED_CACHE", kVgpuRegionFile);
  // The region file alone, not a directory: the container can create nothing on the host.
  edits.mounts.push_back(MountEdit{RegionHostFile(options, container.pod_uid, container.container),
                                   kVgpuRegionFile, /*read_only=*/false});
  if (options.library_host_path.empty() || container.disable_control) return;
  edits.mounts.push_back(MountEdit{options.library_host_path, kVgpuContainerLibrary, true});
  if (options.preload == PreloadMode::kMount) {
    edits.mounts.push_back(MountEdit{PreloadFile(options), kLdSoPreload, true});
  } else {
    edits.env.emplace_back("LD_PRELOAD", kVgpuContainerLibrary);
  }
}

}  // namespace

ContainerEdits BuildContainerEdits(const std::vector<RealizedDevice>& devices,
                                   const ContainerIdentity& container, const VgpuOptions& options) {
  ContainerEdits edits;
  std::vector<std::string> visible;
  for (const RealizedDevice& d : devices) visible.push_back(d.VisibleId());
  edits.env.emplace_back("NVIDIA_VISIBLE_DEVICES",
                         visible.empty() ? "void" : StrJoin(visible, ","));
  AddSliceLimits(devices, container, options, edits);
  // The same devices as the toolkit's volume-mount list: a node that refuses device requests by
  // env from unprivileged containers (so that no tenant takes GPUs by NVIDIA_VISIBLE_DEVICES)
  // still injects the driver's libraries for exactly these. Only /dev/null sources count, and a
  // pod cannot mount the host's /dev/null without a hostPath volume.
  for (const std::string& id : visible) {
    edits.mounts.push_back(
        MountEdit{"/dev/null", StrCat(kDeviceListMountRoot, "/", id), /*read_only=*/true});
  }
  return edits;
}

ContainerEdits BuildFailureEdits(std::string_view reason) {
  ContainerEdits edits;
  edits.env.emplace_back("NVIDIA_VISIBLE_DEVICES", "void");
  edits.env.emplace_back("PRISM_ALLOCATION_ERROR", std::string(reason));
  return edits;
}

}  // namespace prism::deviceplugin
