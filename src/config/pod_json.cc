#include "config/pod_json.h"

#include <cmath>
#include <string>
#include <string_view>
#include <utility>

#include "base/status_macros.h"
#include "base/strings.h"
#include "config/yaml_util.h"

namespace prism::config {
namespace {

using nlohmann::json;

// Errors name the pod once its name is read; `prefix_` is "pod <ns>/<name>: " from then on.
class Reader {
 public:
  absl::Status Error(std::string_view field, std::string_view problem) const {
    return absl::InvalidArgumentError(StrCat(prefix_, field, ": ", problem));
  }
  absl::Status TypeError(std::string_view field, std::string_view expected, const json& v) const {
    return Error(field, StrCat("expected ", expected, ", got ", v.type_name()));
  }
  void Name(const PodManifest& pod) { prefix_ = StrCat("pod ", pod.Key(), ": "); }

  // The member `key` of `object`, nullptr when absent or null (Go decodes null as absent).
  static const json* Member(const json& object, std::string_view key) {
    auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }

  absl::StatusOr<std::string> String(const json& object, std::string_view key,
                                     std::string_view field) const {
    const json* v = Member(object, key);
    if (v == nullptr) return std::string();
    if (!v->is_string()) return TypeError(field, "a string", *v);
    return v->get<std::string>();
  }

  // An object member that must itself be an object when present.
  absl::StatusOr<const json*> Object(const json& object, std::string_view key,
                                     std::string_view field) const {
    const json* v = Member(object, key);
    if (v != nullptr && !v->is_object()) return TypeError(field, "an object", *v);
    return v;
  }

  // metadata.annotations / labels: string values, keys and values together at most `max_bytes`.
  absl::StatusOr<std::map<std::string, std::string>> StringMap(const json& metadata,
                                                               std::string_view key,
                                                               size_t max_bytes) const {
    const std::string field = StrCat("metadata.", key);
    ASSIGN_OR_RETURN(const json* object, Object(metadata, key, field));
    std::map<std::string, std::string> out;
    if (object == nullptr) return out;
    size_t bytes = 0;
    for (auto it = object->begin(); it != object->end(); ++it) {
      if (!it->is_string()) return TypeError(StrCat(field, ".", it.key()), "a string", *it);
      const std::string& value = it->get_ref<const std::string&>();
      bytes += it.key().size() + value.size();
      if (bytes > max_bytes) {
        return Error(field, StrCat("more than ", max_bytes, " bytes"));
      }
      out.emplace(it.key(), value);
    }
    return out;
  }

  // resources.requests / limits: resource name -> quantity text. The API server writes
  // quantities as strings; hand-written JSON may use numbers, which keep their JSON spelling.
  absl::StatusOr<std::map<std::string, std::string>> Quantities(const json& resources,
                                                                std::string_view key,
                                                                const std::string& where) const {
    const std::string field = StrCat(where, ".", key);
    ASSIGN_OR_RETURN(const json* object, Object(resources, key, field));
    std::map<std::string, std::string> out;
    if (object == nullptr) return out;
    if (object->size() > kMaxContainerResources) {
      return Error(field, StrCat(object->size(), " resources, more than ", kMaxContainerResources));
    }
    for (auto it = object->begin(); it != object->end(); ++it) {
      const std::string qfield = StrCat(field, ".", it.key());
      if (it.key().empty() || it.key().size() > kMaxQualifiedNameBytes) {
        return Error(qfield, StrCat("a resource name is 1..", kMaxQualifiedNameBytes, " bytes"));
      }
      std::string text;
      if (it->is_string()) {
        text = it->get<std::string>();
      } else if (it->is_number()) {
        // dump() spells integers exactly (unsigned ones beyond int64 included); a float that is
        // not finite would be spelled "null".
        if (it->is_number_float() && !std::isfinite(it->get<double>())) {
          return Error(qfield, "expected a quantity, got a number that is not finite");
        }
        text = it->dump();
      } else {
        return TypeError(qfield, "a quantity", *it);
      }
      if (text.size() > kMaxQuantityBytes) {
        return Error(qfield,
                     StrCat(text.size(), " bytes, more than a quantity's ", kMaxQuantityBytes));
      }
      out.emplace(it.key(), std::move(text));
    }
    return out;
  }

  absl::StatusOr<std::map<std::string, std::string>> Env(const json& container,
                                                         const std::string& where) const {
    const std::string field = where + ".env";
    std::map<std::string, std::string> out;
    const json* env = Member(container, "env");
    if (env == nullptr) return out;
    if (!env->is_array()) return TypeError(field, "an array", *env);
    if (env->size() > kMaxContainerEnv) {
      return Error(field, StrCat(env->size(), " entries, more than ", kMaxContainerEnv));
    }
    for (size_t i = 0; i < env->size(); ++i) {
      const json& e = (*env)[i];
      const std::string efield = StrCat(field, "[", i, "]");
      if (!e.is_object()) return TypeError(efield, "an object", e);
      ASSIGN_OR_RETURN(std::string name, String(e, "name", efield + ".name"));
      if (name.empty()) return Error(efield + ".name", "missing");
      if (Member(e, "valueFrom") != nullptr) {
        // Resolved by the kubelet from objects Prism does not read: the value is unknown, and
        // an earlier literal of the same name no longer holds (the last entry wins).
        out.erase(name);
        continue;
      }
      ASSIGN_OR_RETURN(out[name], String(e, "value", efield + ".value"));
    }
    return out;
  }

