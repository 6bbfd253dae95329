#include "extender/webhook.h"

#include <utility>
#include <vector>

#include "absl/strings/escaping.h"

#include "base/strings.h"
#include "config/pod_json.h"
#include "config/pod_request.h"
#include "core/sched/engine.h"
#include "extender/wire.h"

namespace prism::extender {
namespace {

using nlohmann::json;

constexpr char kDefaultScheduler[] = "default-scheduler";

std::string EscapePointer(std::string_view token) {
  std::string out;
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

bool HasKey(const json& obj, std::string_view key) {
  return obj.is_object() && obj.find(key) != obj.end();
}

bool Privileged(const json& container) {
  const json* sc = container.is_object() && HasKey(container, "securityContext")
                       ? &container["securityContext"]
                       : nullptr;
  return sc != nullptr && sc->is_object() && HasKey(*sc, "privileged") &&
         (*sc)["privileged"].is_boolean() && (*sc)["privileged"].get<bool>();
}

json Deny(const std::string& uid, const std::string& message) {
  return json{{"uid", uid},
              {"allowed", false},
              {"status", {{"code", 400}, {"reason", "BadRequest"}, {"message", message}}}};
}

// A string member that may be absent or null (""); InvalidArgument naming `where.key` otherwise.
absl::StatusOr<std::string> StringMember(const json& object, std::string_view key,
                                         std::string_view where) {
  const json* v = FindField(object, key);
  if (v == nullptr || v->is_null()) return std::string();
  if (!v->is_string()) {
    return absl::InvalidArgumentError(
        StrCat(where, ".", key, ": expected a string, got ", v->type_name()));
  }
  return v->get<std::string>();
}

// Whether a container of `pod` may name one of `resources` in its requests or limits, read
// leniently, before the strict pod reader runs: that reader's bounds are for pods Prism
// schedules, and a pod that asks for no GPU is not Prism's to refuse (the API server took it,
// whatever its env, labels or generateName). A shape the scan cannot follow counts as naming
// one, so the strict reader decides and says what is wrong.
bool MayNameResource(const json& pod, const std::vector<std::string>& resources) {
  const json* spec = FindField(pod, "spec");
  if (spec == nullptr || spec->is_null()) return false;
  if (!spec->is_object()) return true;
  for (const char* list : {"initContainers", "containers", "ephemeralContainers"}) {
    const json* containers = FindField(*spec, list);
    if (containers == nullptr || containers->is_null()) continue;
    if (!containers->is_array()) return true;
    for (const json& c : *containers) {
      if (!c.is_object()) return true;
      const json* res = FindField(c, "resources");
      if (res == nullptr || res->is_null()) continue;
      if (!res->is_object()) return true;
      for (const char* part : {"limits", "requests"}) {
        const json* m = FindField(*res, part);
        if (m == nullptr || m->is_null()) continue;
        if (!m->is_object()) return true;
        for (const std::string& r : resources) {
          if (HasKey(*m, r)) return true;
        }
      }
    }
  }
  return false;
}

}  // namespace

PodReview ReviewPod(const json& pod, const std::string& ns, bool mutate,
                    const WebhookOptions& options, const sched::DeviceConfig& config) {
  PodReview review;
  auto deny = [&review](std::string message) {
    review.allowed = false;
    review.message = std::move(message);
    review.patch = json::array();
    return review;
  };
  if (!pod.is_object()) return deny("the object is not a Pod");
  const std::vector<std::string> gpu_resources = {
      config.resource_count_name, config.resource_memory_name,
      config.resource_memory_percentage_name, config.resource_core_name};
  if (!MayNameResource(pod, gpu_resources)) return review;
  // Pods of controllers have only generateName at admission. The API server cuts it to 58
  // bytes before adding 5 random characters; the name is only for messages here.
  json named = pod;
  json& metadata = named["metadata"];
  if (!metadata.is_object()) metadata = json::object();
  if (!metadata.contains("name") || !metadata["name"].is_string() ||
      metadata["name"].get<std::string>().empty()) {
    const std::string generate =
        metadata.contains("generateName") && metadata["generateName"].is_string()
            ? metadata["generateName"].get<std::string>()
            : "";
    metadata["name"] = generate.empty() ? "(unnamed)" : generate.substr(0, 58) + "*";
  }
  if (!metadata.contains("namespace") && !ns.empty()) metadata["namespace"] = ns;
  absl::StatusOr<config::PodManifest> manifest = config::PodManifestFromJson(named);
  if (!manifest.ok()) return deny(std::string(manifest.status().message()));

  auto names_gpu = [&](const config::ContainerManifest& c) {
    for (const std::string& r : gpu_resources) {
      if (c.limits.count(r) || c.requests.count(r)) return true;
    }
    return false;
  };
  bool any = false;
  for (const config::ContainerManifest& c : manifest->containers) any = any || names_gpu(c);
  if (!any) return review;

  absl::StatusOr<sched::PodRequest> request = config::BuildPodRequest(*manifest, config);
  if (!request.ok()) return deny(StrCat("invalid GPU request: ", request.status().message()));
  if (!request->WantsGpu()) return review;
  {
    sched::Engine engine(sched::ClusterState(), config);
    if (absl::Status s = engine.Validate(*request); !s.ok()) {
      return deny(StrCat("invalid GPU request: ", s.message()));
    }
  }
  review.gpu_pod = true;
  const json& spec = named.contains("spec") ? named["spec"] : json::object();
  const std::string scheduler = HasKey(spec, "schedulerName") && spec["schedulerName"].is_string()
                                    ? spec["schedulerName"].get<std::string>()
                                    : "";
  if (!scheduler.empty() && scheduler != options.scheduler_name &&
      (scheduler != kDefaultScheduler || !options.overwrite_default_scheduler)) {
    return review;  // Another scheduler is in charge of this pod.
  }
  if (HasKey(spec, "nodeName") && spec["nodeName"].is_string() &&
      !spec["nodeName"].get<std::string>().empty()) {
    return deny(StrCat("pod ", manifest->Key(), " sets spec.nodeName; GPU pods must be placed by ",
                       options.scheduler_name, " (remove spec.nodeName, use a nodeSelector)"));
  }
  if (options.deny_privileged) {
    for (const char* list : {"initContainers", "containers", "ephemeralContainers"}) {
      if (!HasKey(spec, list) || !spec[list].is_array()) continue;
      for (const json& c : spec[list]) {
        if (Privileged(c)) {
          const json* name = FindField(c, "name");
          return deny(StrCat("pod ", manifest->Key(), " container ",
                             name != nullptr && name->is_string() ? name->get<std::string>() : "?",
                             " is privileged; a privileged container sees every GPU of the node, "
                             "so GPU pods may not have one"));
        }
      }
    }
  }
  if (!mutate) return review;
  if (scheduler != options.scheduler_name) {
    review.patch.push_back(
        json{{"op", "add"}, {"path", "/spec/schedulerName"}, {"value", options.scheduler_name}});
  }
  const std::string count = EscapePointer(config.resource_count_name);
  for (const char* list : {"initContainers", "containers"}) {
    if (!HasKey(spec, list) || !spec[list].is_array()) continue;
    const json& containers = spec[list];
    for (size_t i = 0; i < containers.size(); ++i) {
      const json& c = containers[i];
      bool wants = false;
      bool has_count = false;
      for (const char* part : {"limits", "requests"}) {
        if (!HasKey(c, "resources") || !HasKey(c["resources"], part)) continue;
        const json& m = c["resources"][part];
        for (const std::string& r : gpu_resources) {
          if (!HasKey(m, r)) continue;
          if (r == config.resource_count_name)
            has_count = true;
          else
            wants = true;
        }
      }
      if (!wants || has_count) continue;
      const std::string base = StrCat("/spec/", list, "/", i, "/resources");
      const std::string value = std::to_string(config.default_gpu_num);
      if (!HasKey(c, "resources") || !c["resources"].is_object()) {
        review.patch.push_back(
            json{{"op", "add"},
                 {"path", base},
                 {"value", {{"limits", {{config.resource_count_name, value}}}}}});
      } else if (!HasKey(c["resources"], "limits") || !c["resources"]["limits"].is_object()) {
        review.patch.push_back(json{{"op", "add"},
                                    {"path", base + "/limits"},
                                    {"value", {{config.resource_count_name, value}}}});
      } else {
        review.patch.push_back(
            json{{"op", "add"}, {"path", StrCat(base, "/limits/", count)}, {"value", value}});
      }
    }
  }
  return review;
}

json HandleAdmissionReview(const json& review, bool mutate, const WebhookOptions& options,
                           const sched::DeviceConfig& config) {
  json out{{"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"}};
  if (review.is_object() && review.contains("apiVersion") && review["apiVersion"].is_string()) {
    out["apiVersion"] = review["apiVersion"];
  }
  const json* request = review.is_object() ? FindField(review, "request") : nullptr;
  if (request == nullptr || !request->is_object()) {
    out["response"] = Deny("", "AdmissionReview without a request");
    return out;
  }
  // Typed reads: a field of the wrong type is a denial naming it, never an exception.
  absl::StatusOr<std::string> uid = StringMember(*request, "uid", "AdmissionReview.request");
  if (!uid.ok()) {
    out["response"] = Deny("", std::string(uid.status().message()));
    return out;
  }
  if (uid->empty()) {
    out["response"] = Deny("", "AdmissionReview.request.uid is missing");
    return out;
  }
  const json* kind = FindField(*request, "kind");
  absl::StatusOr<std::string> kind_name = std::string();
  if (kind != nullptr && !kind->is_null()) {
    kind_name =
        kind->is_object()
            ? StringMember(*kind, "kind", "AdmissionReview.request.kind")
            : absl::InvalidArgumentError(StrCat(
                  "AdmissionReview.request.kind: expected an object, got ", kind->type_name()));
  }
  absl::StatusOr<std::string> operation =
      StringMember(*request, "operation", "AdmissionReview.request");
  absl::StatusOr<std::string> ns = StringMember(*request, "namespace", "AdmissionReview.request");
  for (const absl::Status& s : {kind_name.status(), operation.status(), ns.status()}) {
    if (!s.ok()) {
      out["response"] = Deny(*uid, std::string(s.message()));
      return out;
    }
  }
  if (*kind_name != "Pod" || (*operation != "CREATE" && !operation->empty())) {
    out["response"] = json{{"uid", *uid}, {"allowed", true}};
    return out;
  }
  const json* object = FindField(*request, "object");
  if (object == nullptr || !object->is_object()) {
    out["response"] = Deny(*uid, "AdmissionReview.request.object is not a Pod");
    return out;
  }
  const PodReview result = ReviewPod(*object, *ns, mutate, options, config);
  if (!result.allowed) {
    out["response"] = Deny(*uid, result.message);
    return out;
  }
  json response{{"uid", *uid}, {"allowed", true}};
  if (!result.patch.empty()) {
    response["patchType"] = "JSONPatch";
    response["patch"] = absl::Base64Escape(result.patch.dump());
  }
  out["response"] = std::move(response);
  return out;
}

}  // namespace prism::extender
