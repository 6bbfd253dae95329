#include "deviceplugin/dra_checkpoint.h"

#include <filesystem>
#include <fstream>

#include "nlohmann/json.hpp"

#include "base/file.h"
#include "base/json_fields.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "config/dra_share.h"
#include "config/names.h"
#include "deviceplugin/dra_claim.h"

namespace prism::deviceplugin {
namespace {

namespace fs = std::filesystem;
namespace jf = json_fields;
using nlohmann::json;
constexpr char kLog[] = "dra-checkpoint";
// A record is well under 10 kB at the API's 32 results; anything near this is not ours.
constexpr size_t kMaxRecordFileBytes = 256 << 10;
constexpr size_t kMaxCdiIdsPerDevice = 8;
constexpr size_t kMaxStringBytes = 512;

absl::StatusOr<std::string> BoundedString(const json& parent, std::string_view key,
                                          const std::string& field) {
  ASSIGN_OR_RETURN(const json* value, jf::Required(parent, key, field));
  ASSIGN_OR_RETURN(std::string s, jf::String(*value, field));
  if (s.size() > kMaxStringBytes) {
    return absl::InvalidArgumentError(
        StrCat(field, ": ", s.size(), " bytes, more than ", kMaxStringBytes));
  }
  return s;
}

absl::StatusOr<PreparedDevice> DeviceFromJson(const json& j, const std::string& field) {
  if (!j.is_object()) return absl::InvalidArgumentError(StrCat(field, ": expected an object"));
  PreparedDevice d;
  ASSIGN_OR_RETURN(d.request, BoundedString(j, "request", StrCat(field, ".request")));
  ASSIGN_OR_RETURN(d.pool, BoundedString(j, "pool", StrCat(field, ".pool")));
  if (!IsPoolName(d.pool)) {
    return absl::InvalidArgumentError(
        StrCat(field, ".pool: ", config::QuoteBounded(d.pool), " is not a pool name"));
  }
  ASSIGN_OR_RETURN(d.device, BoundedString(j, "device", StrCat(field, ".device")));
  if (d.device.empty() || !config::IsDnsLabel(d.device)) {
    return absl::InvalidArgumentError(
        StrCat(field, ".device: ", config::QuoteBounded(d.device), " is not a DNS label"));
  }
  ASSIGN_OR_RETURN(d.gpu_uuid, jf::StringMember(j, "gpuUuid", StrCat(field, ".gpuUuid"), ""));
  if (d.gpu_uuid.size() > kMaxStringBytes) {
    return absl::InvalidArgumentError(StrCat(field, ".gpuUuid: too long"));
  }
  ASSIGN_OR_RETURN(const json* ids,
                   jf::Required(j, "cdiDeviceIds", StrCat(field, ".cdiDeviceIds")));
  if (!ids->is_array() || ids->size() > kMaxCdiIdsPerDevice) {
    return absl::InvalidArgumentError(
        StrCat(field, ".cdiDeviceIds: expected an array of at most ", kMaxCdiIdsPerDevice));
  }
  for (size_t k = 0; k < ids->size(); ++k) {
    const std::string f = StrCat(field, ".cdiDeviceIds[", k, "]");
    ASSIGN_OR_RETURN(std::string id, jf::String((*ids)[k], f));
    if (id.empty() || id.size() > kMaxStringBytes) {
      return absl::InvalidArgumentError(StrCat(f, ": expected 1..", kMaxStringBytes, " bytes"));
    }
    d.cdi_device_ids.push_back(std::move(id));
  }
  ASSIGN_OR_RETURN(d.mig_profile,
                   jf::StringMember(j, "migProfile", StrCat(field, ".migProfile"), ""));
  ASSIGN_OR_RETURN(d.mig_uuid, jf::StringMember(j, "migUuid", StrCat(field, ".migUuid"), ""));
  if (d.mig_profile.size() > 64 || d.mig_uuid.size() > kMaxStringBytes) {
    return absl::InvalidArgumentError(StrCat(field, ": migProfile or migUuid too long"));
  }
  ASSIGN_OR_RETURN(const int64_t start,
                   jf::IntMember(j, "migStart", StrCat(field, ".migStart"), -1, 63, -1));
  ASSIGN_OR_RETURN(const int64_t gi, jf::IntMember(j, "gpuInstanceId",
                                                   StrCat(field, ".gpuInstanceId"), -1, 1023, -1));
  ASSIGN_OR_RETURN(const int64_t ci,
                   jf::IntMember(j, "computeInstanceId", StrCat(field, ".computeInstanceId"), -1,
                                 1023, -1));
  d.mig_start = static_cast<int>(start);
  d.gpu_instance_id = static_cast<int>(gi);
  d.compute_instance_id = static_cast<int>(ci);
  if (d.IsMig() && d.mig_start < 0) {
    return absl::InvalidArgumentError(StrCat(field, ".migStart: required with migProfile"));
  }
  ASSIGN_OR_RETURN(d.share_id, jf::StringMember(j, "shareId", StrCat(field, ".shareId"), ""));
  if (!d.share_id.empty() && !config::IsDraShareId(d.share_id)) {
    // It names the share's region file: held to the API's rule for shareIDs.
    return absl::InvalidArgumentError(StrCat(field, ".shareId: not a UID in normalized form"));
  }
  ASSIGN_OR_RETURN(d.share_memory_mib, jf::IntMember(j, "memoryMib", StrCat(field, ".memoryMib"),
                                                     0, int64_t{1} << 40, 0));
  ASSIGN_OR_RETURN(const int64_t cores,
                   jf::IntMember(j, "coresPercent", StrCat(field, ".coresPercent"), 0,
                                 config::kDraShareMaxCores, 0));
  ASSIGN_OR_RETURN(const int64_t slots,
                   jf::IntMember(j, "slots", StrCat(field, ".slots"), 0, 1000, 0));
  d.share_cores_percent = static_cast<int32_t>(cores);
  d.share_slots = static_cast<int32_t>(slots);
  return d;
}

absl::StatusOr<PreparedClaim> FromJson(const json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("expected an object");
  PreparedClaim c;
  ASSIGN_OR_RETURN(c.uid, BoundedString(j, "uid", "uid"));
  ASSIGN_OR_RETURN(c.namespace_name, BoundedString(j, "namespace", "namespace"));
  ASSIGN_OR_RETURN(c.name, BoundedString(j, "name", "name"));
  // The UID names the record's file and the claim's CDI spec: held to the same rules as a
  // request from the kubelet.
  RETURN_IF_ERROR(ValidateClaimRef({c.namespace_name, c.name, c.uid}));
  ASSIGN_OR_RETURN(c.prepared_ms, jf::IntMember(j, "preparedMs", "preparedMs", 0, INT64_MAX, 0));
  ASSIGN_OR_RETURN(c.preparing, jf::BoolMember(j, "preparing", "preparing", false));
  ASSIGN_OR_RETURN(const json* devices, jf::Required(j, "devices", "devices"));
  if (!devices->is_array()) return absl::InvalidArgumentError("devices: expected an array");
  if (devices->size() > kMaxAllocationResults) {
    return absl::InvalidArgumentError(
        StrCat("devices: ", devices->size(), " entries, more than ", kMaxAllocationResults));
  }
  for (size_t i = 0; i < devices->size(); ++i) {
    ASSIGN_OR_RETURN(PreparedDevice d, DeviceFromJson((*devices)[i], StrCat("devices[", i, "]")));
    c.devices.push_back(std::move(d));
  }
  return c;
}

json ToJson(const PreparedClaim& c) {
  json devices = json::array();
  for (const PreparedDevice& d : c.devices) {
    json entry{{"request", d.request},
               {"pool", d.pool},
               {"device", d.device},
               {"gpuUuid", d.gpu_uuid},
               {"cdiDeviceIds", d.cdi_device_ids}};
    if (d.IsMig()) {
      entry["migProfile"] = d.mig_profile;
      entry["migStart"] = d.mig_start;
      entry["gpuInstanceId"] = d.gpu_instance_id;
      entry["computeInstanceId"] = d.compute_instance_id;
      entry["migUuid"] = d.mig_uuid;
    }
    if (d.IsShare()) {
      entry["shareId"] = d.share_id;
      entry["memoryMib"] = d.share_memory_mib;
      entry["coresPercent"] = d.share_cores_percent;
      entry["slots"] = d.share_slots;
    }
    devices.push_back(std::move(entry));
  }
  json out{{"uid", c.uid},
           {"namespace", c.namespace_name},
           {"name", c.name},
           {"preparedMs", c.prepared_ms},
           {"devices", devices}};
  if (c.preparing) out["preparing"] = true;
  return out;
}

}  // namespace

absl::StatusOr<PreparedClaim> ParsePreparedClaim(std::string_view text) {
  const json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return absl::InvalidArgumentError("not JSON");
  return FromJson(parsed);
}

std::string PreparedClaimToJson(const PreparedClaim& claim) {
  return ToJson(claim).dump(-1, ' ', false, json::error_handler_t::replace);
}

DraCheckpoint::DraCheckpoint(std::string state_dir)
    : dir_(state_dir.empty() ? std::string() : (fs::path(state_dir) / "claims").string()) {}

std::string DraCheckpoint::PathOf(const std::string& uid) const {
  return (fs::path(dir_) / (uid + ".json")).string();
}

absl::Status DraCheckpoint::Load() {
  if (dir_.empty()) return absl::OkStatus();
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return absl::InternalError(StrCat("cannot create ", dir_, ": ", ec.message()));
  absl::MutexLock lock(&mu_);
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    if (entry.path().extension() != ".json") continue;
    absl::StatusOr<PreparedClaim> c;
    absl::StatusOr<std::string> text = ReadFileBounded(entry.path().string(), kMaxRecordFileBytes);
    if (!text.ok()) {
      c = text.status();
    } else {
      c = ParsePreparedClaim(*text);
    }
    if (c.ok() && entry.path().stem().string() != c->uid) {
      c = absl::InvalidArgumentError(StrCat("holds uid '", c->uid, "', not the file's name"));
    }
    if (!c.ok()) {
      LogError(kLog, "skipping unreadable prepared-claim record ", entry.path().string(), ": ",
               c.status().message());
      continue;
    }
    claims_[c->uid] = *std::move(c);
  }
  return absl::OkStatus();
}

