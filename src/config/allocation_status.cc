#include "config/allocation_status.h"

#include <charconv>
#include <cmath>
#include <utility>

#include "nlohmann/json.hpp"

#include "base/json_fields.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "config/names.h"

namespace prism::config {
namespace {

using nlohmann::json;

absl::Status FieldError(std::string_view path, std::string_view problem) {
  return absl::InvalidArgumentError(StrCat(kAllocationStatusAnnotation, ": ", path, ": ", problem));
}

// A json_fields error, with the annotation named in front.
absl::Status Named(const absl::Status& s) {
  if (s.ok()) return s;
  return absl::InvalidArgumentError(StrCat(kAllocationStatusAnnotation, ": ", s.message()));
}

const json* Member(const json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

absl::StatusOr<std::string> Text(const json& object, const char* key, const std::string& path,
                                 size_t max_bytes) {
  const std::string field = path + key;
  const json* v = Member(object, key);
  if (v == nullptr) return FieldError(field, "missing");
  if (!v->is_string()) return FieldError(field, StrCat("expected a string, got ", v->type_name()));
  const std::string& s = v->get_ref<const std::string&>();
  if (s.empty()) return FieldError(field, "empty");
  if (s.size() > max_bytes) return FieldError(field, StrCat("more than ", max_bytes, " bytes"));
  return s;
}

absl::StatusOr<int64_t> Int(const json& object, const char* key, const std::string& path,
                            int64_t lo, int64_t hi) {
  const json* v = Member(object, key);
  if (v == nullptr) return FieldError(path + key, "missing");
  absl::StatusOr<int64_t> value = json_fields::Int(*v, path + key, lo, hi);
  if (!value.ok()) return Named(value.status());
  return value;
}

// A list of at most `max_items` strings: allocation IDs (AllocationIdSeq's grammar), or others
// of 1..`max_bytes` bytes.
absl::StatusOr<std::vector<std::string>> Strings(const json& object, const char* key,
                                                 const std::string& path, size_t max_items,
                                                 size_t max_bytes, bool allocation_ids) {
  const std::string field = path + key;
  std::vector<std::string> out;
  const json* list = Member(object, key);
  if (list == nullptr) return out;
  if (!list->is_array()) {
    return FieldError(field, StrCat("expected an array, got ", list->type_name()));
  }
  if (list->size() > max_items) {
    return FieldError(field, StrCat(list->size(), " entries, more than ", max_items));
  }
  for (size_t i = 0; i < list->size(); ++i) {
    const json& v = (*list)[i];
    const std::string item = StrCat(field, "[", i, "]");
    if (!v.is_string()) return FieldError(item, StrCat("expected a string, got ", v.type_name()));
    const std::string& s = v.get_ref<const std::string&>();
    if (allocation_ids) {
      if (absl::StatusOr<uint64_t> seq = AllocationIdSeq(s); !seq.ok()) {
        return FieldError(item, ToStd(seq.status().message()));
      }
    } else if (s.empty() || s.size() > max_bytes) {
      return FieldError(item, StrCat("expected 1..", max_bytes, " bytes"));
    }
    out.push_back(s);
  }
  return out;
}

absl::StatusOr<AllocatedDevice> ParseDevice(const json& dj, const std::string& path) {
  if (!dj.is_object()) return FieldError(path, StrCat("expected an object, got ", dj.type_name()));
  const std::string p = path + ".";
  AllocatedDevice d;
  ASSIGN_OR_RETURN(const int64_t index, Int(dj, "index", p, 0, 1023));
  d.index = static_cast<int32_t>(index);
  ASSIGN_OR_RETURN(d.uuid, Text(dj, "uuid", p, 253));
  ASSIGN_OR_RETURN(const std::string mode, Text(dj, "mode", p, 64));
  if (mode == sched::GpuModeName(sched::GpuMode::kMig)) {
    d.mode = sched::GpuMode::kMig;
  } else if (mode == sched::GpuModeName(sched::GpuMode::kHamiCore)) {
    d.mode = sched::GpuMode::kHamiCore;
  } else {
    return FieldError(p + "mode", StrCat("unknown mode '", mode, "' (expected ",
                                         sched::GpuModeName(sched::GpuMode::kHamiCore), " or ",
                                         sched::GpuModeName(sched::GpuMode::kMig), ")"));
  }
  if (d.mode == sched::GpuMode::kMig) {
    ASSIGN_OR_RETURN(d.profile, Text(dj, "profile", p, 64));
    // Placement masks are 32 bits (mig::PlacementMask); NVML instance IDs are small.
    ASSIGN_OR_RETURN(const int64_t start, Int(dj, "start", p, 0, 31));
    ASSIGN_OR_RETURN(const int64_t gi, Int(dj, "gi", p, 0, 1023));
    ASSIGN_OR_RETURN(const int64_t ci, Int(dj, "ci", p, 0, 1023));
    d.start = static_cast<int32_t>(start);
    d.gpu_instance_id = static_cast<int32_t>(gi);
    d.compute_instance_id = static_cast<int32_t>(ci);
    ASSIGN_OR_RETURN(d.mig_uuid, Text(dj, "migUuid", p, 253));
    if (const json* shared = Member(dj, "shared"); shared != nullptr) {
      if (!shared->is_boolean()) {
        return FieldError(p + "shared", StrCat("expected a boolean, got ", shared->type_name()));
      }
      d.shared = shared->get<bool>();
    }
    // A slice of a shared instance carries its memory limit.
    if (d.shared) {
      ASSIGN_OR_RETURN(d.memory_mib, Int(dj, "memoryMiB", p, 1, int64_t{1} << 40));
    }
    return d;
  }
  ASSIGN_OR_RETURN(d.memory_mib, Int(dj, "memoryMiB", p, 0, int64_t{1} << 40));
  const json* cores = Member(dj, "cores");
  if (cores == nullptr) return FieldError(p + "cores", "missing");
  if (!cores->is_number()) {
    return FieldError(p + "cores", StrCat("expected a number, got ", cores->type_name()));
  }
  const double percent = cores->get<double>();
  if (!(percent >= 0 && percent <= 100)) {  // Also false for NaN.
    return FieldError(p + "cores", StrCat(cores->dump(), " is out of range 0..100"));
  }
  d.cores_permille = static_cast<int32_t>(std::lround(percent * 10));
  return d;
}

absl::StatusOr<ContainerAllocationStatus> ParseContainer(const json& cj, const std::string& path) {
  if (!cj.is_object()) return FieldError(path, StrCat("expected an object, got ", cj.type_name()));
  const std::string p = path + ".";
  ContainerAllocationStatus c;
  ASSIGN_OR_RETURN(c.allocations, Strings(cj, "allocations", p, kMaxAllocationsPerContainer,
                                          kMaxAllocationIdBytes, /*allocation_ids=*/true));
  ASSIGN_OR_RETURN(c.device_ids, Strings(cj, "deviceIds", p, kMaxDeviceIdsPerContainer,
                                         kMaxDeviceIdBytes, false));
  const json* devices = Member(cj, "devices");
  const json* error = Member(cj, "error");
  if (devices != nullptr && error != nullptr) {
    return FieldError(path, "has both devices and an error");
  }
  if (error != nullptr) {
    ASSIGN_OR_RETURN(c.error, Text(cj, "error", p, kMaxAllocationStatusBytes));
    c.settled = true;
  }
  if (devices != nullptr) {
    if (!devices->is_array()) {
      return FieldError(p + "devices", StrCat("expected an array, got ", devices->type_name()));
    }
    if (devices->size() > kMaxAllocatedDevicesPerContainer) {
      return FieldError(p + "devices", StrCat(devices->size(), " devices, more than ",
                                              kMaxAllocatedDevicesPerContainer));
    }
    for (size_t i = 0; i < devices->size(); ++i) {
      ASSIGN_OR_RETURN(AllocatedDevice d,
                       ParseDevice((*devices)[i], StrCat(p, "devices[", i, "]")));
      c.devices.push_back(std::move(d));
    }
    c.settled = true;
  }
  return c;
}

json DeviceToJson(const AllocatedDevice& d) {
  json j{{"index", d.index}, {"uuid", d.uuid}, {"mode", std::string(sched::GpuModeName(d.mode))}};
  if (d.mode == sched::GpuMode::kMig) {
    j["profile"] = d.profile;
    j["start"] = d.start;
    j["gi"] = d.gpu_instance_id;
    j["ci"] = d.compute_instance_id;
    j["migUuid"] = d.mig_uuid;
    if (d.shared) {
      j["shared"] = true;
      j["memoryMiB"] = d.memory_mib;
    }
  } else {
    j["memoryMiB"] = d.memory_mib;
    // A whole percent as an integer (what a reader expects of "cores"), else with its tenth.
    j["cores"] =
        d.cores_permille % 10 == 0 ? json(d.cores_permille / 10) : json(d.cores_permille / 10.0);
  }
  return j;
}

}  // namespace

absl::StatusOr<uint64_t> AllocationIdSeq(std::string_view id) {
  auto bad = [&](std::string_view why) {
    std::string shown(id.substr(0, kMaxAllocationIdBytes));
    return absl::InvalidArgumentError(StrCat("'", shown, id.size() > shown.size() ? "…" : "",
                                             "' is not an allocation ID (", why, ")"));
  };
  if (id.empty() || id.size() > kMaxAllocationIdBytes) {
    return bad(StrCat("1..", kMaxAllocationIdBytes, " bytes"));
  }
  const size_t dash = id.rfind('-');
  if (dash == std::string_view::npos || dash == 0 || dash + 1 == id.size()) {
    return bad("expected <prefix>-<number>");
  }
  for (char ch : id.substr(0, dash)) {
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z'))) {
      return bad("the prefix is lowercase letters and digits");
    }
  }
  const std::string_view digits = id.substr(dash + 1);
  uint64_t seq = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), seq);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || seq > kMaxAllocationSeq) {
    return bad("the sequence number is a decimal number up to 2^53");
  }
  return seq;
}

