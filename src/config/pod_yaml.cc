#include "config/pod_yaml.h"

#include "base/status_macros.h"
#include "base/strings.h"
#include "config/yaml_util.h"

namespace prism::config {
namespace {

absl::StatusOr<std::map<std::string, std::string>> StringMap(const YAML::Node& node,
                                                             const std::string& path) {
  std::map<std::string, std::string> out;
  if (!node || node.IsNull()) return out;
  if (!node.IsMap()) return absl::InvalidArgumentError(StrCat(path, ": expected a map"));
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string key = it->first.Scalar();
    ASSIGN_OR_RETURN(out[key], ReadString(it->second, StrCat(path, ".", key)));
  }
  return out;
}

// The literal values of a container's env, with pod_json.h's rules: valueFrom entries are left
// out (and drop an earlier literal of their name) and a repeated name keeps its last value.
absl::StatusOr<std::map<std::string, std::string>> Env(const YAML::Node& list,
                                                       const std::string& path) {
  std::map<std::string, std::string> out;
  if (!list || list.IsNull()) return out;
  if (!list.IsSequence()) return absl::InvalidArgumentError(StrCat(path, ": expected a list"));
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string epath = StrCat(path, "[", i, "]");
    const YAML::Node e = list[i];
    if (!e.IsMap()) return absl::InvalidArgumentError(StrCat(epath, ": expected a map"));
    if (!e["name"] || e["name"].IsNull()) {
      return absl::InvalidArgumentError(StrCat(epath, ".name: missing"));
    }
    ASSIGN_OR_RETURN(const std::string name, ReadString(e["name"], StrCat(epath, ".name")));
    if (name.empty()) return absl::InvalidArgumentError(StrCat(epath, ".name: missing"));
    if (e["valueFrom"] && !e["valueFrom"].IsNull()) {
      out.erase(name);  // Unknown here; an earlier literal of the name no longer holds.
      continue;
    }
    const YAML::Node value = e["value"];
    out[name] = "";
    if (value && !value.IsNull()) {
      ASSIGN_OR_RETURN(out[name], ReadString(value, StrCat(epath, ".value")));
    }
  }
  return out;
}

absl::Status Containers(const YAML::Node& list, bool init, const std::string& path,
                        PodManifest& pod) {
  if (!list || list.IsNull()) return absl::OkStatus();
  if (!list.IsSequence()) return absl::InvalidArgumentError(StrCat(path, ": expected a list"));
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string cpath = StrCat(path, "[", i, "]");
    const YAML::Node c = list[i];
    if (!c.IsMap()) return absl::InvalidArgumentError(StrCat(cpath, ": expected a map"));
    ContainerManifest cm;
    cm.init = init;
    if (c["name"]) {
      ASSIGN_OR_RETURN(cm.name, ReadName(c["name"], StrCat(cpath, ".name")));
    } else {
      cm.name = StrCat(init ? "init-" : "container-", i);
    }
    if (const YAML::Node policy = c["restartPolicy"]; policy && !policy.IsNull()) {
      ASSIGN_OR_RETURN(const std::string p, ReadString(policy, StrCat(cpath, ".restartPolicy")));
      cm.restartable = init && p == "Always";
    }
    const YAML::Node res = c["resources"];
    if (res && !res.IsNull()) {
      if (!res.IsMap())
        return absl::InvalidArgumentError(StrCat(cpath, ".resources: expected a map"));
      ASSIGN_OR_RETURN(cm.requests,
                       StringMap(res["requests"], StrCat(cpath, ".resources.requests")));
      ASSIGN_OR_RETURN(cm.limits, StringMap(res["limits"], StrCat(cpath, ".resources.limits")));
    }
    ASSIGN_OR_RETURN(cm.env, Env(c["env"], StrCat(cpath, ".env")));
    pod.containers.push_back(std::move(cm));
  }
  return absl::OkStatus();
}

