#include "deviceplugin/ledger.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"

#include "base/file.h"
#include "base/json_fields.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "config/allocation_status.h"
#include "config/names.h"

namespace prism::deviceplugin {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
constexpr char kLog[] = "ledger";
// A record file is a few hundred bytes; the agent writes none near this.
constexpr uintmax_t kMaxRecordFileBytes = 1 << 20;

json ToJson(const AllocationRecord& r) {
  json j{{"id", r.id},
         {"seq", r.seq},
         {"deviceIds", r.device_ids},
         {"createdMs", r.created_ms},
         {"state", std::string(AllocationStateName(r.state))}};
  if (r.Attributed() || !r.pod_namespace.empty() || !r.pod_name.empty() || !r.container.empty()) {
    j["pod"] = json{{"uid", r.pod_uid},
                    {"namespace", r.pod_namespace},
                    {"name", r.pod_name},
                    {"container", r.container}};
  }
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

// The agent joins a record's UID and container into file names it creates and removes
// (node_files.h): each one present is held to the API server's rules (config/names.h), as the ID
// is held to the agent's grammar.
absl::Status CheckNames(const AllocationRecord& r) {
  if (!r.pod_uid.empty()) RETURN_IF_ERROR(config::ValidatePodUid(r.pod_uid, "pod.uid"));
  if (!r.pod_namespace.empty()) {
    RETURN_IF_ERROR(config::ValidateNamespace(r.pod_namespace, "pod.namespace"));
  }
  if (!r.pod_name.empty()) RETURN_IF_ERROR(config::ValidatePodName(r.pod_name, "pod.name"));
  if (!r.container.empty()) {
    RETURN_IF_ERROR(config::ValidateContainerName(r.container, "pod.container"));
  }
  return absl::OkStatus();
}

// A record file is the plugin's own, but it lives on a host path anyone with node access can
// edit: read it typed, so a damaged file is skipped with a reason, never misread. Its ID is held
// to the agent's grammar as Put holds it: the ID names the file that Put rewrites and Remove
// deletes, so "../x-1" would reach outside the ledger's directory.
absl::StatusOr<AllocationRecord> FromJson(const json& j) {
  namespace jf = json_fields;
  if (!j.is_object()) return absl::InvalidArgumentError("expected an object");
  AllocationRecord r;
  ASSIGN_OR_RETURN(const json* id, jf::Required(j, "id", "id"));
  ASSIGN_OR_RETURN(r.id, jf::String(*id, "id"));
  absl::StatusOr<uint64_t> id_seq = config::AllocationIdSeq(r.id);
  if (!id_seq.ok()) return absl::InvalidArgumentError(StrCat("id: ", id_seq.status().message()));
  ASSIGN_OR_RETURN(const json* seq, jf::Required(j, "seq", "seq"));
  ASSIGN_OR_RETURN(const int64_t seq_value, jf::Int(*seq, "seq", 0, INT64_MAX - 1));
  r.seq = static_cast<uint64_t>(seq_value);
  if (r.seq != *id_seq) {
    return absl::InvalidArgumentError(
        StrCat("seq: ", r.seq, " is not the number in id '", r.id, "'"));
  }
  ASSIGN_OR_RETURN(const json* ids, jf::Required(j, "deviceIds", "deviceIds"));
  if (!ids->is_array()) return absl::InvalidArgumentError("deviceIds: expected an array");
  if (ids->size() > config::kMaxDeviceIdsPerContainer) {
    return absl::InvalidArgumentError(StrCat("deviceIds: ", ids->size(), " entries, more than ",
                                             config::kMaxDeviceIdsPerContainer));
  }
  for (size_t k = 0; k < ids->size(); ++k) {
    const std::string field = StrCat("deviceIds[", k, "]");
    ASSIGN_OR_RETURN(std::string device, jf::String((*ids)[k], field));
    if (device.empty() || device.size() > config::kMaxDeviceIdBytes) {
      return absl::InvalidArgumentError(
          StrCat(field, ": expected 1..", config::kMaxDeviceIdBytes, " bytes"));
    }
    r.device_ids.push_back(std::move(device));
  }
  ASSIGN_OR_RETURN(r.created_ms, jf::IntMember(j, "createdMs", "createdMs", 0, INT64_MAX, 0));
  ASSIGN_OR_RETURN(const std::string state, jf::StringMember(j, "state", "state", "pending"));
  if (state == "ready") {
    r.state = AllocationState::kReady;
  } else if (state == "failed") {
    r.state = AllocationState::kFailed;
  } else if (state == "pending") {
    r.state = AllocationState::kPending;
  } else {
    return absl::InvalidArgumentError(StrCat("state: unknown state '", state, "'"));
  }
  if (j.contains("pod") && !j.at("pod").is_null()) {
    const json& p = j.at("pod");
    ASSIGN_OR_RETURN(r.pod_uid, jf::StringMember(p, "uid", "pod.uid", ""));
    ASSIGN_OR_RETURN(r.pod_namespace, jf::StringMember(p, "namespace", "pod.namespace", ""));
    ASSIGN_OR_RETURN(r.pod_name, jf::StringMember(p, "name", "pod.name", ""));
    ASSIGN_OR_RETURN(r.container, jf::StringMember(p, "container", "pod.container", ""));
    RETURN_IF_ERROR(CheckNames(r));
  }
  ASSIGN_OR_RETURN(r.error, jf::StringMember(j, "error", "error", ""));
  return r;
}

}  // namespace

absl::StatusOr<AllocationRecord> ParseAllocationRecord(std::string_view text) {
  const json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return absl::InvalidArgumentError("not JSON");
  return FromJson(parsed);
}

std::string AllocationRecordToJson(const AllocationRecord& record) {
  // Strings the agent did not make (an error text) may hold bytes that are not UTF-8.
  return ToJson(record).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string_view AllocationStateName(AllocationState state) {
  switch (state) {
    case AllocationState::kPending:
      return "pending";
    case AllocationState::kReady:
      return "ready";
    case AllocationState::kFailed:
      return "failed";
  }
  return "pending";
}

std::string Base36(uint64_t value) {
  constexpr char kDigits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  std::string out;
  do {
    out.push_back(kDigits[value % 36]);
    value /= 36;
  } while (value != 0);
  std::reverse(out.begin(), out.end());
  return out;
}

Ledger::Ledger(std::string state_dir, std::string id_prefix)
    : dir_(state_dir.empty() ? std::string() : (fs::path(state_dir) / "allocations").string()),
      id_prefix_(std::move(id_prefix)) {}

std::string Ledger::PathOf(const std::string& id) const {
  return (fs::path(dir_) / (id + ".json")).string();
}

absl::Status Ledger::Load() {
  if (dir_.empty()) return absl::OkStatus();
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return absl::InternalError(StrCat("cannot create ", dir_, ": ", ec.message()));
  absl::MutexLock lock(&mu_);
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    if (entry.path().extension() != ".json") continue;
    std::error_code size_ec;
    const uintmax_t bytes = fs::file_size(entry.path(), size_ec);
    absl::StatusOr<AllocationRecord> r;
    if (size_ec) {
      r = absl::InternalError(size_ec.message());
    } else if (bytes > kMaxRecordFileBytes) {
      r = absl::InvalidArgumentError(StrCat(bytes, " bytes, more than ", kMaxRecordFileBytes));
    } else {
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      r = ParseAllocationRecord(text.str());
    }
    // Put and Remove find a record by its ID's file name: a record in another file would
    // never be removed and come back at every start.
    if (r.ok() && entry.path().stem().string() != r->id) {
      r = absl::InvalidArgumentError(StrCat("holds id '", r->id, "', not the file's name"));
    }
    if (!r.ok()) {
      LogError(kLog, "skipping unreadable allocation record ", entry.path().string(), ": ",
               r.status().message());
      continue;
    }
    AdvanceSequenceLocked(r->seq);
    records_[r->id] = *std::move(r);
    ++version_;
  }
  return absl::OkStatus();
}

absl::Status Ledger::Persist(const AllocationRecord& record) const {
  if (dir_.empty()) return absl::OkStatus();
  return WriteFileReplacing(PathOf(record.id), AllocationRecordToJson(record) + "\n");
}

void Ledger::AdvanceSequenceLocked(uint64_t seen) {
  // New IDs continue after every record seen, so they sort after them. A record recovered from
  // a pod annotation carries a number the pod's owner chose: one near 2^53 would push every ID
  // this agent makes past what an ID may hold, and each allocation would then fail. Numbers in
  // the upper half of the range are not followed; the agent's own never get there.
  if (seen >= kSequenceFollowLimit) return;
  next_seq_ = std::max(next_seq_, seen + 1);
}

absl::StatusOr<AllocationRecord> Ledger::Add(const std::vector<std::string>& device_ids,
                                             int64_t now_ms) {
  AllocationRecord r;
  {
    absl::MutexLock lock(&mu_);
    r.seq = next_seq_++;
    r.id = StrCat(id_prefix_, "-", r.seq);
    r.device_ids = device_ids;
    r.created_ms = now_ms;
    records_[r.id] = r;
    ++version_;
  }
  absl::Status persisted = Persist(r);
  if (!persisted.ok()) {
    absl::MutexLock lock(&mu_);
    records_.erase(r.id);
    ++version_;
    return persisted;
  }
  return r;
}

absl::Status Ledger::Put(const AllocationRecord& record) {
  // IDs become file names here and in the CDI directory; one recovered from a pod annotation
  // could otherwise name a path outside them ("x/../../etc/y-1").
  if (absl::StatusOr<uint64_t> seq = config::AllocationIdSeq(record.id); !seq.ok()) {
    return seq.status();
  }
  RETURN_IF_ERROR(CheckNames(record));
  {
    absl::MutexLock lock(&mu_);
    records_[record.id] = record;
    AdvanceSequenceLocked(record.seq);
    ++version_;
  }
  return Persist(record);
}

absl::Status Ledger::Remove(const std::string& id) {
  {
    absl::MutexLock lock(&mu_);
    records_.erase(id);
    ++version_;
  }
  if (dir_.empty()) return absl::OkStatus();
  std::error_code ec;
  fs::remove(PathOf(id), ec);
  if (ec) return absl::InternalError(StrCat("cannot remove ", PathOf(id), ": ", ec.message()));
  return absl::OkStatus();
}

std::optional<AllocationRecord> Ledger::Get(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

std::vector<AllocationRecord> Ledger::All() const {
  std::vector<AllocationRecord> out;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, r] : records_) out.push_back(r);
  }
  std::sort(out.begin(), out.end(),
            [](const AllocationRecord& a, const AllocationRecord& b) { return a.seq < b.seq; });
  return out;
}

size_t Ledger::size() const {
  absl::MutexLock lock(&mu_);
  return records_.size();
}

}  // namespace prism::deviceplugin

namespace prism::deviceplugin {

uint64_t Ledger::version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

bool Ledger::WaitForChange(uint64_t seen, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto changed = [this, seen]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return version_ != seen; };
  return mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
}

}  // namespace prism::deviceplugin
