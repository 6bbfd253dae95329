#include "migmanager/reconciler.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/mig/gpu_model.h"
#include "k8s/resource.h"
#include "migmanager/command.h"
#include "migmanager/labels.h"
#include "migparted/default_config.h"
#include "migparted/hooks.h"
#include "migparted/mig_parted.h"

namespace prism::migmanager {
namespace {

constexpr std::string_view kLog = "mig-manager";
constexpr char kCdiRefreshFailed[] = "CdiRefreshFailed";

using Patchset = std::map<std::string, std::optional<std::string>>;

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08X", v);
  return buf;
}

// Go's fmt of a map[string]int, as mig-parted logs it: "map[1g.10gb:5 2g.20gb:1]".
std::string GoMap(const std::map<std::string, int>& m) {
  return StrCat(
      "map[",
      StrJoin(m, " ",
              [](std::string* out, const auto& kv) { StrAppend(out, kv.first, ":", kv.second); }),
      "]");
}

std::string ModeName(bool enabled) { return enabled ? "Enabled" : "Disabled"; }

// As mig-parted logs a spec: "(devices=all)", "(device-filter=[0x20B010DE 0x20B110DE], devices=[0
// 1])".
std::string DescribeSpec(const migparted::MigConfigSpec& spec) {
  const std::string devices =
      spec.all_devices ? "all" : StrCat("[", StrJoin(spec.devices, " "), "]");
  if (spec.device_filter.empty()) return StrCat("(devices=", devices, ")");
  return StrCat(
      "(device-filter=[",
      StrJoin(spec.device_filter, " ",
              [](std::string* o, const migparted::DeviceFilter& f) { StrAppend(o, f.ToString()); }),
      "], devices=", devices, ")");
}

// The GPU model's catalog entry says a MIG mode change needs a GPU reset (Ampere).
bool ModeChangeNeedsReset(const migparted::GpuApplyPreview& g) {
  if (g.mode.ResetPending()) return true;
  const mig::GpuModel* model = mig::FindModelByPciId(g.info.pci_device_id);
  if (model == nullptr) model = mig::FindModel(g.info.name);
  return model != nullptr && model->ModeChangeNeedsReset();
}

// Annotation values may be long, but a reason is for people: keep it readable.
std::string SanitizeReason(std::string text) {
  if (text.size() > 1024) text = text.substr(0, 1021) + "...";
  return text;
}

std::string GpuList(const std::vector<int>& gpus) {
  return StrCat(gpus.size() == 1 ? "GPU " : "GPUs ", StrJoin(gpus, ","));
}

}  // namespace

std::string ConfigSource::Describe() const {
  if (!configmap_name.empty()) {
    return StrCat("ConfigMap ", configmap_namespace, "/", configmap_name, " key ", configmap_key);
  }
  if (!file.empty()) return file;
  return "NVIDIA's default config (built in)";
}

void Interrupt::Request(bool abandon) {
  absl::MutexLock lock(&mu_);
  requested_ = true;
  abandon_ = abandon_ || abandon;
}

bool Interrupt::requested() const {
  absl::MutexLock lock(&mu_);
  return requested_;
}

bool Interrupt::abandon() const {
  absl::MutexLock lock(&mu_);
  return abandon_;
}

bool Interrupt::SleepFor(absl::Duration d) const {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return requested_; };
  mu_.AwaitWithTimeout(absl::Condition(&done), d);
  return requested_;
}

std::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kNoConfig:
      return "no-config";
    case Outcome::kSuccess:
      return "success";
    case Outcome::kFailed:
      return "failed";
    case Outcome::kRebooting:
      return "rebooting";
    case Outcome::kInterrupted:
      return "interrupted";
  }
  return "unknown";
}

// One attempt; holds what it learned about the node and what it paused.
class Reconciler::Attempt {
 public:
  Attempt(const Reconciler& r, const Interrupt& interrupt) : r_(r), interrupt_(interrupt) {}

  ReconcileResult Run();

 private:
  const ReconcilerOptions& opts() const { return r_.options_; }

  absl::Status ReadNode();
  absl::Status Patch(const Patchset& labels, const Patchset& annotations);
  // Retries a patch that must land (restoring paused clients).
  absl::Status PatchHard(const Patchset& labels, const Patchset& annotations);
  void Event(bool warning, const std::string& reason, const std::string& message);

  absl::StatusOr<std::string> ReadConfigText();
  // Starts recorded host services and builds the patch that restores recorded labels and drops
  // the record. Service failures are collected in `problems`.
  void RestoreInto(Patchset* labels, Patchset* annotations, std::vector<std::string>* problems);
  absl::Status UpdateGfdLabels();

  ReconcileResult Fail(bool retry, const std::string& reason, const std::string& message);
  ReconcileResult Interrupted();
  ReconcileResult Succeed(const std::string& message);
  // Ends an attempt that found nothing to do beyond finishing an interrupted change.
  ReconcileResult NoConfig();