absl::StatusOr<AllocationStatus> ParseAllocationStatus(std::string_view text) {
  if (text.size() > kMaxAllocationStatusBytes) {
    return absl::InvalidArgumentError(StrCat(kAllocationStatusAnnotation, ": ", text.size(),
                                             " bytes, more than ", kMaxAllocationStatusBytes));
  }
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(StrCat(kAllocationStatusAnnotation, ": not valid JSON"));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        StrCat(kAllocationStatusAnnotation, ": expected an object, got ", j.type_name()));
  }
  AllocationStatus status;
  ASSIGN_OR_RETURN(status.node, Text(j, "node", "", 253));
  // The node and container names are the API server's (DNS names, config/names.h); a container
  // name joins into file names on the node.
  RETURN_IF_ERROR(Named(ValidateNodeName(status.node, "node")));
  const json* containers = Member(j, "containers");
  if (containers == nullptr) return FieldError("containers", "missing");
  if (!containers->is_object()) {
    return FieldError("containers", StrCat("expected an object, got ", containers->type_name()));
  }
  if (containers->size() > kMaxAllocationStatusContainers) {
    return FieldError("containers", StrCat(containers->size(), " containers, more than ",
                                           kMaxAllocationStatusContainers));
  }
  for (auto it = containers->begin(); it != containers->end(); ++it) {
    // Checked before it is part of a field path (which error messages and logs show).
    RETURN_IF_ERROR(Named(ValidateContainerName(it.key(), "containers")));
    const std::string path = StrCat("containers.", it.key());
    ASSIGN_OR_RETURN(status.containers[it.key()], ParseContainer(*it, path));
  }
  return status;
}

std::string AllocationStatusToJson(const AllocationStatus& status) {
  json containers = json::object();
  for (const auto& [name, c] : status.containers) {
    json& cj = containers[name];
    cj = json::object();
    for (const std::string& id : c.allocations) cj["allocations"].push_back(id);
    for (const std::string& id : c.device_ids) cj["deviceIds"].push_back(id);
    if (!c.settled) continue;
    if (!c.error.empty()) {
      cj["error"] = c.error;
      continue;
    }
    json devices = json::array();
    for (const AllocatedDevice& d : c.devices) devices.push_back(DeviceToJson(d));
    cj["devices"] = std::move(devices);
  }
  // Names and errors come from the API and NVML; a byte that is not UTF-8 is replaced rather
  // than thrown.
  return json{{"node", status.node}, {"containers", std::move(containers)}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

}  // namespace prism::config
