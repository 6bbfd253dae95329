#include "deviceplugin/ledger.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"

#include "base/log.h"
#include "base/strings.h"

namespace prism::deviceplugin {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
constexpr char kLog[] = "ledger";

json ToJson(const AllocationRecord& r) {
  json j{{"id", r.id},
         {"seq", r.seq},
         {"deviceIds", r.device_ids},
         {"createdMs", r.created_ms},
         {"state", std::string(AllocationStateName(r.state))}};
  if (r.Attributed()) {
    j["pod"] = json{{"uid", r.pod_uid},
                    {"namespace", r.pod_namespace},
                    {"name", r.pod_name},
                    {"container", r.container}};
  }
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

AllocationRecord FromJson(const json& j) {
  AllocationRecord r;
  r.id = j.at("id").get<std::string>();
  r.seq = j.at("seq").get<uint64_t>();
  r.device_ids = j.at("deviceIds").get<std::vector<std::string>>();
  r.created_ms = j.value("createdMs", int64_t{0});
  const std::string state = j.value("state", std::string("pending"));
  r.state = state == "ready"    ? AllocationState::kReady
            : state == "failed" ? AllocationState::kFailed
                                : AllocationState::kPending;
  if (j.contains("pod")) {
    const json& p = j.at("pod");
    r.pod_uid = p.at("uid").get<std::string>();
    r.pod_namespace = p.at("namespace").get<std::string>();
    r.pod_name = p.at("name").get<std::string>();
    r.container = p.at("container").get<std::string>();
  }
  r.error = j.value("error", std::string());
  return r;
}

}  // namespace

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
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    try {
      AllocationRecord r = FromJson(json::parse(text.str()));
      next_seq_ = std::max(next_seq_, r.seq + 1);
      records_[r.id] = std::move(r);
      ++version_;
    } catch (const json::exception& e) {
      LogError(kLog, "skipping unreadable allocation record ", entry.path().string(), ": ",
               e.what());
    }
  }
  return absl::OkStatus();
}

absl::Status Ledger::Persist(const AllocationRecord& record) const {
  if (dir_.empty()) return absl::OkStatus();
  const std::string path = PathOf(record.id);
  const std::string tmp = (fs::path(dir_) / ("." + record.id + ".tmp")).string();
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << ToJson(record).dump() << "\n";
    out.flush();
    if (!out) return absl::InternalError(StrCat("cannot write ", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return absl::InternalError(StrCat("cannot rename ", tmp, ": ", ec.message()));
  return absl::OkStatus();
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
  {
    absl::MutexLock lock(&mu_);
    records_[record.id] = record;
    next_seq_ = std::max(next_seq_, record.seq + 1);
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