  absl::StatusOr<std::vector<migparted::MigConfigSpec>> RestrictToStaticGpus(
      std::vector<migparted::MigConfigSpec> specs, std::string* problem);
  void LogWalk(const std::vector<migparted::MigConfigSpec>& specs,
               const migparted::ApplyPreview& preview);
  // Pods on the node using GPUs in `changing`; "" when none.
  absl::StatusOr<std::string> GpuUsers(const std::set<int>& changing);
  // Pauses operands; fills `paused_keys`.
  absl::Status PauseOperands(std::set<std::string>* paused_keys);
  // OK once no operand pod is left; DeadlineExceeded naming them; Cancelled if interrupted.
  absl::Status WaitForOperandPods(const std::set<std::string>& paused_keys);
  absl::Status StopHostServices();
  absl::StatusOr<std::vector<k8s::Json>> PodsOnNode();
  // Runs the CDI refresh commands in order; the first failure is the error.
  absl::Status RefreshCdi();

  const Reconciler& r_;
  const Interrupt& interrupt_;
  ReconcileResult result_;
  std::map<std::string, std::string> labels_;
  std::map<std::string, std::string> annotations_;
  k8s::ObjectReference node_ref_;
  InFlightRecord record_;
  bool has_record_ = false;  // The node carries a record (ours or a previous run's).
  bool dynamic_node_ = false;
  std::vector<nvml::GpuInfo> gpus_;
  std::set<int> dynamic_gpus_;
  migparted::ApplyOptions apply_options_;
  migparted::HooksFile hooks_;
};

absl::Status Reconciler::Attempt::ReadNode() {
  ASSIGN_OR_RETURN(k8s::Json node, r_.client_->Get(k8s::kNodes, "", opts().node_name));
  labels_ = k8s::Labels(node);
  annotations_ = k8s::Annotations(node);
  node_ref_ = k8s::ReferenceTo(node, "Node", "v1");
  return absl::OkStatus();
}

absl::Status Reconciler::Attempt::Patch(const Patchset& labels, const Patchset& annotations) {
  k8s::Json patch = {{"metadata", k8s::Json::object()}};
  bool any = false;
  for (const auto& [key, value] : labels) {
    auto it = labels_.find(key);
    const bool same = value ? (it != labels_.end() && it->second == *value) : it == labels_.end();
    if (same) continue;
    patch["metadata"]["labels"][key] = value ? k8s::Json(*value) : k8s::Json(nullptr);
    any = true;
  }
  for (const auto& [key, value] : annotations) {
    auto it = annotations_.find(key);
    const bool same =
        value ? (it != annotations_.end() && it->second == *value) : it == annotations_.end();
    if (same) continue;
    patch["metadata"]["annotations"][key] = value ? k8s::Json(*value) : k8s::Json(nullptr);
    any = true;
  }
  if (!any) return absl::OkStatus();
  ASSIGN_OR_RETURN(k8s::Json node, r_.client_->Patch(k8s::kNodes, "", opts().node_name,
                                                     k8s::PatchType::kMerge, patch));
  labels_ = k8s::Labels(node);
  annotations_ = k8s::Annotations(node);
  return absl::OkStatus();
}

absl::Status Reconciler::Attempt::PatchHard(const Patchset& labels, const Patchset& annotations) {
  absl::Status status;
  absl::Duration delay = opts().poll_interval;
  for (int attempt = 0; attempt < 5; ++attempt) {
    status = Patch(labels, annotations);
    if (status.ok()) return status;
    LogWarning(kLog, "Updating node ", opts().node_name, " failed: ", ToStd(status.message()),
               "; retrying");
    if (interrupt_.abandon() || interrupt_.SleepFor(delay)) break;
    delay = std::min(delay * 2, absl::Seconds(10));
  }
  return status;
}

void Reconciler::Attempt::Event(bool warning, const std::string& reason,
                                const std::string& message) {
  if (r_.events_ == nullptr || node_ref_.name.empty()) return;
  r_.events_->Record(node_ref_, warning ? k8s::EventType::kWarning : k8s::EventType::kNormal,
                     reason, message);
}

absl::StatusOr<std::string> Reconciler::Attempt::ReadConfigText() {
  const ConfigSource& src = opts().config;
  if (!src.configmap_name.empty()) {
    auto cm = r_.client_->Get(k8s::kConfigMaps, src.configmap_namespace, src.configmap_name);
    if (absl::IsNotFound(cm.status())) {
      result_.config_text = "";
      return absl::NotFoundError(StrCat("ConfigMap ", src.configmap_namespace, "/",
                                        src.configmap_name, " does not exist"));
    }
    if (!cm.ok())
      return absl::UnavailableError(
          StrCat("reading ", src.Describe(), ": ", ToStd(cm.status().message())));
    const auto data = StringMap(k8s::Find(*cm, {"data"}));
    auto it = data.find(src.configmap_key);
    if (it == data.end()) {
      result_.config_text = "";
      std::vector<std::string> keys;
      for (const auto& kv : data) keys.push_back(kv.first);
      return absl::InvalidArgumentError(
          StrCat("ConfigMap ", src.configmap_namespace, "/", src.configmap_name, " has no key '",
                 src.configmap_key, "' (keys: ", keys.empty() ? "none" : StrJoin(keys, ", "), ")"));
    }
    result_.config_text = it->second;
    return it->second;
  }
  if (!src.file.empty()) {
    std::ifstream in(src.file);
    if (!in) {
      result_.config_text = "";
      return absl::NotFoundError(StrCat("cannot read config file ", src.file));
    }
    std::stringstream buffer;
    buffer << in.rdbuf();
    result_.config_text = buffer.str();
    return buffer.str();
  }
  result_.config_text = std::string(migparted::DefaultMigPartedConfig());
  return *result_.config_text;
}