absl::Status DraCheckpoint::Put(const PreparedClaim& claim) {
  RETURN_IF_ERROR(ValidateClaimRef({claim.namespace_name, claim.name, claim.uid}));
  if (!dir_.empty()) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    RETURN_IF_ERROR(WriteFileReplacing(PathOf(claim.uid), PreparedClaimToJson(claim)));
  }
  absl::MutexLock lock(&mu_);
  claims_[claim.uid] = claim;
  return absl::OkStatus();
}

absl::Status DraCheckpoint::Remove(const std::string& uid) {
  RETURN_IF_ERROR(config::ValidatePodUid(uid, "claim.uid"));
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove(PathOf(uid), ec);
    if (ec) return absl::InternalError(StrCat("cannot remove ", PathOf(uid), ": ", ec.message()));
  }
  absl::MutexLock lock(&mu_);
  claims_.erase(uid);
  return absl::OkStatus();
}

std::optional<PreparedClaim> DraCheckpoint::Get(const std::string& uid) const {
  absl::MutexLock lock(&mu_);
  auto it = claims_.find(uid);
  if (it == claims_.end()) return std::nullopt;
  return it->second;
}

std::vector<PreparedClaim> DraCheckpoint::All() const {
  absl::MutexLock lock(&mu_);
  std::vector<PreparedClaim> out;
  for (const auto& [uid, c] : claims_) out.push_back(c);
  return out;
}

}  // namespace prism::deviceplugin
