// src/deviceplugin/dra_driver_share.cc: DraDriver's shares of a GPU (docs/dra-design.md §1.6), the
// consumable-capacity half of Prepare and Unprepare. See dra_driver.h.
#include <algorithm>
#include <map>

#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "deviceplugin/container_edits.h"
#include "deviceplugin/dra_driver.h"
#include "deviceplugin/node_files.h"

namespace prism::deviceplugin {
namespace {

constexpr char kLog[] = "dra";

// What a share consumes: the result's consumedCapacity, a capacity it does not name (or memory
// and slots named as 0, below their minimums) taking the published default (docs/dra-design.md
// §1.4): all the memory, all the cores, one slot. Cores named as 0 stay 0 (HAMi's gpucores unset:
// no compute reserved, no throttle). Upstream's allocator writes all three.
config::DraShareAmount Consumed(const DraAllocationResult& r, const DraGpu& gpu) {
  config::DraShareAmount a = r.consumed.value_or(config::DraShareAmount{-1, -1, -1});
  if (a.memory_mib <= 0) a.memory_mib = gpu.memory_mib;
  if (a.cores_percent < 0) a.cores_percent = config::kDraShareMaxCores;
  if (a.slots <= 0) a.slots = 1;
  return a;
}

}  // namespace

std::string DraShareRegionName(std::string_view claim_uid, const PreparedDevice& device) {
  return RegionFileName(claim_uid, StrCat(device.device, "_", device.share_id));
}

absl::StatusOr<PreparedDevice> DraDriver::CheckShare(
    const std::string& claim_uid, const std::string& field, const DraAllocationResult& r,
    uint32_t minor, const std::vector<DraGpu>& gpus,
    const std::vector<PreparedDevice>& in_claim) const {
  if (!options_.consumable_capacity) {
    return absl::FailedPreconditionError(
        StrCat(field, ": device '", r.device, "' is allocated as a share (shareID ",
               r.share_id.value_or(""),
               ") but this agent does not publish shared devices (--dra-consumable-capacity is "
               "off)"));
  }
  const DraGpu* gpu = nullptr;
  for (const DraGpu& g : gpus) {
    if (g.minor == minor) gpu = &g;
  }
  if (gpu == nullptr) {
    return absl::NotFoundError(StrCat(field, ": no device '", r.device, "' on this node"));
  }
  RETURN_IF_ERROR(RefuseUnhealthy(field, r.device, *gpu));
  if (gpu->mig_enabled) {
    return absl::FailedPreconditionError(StrCat(field, ": device '", r.device, "' (", gpu->uuid,
                                                ") is in MIG mode and cannot be shared"));
  }
  const config::DraShareAmount want = Consumed(r, *gpu);
  // What the published device has (config::DraSharedGpuCapacity).
  const config::DraShareAmount cap{gpu->memory_mib, config::kDraShareMaxCores,
                                   std::max(1, options_.split_count)};
  if (want.memory_mib > cap.memory_mib || want.cores_percent > cap.cores_percent ||
      want.slots > cap.slots) {
    return absl::FailedPreconditionError(
        StrCat(field, ": consumedCapacity (memory ", want.memory_mib, " MiB, cores ",
               want.cores_percent, ", slots ", want.slots, ") is more than device '", r.device,
               "' has (", cap.memory_mib, " MiB, ", cap.cores_percent, ", ", cap.slots, ")"));
  }
  config::DraShareAmount used = want;
  std::string with;  // Who else holds shares of it, for the error.
  auto add = [&](const PreparedDevice& d, const std::string& who) {
    if (!d.IsShare() || d.gpu_uuid != gpu->uuid) return;
    used.memory_mib += d.share_memory_mib;
    used.cores_percent += d.share_cores_percent;
    used.slots += d.share_slots;
    if (with.size() < 200) with = with.empty() ? who : StrCat(with, ", ", who);
  };
  for (const PreparedDevice& d : in_claim) add(d, "this claim");
  for (const PreparedClaim& c : checkpoint_.All()) {
    if (c.uid == claim_uid) continue;
    for (const PreparedDevice& d : c.devices) {
      add(d, StrCat("ResourceClaim ", c.namespace_name, "/", c.name));
    }
  }
  if (used.memory_mib > cap.memory_mib || used.cores_percent > cap.cores_percent ||
      used.slots > cap.slots) {
    return absl::FailedPreconditionError(
        StrCat(field, ": share ", r.share_id.value_or(""), " of device '", r.device, "' (memory ",
               want.memory_mib, " MiB, cores ", want.cores_percent, ") does not fit GPU ",
               gpu->uuid, " next to the shares prepared for ", with, ": memory ", used.memory_mib,
               "/", cap.memory_mib, " MiB, cores ", used.cores_percent, "/", cap.cores_percent,
               ", slots ", used.slots, "/", cap.slots));
  }
  PreparedDevice out;
  out.request = r.request;
  out.pool = r.pool;
  out.device = r.device;
  out.gpu_uuid = gpu->uuid;
  out.share_id = r.share_id.value_or("");
  out.share_memory_mib = want.memory_mib;
  out.share_cores_percent = want.cores_percent;
  out.share_slots = want.slots;
  out.cdi_device_ids = {DraCdiDeviceId(claim_uid, StrCat(r.device, "-", out.share_id))};
  return out;
}

absl::Status DraDriver::MakeShareRegions(const std::string& uid,
                                         const std::vector<PreparedDevice>& devices) const {
  const std::string dir = RegionDir(options_.vgpu);
  bool dir_ready = false;
  for (const PreparedDevice& d : devices) {
    // Made for every share; one of the whole GPU gets no limits and never mounts it.
    if (!d.IsShare()) continue;
    if (!dir_ready) {
      RETURN_IF_ERROR(Annotate(EnsurePrivateDir(dir), "the region directory"));
      dir_ready = true;
    }
    // At its final size before the container starts (node_files.h), as for a device-plugin
    // slice; an existing one (a prepare repeated after a restart) is kept.
    RETURN_IF_ERROR(Annotate(CreateSizedFile(dir, DraShareRegionName(uid, d), RegionFileBytes()),
                             StrCat("the region file of share ", d.share_id)));
  }
  return absl::OkStatus();
}

absl::Status DraDriver::RemoveShareRegions(const std::string& uid,
                                           const std::vector<PreparedDevice>& devices) const {
  for (const PreparedDevice& d : devices) {
    if (!d.IsShare()) continue;
    // Confined to the agent's directory, never following a link (node_files.h).
    if (absl::Status removed = RemoveUnder(RegionDir(options_.vgpu), DraShareRegionName(uid, d));
        !removed.ok()) {
      LogWarning(kLog, "removing the region of share ", d.share_id, " of ResourceClaim ", uid, ": ",
                 removed.message());
      return removed;
    }
  }
  return absl::OkStatus();
}

}  // namespace prism::deviceplugin