void Reconciler::Attempt::RestoreInto(Patchset* labels, Patchset* annotations,
                                      std::vector<std::string>* problems) {
  if (!has_record_ && record_.empty()) return;
  if (!record_.services.empty()) {
    LogInfo(kLog,
            "Restarting host GPU clients previously stopped: ", StrJoin(record_.services, ", "));
  }
  // Reverse order: the last stopped may depend on the ones stopped before it.
  for (auto it = record_.services.rbegin(); it != record_.services.rend(); ++it) {
    if (r_.host_services_ == nullptr) break;
    if (auto s = r_.host_services_->Start(*it); !s.ok()) {
      problems->push_back(StrCat("starting ", *it, ": ", ToStd(s.message())));
    }
  }
  if (!record_.labels.empty() || !record_.added.empty()) {
    LogInfo(kLog,
            "Restarting all GPU clients previously shutdown in Kubernetes by reenabling their "
            "component-specific nodeSelector labels");
  }
  for (const auto& [key, value] : record_.labels) {
    auto it = labels_.find(key);
    // Someone else changed it meanwhile (e.g. to `false`): theirs wins.
    if (it == labels_.end() || it->second != kPausedValue) continue;
    (*labels)[key] = value;
  }
  for (const std::string& key : record_.added) {
    auto it = labels_.find(key);
    if (it == labels_.end() || it->second != kPausedValue) continue;
    (*labels)[key] = std::nullopt;  // It was absent: the operand runs again.
  }
  (*annotations)[kInFlightAnnotation] = std::nullopt;
}

absl::Status Reconciler::Attempt::UpdateGfdLabels() {
  if (!opts().write_gfd_labels) return absl::OkStatus();
  ASSIGN_OR_RETURN(auto snapshots, ReadGpuSnapshots(*r_.nvml_, dynamic_gpus_));
  const Labels want = BuildGfdLabels(snapshots, opts().strategy);
  Patchset patch;
  for (const auto& [key, value] : want) patch[key] = value;
  for (const auto& [key, value] : labels_) {
    if (IsGfdLabelKey(key) && !want.count(key)) patch[key] = std::nullopt;
  }
  return Patch(patch, {});
}

ReconcileResult Reconciler::Attempt::Fail(bool retry, const std::string& reason,
                                          const std::string& message) {
  if (interrupt_.abandon()) return Interrupted();
  LogError(kLog, "Reconfiguring node ", opts().node_name, " to MIG config '", result_.config,
           "' failed (", reason, "): ", message);
  if (!dynamic_node_) {
    if (auto s = UpdateGfdLabels(); !s.ok()) {
      LogWarning(kLog, "Updating GPU feature labels failed: ", ToStd(s.message()));
    }
  }
  Patchset labels;
  Patchset annotations;
  std::vector<std::string> problems;
  RestoreInto(&labels, &annotations, &problems);
  if (!result_.config.empty()) {
    LogInfo(kLog, "Changing the '", kStateLabel, "' node label to '", kStateFailed, "'");
    labels[kStateLabel] = kStateFailed;
    annotations[kReasonAnnotation] = SanitizeReason(StrCat(reason, ": ", message));
  }
  absl::Status patched = PatchHard(labels, annotations);
  result_.outcome = Outcome::kFailed;
  result_.retry = retry;
  result_.reason = reason;
  result_.message = message;
  if (!problems.empty()) StrAppend(&result_.message, " (also: ", StrJoin(problems, "; "), ")");
  if (!patched.ok()) {
    // The record stays on the node; only a retry restores what it names.
    StrAppend(&result_.message, " (updating the node failed: ", ToStd(patched.message()), ")");
    result_.retry = true;
  }
  Event(true, reason, result_.message);
  return result_;
}

ReconcileResult Reconciler::Attempt::Interrupted() {
  if (!interrupt_.abandon()) {
    // A graceful stop: give the node back its clients; the next start tries again.
    ReconcileResult r = Fail(true, "Interrupted", "the MIG manager is stopping");
    r.outcome = Outcome::kInterrupted;
    return r;
  }
  LogWarning(kLog, "Abandoning the attempt (the next start finishes it)");
  result_.outcome = Outcome::kInterrupted;
  result_.reason = "Interrupted";
  result_.message = "abandoned";
  return result_;
}