  absl::Status Containers(const json& spec, std::string_view key, bool init, PodManifest& pod) {
    const json* list = Member(spec, key);
    const std::string field = StrCat("spec.", key);
    if (list == nullptr) return absl::OkStatus();
    if (!list->is_array()) return TypeError(field, "an array", *list);
    if (pod.containers.size() + list->size() > kMaxPodContainers) {
      return Error(field, StrCat("more than ", kMaxPodContainers, " containers in the pod"));
    }
    for (size_t i = 0; i < list->size(); ++i) {
      const json& c = (*list)[i];
      const std::string where = StrCat(field, "[", i, "]");
      if (!c.is_object()) return TypeError(where, "an object", c);
      ContainerManifest container;
      container.init = init;
      if (Member(c, "name") == nullptr) return Error(where + ".name", "missing");
      ASSIGN_OR_RETURN(container.name, String(c, "name", where + ".name"));
      RETURN_IF_ERROR(Prefixed(ValidateName(container.name, where + ".name")));
      ASSIGN_OR_RETURN(const std::string policy,
                       String(c, "restartPolicy", where + ".restartPolicy"));
      container.restartable = init && policy == "Always";
      ASSIGN_OR_RETURN(const json* resources, Object(c, "resources", where + ".resources"));
      if (resources != nullptr) {
        ASSIGN_OR_RETURN(container.requests,
                         Quantities(*resources, "requests", where + ".resources"));
        ASSIGN_OR_RETURN(container.limits, Quantities(*resources, "limits", where + ".resources"));
      }
      ASSIGN_OR_RETURN(container.env, Env(c, where));
      pod.containers.push_back(std::move(container));
    }
    return absl::OkStatus();
  }

  // A status from a shared helper (ValidateName), with the pod named in front.
  absl::Status Prefixed(const absl::Status& s) const {
    if (s.ok() || prefix_.empty()) return s;
    return absl::Status(s.code(), StrCat(prefix_, s.message()));
  }

 private:
  std::string prefix_ = "pod: ";
};

// Go's encoding/json: the exact key, else the first that matches ignoring ASCII case.
const json* FoldedMember(const json& object, std::string_view key) {
  if (auto it = object.find(key); it != object.end()) return it->is_null() ? nullptr : &*it;
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (EqualsIgnoreAsciiCase(it.key(), key)) return it->is_null() ? nullptr : &*it;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<PodManifest> PodManifestFromJson(const json& pod) {
  Reader r;
  if (!pod.is_object()) return r.TypeError("pod", "an object", pod);
  const json* metadata = FoldedMember(pod, "metadata");
  if (metadata == nullptr) return r.Error("metadata", "missing");
  if (!metadata->is_object()) return r.TypeError("metadata", "an object", *metadata);
  PodManifest m;
  if (r.Member(*metadata, "name") == nullptr) return r.Error("metadata.name", "missing");
  ASSIGN_OR_RETURN(m.name, r.String(*metadata, "name", "metadata.name"));
  RETURN_IF_ERROR(ValidateName(m.name, "pod: metadata.name"));
  ASSIGN_OR_RETURN(std::string ns, r.String(*metadata, "namespace", "metadata.namespace"));
  if (!ns.empty()) {
    RETURN_IF_ERROR(ValidateName(ns, StrCat("pod ", m.name, ": metadata.namespace")));
    m.namespace_name = std::move(ns);
  }
  r.Name(m);
  ASSIGN_OR_RETURN(m.uid, r.String(*metadata, "uid", "metadata.uid"));
  if (m.uid.size() > 253) return r.Error("metadata.uid", "more than 253 bytes");
  ASSIGN_OR_RETURN(m.annotations, r.StringMap(*metadata, "annotations", kMaxPodAnnotationBytes));
  ASSIGN_OR_RETURN(m.labels, r.StringMap(*metadata, "labels", kMaxPodLabelBytes));
  const json* spec = FoldedMember(pod, "spec");
  if (spec == nullptr) return r.Error("spec", "missing");
  if (!spec->is_object()) return r.TypeError("spec", "an object", *spec);
  ASSIGN_OR_RETURN(m.node_name, r.String(*spec, "nodeName", "spec.nodeName"));
  if (!m.node_name.empty()) RETURN_IF_ERROR(r.Prefixed(ValidateName(m.node_name, "spec.nodeName")));
  RETURN_IF_ERROR(r.Containers(*spec, "initContainers", /*init=*/true, m));
  RETURN_IF_ERROR(r.Containers(*spec, "containers", /*init=*/false, m));
  bool any_regular = false;
  for (const ContainerManifest& c : m.containers) any_regular = any_regular || !c.init;
  if (!any_regular) return r.Error("spec.containers", "empty (a pod has at least one)");
  return m;
}

}  // namespace prism::config
