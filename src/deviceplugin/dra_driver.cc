#include "deviceplugin/dra_driver.h"

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
#include "config/names.h"
#include "k8s/client.h"
#include "nvml/nvml.h"

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

bool IsMigDeviceName(std::string_view device) {
  const size_t mig = device.find("-mig-");
  return mig != std::string_view::npos && ParseGpuDeviceName(device.substr(0, mig)).has_value();
}

// A device's containerEdits as the device-plugin path encodes them (cdi_spec.h): one encoder of
// ContainerEdits, so the two paths cannot drift apart.
json EditsJson(const ContainerEdits& edits) {
  return json::parse(CdiSpecJson("x", edits))["devices"][0]["containerEdits"];
}

}  // namespace

std::string DraGpuDeviceName(uint32_t minor) { return StrCat("gpu-", minor); }

std::string DraCdiDeviceId(std::string_view claim_uid, std::string_view device) {
  return StrCat(kDraCdiKind, "=", claim_uid, "-", device);
}

std::string DraCdiSpecPath(std::string_view cdi_dir, std::string_view claim_uid) {
  return (fs::path(std::string(cdi_dir)) / StrCat(kSpecPrefix, claim_uid, ".json")).string();
}

absl::StatusOr<std::vector<DraGpu>> ReadDraGpus(nvml::Nvml* nvml, const std::string& proc_root) {
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
    auto minor = minors.find(info.uuid);
    gpu.minor = minor != minors.end() ? minor->second : static_cast<uint32_t>(info.index);
    if (info.mig_capable) {
      absl::StatusOr<nvml::MigModeState> mode = nvml->GetMigMode(info.index);
      // A GPU whose mode cannot be read is not offered whole: it might be partitioned.
      gpu.mig_enabled = !mode.ok() || mode->current || mode->pending;
    }
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

DraDriver::DraDriver(DraDriverOptions options, k8s::Client* client)
    : options_(std::move(options)), client_(client), checkpoint_(options_.state_dir) {}

absl::Status DraDriver::Start() {
  RETURN_IF_ERROR(checkpoint_.Load());
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
  if (std::optional<PreparedClaim> c = checkpoint_.Get(ref.uid)) return recorded(*c);

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
  absl::MutexLock lock(&mu_);
  // A concurrent call for the same claim may have finished first: same answer.
  if (std::optional<PreparedClaim> c = checkpoint_.Get(ref.uid)) return recorded(*c);
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
  // Devices other prepared claims hold.
  std::map<std::string, std::string> held;
  for (const PreparedClaim& c : checkpoint_.All()) {
    for (const PreparedDevice& d : c.devices) {
      held[d.device] = StrCat(ClaimKey(c.namespace_name, c.name), " (", c.uid, ")");
    }
  }
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
    if (IsMigDeviceName(r.device)) {
      return absl::UnimplementedError(
          StrCat(field, ": device '", r.device,
                 "' is a MIG partition; this agent prepares whole GPUs only so far"));
    }
    if (r.share_id) {
      return absl::UnimplementedError(StrCat(field, ": device '", r.device,
                                             "' is allocated as a share (shareID ", *r.share_id,
                                             "); this agent prepares whole GPUs only so far"));
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
    if (!gpus_read) {
      if (!options_.gpus) return absl::InternalError("no GPU source configured");
      absl::StatusOr<std::vector<DraGpu>> listed = options_.gpus();
      if (!listed.ok()) {
        return absl::UnavailableError(StrCat("cannot list GPUs: ", listed.status().message()));
      }
      gpus = *std::move(listed);
      gpus_read = true;
    }
    const DraGpu* gpu = nullptr;
    for (const DraGpu& g : gpus) {
      if (g.minor == *minor) gpu = &g;
    }
    if (gpu == nullptr) {
      return absl::NotFoundError(StrCat(field, ": no device '", r.device, "' on this node"));
    }
    if (gpu->mig_enabled) {
      return absl::FailedPreconditionError(StrCat(field, ": device '", r.device, "' (", gpu->uuid,
                                                  ") is in MIG mode and cannot be prepared whole"));
    }
    devices.push_back(PreparedDevice{
        r.request, r.pool, r.device, gpu->uuid, {DraCdiDeviceId(claim.uid, r.device)}});
  }
  if (devices.empty()) {
    return absl::FailedPreconditionError(
        StrCat("no device of driver ", options_.driver_name, " in status.allocation (it names ",
               other_drivers.empty() ? std::string("no device")
                                     : StrCat("drivers ", StrJoin(other_drivers, ", ")),
               ")"));
  }
  RETURN_IF_ERROR(WriteSpec(claim.uid, devices, gpus));
  PreparedClaim record{claim.uid, claim.namespace_name, claim.name, absl::ToUnixMillis(absl::Now()),
                       devices};
  if (absl::Status put = checkpoint_.Put(record); !put.ok()) {
    std::error_code ec;
    fs::remove(DraCdiSpecPath(options_.cdi_dir, claim.uid), ec);
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
  json list = json::array();
  for (const PreparedDevice& d : devices) {
    const DraGpu* gpu = nullptr;
    for (const DraGpu& g : gpus) {
      if (g.uuid == d.gpu_uuid) gpu = &g;
    }
    if (gpu == nullptr) return absl::InternalError(StrCat("no GPU ", d.gpu_uuid));
    RealizedDevice realized;
    realized.gpu_index = gpu->index;
    realized.gpu_uuid = gpu->uuid;
    realized.gpu_memory_mib = gpu->memory_mib;
    // Whole GPU: no limits, no region, no preload; NVIDIA_VISIBLE_DEVICES and the toolkit's
    // device-list mount.
    ContainerEdits edits = BuildContainerEdits({realized}, ContainerIdentity{}, options_.vgpu);
    if (options_.device_nodes.enabled) {
      ASSIGN_OR_RETURN(std::vector<DeviceNodeEdit> nodes,
                       NvidiaDeviceNodes({realized}, options_.device_nodes));
      for (DeviceNodeEdit& n : nodes) {
        if (control_paths.count(n.path) == 0) edits.device_nodes.push_back(std::move(n));
      }
    }
    list.push_back(
        json{{"name", StrCat(uid, "-", d.device)}, {"containerEdits", EditsJson(edits)}});
  }
  json spec{{"cdiVersion", kCdiVersion}, {"kind", kDraCdiKind}, {"devices", list}};
  if (!control.empty()) {
    ContainerEdits common;
    common.device_nodes = control;
    json edits = EditsJson(common);
    edits.erase("env");
    spec["containerEdits"] = edits;
  }
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
  const bool known = checkpoint_.Get(ref.uid).has_value();
  RETURN_IF_ERROR(checkpoint_.Remove(ref.uid));
  if (known) {
    LogInfo(kLog, "unprepared ResourceClaim ", ClaimKey(ref.namespace_name, ref.name), " (",
            ref.uid, ")");
  }
  return absl::OkStatus();
}

}  // namespace prism::deviceplugin
