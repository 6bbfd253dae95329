#include "extender/webhook.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"

#include "base/strings.h"
#include "config/dra_pod.h"
#include "extender/dra_hami.h"
#include "config/owned_annotations.h"
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


bool Contains(const std::vector<std::string>& list, std::string_view value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

// The Prism-owned annotations `pod` carries (key -> value). A pod whose metadata.annotations is
// not an object of strings is an error naming the field: the API server never sends one, and a
// review that cannot tell what a pod carries must not let it pass.
absl::StatusOr<std::map<std::string, std::string, std::less<>>> OwnedAnnotations(const json& pod,
                                                                    std::string_view where) {
  std::map<std::string, std::string, std::less<>> out;
  const json* metadata = FindField(pod, "metadata");
  if (metadata == nullptr || metadata->is_null()) return out;
  if (!metadata->is_object()) {
    return absl::InvalidArgumentError(
        StrCat(where, ".metadata: expected an object, got ", metadata->type_name()));
  }
  const json* annotations = FindField(*metadata, "annotations");
  if (annotations == nullptr || annotations->is_null()) return out;
  if (!annotations->is_object()) {
    return absl::InvalidArgumentError(StrCat(where, ".metadata.annotations: expected an object, got ",
                                             annotations->type_name()));
  }
  for (std::string_view key : config::kPrismOwnedPodAnnotations) {
    auto it = annotations->find(key);
    if (it == annotations->end()) continue;
    if (!it->is_string()) {
      return absl::InvalidArgumentError(StrCat(where, ".metadata.annotations[\"", key,
                                               "\"]: expected a string, got ", it->type_name()));
    }
    out.emplace(std::string(key), it->get<std::string>());
  }
  return out;
}

std::string PodLabel(const json& pod, const std::string& ns) {
  const json* metadata = FindField(pod, "metadata");
  std::string name;
  if (metadata != nullptr && metadata->is_object()) {
    for (const char* field : {"name", "generateName"}) {
      const json* v = FindField(*metadata, field);
      if (v != nullptr && v->is_string() && !v->get<std::string>().empty()) {
        name = v->get<std::string>();
        if (std::string_view(field) == "generateName") name += "*";
        break;
      }
    }
  }
  // Names are bounded by the API server (253 bytes); the cut keeps a hostile review's message
  // short all the same.
  if (name.size() > 253) name = name.substr(0, 253) + "...";
  if (name.empty()) name = "(unnamed)";
  return ns.empty() ? name : StrCat(ns, "/", name);
}

std::string TrustedList(const WebhookOptions& options) {
  return options.trusted_users.empty() ? std::string("none configured")
                                       : StrJoin(options.trusted_users, ", ");
}

std::vector<std::string> GpuResources(const sched::DeviceConfig& config) {
  return {config.resource_count_name, config.resource_memory_name,
          config.resource_memory_percentage_name, config.resource_core_name};
}

// --- Device env (kDeviceEnv, kUngrantedDeviceEnv, kSliceLimitEnv) --------------------------------

template <size_t N>
bool OneOf(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

// One env entry of interest (a name in one of the lists above).
struct EnvVar {
  size_t index = 0;
  std::string name;
  std::optional<std::string> value;  // Absent: valueFrom (the webhook cannot see the value).
};

struct ContainerEnv {
  const char* list = "";  // "initContainers", "containers", "ephemeralContainers".
  size_t index = 0;
  std::string name;
  bool granted = false;  // Names one of Prism's GPU resources: its devices come from Prism.
  std::vector<EnvVar> env;
};

bool NamesResource(const json& container, const std::vector<std::string>& resources) {
  const json* res = FindField(container, "resources");
  if (res == nullptr || !res->is_object()) return false;
  for (const char* part : {"limits", "requests"}) {
    const json* m = FindField(*res, part);
    if (m == nullptr || !m->is_object()) continue;
    for (const std::string& r : resources) {
      auto it = m->find(r);
      // A quantity of 0 grants nothing: the kubelet calls no device plugin for it.
      if (it != m->end() && *it != json("0") && *it != json(0)) return true;
    }
  }
  return false;
}

// The containers of `pod`'s three lists with the env entries the device-env rules look at. The
// API server sends env as a list of objects with a string name and a string value or a
// valueFrom; anything else is an error naming the field (a review that cannot tell what a
// container sets must not let it pass). Linear in the env, which is otherwise not read.
absl::StatusOr<std::vector<ContainerEnv>> ScanEnv(const json& pod,
                                                  const std::vector<std::string>& gpu_resources,
                                                  std::string_view where) {
  std::vector<ContainerEnv> out;
  const json* spec = FindField(pod, "spec");
  if (spec == nullptr || spec->is_null()) return out;
  if (!spec->is_object()) {
    return absl::InvalidArgumentError(StrCat(where, ".spec: expected an object"));
  }
  for (const char* list : {"initContainers", "containers", "ephemeralContainers"}) {
    const json* containers = FindField(*spec, list);
    if (containers == nullptr || containers->is_null()) continue;
    if (!containers->is_array()) {
      return absl::InvalidArgumentError(StrCat(where, ".spec.", list, ": expected a list"));
    }
    for (size_t i = 0; i < containers->size(); ++i) {
      const json& c = (*containers)[i];
      const std::string at = StrCat(where, ".spec.", list, "[", i, "]");
      if (!c.is_object()) return absl::InvalidArgumentError(StrCat(at, ": expected an object"));
      ContainerEnv container;
      container.list = list;
      container.index = i;
      absl::StatusOr<std::string> name = StringMember(c, "name", at);
      if (!name.ok()) return name.status();
      // Mutating admission runs before the API server validates the name: bounded and escaped.
      container.name = absl::CHexEscape(name->substr(0, 63));
      container.granted =
          std::string_view(list) != "ephemeralContainers" && NamesResource(c, gpu_resources);
      const json* env = FindField(c, "env");
      if (env != nullptr && !env->is_null()) {
        if (!env->is_array())
          return absl::InvalidArgumentError(StrCat(at, ".env: expected a list"));
        for (size_t j = 0; j < env->size(); ++j) {
          const json& e = (*env)[j];
          const std::string eat = StrCat(at, ".env[", j, "]");
          if (!e.is_object())
            return absl::InvalidArgumentError(StrCat(eat, ": expected an object"));
          const json* n = FindField(e, "name");
          if (n == nullptr || !n->is_string()) {
            return absl::InvalidArgumentError(StrCat(eat, ".name: expected a string"));
          }
          const std::string& var = n->get_ref<const std::string&>();
          if (!OneOf(kDeviceEnv, var) && !OneOf(kUngrantedDeviceEnv, var) &&
              !OneOf(kSliceLimitEnv, var)) {
            continue;
          }
          EnvVar v{j, var, std::nullopt};
          const json* from = FindField(e, "valueFrom");
          if (from == nullptr || from->is_null()) {
            absl::StatusOr<std::string> value = StringMember(e, "value", eat);
            if (!value.ok()) return value.status();
            v.value = *std::move(value);
          }
          container.env.push_back(std::move(v));
        }
      }
      out.push_back(std::move(container));
    }
  }
  return out;
}

bool IsVoid(const EnvVar& v) {
  return v.name == "NVIDIA_VISIBLE_DEVICES" && v.value && StripWhitespace(*v.value) == "void";
}

// The entries of `c` nobody but Prism may set: kDeviceEnv (NVIDIA_VISIBLE_DEVICES=void aside) and,
// in a container Prism grants nothing, NVIDIA_DRIVER_CAPABILITIES. CUDA_VERSION: NeedsVoid.
std::vector<const EnvVar*> DeviceEnvToStrip(const ContainerEnv& c) {
  std::vector<const EnvVar*> out;
  for (const EnvVar& v : c.env) {
    if ((OneOf(kDeviceEnv, v.name) && !IsVoid(v)) ||
        (!c.granted && v.name == "NVIDIA_DRIVER_CAPABILITIES")) {
      out.push_back(&v);
    }
  }
  return out;
}

// A container Prism grants nothing that sets CUDA_VERSION with no NVIDIA_VISIBLE_DEVICES=void:
// the NVIDIA runtime takes it for a legacy CUDA image and gives it every GPU (unless the image
// sets NVIDIA_REQUIRE_CUDA, which the webhook cannot see). `stripped`: entries already removed.
bool NeedsVoid(const ContainerEnv& c, const std::vector<const EnvVar*>& stripped) {
  if (c.granted) return false;
  bool legacy = false;
  bool has_void = false;
  for (const EnvVar& v : c.env) {
    if (std::find(stripped.begin(), stripped.end(), &v) != stripped.end()) continue;
    legacy = legacy || v.name == "CUDA_VERSION";
    has_void = has_void || IsVoid(v);
  }
  return legacy && !has_void;
}

std::string EnvNames(const std::vector<const EnvVar*>& vars) {
  std::vector<std::string> names;
  for (const EnvVar* v : vars) {
    if (std::find(names.begin(), names.end(), v->name) == names.end()) names.push_back(v->name);
  }
  return StrJoin(names, ", ");
}

std::string ContainerLabel(const ContainerEnv& c) {
  const std::string_view kind = std::string_view(c.list) == "containers" ? "container"
                                : std::string_view(c.list) == "initContainers"
                                    ? "init container"
                                    : "ephemeral container";
  return StrCat(kind, " ", c.name.empty() ? "(unnamed)" : c.name);
}

// Why `c` may not start where the device-env rules apply; empty: it may.
std::string DeviceEnvProblem(const ContainerEnv& c) {
  const std::vector<const EnvVar*> strip = DeviceEnvToStrip(c);
  if (!strip.empty()) {
    return StrCat(ContainerLabel(c), " sets ", EnvNames(strip),
                  c.granted ? "; Prism's device plugin sets the devices of a GPU container"
                            : "; the NVIDIA container runtime would give it GPUs Prism did not "
                              "grant (ask for nvidia.com/gpu instead)");
  }
  if (NeedsVoid(c, strip)) {
    return StrCat(ContainerLabel(c),
                  " sets CUDA_VERSION, which makes the NVIDIA container runtime give it every GPU; "
                  "add NVIDIA_VISIBLE_DEVICES=void or remove it");
  }
  return "";
}

// Why `c` may not start where slice limits are enforced; empty: it may.
std::string SliceLimitProblem(const ContainerEnv& c) {
  for (const EnvVar& v : c.env) {
    if (!OneOf(kSliceLimitEnv, v.name)) continue;
    if (!v.value) {
      return StrCat(ContainerLabel(c), " sets ", v.name,
                    " from valueFrom; slice limits are enforced in this namespace, so it must be "
                    "a literal value");
    }
    const std::string value = AsciiLower(StripWhitespace(*v.value));
    const bool off = v.name == "CUDA_DISABLE_CONTROL"
                         ? !(value.empty() || value == "0" || value == "false" || value == "no" ||
                             value == "off")
                         : value == "disable";
    if (off) {
      return StrCat(ContainerLabel(c), " sets ", v.name, "=", "\"",
                    absl::CHexEscape(v.value->substr(0, 32)), "\"",
                    ", which turns the GPU slice limits off; they are enforced in this namespace "
                    "(label prism.io/enforce-slice-limits)");
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ServiceAccountUsers(std::string_view list) {
  std::vector<std::string> users;
  for (std::string_view entry : StrSplit(list, ',')) {
    entry = StripWhitespace(entry);
    if (entry.empty()) continue;
    std::vector<std::string_view> parts = StrSplit(entry, ':');
    auto valid = [](std::string_view part, size_t max) {
      if (part.empty() || part.size() > max) return false;
      for (char c : part) {
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) {
          return false;
        }
      }
      return true;
    };
    if (parts.size() != 2 || !valid(parts[0], 63) || !valid(parts[1], 253)) {
      return absl::InvalidArgumentError(
          StrCat("trusted service account '", entry.substr(0, 100),
                 "': expected <namespace>:<name> (lowercase letters, digits, '-', '.')"));
    }
    users.push_back(StrCat("system:serviceaccount:", parts[0], ":", parts[1]));
  }
  return users;
}

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
  // A preset node skips every scheduler, and with it the GPU accounting: only a scheduler the
  // admin trusts to account for Prism's GPUs may create such pods (it binds by setting the node).
  if (HasKey(spec, "nodeName") && spec["nodeName"].is_string() &&
      !spec["nodeName"].get<std::string>().empty() &&
      !Contains(options.trusted_schedulers, scheduler.empty() ? kDefaultScheduler : scheduler)) {
    return deny(StrCat("pod ", manifest->Key(), " sets spec.nodeName; GPU pods must be placed by ",
                       options.scheduler_name,
                       " or a trusted scheduler (remove spec.nodeName, use a nodeSelector)"));
  }
  if (!scheduler.empty() && scheduler != options.scheduler_name &&
      (scheduler != kDefaultScheduler || !options.overwrite_default_scheduler)) {
    return review;  // Another scheduler is in charge of this pod.
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
  if (options.dra_hami_claims) {
    // Its claims are allocated behind Prism's scheduling gate (AddDraGate), and the API server
    // refuses a pod created with both spec.nodeName and gates (DraAllocator::NeedsGate); without
    // the gate nothing would allocate them and the pod would wait on its node forever.
    if (HasKey(spec, "nodeName") && spec["nodeName"].is_string() &&
        !spec["nodeName"].get<std::string>().empty()) {
      return deny(StrCat("pod ", manifest->Key(),
                         " sets spec.nodeName; on this cluster its GPUs become ResourceClaims that "
                         "Prism allocates before placing the pod (remove spec.nodeName, use a "
                         "nodeSelector)"));
    }
    // After the operations above: the conversion replaces each GPU container's resources whole.
    absl::StatusOr<HamiConversion> dra =
        ConvertHamiToDra(named, *request, manifest->namespace_name, config);
    if (!dra.ok()) {
      return deny(StrCat("pod ", manifest->Key(), " cannot be served by Prism's DRA driver: ",
                         dra.status().message()));
    }
    for (json& op : dra->patch) review.patch.push_back(std::move(op));
    review.claim_templates = std::move(dra->templates);
    review.warnings.push_back(
        StrCat("prism: the pod's GPU requests became ResourceClaims from templates ",
               [&] {
                 std::vector<std::string> names;
                 for (const json& t : review.claim_templates) names.push_back(t["metadata"]["name"]);
                 return StrJoin(names, ", ");
               }(),
               " (this cluster serves GPUs through DRA)"));
  }
  return review;
}

namespace {

// ReviewPodCreate without the DRA gate (below).
PodReview ReviewPodCreateDevices(const json& pod, const std::string& ns, const std::string& user,
                                 bool mutate, const WebhookOptions& options,
                                 const sched::DeviceConfig& config);

// A pod whose claims Prism allocates waits behind Prism's scheduling gate, on Prism's scheduler
// (docs/dra-design.md §2.3, §2.4). Gates can only be set at creation, so this runs on CREATE only.
void AddDraGate(const json& pod, bool mutate, const WebhookOptions& options, PodReview& review) {
  if (!mutate || !review.allowed) return;
  // A pod whose GPU requests just became claims has no claims yet in `pod`.
  if (review.claim_templates.empty() && (!options.dra_gate || !options.dra_gate(pod))) return;
  const json& spec = pod.contains("spec") && pod["spec"].is_object() ? pod["spec"] : json::object();
  const std::string scheduler = HasKey(spec, "schedulerName") && spec["schedulerName"].is_string()
                                    ? spec["schedulerName"].get<std::string>()
                                    : "";
  if (!scheduler.empty() && scheduler != options.scheduler_name &&
      (scheduler != kDefaultScheduler || !options.overwrite_default_scheduler)) {
    review.warnings.push_back(StrCat(
        "prism: the pod's ResourceClaims use Prism's device classes but its scheduler is ",
        scheduler, "; Prism's node agent prepares only devices Prism allocated"));
    return;
  }
  bool routed = scheduler == options.scheduler_name;
  for (const json& op : review.patch) {
    routed = routed || (op.value("path", "") == "/spec/schedulerName");
  }
  if (!routed) {
    review.patch.push_back(
        json{{"op", "add"}, {"path", "/spec/schedulerName"}, {"value", options.scheduler_name}});
  }
  const json gate{{"name", config::kDraSchedulingGate}};
  if (!HasKey(spec, "schedulingGates") || !spec["schedulingGates"].is_array()) {
    review.patch.push_back(
        json{{"op", "add"}, {"path", "/spec/schedulingGates"}, {"value", json::array({gate})}});
  } else {
    for (const json& g : spec["schedulingGates"]) {
      if (g.is_object() && g.value("name", "") == config::kDraSchedulingGate) return;
    }
    review.patch.push_back(json{{"op", "add"}, {"path", "/spec/schedulingGates/-"}, {"value", gate}});
  }
  review.warnings.push_back(
      StrCat("prism: scheduling gate ", config::kDraSchedulingGate,
             " added: the pod waits until Prism has allocated its ResourceClaims"));
}

}  // namespace

PodReview ReviewPodCreate(const json& pod, const std::string& ns, const std::string& user,
                          bool mutate, const WebhookOptions& options,
                          const sched::DeviceConfig& config) {
  PodReview review = ReviewPodCreateDevices(pod, ns, user, mutate, options, config);
  if (options.dra_gate && review.allowed) {
    if (const std::string implicit = ImplicitPrismClassResource(pod); !implicit.empty()) {
      review.allowed = false;
      review.patch = json::array();
      review.message = StrCat(
          "pod ", PodLabel(pod, ns), " asks for ", implicit,
          ", which kube-scheduler would allocate itself, first fit, and Prism's node agent would "
          "not prepare; ask nvidia.com/gpu (with nvidia.com/gpumem, gpucores) or a ResourceClaim "
          "of that class instead (docs/dra.md, \"KEP-5004\")");
      return review;
    }
  }
  AddDraGate(pod, mutate, options, review);
  return review;
}

namespace {

PodReview ReviewPodCreateDevices(const json& pod, const std::string& ns, const std::string& user,
                                 bool mutate, const WebhookOptions& options,
                                 const sched::DeviceConfig& config) {
  PodReview review;
  auto deny = [&review](std::string message) {
    review.allowed = false;
    review.message = std::move(message);
    return review;
  };
  absl::StatusOr<std::map<std::string, std::string, std::less<>>> owned =
      OwnedAnnotations(pod, "AdmissionReview.request.object");
  if (!owned.ok()) return deny(std::string(owned.status().message()));
  if (Contains(options.trusted_users, user)) return ReviewPod(pod, ns, mutate, options, config);
  const std::string label = PodLabel(pod, ns);
  const std::string who = user.empty() ? "an unnamed user" : user;
  // The pod as it will be stored after this webhook's own removals, which the rest of the
  // review sees, and those removals.
  json stored = pod;
  json patch = json::array();
  std::vector<std::string> warnings;
  if (!owned->empty()) {
    std::vector<std::string> keys;
    for (const auto& [key, value] : *owned) keys.push_back(key);
    if (!mutate) {
      return deny(StrCat("pod ", label, ": annotation ", StrJoin(keys, ", "),
                         " is written only by Prism (", TrustedList(options), "), not by ", who,
                         "; remove it"));
    }
    // Stripped, not refused: a pod re-created from `kubectl get -o yaml` of a scheduled one
    // carries them in good faith.
    for (const std::string& key : keys) {
      stored["metadata"]["annotations"].erase(key);
      patch.push_back(
          json{{"op", "remove"}, {"path", StrCat("/metadata/annotations/", EscapePointer(key))}});
    }
    warnings.push_back(StrCat("prism: removed annotation ", StrJoin(keys, ", "),
                              " (written only by Prism when it places the pod)"));
  }
  absl::StatusOr<std::vector<ContainerEnv>> containers =
      ScanEnv(pod, GpuResources(config), "AdmissionReview.request.object");
  if (!containers.ok()) return deny(std::string(containers.status().message()));
  for (const ContainerEnv& c : *containers) {
    if (options.enforce_slice_limits) {
      if (std::string problem = SliceLimitProblem(c); !problem.empty()) {
        return deny(StrCat("pod ", label, ": ", problem));
      }
    }
    if (!mutate) {
      if (std::string problem = DeviceEnvProblem(c); !problem.empty()) {
        return deny(StrCat("pod ", label, ": ", problem, " (", who, ")"));
      }
      continue;
    }
    // Stripped, not refused, as the annotations: images and manifests written for the NVIDIA
    // device plugin set them in good faith. Highest index first, so each path stays valid.
    const std::vector<const EnvVar*> strip = DeviceEnvToStrip(c);
    const bool add_void = NeedsVoid(c, strip);
    if (strip.empty() && !add_void) continue;
    const std::string base = StrCat("/spec/", c.list, "/", c.index, "/env");
    json& env = stored["spec"][c.list][c.index]["env"];
    for (auto it = strip.rbegin(); it != strip.rend(); ++it) {
      env.erase((*it)->index);
      patch.push_back(json{{"op", "remove"}, {"path", StrCat(base, "/", (*it)->index)}});
    }
    if (add_void) {
      const json entry{{"name", "NVIDIA_VISIBLE_DEVICES"}, {"value", "void"}};
      env.push_back(entry);
      patch.push_back(json{{"op", "add"}, {"path", base + "/-"}, {"value", entry}});
    }
    std::vector<std::string> what;
    if (!strip.empty()) what.push_back(StrCat("removed ", EnvNames(strip)));
    if (add_void) what.push_back("set NVIDIA_VISIBLE_DEVICES=void beside CUDA_VERSION");
    warnings.push_back(StrCat("prism: ", ContainerLabel(c), ": ", StrJoin(what, ", "),
                              c.granted ? " (Prism's device plugin sets its devices)"
                                        : " (the NVIDIA runtime would give it GPUs Prism did "
                                          "not grant)"));
  }
  review = ReviewPod(stored, ns, mutate, options, config);
  if (!review.allowed) return review;
  for (json& op : review.patch) patch.push_back(std::move(op));
  review.patch = std::move(patch);
  review.warnings.insert(review.warnings.begin(), warnings.begin(), warnings.end());
  return review;
}

}  // namespace

PodReview ReviewPodUpdate(const json& pod, const json* old_pod, const std::string& ns,
                          const std::string& user, const WebhookOptions& options) {
  PodReview review;
  auto deny = [&review](std::string message) {
    review.allowed = false;
    review.message = std::move(message);
    return review;
  };
  if (old_pod == nullptr || !old_pod->is_object()) {
    // Every UPDATE carries the stored object; without it nothing says what changed.
    return deny("AdmissionReview.request.oldObject: missing on an UPDATE");
  }
  absl::StatusOr<std::map<std::string, std::string, std::less<>>> now =
      OwnedAnnotations(pod, "AdmissionReview.request.object");
  if (!now.ok()) return deny(std::string(now.status().message()));
  absl::StatusOr<std::map<std::string, std::string, std::less<>>> before =
      OwnedAnnotations(*old_pod, "AdmissionReview.request.oldObject");
  if (!before.ok()) return deny(std::string(before.status().message()));
  if (Contains(options.trusted_users, user)) return review;
  const std::string who = user.empty() ? "an unnamed user" : user;
  if (*now != *before) {
    std::vector<std::string> changes;
    for (std::string_view key : config::kPrismOwnedPodAnnotations) {
      auto a = before->find(key);
      auto b = now->find(key);
      if (a == before->end() && b == now->end()) continue;
      if (a == before->end()) {
        changes.push_back(StrCat("set ", key));
      } else if (b == now->end()) {
        changes.push_back(StrCat("removed ", key));
      } else if (a->second != b->second) {
        changes.push_back(StrCat("changed ", key));
      }
    }
    return deny(StrCat("pod ", PodLabel(pod, ns), ": ", who, " ", StrJoin(changes, ", "),
                       "; these annotations are written only by Prism (", TrustedList(options),
                       ")"));
  }
  // The one thing of a running pod's env an update can add: ephemeral containers
  // (pods/ephemeralcontainers). Those already there were judged when they were added.
  absl::StatusOr<std::vector<ContainerEnv>> added =
      ScanEnv(pod, {}, "AdmissionReview.request.object");
  if (!added.ok()) return deny(std::string(added.status().message()));
  absl::StatusOr<std::vector<ContainerEnv>> had =
      ScanEnv(*old_pod, {}, "AdmissionReview.request.oldObject");
  if (!had.ok()) return deny(std::string(had.status().message()));
  for (const ContainerEnv& c : *added) {
    if (std::string_view(c.list) != "ephemeralContainers") continue;
    bool known = false;
    for (const ContainerEnv& o : *had) {
      known = known || (std::string_view(o.list) == c.list && o.name == c.name);
    }
    if (known) continue;
    std::string problem = options.enforce_slice_limits ? SliceLimitProblem(c) : "";
    if (problem.empty()) problem = DeviceEnvProblem(c);
    if (!problem.empty())
      return deny(StrCat("pod ", PodLabel(pod, ns), ": ", problem, " (", who, ")"));
  }
  return review;
}

namespace {

// AdmissionReview.request.dryRun: true.
bool IsDryRun(const json& request) {
  const json* dry = FindField(request, "dryRun");
  return dry != nullptr && dry->is_boolean() && dry->get<bool>();
}

}  // namespace

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
  const bool create = *operation == "CREATE" || operation->empty();
  if (*kind_name != "Pod" || (!create && *operation != "UPDATE")) {
    out["response"] = json{{"uid", *uid}, {"allowed", true}};
    return out;
  }
  const json* object = FindField(*request, "object");
  if (object == nullptr || !object->is_object()) {
    out["response"] = Deny(*uid, "AdmissionReview.request.object is not a Pod");
    return out;
  }
  std::string user;
  if (const json* info = FindField(*request, "userInfo"); info != nullptr && !info->is_null()) {
    absl::StatusOr<std::string> name =
        info->is_object() ? StringMember(*info, "username", "AdmissionReview.request.userInfo")
                          : absl::InvalidArgumentError(StrCat(
                                "AdmissionReview.request.userInfo: expected an object, got ",
                                info->type_name()));
    if (!name.ok()) {
      out["response"] = Deny(*uid, std::string(name.status().message()));
      return out;
    }
    user = *std::move(name);
  }
  const PodReview result =
      create ? ReviewPodCreate(*object, *ns, user, mutate, options, config)
             : ReviewPodUpdate(*object, FindField(*request, "oldObject"), *ns, user, options);
  if (!result.allowed) {
    out["response"] = Deny(*uid, result.message);
    return out;
  }
  // The templates exist before the pod does (the resourceclaim controller makes its claims from
  // them), except for a dry run, which must change nothing (sideEffects: NoneOnDryRun).
  if (!result.claim_templates.empty() && !IsDryRun(*request)) {
    absl::Status made = options.ensure_claim_templates
                            ? options.ensure_claim_templates(result.claim_templates)
                            : absl::FailedPreconditionError("no API client to create them with");
    if (!made.ok()) {
      out["response"] = Deny(*uid, StrCat("prism: cannot create the pod's ResourceClaimTemplates: ",
                                          made.message()));
      return out;
    }
  }
  json response{{"uid", *uid}, {"allowed", true}};
  if (!result.patch.empty()) {
    response["patchType"] = "JSONPatch";
    response["patch"] = absl::Base64Escape(result.patch.dump());
  }
  if (!result.warnings.empty()) response["warnings"] = result.warnings;
  out["response"] = std::move(response);
  return out;
}

}  // namespace prism::extender