ReconcileResult Reconciler::Attempt::Succeed(const std::string& message) {
  if (auto s = UpdateGfdLabels(); !s.ok()) {
    return Fail(true, "LabelsFailed", StrCat("updating GPU feature labels: ", ToStd(s.message())));
  }
  Patchset labels;
  Patchset annotations;
  std::vector<std::string> problems;
  RestoreInto(&labels, &annotations, &problems);
  for (const std::string& selector : opts().restart_pod_selectors) {
    if (!has_record_) break;  // Nothing was paused: nothing to re-validate.
    auto pods = PodsOnNode();
    if (!pods.ok()) break;
    for (const k8s::Json& pod : *pods) {
      if (!opts().operand_namespace.empty() && k8s::Namespace(pod) != opts().operand_namespace) {
        continue;
      }
      auto match = MatchesSelector(k8s::Labels(pod), selector);
      if (!match.ok() || !*match) continue;
      LogInfo(kLog, "Restarting validator pod ", PodKey(pod), " to re-run all validations");
      if (auto s = r_.client_->Delete(k8s::kPods, k8s::Namespace(pod), k8s::Name(pod));
          !s.ok() && !absl::IsNotFound(s)) {
        LogWarning(kLog, "Deleting pod ", PodKey(pod), ": ", ToStd(s.message()));
      }
    }
  }
  LogInfo(kLog, "Changing the '", kStateLabel, "' node label to '", kStateSuccess, "'");
  labels[kStateLabel] = kStateSuccess;
  annotations[kReasonAnnotation] = std::nullopt;
  if (auto s = PatchHard(labels, annotations); !s.ok()) {
    return Fail(true, "NodeUpdateFailed", StrCat("updating node: ", ToStd(s.message())));
  }
  result_.outcome = Outcome::kSuccess;
  result_.message = message;
  if (!problems.empty()) {
    // The GPUs are right; a host service that would not start is worth a warning, not a retry.
    Event(true, "HostServiceStartFailed", StrJoin(problems, "; "));
  }
  Event(false, "MigConfigApplied", message);
  return result_;
}

ReconcileResult Reconciler::Attempt::NoConfig() {
  Patchset labels;
  Patchset annotations;
  std::vector<std::string> problems;
  RestoreInto(&labels, &annotations, &problems);
  // The state label (and the reason next to it) stays as the last attempt left it: NVIDIA's
  // manager leaves it too, and tooling reads it after the config label is removed.
  if (auto s = UpdateGfdLabels(); !s.ok()) {
    LogWarning(kLog, "Updating GPU feature labels failed: ", ToStd(s.message()));
  }
  if (auto s = PatchHard(labels, annotations); !s.ok()) {
    result_.outcome = Outcome::kFailed;
    result_.retry = true;
    result_.reason = "NodeUpdateFailed";
    result_.message = std::string(s.message());
    return result_;
  }
  result_.outcome = Outcome::kNoConfig;
  result_.message = StrCat("no ", kConfigLabel, " label");
  return result_;
}

absl::StatusOr<std::vector<migparted::MigConfigSpec>> Reconciler::Attempt::RestrictToStaticGpus(
    std::vector<migparted::MigConfigSpec> specs, std::string* problem) {
  if (dynamic_gpus_.empty()) return specs;
  for (migparted::MigConfigSpec& spec : specs) {
    if (spec.all_devices) {
      // `devices: all` means every GPU this manager owns.
      spec.all_devices = false;
      spec.devices.clear();
      for (const nvml::GpuInfo& g : gpus_) {
        if (dynamic_gpus_.count(g.index)) continue;
        if (spec.mig_enabled && !g.mig_capable) continue;  // As mig-parted skips them.
        spec.devices.push_back(g.index);
      }
      continue;
    }
    for (int index : spec.devices) {
      if (dynamic_gpus_.count(index) == 0) continue;
      bool filtered_out = false;
      for (const nvml::GpuInfo& g : gpus_) {
        if (g.index == index && !spec.Applies(index, g.pci_device_id, g.pci_subsystem_id)) {
          filtered_out = true;
        }
      }
      if (filtered_out) continue;
      *problem =
          StrCat("MIG config '", result_.config, "' names GPU ", index,
                 ", which Prism's device plugin manages dynamically (", kDynamicGpusAnnotation,
                 "); remove it from the config or from the annotation");
      return absl::InvalidArgumentError(*problem);
    }
  }
  return specs;
}

void Reconciler::Attempt::LogWalk(const std::vector<migparted::MigConfigSpec>& specs,
                                  const migparted::ApplyPreview& preview) {
  auto walk = [&](bool mode) {
    for (const migparted::MigConfigSpec& spec : specs) {
      bool walked = false;
      for (const migparted::GpuApplyPreview& g : preview.gpus) {
        if (!spec.Applies(g.info.index, g.info.pci_device_id, g.info.pci_subsystem_id)) continue;
        if (dynamic_gpus_.count(g.info.index)) continue;
        // Specs for other models (NVIDIA's default file has one per PCI ID) are not worth a line.
        if (!walked) LogInfo(kLog, "Walking MigConfig for ", DescribeSpec(spec));
        walked = true;
        LogInfo(kLog, "  GPU ", g.info.index, ": ", Hex(g.info.pci_device_id));
        if (mode) {
          LogInfo(kLog, "    Asserting MIG mode: ", ModeName(spec.mig_enabled));
          LogInfo(kLog, "    MIG capable: ", g.info.mig_capable);
          if (g.info.mig_capable) {
            LogInfo(kLog, "    Current MIG mode: ", ModeName(g.mode.current),
                    g.mode.ResetPending()
                        ? StrCat(" (", ModeName(g.mode.pending), " after a reset)")
                        : "");
          }
        } else if (spec.mig_enabled) {
          LogInfo(kLog, "    Asserting MIG config: ", GoMap(g.desired));
          LogInfo(kLog, "    Current MIG config: ", GoMap(g.current));
        }
      }
    }
  };
  LogInfo(kLog, "Checking current MIG mode...");
  walk(true);
  LogInfo(kLog, "Checking current MIG device configuration...");
  walk(false);
}

