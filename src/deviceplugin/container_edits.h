// src/deviceplugin/container_edits.h: what a container gets for its realized devices.
//
// The env and mounts the agent writes into an allocation's CDI spec (docs/device-plugin.md):
//   NVIDIA_VISIBLE_DEVICES   MIG-<uuid> / GPU-<uuid> list, for the NVIDIA container toolkit;
//   the same list as mounts of the host's /dev/null at
//     /var/run/nvidia-container-devices/<id> (the toolkit's volume-mount device list), which it
//     honours for unprivileged containers where it ignores the env
//     (accept-nvidia-visible-devices-envvar-when-unprivileged = false, docs/security.md);
//   software slices (libprism-vgpu, reference/vgpu-interception.md §2):
//     CUDA_DEVICE_MEMORY_LIMIT_<i>=<MiB>m and CUDA_DEVICE_SM_LIMIT_<i>=<percent> per limited
//     device (i = the device's position in NVIDIA_VISIBLE_DEVICES), CUDA_DEVICE_SM_LIMIT when
//     all limited devices share one value (HAMi-core reads only that), and
//     CUDA_DEVICE_MEMORY_SHARED_CACHE naming the container's region file, which the agent
//     creates at its final size and mounts alone (node_files.h);
//     the library mounted read-only and loaded through /etc/ld.so.preload (or LD_PRELOAD),
//     unless the container sets CUDA_DISABLE_CONTROL=true or no library is configured.
//   A device granted whole (all memory, no compute share) gets no limits and no preload.
//   A slice of a shared MIG instance (docs/mig-slices.md) gets the MIG device as a whole instance
//   does, plus the library with its memory limit (relative to the instance: CUDA sees only the
//   instance) and no SM limit (CUDA_DEVICE_SM_LIMIT_<i>=100: NVML reports no per-process
//   utilization in MIG mode, so the limiter could not measure; compute is not limited).
// Pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/sched/request.h"
#include "deviceplugin/cdi_spec.h"

namespace prism::deviceplugin {

// Paths inside the container.
inline constexpr char kVgpuContainerLibrary[] = "/usr/local/prism/lib/libprism-vgpu.so";
inline constexpr char kVgpuRegionFile[] = "/usr/local/prism/run/vgpu.cache";
inline constexpr char kLdSoPreload[] = "/etc/ld.so.preload";
// The NVIDIA container toolkit's device list as volume mounts: a mount of the host's /dev/null
// at <root>/<device id> requests that device (nvidia-container-toolkit
// internal/config/image/cuda_image.go, CUDA.DevicesFromMounts).
inline constexpr char kDeviceListMountRoot[] = "/var/run/nvidia-container-devices";

enum class PreloadMode {
  kMount,  // Mount <host-dir>/ld.so.preload over /etc/ld.so.preload (catches everything).
  kEnv,    // Set LD_PRELOAD (programs that clear their environment escape it).
};

struct VgpuOptions {
  // Host path of libprism-vgpu.so; empty: slices get their limits in the env only (the image
  // must bring the library).
  std::string library_host_path;
  // Host directory for the per-container region files (regions/) and the ld.so.preload file.
  std::string host_dir = "/var/lib/prism/vgpu";
  PreloadMode preload = PreloadMode::kMount;
};

// One device of a container, as realized on this node.
struct RealizedDevice {
  int gpu_index = 0;
  std::string gpu_uuid;
  sched::GpuMode mode = sched::GpuMode::kHamiCore;
  int64_t gpu_memory_mib = 0;  // The whole GPU's.
  // Software slice.
  int64_t memory_mib = 0;
  int32_t cores_permille = 0;
  // MIG.
  std::string profile;
  int start = -1;
  int gpu_instance_id = -1;
  int compute_instance_id = -1;
  std::string mig_uuid;
  // A slice of a shared MIG instance: memory_mib is its limit, instance_memory_mib the
  // instance's memory.
  bool shared = false;
  int64_t instance_memory_mib = 0;

  bool IsMig() const { return mode == sched::GpuMode::kMig; }
  // What NVIDIA_VISIBLE_DEVICES names.
  const std::string& VisibleId() const { return IsMig() ? mig_uuid : gpu_uuid; }
  // A slice that must be limited (memory below the GPU's, or a compute share below 100%; every
  // slice of a shared MIG instance).
  bool Limited() const;
  friend bool operator==(const RealizedDevice&, const RealizedDevice&) = default;
};

struct ContainerIdentity {
  std::string pod_uid;
  std::string container;
  bool disable_control = false;  // The container sets CUDA_DISABLE_CONTROL=true.
};

// <host_dir>/regions: the agent's directory of region files (mode 0700; no container sees it).
std::string RegionDir(const VgpuOptions& options);
// "<pod uid>_<container>": a region file's name in RegionDir. Both parts are held to
// config/names.h before they get here (neither can hold '_' or '/'), so one name is one
// container's.
std::string RegionFileName(std::string_view pod_uid, std::string_view container);
// RegionDir/RegionFileName: the host file mounted at kVgpuRegionFile.
std::string RegionHostFile(const VgpuOptions& options, std::string_view pod_uid,
                           std::string_view container);
// The size every region file has: one libprism-vgpu region of its ABI (intercept/region.h).
uint64_t RegionFileBytes();
// <host_dir>/containers: where earlier versions made a world-writable region directory per
// container (named like RegionFileName), mounted into it whole; only ever removed now.
std::string LegacyRunDirs(const VgpuOptions& options);
// <host_dir>/ld.so.preload.
std::string PreloadFile(const VgpuOptions& options);

ContainerEdits BuildContainerEdits(const std::vector<RealizedDevice>& devices,
                                   const ContainerIdentity& container, const VgpuOptions& options);

// A container whose allocation failed: no GPU (NVIDIA_VISIBLE_DEVICES=void overrides the
// image's "all") and the reason in PRISM_ALLOCATION_ERROR.
ContainerEdits BuildFailureEdits(std::string_view reason);

// Percent for CUDA_DEVICE_SM_LIMIT from a per-mille share (rounded up, at least 1).
int SmLimitPercent(int32_t cores_permille);

}  // namespace prism::deviceplugin
