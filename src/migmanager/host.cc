#include "migmanager/host.h"

#include <yaml-cpp/yaml.h>

#include "base/status_macros.h"
#include "base/strings.h"
#include "migmanager/command.h"

namespace prism::migmanager {
namespace {

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(StrCat("gpu-clients file: ", what));
}

// Plain systemd unit names only: they become command arguments.
bool IsUnitName(const std::string& name) {
  if (name.empty() || name.size() > 256 || name[0] == '-') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == ':' || c == '_' || c == '.' || c == '@' || c == '-' || c == '\\';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<GpuClientsConfig> ParseGpuClients(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return Bad(StrCat("malformed YAML: ", e.what()));
  }
  if (!root.IsMap()) return Bad("expected a mapping with 'version' and 'systemd-services'");
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (key != "version" && key != "systemd-services") {
      return Bad(StrCat("unknown field '", key, "'"));
    }
  }
  if (!root["version"]) return Bad("missing 'version'");
  if (root["version"].Scalar() != "v1") {
    return Bad(StrCat("unknown version '", root["version"].Scalar(), "' (supported: v1)"));
  }
  GpuClientsConfig config;
  const YAML::Node services = root["systemd-services"];
  if (!services || services.IsNull()) return config;
  if (!services.IsSequence()) return Bad("'systemd-services' must be a list of unit names");
  for (const auto& entry : services) {
    if (!entry.IsScalar()) return Bad("'systemd-services' entries must be unit names");
    const std::string unit = entry.Scalar();
    if (!IsUnitName(unit)) return Bad(StrCat("'", unit, "' is not a systemd unit name"));
    config.systemd_services.push_back(unit);
  }
  return config;
}

PauseAction DecidePause(const UnitStatus& status, std::string* why) {
  if (status.load_state == "not-found") {
    *why = "not installed";
    return PauseAction::kSkip;
  }
  if (status.active_state == "active" || status.active_state == "activating" ||
      status.active_state == "reloading") {
    *why = "active, will restart";
    return PauseAction::kStopAndRestart;
  }
  if (status.active_state == "failed") {
    *why = "failed, will restart";
    return PauseAction::kRestartOnly;
  }
  if (status.unit_file_state == "disabled" || status.unit_file_state == "masked") {
    *why = StrCat(status.unit_file_state, ", inactive");
    return PauseAction::kSkip;
  }
  if (status.type == "oneshot") {
    *why = "inactive oneshot";
    return PauseAction::kSkip;
  }
  *why = StrCat("inactive ", status.type.empty() ? "unit" : status.type, ", will restart");
  return PauseAction::kRestartOnly;
}

absl::Status SystemctlHostServices::Run(std::vector<std::string> args) {
  std::vector<std::string> argv = systemctl_;
  argv.insert(argv.end(), args.begin(), args.end());
  ASSIGN_OR_RETURN(CommandResult result, RunCommand(argv, timeout_));
  if (result.ok()) return absl::OkStatus();
  return result.timed_out ? absl::DeadlineExceededError(DescribeFailure(argv, result))
                          : absl::UnavailableError(DescribeFailure(argv, result));
}

absl::StatusOr<UnitStatus> SystemctlHostServices::Status(const std::string& unit) {
  std::vector<std::string> argv = systemctl_;
  for (const char* arg : {"show", "--property=LoadState,ActiveState,UnitFileState,Type"}) {
    argv.push_back(arg);
  }
  argv.push_back(unit);
  ASSIGN_OR_RETURN(CommandResult result, RunCommand(argv, timeout_));
  if (!result.ok()) return absl::UnavailableError(DescribeFailure(argv, result));
  UnitStatus status;
  for (std::string_view line : StrSplit(result.output, '\n')) {
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, eq);
    const std::string value(StripWhitespace(line.substr(eq + 1)));
    if (key == "LoadState") status.load_state = value;
    if (key == "ActiveState") status.active_state = value;
    if (key == "UnitFileState") status.unit_file_state = value;
    if (key == "Type") status.type = value;
  }
  if (status.load_state.empty() || status.active_state.empty()) {
    return absl::UnavailableError(
        StrCat("'", StrJoin(argv, " "), "' printed no LoadState/ActiveState: ", result.output));
  }
  return status;
}

absl::Status SystemctlHostServices::Stop(const std::string& unit) { return Run({"stop", unit}); }

absl::Status SystemctlHostServices::Start(const std::string& unit) {
  return Run({"start", "--no-block", unit});
}

void FakeHostServices::AddRunning(const std::string& unit) {
  Set(unit, UnitStatus{"loaded", "active", "enabled", "simple"});
}

void FakeHostServices::Set(const std::string& unit, UnitStatus status) {
  absl::MutexLock lock(&mu_);
  units_[unit] = std::move(status);
}

void FakeHostServices::FailNext(const std::string& op, const std::string& unit,
                                absl::Status status) {
  absl::MutexLock lock(&mu_);
  failures_[StrCat(op, " ", unit)] = std::move(status);
}

std::vector<std::string> FakeHostServices::log() const {
  absl::MutexLock lock(&mu_);
  return log_;
}

UnitStatus FakeHostServices::Get(const std::string& unit) const {
  absl::MutexLock lock(&mu_);
  auto it = units_.find(unit);
  return it == units_.end() ? UnitStatus{"not-found", "inactive", "", ""} : it->second;
}

absl::StatusOr<UnitStatus> FakeHostServices::Status(const std::string& unit) { return Get(unit); }

absl::Status FakeHostServices::Stop(const std::string& unit) {
  absl::MutexLock lock(&mu_);
  const std::string key = StrCat("stop ", unit);
  if (auto it = failures_.find(key); it != failures_.end()) {
    absl::Status s = it->second;
    failures_.erase(it);
    return s;
  }
  log_.push_back(key);
  if (auto it = units_.find(unit); it != units_.end()) it->second.active_state = "inactive";
  return absl::OkStatus();
}

absl::Status FakeHostServices::Start(const std::string& unit) {
  absl::MutexLock lock(&mu_);
  const std::string key = StrCat("start ", unit);
  if (auto it = failures_.find(key); it != failures_.end()) {
    absl::Status s = it->second;
    failures_.erase(it);
    return s;
  }
  log_.push_back(key);
  if (auto it = units_.find(unit); it != units_.end()) it->second.active_state = "active";
  return absl::OkStatus();
}

absl::Status CommandRebooter::Reboot() {
  ASSIGN_OR_RETURN(CommandResult result, RunCommand(command_, timeout_));
  if (!result.ok()) return absl::UnavailableError(DescribeFailure(command_, result));
  return absl::OkStatus();
}

absl::Status FakeRebooter::Reboot() {
  {
    absl::MutexLock lock(&mu_);
    ++reboots_;
  }
  return on_reboot_ ? on_reboot_() : absl::OkStatus();
}

int FakeRebooter::reboots() const {
  absl::MutexLock lock(&mu_);
  return reboots_;
}

}  // namespace prism::migmanager