absl::Status Reconciler::Attempt::RefreshCdi() {
  if (opts().cdi_refresh_commands.empty()) return absl::OkStatus();
  LogInfo(kLog, "Refreshing CDI for the new MIG devices");
  for (const std::vector<std::string>& argv : opts().cdi_refresh_commands) {
    LogInfo(kLog, "  Running '", StrJoin(argv, " "), "'");
    auto result = RunCommand(argv, opts().host_command_timeout);
    if (!result.ok()) {
      return absl::Status(result.status().code(),
                          StrCat("CDI refresh: ", ToStd(result.status().message())));
    }
    if (!result->ok()) return absl::UnavailableError(StrCat("CDI refresh: ",
                                                            DescribeFailure(argv, *result)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<k8s::Json>> Reconciler::Attempt::PodsOnNode() {
  k8s::ListOptions options;
  options.field_selector = StrCat("spec.nodeName=", opts().node_name);
  ASSIGN_OR_RETURN(k8s::ListResult list, r_.client_->ListAll(k8s::kPods, "", options));
  return list.items;
}

absl::StatusOr<std::string> Reconciler::Attempt::GpuUsers(const std::set<int>& changing) {
  ASSIGN_OR_RETURN(std::vector<k8s::Json> pods, PodsOnNode());
  std::vector<std::string> users;
  for (const k8s::Json& pod : pods) {
    if (IsTerminal(pod)) continue;
    const std::set<std::string> resources = GpuResources(pod);
    if (resources.empty()) continue;
    bool affected = true;
    if (auto uuids = DecisionGpus(pod)) {
      affected = false;
      for (const nvml::GpuInfo& g : gpus_) {
        if (uuids->count(g.uuid) && changing.count(g.index)) affected = true;
      }
    }
    if (affected) users.push_back(StrCat(PodKey(pod), " (", StrJoin(resources, ", "), ")"));
  }
  return StrJoin(users, ", ");
}

absl::Status Reconciler::Attempt::PauseOperands(std::set<std::string>* paused_keys) {
  Patchset labels;
  std::set<std::string> keys;
  std::set<std::string> on_when_absent;
  for (const DeployComponent& c : opts().deploy_components) {
    keys.insert(c.label);
    if (c.on_when_absent) on_when_absent.insert(c.label);
  }
  for (const auto& kv : record_.labels) keys.insert(kv.first);
  for (const std::string& key : record_.added) {
    keys.insert(key);
    on_when_absent.insert(key);
  }
  for (const std::string& key : keys) {
    auto it = labels_.find(key);
    if (it == labels_.end() && on_when_absent.count(key)) {
      // The operand runs while the label is absent: adding it pauses it; removing it afterwards
      // gives the node back as it was.
      record_.labels.erase(key);
      record_.added.insert(key);
      labels[key] = kPausedValue;
      paused_keys->insert(key);
      continue;
    }
    if (it == labels_.end() || it->second == "false") {
      // Absent, or switched off by someone else: not ours to touch.
      record_.labels.erase(key);
      record_.added.erase(key);
      continue;
    }
    if (record_.added.count(key)) {
      if (it->second == kPausedValue) {  // Added by the interrupted attempt: still ours.
        paused_keys->insert(key);
        continue;
      }
      record_.added.erase(key);  // Someone set it meanwhile: restore their value.
    }
    if (!record_.labels.count(key)) {
      // A `paused-for-mig-change` nobody recorded was left by a crashed manager of another
      // kind: restore it to `true` as NVIDIA's does.
      record_.labels[key] = it->second == kPausedValue ? "true" : it->second;
    }
    if (it->second != kPausedValue) labels[key] = kPausedValue;
    paused_keys->insert(key);
  }
  record_.config = result_.config;
  if (!labels.empty()) {
    LogInfo(kLog,
            "Shutting down all GPU clients in Kubernetes by disabling their "
            "component-specific nodeSelector labels");
  }
  has_record_ = true;
  return PatchHard(labels, {{kInFlightAnnotation, EncodeInFlight(record_)}});
}

absl::Status Reconciler::Attempt::WaitForOperandPods(const std::set<std::string>& paused_keys) {
  if (paused_keys.empty()) return absl::OkStatus();
  const absl::Time deadline = opts().clock->Now() + opts().pod_wait_timeout;
  int polls = 0;
  while (true) {
    std::vector<std::string> waiting;
    auto pods = PodsOnNode();
    if (pods.ok()) {
      for (const k8s::Json& pod : *pods) {
        if (IsTerminal(pod)) continue;
        bool operand = SelectsOnAnyLabel(pod, paused_keys);
        for (const DeployComponent& c : opts().deploy_components) {
          if (operand || c.pod_selector.empty() || !paused_keys.count(c.label)) continue;
          if (!opts().operand_namespace.empty() &&
              k8s::Namespace(pod) != opts().operand_namespace) {
            continue;
          }
          auto match = MatchesSelector(k8s::Labels(pod), c.pod_selector);
          operand = match.ok() && *match;
        }
        if (operand) waiting.push_back(PodKey(pod));
      }
      if (waiting.empty()) return absl::OkStatus();
    } else {
      LogWarning(kLog, "Listing pods on the node failed: ", ToStd(pods.status().message()));
    }
    if (opts().clock->Now() >= deadline) {
      return absl::DeadlineExceededError(
          StrCat("timed out after ", absl::FormatDuration(opts().pod_wait_timeout),
                 " waiting for GPU operand pods to leave the node",
                 waiting.empty() ? std::string(" (cannot list pods)")
                                 : StrCat(": ", StrJoin(waiting, ", "))));
    }
    if (polls++ % 30 == 0 && !waiting.empty()) {
      LogInfo(kLog, "Waiting for ", waiting.size(), " GPU operand pod",
              waiting.size() == 1 ? "" : "s", " to stop: ", StrJoin(waiting, ", "));
    }
    if (interrupt_.SleepFor(opts().poll_interval)) return absl::CancelledError("interrupted");
  }
}

absl::Status Reconciler::Attempt::StopHostServices() {
  if (!opts().shutdown_host_gpu_clients || r_.host_services_ == nullptr ||
      opts().gpu_clients.systemd_services.empty()) {
    return absl::OkStatus();
  }
  LogInfo(kLog, "Shutting down all GPU clients on the host by stopping their systemd services");
  for (const std::string& unit : opts().gpu_clients.systemd_services) {
    if (interrupt_.requested()) return absl::CancelledError("interrupted");
    ASSIGN_OR_RETURN(UnitStatus status, r_.host_services_->Status(unit));
    std::string why;
    const PauseAction action = DecidePause(status, &why);
    LogInfo(kLog, "  ", unit, ": ", why);
    if (action == PauseAction::kSkip) continue;
    const bool recorded =
        std::find(record_.services.begin(), record_.services.end(), unit) != record_.services.end();
    if (!recorded) {
      // Recorded before stopping: a crash right after the stop still restarts it.
      record_.services.push_back(unit);
      RETURN_IF_ERROR(PatchHard({}, {{kInFlightAnnotation, EncodeInFlight(record_)}}));
    }
    if (action == PauseAction::kStopAndRestart) {
      if (auto s = r_.host_services_->Stop(unit); !s.ok()) {
        return absl::Status(s.code(), StrCat("stopping ", unit, ": ", ToStd(s.message())));
      }
    }
  }
  return absl::OkStatus();
}

ReconcileResult Reconciler::Attempt::Run() {
  if (auto s = ReadNode(); !s.ok()) {
    result_.outcome = Outcome::kFailed;
    result_.retry = true;
    result_.reason = "NodeUnreadable";
    result_.message = StrCat("reading node ", opts().node_name, ": ", ToStd(s.message()));
    LogError(kLog, result_.message);
    return result_;
  }
  if (auto it = annotations_.find(kInFlightAnnotation); it != annotations_.end()) {
    has_record_ = true;
    auto record = DecodeInFlight(it->second);
    if (record.ok()) {
      record_ = *record;
      LogInfo(kLog, "Finishing a change interrupted earlier (MIG config '", record_.config,
              "', paused: ", record_.labels.size(), " label(s), ", record_.services.size(),
              " host service(s))");
    } else {
      LogError(kLog, "Ignoring an unreadable ", kInFlightAnnotation,
               " annotation: ", ToStd(record.status().message()));
    }
  }
  auto config_it = labels_.find(kConfigLabel);
  result_.config = config_it == labels_.end() ? "" : config_it->second;
  const std::string state = labels_.count(kStateLabel) ? labels_.at(kStateLabel) : "";

  if (labels_.count(kMigModeLabel) && labels_.at(kMigModeLabel) == kMigModeDynamic) {
    dynamic_node_ = true;
    if (result_.config.empty()) {
      // Nothing asked of a dynamic node: leave its GPUs (and their labels) alone.
      Patchset labels;
      Patchset annotations;
      std::vector<std::string> problems;
      RestoreInto(&labels, &annotations, &problems);
      (void)PatchHard(labels, annotations);
      result_.outcome = Outcome::kNoConfig;
      return result_;
    }
    return Fail(false, "DynamicNode",
                StrCat("node ", opts().node_name, " is managed dynamically (", kMigModeLabel, "=",
                       kMigModeDynamic, "): its GPUs belong to Prism's device plugin; remove the ",
                       kConfigLabel, " label or set ", kMigModeLabel, "=", kMigModeStatic));
  }

  // Which GPUs are this manager's.
  auto gpus = r_.nvml_->ListGpus();
  if (!gpus.ok()) {
    return Fail(true, "NvmlError", StrCat("listing GPUs: ", ToStd(gpus.status().message())));
  }
  gpus_ = *gpus;
  if (auto it = annotations_.find(kDynamicGpusAnnotation); it != annotations_.end()) {
    for (std::string_view entry : StrSplit(it->second, ',', /*skip_empty=*/true)) {
      const std::string id(StripWhitespace(entry));
      bool found = false;
      for (const nvml::GpuInfo& g : gpus_) {
        if (g.uuid == id || StrCat(g.index) == id) {
          dynamic_gpus_.insert(g.index);
          found = true;
        }
      }
      if (!found && !id.empty()) {
        if (result_.config.empty()) return NoConfig();
        return Fail(false, "DynamicGpusInvalid",
                    StrCat("annotation ", kDynamicGpusAnnotation, " names GPU '", id,
                           "', which is not on this node (GPUs 0-", gpus_.size() - 1,
                           " by index or UUID)"));
      }
    }
  }
  if (result_.config.empty()) return NoConfig();
  if (interrupt_.requested()) return Interrupted();

  LogInfo(kLog, "Applying the selected MIG config '", result_.config, "' to node ",
          opts().node_name);
  LogInfo(kLog, "Parsing config file... (", opts().config.Describe(), ")");
  auto text = ReadConfigText();
  if (!text.ok()) {
    if (absl::IsUnavailable(text.status())) {
      return Fail(true, "ConfigUnreadable", std::string(text.status().message()));
    }
    return Fail(false, absl::IsNotFound(text.status()) ? "ConfigMissing" : "ConfigInvalid",
                std::string(text.status().message()));
  }
  auto file = migparted::ParseMigConfig(*text);
  if (!file.ok()) {
    return Fail(false, "ConfigInvalid",
                StrCat(opts().config.Describe(), ": ", ToStd(file.status().message())));
  }
  LogInfo(kLog, "Selecting specific MIG config...");
  auto selected = migparted::SelectMigConfig(*file, result_.config);
  if (!selected.ok()) {
    return Fail(false, "UnknownConfig",
                StrCat("MIG config '", result_.config, "' is not in ", opts().config.Describe(),
                       ": ", ToStd(selected.status().message())));
  }
  if (!opts().hooks_file.empty()) {
    std::ifstream in(opts().hooks_file);
    std::stringstream buffer;
    buffer << in.rdbuf();
    auto hooks = in ? migparted::ParseHooks(buffer.str())
                    : absl::StatusOr<migparted::HooksFile>(absl::NotFoundError("cannot read it"));
    if (!hooks.ok()) {
      return Fail(false, "HooksInvalid",
                  StrCat("hooks file ", opts().hooks_file, ": ", ToStd(hooks.status().message())));
    }
    hooks_ = *hooks;
    apply_options_.hooks = &hooks_;
  }
  apply_options_.hook_env = {{"MIG_PARTED_CONFIG_FILE", opts().config.file},
                             {"MIG_PARTED_SELECTED_CONFIG", result_.config},
                             {"MIG_PARTED_HOOKS_FILE", opts().hooks_file},
                             {"MIG_PARTED_SKIP_RESET", "false"},
                             {"MIG_PARTED_MODE_CHANGE_ONLY", "false"}};
  std::string problem;
  auto specs = RestrictToStaticGpus(*selected, &problem);
  if (!specs.ok()) return Fail(false, "DynamicGpu", problem);

  auto preview = migparted::PreviewApply(*r_.nvml_, *specs);
  if (!preview.ok()) {
    const absl::Status& s = preview.status();
    if (absl::IsInvalidArgument(s)) {
      return Fail(false, "ConfigDoesNotFit",
                  StrCat("MIG config '", result_.config, "' cannot apply: ", ToStd(s.message())));
    }
    if (absl::IsFailedPrecondition(s)) {
      return Fail(true, "GpuInUse", std::string(s.message()));
    }
    return Fail(true, "NvmlError", std::string(s.message()));
  }
  LogWalk(*specs, *preview);
  if (!preview->NeedsChanges()) {
    LogInfo(kLog, "Selected MIG configuration currently applied");
    auto reason = annotations_.find(kReasonAnnotation);
    if (reason != annotations_.end() && reason->second.rfind(kCdiRefreshFailed, 0) == 0) {
      // The GPUs were changed by an attempt whose CDI refresh failed: finish that first.
      if (auto s = RefreshCdi(); !s.ok()) {
        return Fail(true, kCdiRefreshFailed, std::string(s.message()));
      }
    }
    return Succeed(StrCat("MIG config '", result_.config, "' is applied"));
  }

  std::set<int> changing;
  std::vector<int> mode_reset_gpus;
  std::vector<std::string> changes;
  for (const migparted::GpuApplyPreview& g : preview->gpus) {
    if (!g.mode_change && !g.layout_change) continue;
    changing.insert(g.info.index);
    if (g.mode_change && ModeChangeNeedsReset(g)) mode_reset_gpus.push_back(g.info.index);
    changes.push_back(
        StrCat("GPU ", g.info.index, ": ",
               g.mode_change ? StrCat("MIG ", g.mig_enabled ? "on" : "off", ", ") : "",
               g.mig_enabled ? GoMap(g.desired) : "no MIG devices"));
  }
  // Reboot-loop guard: we rebooted for this very config and the mode still is not right.
  if (state == kStateRebooting && record_.config == result_.config && !mode_reset_gpus.empty()) {
    return Fail(
        false, "RebootDidNotHelp",
        StrCat("MIG mode change did not take effect after rebooting (", GpuList(mode_reset_gpus),
               "); not rebooting again. Check the host (passthrough VM without GPU "
               "reset, driver, InfoROM), then change the label to retry"));
  }
  const bool forced = opts().force || (annotations_.count(kForceAnnotation) &&
                                       AsciiLower(annotations_.at(kForceAnnotation)) == "true");
  if (!forced) {
    auto users = GpuUsers(changing);
    if (!users.ok()) {
      return Fail(true, "ApiError",
                  StrCat("listing pods on the node: ", ToStd(users.status().message())));
    }
    if (!users->empty()) {
      return Fail(true, "GpuInUse",
                  StrCat(GpuList(std::vector<int>(changing.begin(), changing.end())),
                         " would change, but pods on the node use GPUs: ", *users,
                         ". Drain the node (kubectl drain), or annotate it ", kForceAnnotation,
                         "=true to change the GPUs anyway"));
    }
  }
  if (interrupt_.requested()) return Interrupted();

  LogInfo(kLog, "Changing the '", kStateLabel, "' node label to '", kStatePending, "'");
  if (auto s = PatchHard({{kStateLabel, kStatePending}}, {}); !s.ok()) {
    return Fail(true, "NodeUpdateFailed", StrCat("setting state pending: ", ToStd(s.message())));
  }
  Event(false, "MigConfigPending",
        StrCat("applying MIG config '", result_.config, "': ", StrJoin(changes, "; ")));

  std::set<std::string> paused_keys;
  if (auto s = PauseOperands(&paused_keys); !s.ok()) {
    return Fail(true, "NodeUpdateFailed", StrCat("pausing GPU operands: ", ToStd(s.message())));
  }
  if (auto s = WaitForOperandPods(paused_keys); !s.ok()) {
    if (absl::IsCancelled(s)) return Interrupted();
    return Fail(true, "OperandsDidNotStop", std::string(s.message()));
  }
  if (auto s = StopHostServices(); !s.ok()) {
    if (absl::IsCancelled(s)) return Interrupted();
    return Fail(true, "HostServiceStopFailed", std::string(s.message()));
  }
  if (interrupt_.requested()) return Interrupted();

  if (preview->NeedsModeChange()) {
    LogInfo(kLog, "Applying MIG mode change...");
    migparted::ApplyOptions mode_options = apply_options_;
    mode_options.mode_only = true;
    mode_options.hook_env["MIG_PARTED_MODE_CHANGE_ONLY"] = "true";
    auto applied = migparted::Apply(*r_.nvml_, *specs, mode_options);
    std::vector<int> pending;
    auto after = migparted::PreviewApply(*r_.nvml_, *specs);
    if (after.ok()) {
      for (const migparted::GpuApplyPreview& g : after->gpus) {
        if (g.mode_change && g.mode.ResetPending()) pending.push_back(g.info.index);
      }
    }
    if (!pending.empty()) {
      const std::string why = applied.ok() ? "the mode change is pending a GPU reset"
                                           : std::string(applied.status().message());
      if (opts().with_reboot && r_.rebooter_ != nullptr) {
        LogInfo(kLog, "Changing the '", kStateLabel, "' node label to '", kStateRebooting, "'");
        if (auto s = PatchHard({{kStateLabel, kStateRebooting}}, {}); !s.ok()) {
          // Never reboot without the marker: the guard after the reboot depends on it.
          return Fail(true, "NodeUpdateFailed",
                      StrCat("cannot set state rebooting, so not rebooting: ", ToStd(s.message())));
        }
        Event(false, "Rebooting",
              StrCat("rebooting the node to finish the MIG mode change of ", GpuList(pending), " (",
                     why, ")"));
        LogInfo(kLog, "Rebooting the node to finish the MIG mode change of ", GpuList(pending));
        if (auto s = r_.rebooter_->Reboot(); !s.ok()) {
          return Fail(true, "RebootFailed", StrCat("rebooting: ", ToStd(s.message())));
        }
        result_.outcome = Outcome::kRebooting;
        result_.message = StrCat("rebooting to finish the MIG mode change of ", GpuList(pending));
        return result_;
      }
      return Fail(false, "ModeChangeNeedsReset",
                  StrCat(GpuList(pending), " need a GPU reset to change MIG mode, which did not ",
                         "happen (", why, "); reboot the node, or run the MIG manager with ",
                         "--with-reboot (WITH_REBOOT=true)"));
    }
    if (!applied.ok()) {
      return Fail(true, "ApplyFailed",
                  StrCat("changing MIG mode: ", ToStd(applied.status().message())));
    }
  }

  LogInfo(kLog, "Applying MIG device configuration...");
  for (const std::string& change : changes) LogInfo(kLog, "  Updating ", change);
  auto applied = migparted::Apply(*r_.nvml_, *specs, apply_options_);
  if (!applied.ok()) {
    return Fail(true, "ApplyFailed", std::string(applied.status().message()));
  }
  auto check = migparted::PreviewApply(*r_.nvml_, *specs);
  if (!check.ok() || check->NeedsChanges()) {
    return Fail(true, "VerifyFailed",
                check.ok() ? "the GPUs do not match the config after applying it"
                           : StrCat("reading back: ", ToStd(check.status().message())));
  }
  LogInfo(kLog, "MIG configuration applied successfully");
  if (auto s = RefreshCdi(); !s.ok()) return Fail(true, kCdiRefreshFailed, std::string(s.message()));
  return Succeed(StrCat("applied MIG config '", result_.config, "': ", StrJoin(changes, "; ")));
}

Reconciler::Reconciler(k8s::Client* client, nvml::Nvml* nvml, HostServices* host_services,
                       Rebooter* rebooter, k8s::EventRecorder* events, ReconcilerOptions options)
    : client_(client),
      nvml_(nvml),
      host_services_(host_services),
      rebooter_(rebooter),
      events_(events),
      options_(std::move(options)) {}

ReconcileResult Reconciler::Reconcile(const Interrupt& interrupt) {
  Attempt attempt(*this, interrupt);
  return attempt.Run();
}

}  // namespace prism::migmanager
