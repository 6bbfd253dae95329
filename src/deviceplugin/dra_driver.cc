#include "deviceplugin/dra_driver.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

#include "base/file.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "config/dra_pod.h"
#include "config/names.h"
#include "deviceplugin/dra_mig.h"
#include "k8s/client.h"
#include "nvml/gpu_state.h"
#include "nvml/nvml.h"
#include "nvml/topology.h"

namespace prism::deviceplugin {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
constexpr char kLog[] = "dra";
constexpr std::string_view kSpecPrefix = "prism.io-claim-";
// /proc/driver/nvidia/gpus/*/information is a few hundred bytes.
constexpr size_t kMaxInformationBytes = 64 << 10;

std::string ClaimKey(std::string_view ns, std::string_view name) { return StrCat(ns, "/", name); }

// "gpu-<minor>" -> minor; nullopt for anything else (leading zeros included: one name per GPU).
std::optional<uint32_t> ParseGpuDeviceName(std::string_view device) {
  constexpr std::string_view kPrefix = "gpu-";
  if (device.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  const std::string_view digits = device.substr(kPrefix.size());
  if (digits.empty() || digits.size() > 6 || (digits.size() > 1 && digits[0] == '0')) {
    return std::nullopt;
  }
  uint32_t minor = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    minor = minor * 10 + static_cast<uint32_t>(c - '0');
  }
  return minor;
}

// "gpu-<minor>-mig-..." -> minor.
std::optional<uint32_t> MigDeviceMinor(std::string_view device) {
  const size_t mig = device.find("-mig-");
  if (mig == std::string_view::npos) return std::nullopt;
  return ParseGpuDeviceName(device.substr(0, mig));
}

}  // namespace

absl::Status RefuseUnhealthy(const std::string& field, std::string_view device, const DraGpu& gpu) {
  if (gpu.healthy) return absl::OkStatus();
  // The pod waits: the kubelet retries Prepare, and a probe may find the GPU healthy again.
  return absl::UnavailableError(StrCat(field, ": device '", device, "' is on GPU ", gpu.uuid,
                                       ", which is unhealthy (withdrawn from the "
                                       "ResourceSlices)"));
}

namespace {

std::string DraOwner(std::string_view claim_uid) {
  return StrCat(kDraInstanceOwnerPrefix, claim_uid);
}

// What a claim's whole GPUs and shares hold of their GPUs (gpu_holds.h); MIG partitions are the
// realizer's. `gpus` gives each GPU's memory (empty at start: the bound comes from the request
// being checked).
std::vector<GpuHold> DraGpuHolds(const std::vector<PreparedDevice>& devices,
                                 const std::vector<DraGpu>& gpus) {
  std::vector<GpuHold> holds;
  for (const PreparedDevice& d : devices) {
    if (d.IsMig()) continue;
    GpuHold h;
    h.gpu_uuid = d.gpu_uuid;
    for (const DraGpu& g : gpus) {
      if (g.uuid == d.gpu_uuid) h.gpu_memory_mib = g.memory_mib;
    }
    h.whole = !d.IsShare();
    h.memory_mib = d.share_memory_mib;
    h.cores_permille = d.share_cores_percent * (sched::kPermille / 100);
    h.slots = d.IsShare() ? d.share_slots : 1;
    holds.push_back(std::move(h));
  }
  return holds;
}

// A device's containerEdits as the device-plugin path encodes them (cdi_spec.h): one encoder of
// ContainerEdits, so the two paths cannot drift apart.
json EditsJson(const ContainerEdits& edits) {
  return json::parse(CdiSpecJson("x", edits))["devices"][0]["containerEdits"];
}

}  // namespace

std::string DraCdiDeviceId(std::string_view claim_uid, std::string_view device) {
  return StrCat(kDraCdiKind, "=", claim_uid, "-", device);
}

std::string DraCdiSpecPath(std::string_view cdi_dir, std::string_view claim_uid) {
  return (fs::path(std::string(cdi_dir)) / StrCat(kSpecPrefix, claim_uid, ".json")).string();
}