absl::Status Collect(const YAML::Node& doc, std::string_view where, std::vector<PodManifest>& out) {
  if (doc.IsMap() && doc["kind"] && doc["kind"].IsScalar() && doc["kind"].Scalar() == "List") {
    const YAML::Node items = doc["items"];
    if (!items || !items.IsSequence()) {
      return absl::InvalidArgumentError(StrCat(where, ": List has no items"));
    }
    for (size_t i = 0; i < items.size(); ++i) {
      ASSIGN_OR_RETURN(PodManifest pod, ParsePodNode(items[i], StrCat(where, " items[", i, "]")));
      out.push_back(std::move(pod));
    }
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(PodManifest pod, ParsePodNode(doc, where));
  out.push_back(std::move(pod));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PodManifest> ParsePodNode(const YAML::Node& node, std::string_view where) {
  try {
    if (!node.IsMap()) return absl::InvalidArgumentError(StrCat(where, ": not a Pod manifest"));
    const YAML::Node kind = node["kind"];
    if (!kind || !kind.IsScalar()) {
      return absl::InvalidArgumentError(StrCat(where, ": no kind (expected kind: Pod)"));
    }
    if (kind.Scalar() != "Pod") {
      return absl::InvalidArgumentError(
          StrCat(where, ": is a ", kind.Scalar(), ", not a Pod (use the pod template's Pod)"));
    }
    PodManifest pod;
    const YAML::Node meta = node["metadata"];
    if (!meta || !meta.IsMap()) return absl::InvalidArgumentError(StrCat(where, ": no metadata"));
    if (!meta["name"]) return absl::InvalidArgumentError(StrCat(where, ": no metadata.name"));
    ASSIGN_OR_RETURN(pod.name, ReadName(meta["name"], StrCat(where, ": metadata.name")));
    if (meta["namespace"]) {
      ASSIGN_OR_RETURN(const std::string ns,
                       ReadString(meta["namespace"], StrCat(where, ": metadata.namespace")));
      // Empty means the default namespace, as in the API server (and pod_json.h).
      if (!ns.empty()) {
        RETURN_IF_ERROR(ValidateName(ns, StrCat(where, ": metadata.namespace")));
        pod.namespace_name = ns;
      }
    }
    if (meta["uid"]) {
      ASSIGN_OR_RETURN(pod.uid, ReadString(meta["uid"], StrCat(where, ": metadata.uid")));
    }
    ASSIGN_OR_RETURN(pod.annotations,
                     StringMap(meta["annotations"], StrCat(where, ": metadata.annotations")));
    ASSIGN_OR_RETURN(pod.labels, StringMap(meta["labels"], StrCat(where, ": metadata.labels")));
    const YAML::Node spec = node["spec"];
    if (!spec || !spec.IsMap()) return absl::InvalidArgumentError(StrCat(where, ": no spec"));
    if (spec["nodeName"]) {
      ASSIGN_OR_RETURN(pod.node_name,
                       ReadString(spec["nodeName"], StrCat(where, ": spec.nodeName")));
      if (!pod.node_name.empty()) {
        RETURN_IF_ERROR(ValidateName(pod.node_name, StrCat(where, ": spec.nodeName")));
      }
    }
    const std::string prefix = StrCat(where, ": spec.");
    RETURN_IF_ERROR(Containers(spec["initContainers"], true, prefix + "initContainers", pod));
    RETURN_IF_ERROR(Containers(spec["containers"], false, prefix + "containers", pod));
    bool any_regular = false;
    for (const ContainerManifest& c : pod.containers) any_regular = any_regular || !c.init;
    if (!any_regular)
      return absl::InvalidArgumentError(StrCat(where, ": spec.containers is empty"));
    return pod;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(where, ": ", e.what()));
  }
}

absl::StatusOr<std::vector<PodManifest>> ParsePodYaml(std::string_view text,
                                                      std::string_view where) {
  ASSIGN_OR_RETURN(std::vector<YAML::Node> docs, LoadAllYaml(text, where));
  std::vector<PodManifest> out;
  for (size_t i = 0; i < docs.size(); ++i) {
    RETURN_IF_ERROR(Collect(
        docs[i], docs.size() > 1 ? StrCat(where, " document ", i + 1) : std::string(where), out));
  }
  if (out.empty()) return absl::InvalidArgumentError(StrCat(where, ": no Pod in it"));
  return out;
}

}  // namespace prism::config
