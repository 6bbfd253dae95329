#include "migmanager/operands.h"

#include "base/status_macros.h"
#include "base/strings.h"
#include "k8s/objects.h"
#include "k8s/resource.h"
#include "migmanager/labels.h"

namespace prism::migmanager {

std::string PodKey(const k8s::Json& pod) {
  return StrCat(k8s::Namespace(pod), "/", k8s::Name(pod));
}

bool IsTerminal(const k8s::Json& pod) {
  const std::string phase = k8s::PodPhase(pod);
  return phase == "Succeeded" || phase == "Failed";
}

std::map<std::string, std::string> StringMap(const k8s::Json* obj) {
  std::map<std::string, std::string> out;
  if (obj == nullptr || !obj->is_object()) return out;
  for (const auto& [k, v] : obj->items()) {
    if (v.is_string()) out[k] = v.get<std::string>();
  }
  return out;
}

std::set<std::string> GpuResources(const k8s::Json& pod) {
  std::set<std::string> out;
  for (const char* list : {"containers", "initContainers"}) {
    const k8s::Json* containers = k8s::Find(pod, {"spec", list});
    if (containers == nullptr || !containers->is_array()) continue;
    for (const k8s::Json& c : *containers) {
      for (const char* kind : {"requests", "limits"}) {
        const k8s::Json* res = k8s::Find(c, {"resources", kind});
        if (res == nullptr || !res->is_object()) continue;
        for (const auto& [name, qty] : res->items()) {
          if (name.rfind("nvidia.com/", 0) != 0) continue;
          if (qty.is_string() && qty.get<std::string>() == "0") continue;
          if (qty.is_number() && qty.get<double>() == 0) continue;
          out.insert(name);
        }
      }
    }
  }
  return out;
}

std::optional<std::set<std::string>> DecisionGpus(const k8s::Json& pod) {
  auto text = k8s::Annotation(pod, "prism.io/decision");
  if (!text) return std::nullopt;
  auto decision = k8s::ParseJson(*text, "prism.io/decision");
  if (!decision.ok()) return std::nullopt;
  const k8s::Json* containers = k8s::Find(*decision, {"containers"});
  if (containers == nullptr || !containers->is_array()) return std::nullopt;
  std::set<std::string> uuids;
  for (const k8s::Json& c : *containers) {
    const k8s::Json* devices = k8s::Find(c, {"devices"});
    if (devices == nullptr || !devices->is_array()) continue;
    for (const k8s::Json& d : *devices) {
      const std::string uuid = k8s::GetString(d, {"uuid"});
      if (uuid.empty()) return std::nullopt;
      uuids.insert(uuid);
    }
  }
  return uuids;
}

std::vector<DeployComponent> DefaultDeployComponents() {
  return {
      {"nvidia.com/gpu.deploy.device-plugin", "app=nvidia-device-plugin-daemonset", false},
      {"nvidia.com/gpu.deploy.gpu-feature-discovery", "app=gpu-feature-discovery", false},
      {"nvidia.com/gpu.deploy.dcgm-exporter", "app=nvidia-dcgm-exporter", false},
      {"nvidia.com/gpu.deploy.dcgm", "app=nvidia-dcgm", false},
      {"nvidia.com/gpu.deploy.nvsm", "", false},
      {"nvidia.com/gpu.deploy.client", "", false},
  };
}

std::string EncodeInFlight(const InFlightRecord& record) {
  k8s::Json j = {
      {"config", record.config}, {"labels", record.labels}, {"services", record.services}};
  // Only when used, so that a record without it reads the same to an older manager.
  if (!record.added.empty()) j["added"] = record.added;
  return j.dump();
}

absl::StatusOr<InFlightRecord> DecodeInFlight(const std::string& text) {
  ASSIGN_OR_RETURN(k8s::Json j, k8s::ParseJson(text, kInFlightAnnotation));
  InFlightRecord record;
  if (!j.is_object()) return absl::InvalidArgumentError("in-flight record: not a JSON object");
  record.config = k8s::GetString(j, {"config"});
  record.labels = StringMap(k8s::Find(j, {"labels"}));
  if (const k8s::Json* a = k8s::Find(j, {"added"}); a != nullptr && a->is_array()) {
    for (const k8s::Json& key : *a) {
      if (key.is_string()) record.added.insert(key.get<std::string>());
    }
  }
  if (const k8s::Json* s = k8s::Find(j, {"services"}); s != nullptr && s->is_array()) {
    for (const k8s::Json& unit : *s) {
      if (unit.is_string()) record.services.push_back(unit.get<std::string>());
    }
  }
  return record;
}

absl::StatusOr<bool> MatchesSelector(const std::map<std::string, std::string>& labels,
                                     const std::string& selector) {
  for (std::string_view term : StrSplit(selector, ',', /*skip_empty=*/true)) {
    term = StripWhitespace(term);
    size_t eq = term.find("==");
    size_t value_at = eq + 2;
    if (eq == std::string_view::npos) {
      eq = term.find('=');
      value_at = eq + 1;
    }
    if (eq == std::string_view::npos || eq == 0 || term.find('!') != std::string_view::npos) {
      return absl::InvalidArgumentError(
          StrCat("pod selector '", selector, "': only key=value terms are supported"));
    }
    const std::string key(StripWhitespace(term.substr(0, eq)));
    const std::string value(StripWhitespace(term.substr(value_at)));
    auto it = labels.find(key);
    if (it == labels.end() || it->second != value) return false;
  }
  return true;
}

absl::StatusOr<DeployComponent> ParseDeployComponent(const std::string& text, bool on_when_absent,
                                                     const std::string& flag) {
  const size_t eq = text.find('=');
  DeployComponent c;
  c.label = text.substr(0, eq);
  if (eq != std::string::npos) c.pod_selector = text.substr(eq + 1);
  c.on_when_absent = on_when_absent;
  if (c.label.empty()) {
    return absl::InvalidArgumentError(
        StrCat("--", flag, ": expected <label>[=<pod selector>], got '", text, "'"));
  }
  if (!c.pod_selector.empty()) {
    if (auto m = MatchesSelector({}, c.pod_selector); !m.ok()) {
      return absl::InvalidArgumentError(StrCat("--", flag, ": ", ToStd(m.status().message())));
    }
  }
  return c;
}

bool SelectsOnAnyLabel(const k8s::Json& pod, const std::set<std::string>& keys) {
  for (const auto& [key, value] : StringMap(k8s::Find(pod, {"spec", "nodeSelector"}))) {
    if (keys.count(key)) return true;
  }
  const k8s::Json* terms =
      k8s::Find(pod, {"spec", "affinity", "nodeAffinity",
                      "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"});
  if (terms == nullptr || !terms->is_array()) return false;
  for (const k8s::Json& term : *terms) {
    const k8s::Json* exprs = k8s::Find(term, {"matchExpressions"});
    if (exprs == nullptr || !exprs->is_array()) continue;
    for (const k8s::Json& e : *exprs) {
      if (keys.count(k8s::GetString(e, {"key"}))) return true;
    }
  }
  return false;
}

}  // namespace prism::migmanager