absl::StatusOr<std::vector<DraGpu>> ReadDraGpus(nvml::Nvml* nvml, const std::string& proc_root,
                                                const std::function<bool(int)>& dynamic,
                                                const std::function<bool(int, int)>& held_elsewhere) {
  ASSIGN_OR_RETURN(std::vector<nvml::GpuInfo> infos, nvml->ListGpus());
  std::map<std::string, uint32_t> minors;
  std::error_code ec;
  for (const auto& entry :
       fs::directory_iterator(fs::path(proc_root) / "driver" / "nvidia" / "gpus", ec)) {
    absl::StatusOr<std::string> text =
        ReadFileBounded((entry.path() / "information").string(), kMaxInformationBytes);
    if (!text.ok()) continue;
    if (auto info = ParseGpuInformation(*text)) minors[info->first] = info->second;
  }
  std::vector<DraGpu> gpus;
  for (const nvml::GpuInfo& info : infos) {
    DraGpu gpu;
    gpu.index = info.index;
    gpu.uuid = info.uuid;
    gpu.memory_mib = info.memory_total_mib;
    gpu.product_name = info.name;
    gpu.pci_bus_id = nvml::PciBusIdSysfsForm(info.pci_bus_id);
    // Unknown (an old driver, a VM without NUMA) is not an error: the attribute is left out.
    if (absl::StatusOr<int> numa = nvml->NumaNode(info.index); numa.ok() && *numa >= 0) {
      gpu.numa_node = *numa;
    }
    auto minor = minors.find(info.uuid);
    gpu.minor = minor != minors.end() ? minor->second : static_cast<uint32_t>(info.index);
    if (info.mig_capable) {
      absl::StatusOr<nvml::MigModeState> mode = nvml->GetMigMode(info.index);
      // A GPU whose mode cannot be read is not offered whole: it might be partitioned.
      gpu.mig_enabled = !mode.ok() || mode->current || mode->pending;
      if (mode.ok() && mode->current) {
        absl::StatusOr<mig::GpuModel> model = nvml::ModelForGpu(*nvml, info);
        absl::StatusOr<std::vector<nvml::GpuInstanceInfo>> instances =
            nvml->ListGpuInstances(info.index);
        // A GPU whose model or instances cannot be read publishes no partition.
        if (model.ok() && instances.ok()) {
          gpu.mig_model = std::make_shared<const mig::GpuModel>(*std::move(model));
          gpu.mig_dynamic = !dynamic || dynamic(info.index);
          for (const nvml::GpuInstanceInfo& gi : *instances) {
            DraMigInstance inst{gi.profile_id, gi.start, ""};
            if (!gi.compute_instances.empty()) inst.uuid = gi.compute_instances.front().uuid;
            inst.held_elsewhere = held_elsewhere && held_elsewhere(info.index, gi.start);
            gpu.mig_instances.push_back(std::move(inst));
          }
        }
      }
    }
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

absl::StatusOr<std::vector<DraGpu>> ReadDraGpusWithRealizer(nvml::Nvml* nvml,
                                                            const std::string& proc_root,
                                                            const MigRealizer& realizer) {
  const std::map<std::pair<int, int>, InstanceOwner> held = realizer.Held();
  return ReadDraGpus(
      nvml, proc_root, [&realizer](int i) { return realizer.IsDynamic(i); },
      [&held](int i, int start) {
        auto it = held.find({i, start});
        return it != held.end() && it->second.pod_uid.rfind(kDraInstanceOwnerPrefix, 0) != 0;
      });
}

std::vector<DraMigDevice> DraMigDevices(const DraGpu& gpu) {
  std::vector<DraMigDevice> out;
  if (!gpu.mig_enabled || gpu.mig_model == nullptr) return out;
  const mig::GpuModel& model = *gpu.mig_model;
  if (gpu.mig_dynamic) {
    for (DraMigPartition& p : BuildMigCounters(model, gpu.minor).partitions) {
      out.push_back(DraMigDevice{p.device, p.profile, p.start, false, "", std::move(p.consumes)});
    }
    return out;
  }
  for (const DraMigInstance& inst : gpu.mig_instances) {
    const int profile = model.FindProfileById(inst.profile_id);
    // An instance without a compute instance (or of a profile the model lacks) is not usable.
    if (profile < 0 || inst.uuid.empty()) continue;
    out.push_back(DraMigDevice{DraMigDeviceName(gpu.minor, model.profiles[profile], inst.start),
                               profile, inst.start, true, inst.uuid, {}});
  }
  std::sort(out.begin(), out.end(),
            [](const DraMigDevice& a, const DraMigDevice& b) { return a.device < b.device; });
  return out;
}

DraDriver::DraDriver(DraDriverOptions options, k8s::Client* client)
    : options_(std::move(options)), client_(client), checkpoint_(options_.state_dir) {}

absl::Status DraDriver::Start() {
  RETURN_IF_ERROR(checkpoint_.Load());
  if (options_.gpu_holds != nullptr) {
    // What prepared claims hold, before the kubelet or the device-plugin path asks anything.
    for (const PreparedClaim& c : checkpoint_.All()) {
      options_.gpu_holds->Restore(GpuPath::kDra, c.uid, "",
                                  StrCat("ResourceClaim ", ClaimKey(c.namespace_name, c.name)),
                                  DraGpuHolds(c.devices, {}));
    }
  }
  LogInfo(kLog, "driver ", options_.driver_name, ", pool ", options_.node_name, ": ",
          checkpoint_.All().size(), " prepared claims from ",
          checkpoint_.dir().empty() ? "memory" : checkpoint_.dir());
  return absl::OkStatus();
}

DraPrepareResult DraDriver::Prepare(const DraClaimRef& ref) {
  DraPrepareResult result;
  if (absl::Status valid = ValidateClaimRef(ref); !valid.ok()) {
    result.error = std::string(valid.message());
    return result;
  }
  const std::string key = ClaimKey(ref.namespace_name, ref.name);
  auto recorded = [&](const PreparedClaim& c) {
    if (c.namespace_name != ref.namespace_name || c.name != ref.name) {
      result.error = StrCat("ResourceClaim ", key, ": UID ", ref.uid, " was prepared as ",
                            ClaimKey(c.namespace_name, c.name));
    } else {
      result.devices = c.devices;
    }
    return result;
  };
  // A claim recorded as preparing (the agent stopped in the middle) is prepared again.
  if (std::optional<PreparedClaim> c = checkpoint_.Get(ref.uid); c && !c->preparing) {
    return recorded(*c);
  }

  absl::StatusOr<k8s::Json> object = client_->Get(kResourceClaims, ref.namespace_name, ref.name);
  if (!object.ok()) {
    result.error =
        absl::IsNotFound(object.status())
            ? StrCat("ResourceClaim ", key, " not found")
            : StrCat("ResourceClaim ", key, ": cannot read it: ", object.status().message());
    return result;
  }
  absl::StatusOr<DraClaim> claim = ParseResourceClaim(*object);
  if (!claim.ok()) {
    result.error = StrCat("ResourceClaim ", key, ": ", claim.status().message());
    return result;
  }
  if (claim->uid != ref.uid) {
    result.error = StrCat("ResourceClaim ", key, " has UID ", config::QuoteBounded(claim->uid),
                          ", not ", ref.uid, " (deleted and created again)");
    return result;
  }
  if (claim->namespace_name != ref.namespace_name || claim->name != ref.name) {
    result.error = StrCat("ResourceClaim ", key, ": the API server answered with ",
                          config::QuoteBounded(ClaimKey(claim->namespace_name, claim->name)));
    return result;
  }
  if (!claim->allocated) {
    result.error = StrCat("ResourceClaim ", key, " is not allocated");
    return result;
  }
  if (options_.require_prism_allocation) {
    absl::StatusOr<config::DraAllocationRecord> record = config::ReadDraAllocation(*object);
    if (!record.ok()) {
      result.error = StrCat("ResourceClaim ", key, ": ", record.status().message());
      return result;
    }
    if (!record->prism_marker || record->node != options_.node_name) {
      result.error = StrCat(
          "ResourceClaim ", key,
          record->prism_marker
              ? StrCat(" was allocated by Prism for node ", record->node, ", not this node")
              : std::string(" was not allocated by Prism's scheduler (no PrismAllocation marker "
                            "in status.allocation.devices.config): Prism prepares only the "
                            "allocations it made (docs/dra.md)"));
      LogWarning(kLog, "not prepared: ", result.error);
      return result;
    }
  }
  absl::MutexLock lock(&mu_);
  // A concurrent call for the same claim may have finished first: same answer.
  if (std::optional<PreparedClaim> c = checkpoint_.Get(ref.uid); c && !c->preparing) {
    return recorded(*c);
  }
  absl::StatusOr<std::vector<PreparedDevice>> devices = PrepareLocked(*claim);
  if (!devices.ok()) {
    result.error = StrCat("ResourceClaim ", key, ": ", devices.status().message());
    LogWarning(kLog, "not prepared: ", result.error);
    return result;
  }
  result.devices = *std::move(devices);
  LogInfo(kLog, "prepared ResourceClaim ", key, " (", ref.uid, "): ", result.devices.size(),
          " devices");
  return result;
}

absl::StatusOr<std::vector<PreparedDevice>> DraDriver::PrepareLocked(const DraClaim& claim) {
  std::vector<PreparedDevice> devices;
  std::set<std::string> other_drivers;
  std::set<std::string> seen;
  std::vector<DraGpu> gpus;
  bool gpus_read = false;
  // Devices other prepared claims hold (whole), and whole GPUs they hold shares of.
  std::map<std::string, std::string> held;
  std::map<std::string, std::string> shared;
  const std::optional<PreparedClaim> earlier = checkpoint_.Get(claim.uid);  // Preparing.
  for (const PreparedClaim& c : checkpoint_.All()) {
    if (c.uid == claim.uid) continue;
    for (const PreparedDevice& d : c.devices) {
      (d.IsShare() ? shared : held)[d.device] =
          StrCat(ClaimKey(c.namespace_name, c.name), " (", c.uid, ")");
    }
  }
  auto read_gpus = [&]() -> absl::Status {
    if (gpus_read) return absl::OkStatus();
    if (!options_.gpus) return absl::InternalError("no GPU source configured");
    absl::StatusOr<std::vector<DraGpu>> listed = options_.gpus();
    if (!listed.ok()) {
      return absl::UnavailableError(StrCat("cannot list GPUs: ", listed.status().message()));
    }
    gpus = *std::move(listed);
    gpus_read = true;
    return absl::OkStatus();
  };
  for (size_t i = 0; i < claim.results.size(); ++i) {
    const DraAllocationResult& r = claim.results[i];
    if (r.driver != options_.driver_name) {
      other_drivers.insert(r.driver);
      continue;
    }
    const std::string field = StrCat("status.allocation.devices.results[", i, "]");
    if (r.pool != options_.node_name) {
      return absl::FailedPreconditionError(StrCat(field, ": pool ", config::QuoteBounded(r.pool),
                                                  " is not this node's pool '", options_.node_name,
                                                  "'"));
    }
    if (r.share_id) {
      const std::optional<uint32_t> minor = ParseGpuDeviceName(r.device);
      if (!minor) {
        return absl::NotFoundError(StrCat(field, ": no shared device '", r.device, "' in pool '",
                                          options_.node_name, "' of driver ",
                                          options_.driver_name));
      }
      if (!seen.insert(StrCat(r.device, "/", *r.share_id)).second) {
        return absl::InvalidArgumentError(StrCat(field, ": share ", *r.share_id, " of device '",
                                                 r.device, "' is allocated twice in this claim"));
      }
      if (auto it = held.find(r.device); it != held.end()) {
        return absl::FailedPreconditionError(
            StrCat(field, ": device '", r.device, "' is already prepared whole for ResourceClaim ",
                   it->second));
      }
      RETURN_IF_ERROR(read_gpus());
      ASSIGN_OR_RETURN(PreparedDevice device,
                       CheckShare(claim.uid, field, r, *minor, gpus, devices));
      devices.push_back(std::move(device));
      continue;
    }
    if (std::optional<uint32_t> mig_minor = MigDeviceMinor(r.device)) {
      if (!seen.insert(r.device).second) {
        return absl::InvalidArgumentError(
            StrCat(field, ": device '", r.device, "' is allocated twice in this claim"));
      }
      if (auto it = held.find(r.device); it != held.end()) {
        return absl::FailedPreconditionError(StrCat(field, ": device '", r.device,
                                                    "' is already prepared for ResourceClaim ",
                                                    it->second));
      }
      RETURN_IF_ERROR(read_gpus());
      ASSIGN_OR_RETURN(PreparedDevice device, CheckMigDevice(claim.uid, field, r, *mig_minor, gpus, devices));
      device.cdi_device_ids = {DraCdiDeviceId(claim.uid, r.device)};
      devices.push_back(std::move(device));
      continue;
    }
    const std::optional<uint32_t> minor = ParseGpuDeviceName(r.device);
    if (!minor) {
      return absl::NotFoundError(StrCat(field, ": no device '", r.device, "' in pool '",
                                        options_.node_name, "' of driver ", options_.driver_name));
    }
    if (!seen.insert(r.device).second) {
      return absl::InvalidArgumentError(
          StrCat(field, ": device '", r.device, "' is allocated twice in this claim"));
    }
    if (auto it = held.find(r.device); it != held.end()) {
      return absl::FailedPreconditionError(StrCat(
          field, ": device '", r.device, "' is already prepared for ResourceClaim ", it->second));
    }
    if (auto it = shared.find(r.device); it != shared.end()) {
      return absl::FailedPreconditionError(StrCat(field, ": device '", r.device,
                                                  "' is shared by ResourceClaim ", it->second,
                                                  " and cannot be prepared whole"));
    }
    for (const PreparedDevice& d : devices) {
      if (d.IsShare() && d.device == r.device) {
        return absl::InvalidArgumentError(StrCat(field, ": device '", r.device,
                                                 "' is allocated whole and as a share in this "
                                                 "claim"));
      }
    }
    RETURN_IF_ERROR(read_gpus());
    const DraGpu* gpu = nullptr;
    for (const DraGpu& g : gpus) {
      if (g.minor == *minor) gpu = &g;
    }
    if (gpu == nullptr) {
      return absl::NotFoundError(StrCat(field, ": no device '", r.device, "' on this node"));
    }
    RETURN_IF_ERROR(RefuseUnhealthy(field, r.device, *gpu));
    if (gpu->mig_enabled) {
      return absl::FailedPreconditionError(StrCat(field, ": device '", r.device, "' (", gpu->uuid,
                                                  ") is in MIG mode and cannot be prepared whole"));
    }
    PreparedDevice whole;
    whole.request = r.request;
    whole.pool = r.pool;
    whole.device = r.device;
    whole.gpu_uuid = gpu->uuid;
    whole.cdi_device_ids = {DraCdiDeviceId(claim.uid, r.device)};
    devices.push_back(std::move(whole));
  }
  if (devices.empty()) {
    return absl::FailedPreconditionError(
        StrCat("no device of driver ", options_.driver_name, " in status.allocation (it names ",
               other_drivers.empty() ? std::string("no device")
                                     : StrCat("drivers ", StrJoin(other_drivers, ", ")),
               ")"));
  }
  // Whole GPUs and shares against what the device-plugin path holds of their GPUs, before any
  // side effect (released below on every failure).
  if (options_.gpu_holds != nullptr) {
    RETURN_IF_ERROR(options_.gpu_holds->Take(
        GpuPath::kDra, claim.uid, "",
        StrCat("ResourceClaim ", ClaimKey(claim.namespace_name, claim.name)),
        DraGpuHolds(devices, gpus)));
  }
  auto release_holds = [&] {
    if (options_.gpu_holds != nullptr) options_.gpu_holds->Release(GpuPath::kDra, claim.uid);
  };
  PreparedClaim record{claim.uid,   claim.namespace_name, claim.name,
                       absl::ToUnixMillis(absl::Now()), /*preparing=*/true, devices};
  const bool mig = std::any_of(devices.begin(), devices.end(),
                               [](const PreparedDevice& d) { return d.IsMig(); });
  const bool share = std::any_of(devices.begin(), devices.end(),
                                 [](const PreparedDevice& d) { return d.IsShare(); });
  if (mig || share) {
    // Recorded before any NVML call or region file: a restart then knows what to adopt or
    // release, and the shares count against their GPU from now on.
    if (absl::Status put = checkpoint_.Put(record); !put.ok()) {
      release_holds();
      return put;
    }
  }
  if (mig) {
    const EnsureMode mode = earlier ? EnsureMode::kAdopt : EnsureMode::kAllocate;
    if (absl::Status realized = RealizeMig(claim.uid, devices, gpus, mode); !realized.ok()) {
      (void)checkpoint_.Remove(claim.uid);
      release_holds();
      return realized;
    }
  }
  auto undo = [&] {
    release_holds();
    std::error_code ec;
    fs::remove(DraCdiSpecPath(options_.cdi_dir, claim.uid), ec);
    if (mig) (void)ReleaseMig(claim.uid);
    if (share) (void)RemoveShareRegions(claim.uid, devices);
    (void)checkpoint_.Remove(claim.uid);
  };
  if (share) {
    if (absl::Status made = MakeShareRegions(claim.uid, devices); !made.ok()) {
      undo();
      return made;
    }
  }
  if (absl::Status written = WriteSpec(claim.uid, devices, gpus); !written.ok()) {
    undo();
    return written;
  }
  record.preparing = false;
  record.devices = devices;
  if (absl::Status put = checkpoint_.Put(record); !put.ok()) {
    undo();
    return put;
  }
  return devices;
}

absl::Status DraDriver::WriteSpec(const std::string& uid,
                                  const std::vector<PreparedDevice>& devices,
                                  const std::vector<DraGpu>& gpus) const {
  // The control nodes (nvidiactl, uvm, ...) once for the spec, each GPU's node with its device.
  std::vector<DeviceNodeEdit> control;
  if (options_.device_nodes.enabled) {
    ASSIGN_OR_RETURN(control, NvidiaDeviceNodes({}, options_.device_nodes));
  }
  std::set<std::string> control_paths;
  for (const DeviceNodeEdit& n : control) control_paths.insert(n.path);
  // Each device as realized on this node (a share with its limits).
  std::vector<RealizedDevice> realized(devices.size());
  for (size_t k = 0; k < devices.size(); ++k) {
    const PreparedDevice& d = devices[k];
    const DraGpu* gpu = nullptr;
    for (const DraGpu& g : gpus) {
      if (g.uuid == d.gpu_uuid) gpu = &g;
    }
    if (gpu == nullptr) return absl::InternalError(StrCat("no GPU ", d.gpu_uuid));
    RealizedDevice& r = realized[k];
    r.gpu_index = gpu->index;
    r.gpu_uuid = gpu->uuid;
    r.gpu_memory_mib = gpu->memory_mib;
    if (d.IsShare()) {
      r.memory_mib = d.share_memory_mib;
      r.cores_permille = d.share_cores_percent * (sched::kPermille / 100);
    }
    if (d.IsMig()) {
      r.mode = sched::GpuMode::kMig;
      r.profile = d.mig_profile;
      r.start = d.mig_start;
      r.gpu_instance_id = d.gpu_instance_id;
      r.compute_instance_id = d.compute_instance_id;
      r.mig_uuid = d.mig_uuid;
    }
  }
  // The shares of one request reach the same containers together (a container names the claim
  // or one of its requests; a firstAvailable subrequest counts as its request), so they are
  // limited as one container's devices, in CUDA's order (GPU index): the group's first device
  // carries every share's CUDA_DEVICE_*_<i>, the region (its own) and the library; the others
  // only their device. One CDI device per share, each with its own `_0` limits and region mount
  // at the same container path, would leave a container given several shares with one limit
  // for all (the runtime applies the edits in turn, the last wins).
  std::map<std::string, std::vector<size_t>> share_groups;
  for (size_t k = 0; k < devices.size(); ++k) {
    if (!devices[k].IsShare()) continue;
    const std::string& request = devices[k].request;
    share_groups[request.substr(0, request.find('/'))].push_back(k);
  }
  std::map<size_t, ContainerEdits> group_limits;  // By the group's first device.
  for (auto& [request, members] : share_groups) {
    std::sort(members.begin(), members.end(), [&](size_t a, size_t b) {
      return realized[a].gpu_index < realized[b].gpu_index;
    });
    std::vector<RealizedDevice> in_order;
    for (size_t k : members) in_order.push_back(realized[k]);
    const PreparedDevice& lead = devices[members.front()];
    group_limits[members.front()] = BuildContainerEdits(
        in_order, ContainerIdentity{uid, StrCat(lead.device, "_", lead.share_id), false},
        options_.vgpu);
  }
  json list = json::array();
  for (size_t k = 0; k < devices.size(); ++k) {
    const PreparedDevice& d = devices[k];
    std::string cdi_name = StrCat(uid, "-", d.device);
    if (d.IsShare()) cdi_name = StrCat(cdi_name, "-", d.share_id);
    // The device itself: the toolkit's device-list mount, which composes when a container gets
    // several devices. Not NVIDIA_VISIBLE_DEVICES: each CDI device setting it, the runtime would
    // keep only the last device's (the spec sets it to "void" once, below).
    RealizedDevice plain = realized[k];
    plain.memory_mib = 0;
    plain.cores_permille = 0;
    ContainerEdits edits = BuildContainerEdits({plain}, ContainerIdentity{}, options_.vgpu);
    std::erase_if(edits.env, [](const auto& e) { return e.first == "NVIDIA_VISIBLE_DEVICES"; });
    if (auto limits = group_limits.find(k); limits != group_limits.end()) {
      for (auto& e : limits->second.env) {
        if (e.first != "NVIDIA_VISIBLE_DEVICES") edits.env.push_back(std::move(e));
      }
      for (MountEdit& m : limits->second.mounts) {
        if (m.container_path.rfind(kDeviceListMountRoot, 0) != 0) edits.mounts.push_back(m);
      }
    }
    if (options_.device_nodes.enabled) {
      ASSIGN_OR_RETURN(std::vector<DeviceNodeEdit> nodes,
                       NvidiaDeviceNodes({realized[k]}, options_.device_nodes));
      for (DeviceNodeEdit& n : nodes) {
        if (control_paths.count(n.path) == 0) edits.device_nodes.push_back(std::move(n));
      }
    }
    list.push_back(json{{"name", cdi_name}, {"containerEdits", EditsJson(edits)}});
  }
  json spec{{"cdiVersion", kCdiVersion}, {"kind", kDraCdiKind}, {"devices", list}};
  // Once for the spec, as the NVIDIA container toolkit's CDI specs do (nvcdi wrapper.go,
  // GetCommonEdits): the toolkit's legacy hook then takes the devices from the mounts only,
  // never the image's own NVIDIA_VISIBLE_DEVICES (e.g. "all").
  ContainerEdits common;
  common.device_nodes = control;
  common.env.emplace_back("NVIDIA_VISIBLE_DEVICES", "void");
  spec["containerEdits"] = EditsJson(common);
  std::error_code ec;
  fs::create_directories(options_.cdi_dir, ec);
  // The dot-file is neither *.json nor *.yaml: CDI caches ignore it until the rename.
  return WriteFileReplacing(DraCdiSpecPath(options_.cdi_dir, uid), spec.dump(2) + "\n");
}

absl::Status DraDriver::Unprepare(const DraClaimRef& ref) {
  RETURN_IF_ERROR(config::ValidatePodUid(ref.uid, "claim.uid"));
  absl::MutexLock lock(&mu_);
  std::error_code ec;
  // Removed whether or not a record exists: a spec written just before a crash has none.
  const std::string path = DraCdiSpecPath(options_.cdi_dir, ref.uid);
  fs::remove(path, ec);
  if (ec) return absl::InternalError(StrCat("cannot remove ", path, ": ", ec.message()));
  const std::optional<PreparedClaim> record = checkpoint_.Get(ref.uid);
  const bool known = record.has_value();
  if (record && std::any_of(record->devices.begin(), record->devices.end(),
                            [](const PreparedDevice& d) { return d.IsMig(); })) {
    // The record stays until the instances are released: a failure is retried by the kubelet.
    RETURN_IF_ERROR(ReleaseMig(ref.uid));
  }
  if (record) RETURN_IF_ERROR(RemoveShareRegions(ref.uid, record->devices));
  RETURN_IF_ERROR(checkpoint_.Remove(ref.uid));
  if (options_.gpu_holds != nullptr) options_.gpu_holds->Release(GpuPath::kDra, ref.uid);
  if (known) {
    LogInfo(kLog, "unprepared ResourceClaim ", ClaimKey(ref.namespace_name, ref.name), " (",
            ref.uid, ")");
  }
  return absl::OkStatus();
}

absl::StatusOr<PreparedDevice> DraDriver::CheckMigDevice(
    const std::string& claim_uid, const std::string& field, const DraAllocationResult& r, uint32_t minor,
    const std::vector<DraGpu>& gpus, const std::vector<PreparedDevice>& in_claim) const {
  const DraGpu* gpu = nullptr;
  for (const DraGpu& g : gpus) {
    if (g.minor == minor) gpu = &g;
  }
  if (gpu != nullptr) RETURN_IF_ERROR(RefuseUnhealthy(field, r.device, *gpu));
  const std::vector<DraMigDevice> published =
      gpu != nullptr ? DraMigDevices(*gpu) : std::vector<DraMigDevice>{};
  const DraMigDevice* device = nullptr;
  for (const DraMigDevice& d : published) {
    if (d.device == r.device) device = &d;
  }
  if (device == nullptr) {
    return absl::NotFoundError(StrCat(field, ": no device '", r.device, "' on this node",
                                      gpu == nullptr ? "" : StrCat(" (GPU ", gpu->uuid, ")")));
  }
  if (!options_.mig_worker) {
    return absl::UnimplementedError(
        StrCat(field, ": device '", r.device, "' is a MIG partition and this agent has no MIG "
                                              "realizer configured"));
  }
  if (!device->fixed) {
    // Two partitions of prepared claims (or of this claim) must fit the GPU's counters together,
    // as they did for the allocator: overlapping ones never both exist.
    std::map<std::string, const DraMigDevice*> by_name;
    for (const DraMigDevice& d : published) by_name[d.device] = &d;
    const DraMigCounters counters = BuildMigCounters(*gpu->mig_model, gpu->minor);
    std::map<std::string, int64_t> used = device->consumes;
    auto add = [&](const std::string& name, const std::string& who) -> absl::Status {
      auto it = by_name.find(name);
      if (it == by_name.end()) return absl::OkStatus();
      for (const auto& [counter, amount] : it->second->consumes) {
        auto limit = counters.counters.find(counter);
        if (limit == counters.counters.end()) continue;
        if (device->consumes.count(counter) != 0 &&
            device->consumes.at(counter) + amount > limit->second) {
          return absl::FailedPreconditionError(StrCat(field, ": device '", r.device,
                                                      "' overlaps device '", name, "' ", who));
        }
        used[counter] += amount;
      }
      return absl::OkStatus();
    };
    for (const PreparedDevice& d : in_claim) RETURN_IF_ERROR(add(d.device, "of this claim"));
    for (const PreparedClaim& c : checkpoint_.All()) {
      if (c.uid == claim_uid) continue;
      for (const PreparedDevice& d : c.devices) {
        if (d.gpu_uuid != gpu->uuid || !d.IsMig()) continue;
        RETURN_IF_ERROR(add(d.device, StrCat("prepared for ResourceClaim ",
                                             ClaimKey(c.namespace_name, c.name), " (", c.uid,
                                             ")")));
      }
    }
    for (const auto& [counter, amount] : used) {
      auto limit = counters.counters.find(counter);
      if (limit != counters.counters.end() && amount > limit->second) {
        return absl::FailedPreconditionError(
            StrCat(field, ": device '", r.device, "' does not fit GPU ", gpu->uuid,
                   " next to the partitions already prepared (counter ", counter, ")"));
      }
    }
  }
  PreparedDevice out;
  out.request = r.request;
  out.pool = r.pool;
  out.device = r.device;
  out.gpu_uuid = gpu->uuid;
  out.mig_profile = gpu->mig_model->profiles[device->profile].Name();
  out.mig_start = device->start;
  out.mig_uuid = device->mig_uuid;
  return out;
}

absl::Status DraDriver::RealizeMig(const std::string& uid, std::vector<PreparedDevice>& devices,
                                   const std::vector<DraGpu>& gpus, EnsureMode mode) {
  absl::Status status;
  RETURN_IF_ERROR(options_.mig_worker([&](nvml::Nvml&, MigRealizer& realizer) {
    for (PreparedDevice& d : devices) {
      if (!d.IsMig()) continue;
      const DraGpu* gpu = nullptr;
      for (const DraGpu& g : gpus) {
        if (g.uuid == d.gpu_uuid) gpu = &g;
      }
      if (gpu == nullptr) {
        status = absl::NotFoundError(StrCat("GPU ", d.gpu_uuid, " is gone"));
        break;
      }
      absl::StatusOr<MigInstanceRef> ref = realizer.Ensure(
          gpu->index, d.mig_profile, d.mig_start, InstanceOwner{DraOwner(uid), d.device}, mode);
      if (!ref.ok()) {
        status = absl::Status(ref.status().code(), StrCat("device '", d.device, "': ",
                                                          ref.status().message()));
        break;
      }
      d.gpu_instance_id = ref->gpu_instance_id;
      d.compute_instance_id = ref->compute_instance_id;
      d.mig_uuid = ref->mig_uuid;
    }
    // What this claim took is given back (created instances destroyed unless kept idle).
    if (!status.ok()) (void)realizer.ReleasePod(DraOwner(uid));
  }));
  return status;
}

absl::Status DraDriver::ReleaseMig(const std::string& uid) {
  if (!options_.mig_worker) return absl::OkStatus();
  absl::Status status;
  RETURN_IF_ERROR(options_.mig_worker(
      [&](nvml::Nvml&, MigRealizer& realizer) { status = realizer.ReleasePod(DraOwner(uid)); }));
  if (!status.ok()) {
    // The hold is dropped either way; what could not be trimmed is trimmed later.
    LogWarning(kLog, "releasing the MIG instances of ResourceClaim ", uid, ": ", status.message());
  }
  return absl::OkStatus();
}

void DraDriver::AdoptMig(nvml::Nvml& nvml, MigRealizer& realizer) {
  absl::StatusOr<std::vector<nvml::GpuInfo>> infos = nvml.ListGpus();
  if (!infos.ok()) {
    LogError(kLog, "adopting the MIG instances of prepared claims: ", infos.status().message());
    return;
  }
  for (const PreparedClaim& c : checkpoint_.All()) {
    for (const PreparedDevice& d : c.devices) {
      if (!d.IsMig()) continue;
      int index = -1;
      for (const nvml::GpuInfo& info : *infos) {
        if (info.uuid == d.gpu_uuid) index = info.index;
      }
      absl::StatusOr<MigInstanceRef> ref =
          index < 0 ? absl::NotFoundError(StrCat("GPU ", d.gpu_uuid, " is gone"))
                    : realizer.Ensure(index, d.mig_profile, d.mig_start,
                                      InstanceOwner{DraOwner(c.uid), d.device}, EnsureMode::kAdopt);
      if (!ref.ok()) {
        LogError(kLog, "ResourceClaim ", ClaimKey(c.namespace_name, c.name), " (", c.uid,
                 ") device ", d.device, ": cannot adopt its MIG instance: ",
                 ref.status().message());
      } else if (!c.preparing && ref->mig_uuid != d.mig_uuid) {
        LogWarning(kLog, "ResourceClaim ", ClaimKey(c.namespace_name, c.name), " device ",
                   d.device, ": its MIG instance was re-created (", d.mig_uuid, " -> ",
                   ref->mig_uuid, "): containers started before see none");
      }
    }
  }
}

}  // namespace prism::deviceplugin
