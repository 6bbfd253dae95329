#include "k8s/objects.h"

#include "base/strings.h"

namespace prism::k8s {

absl::StatusOr<Json> ParseJson(std::string_view text, std::string_view what) {
  // The callback-less, non-throwing parse marks failure by returning a discarded value; a second
  // throwing parse inside try/catch recovers the parser's message for the error.
  Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_discarded()) return parsed;
  std::string detail = "not valid JSON";
  try {
    Json unused = Json::parse(text);
    (void)unused;
  } catch (const Json::exception& e) {
    detail = e.what();
  }
  std::string excerpt(text.substr(0, 80));
  return absl::InvalidArgumentError(
      StrCat("malformed JSON in ", what, ": ", detail, " (starts with '", excerpt, "')"));
}

const Json* Find(const Json& obj, std::initializer_list<std::string_view> path) {
  const Json* node = &obj;
  for (std::string_view key : path) {
    if (!node->is_object()) return nullptr;
    auto it = node->find(key);
    if (it == node->end()) return nullptr;
    node = &*it;
  }
  return node;
}

std::string GetString(const Json& obj, std::initializer_list<std::string_view> path) {
  const Json* node = Find(obj, path);
  if (node == nullptr || !node->is_string()) return "";
  return node->get<std::string>();
}

std::optional<int64_t> GetInt(const Json& obj, std::initializer_list<std::string_view> path) {
  const Json* node = Find(obj, path);
  if (node == nullptr || !node->is_number_integer()) return std::nullopt;
  return node->get<int64_t>();
}

std::string Name(const Json& obj) { return GetString(obj, {"metadata", "name"}); }
std::string Namespace(const Json& obj) { return GetString(obj, {"metadata", "namespace"}); }
std::string Uid(const Json& obj) { return GetString(obj, {"metadata", "uid"}); }
std::string ResourceVersion(const Json& obj) {
  return GetString(obj, {"metadata", "resourceVersion"});
}

std::string ObjectKey(std::string_view ns, std::string_view name) {
  if (ns.empty()) return std::string(name);
  return StrCat(ns, "/", name);
}

std::string ObjectKey(const Json& obj) { return ObjectKey(Namespace(obj), Name(obj)); }

namespace {
std::map<std::string, std::string> StringMap(const Json& obj, std::string_view field) {
  std::map<std::string, std::string> out;
  const Json* node = Find(obj, {"metadata", field});
  if (node == nullptr || !node->is_object()) return out;
  for (auto it = node->begin(); it != node->end(); ++it) {
    if (it.value().is_string()) out[it.key()] = it.value().get<std::string>();
  }
  return out;
}
}  // namespace

std::map<std::string, std::string> Labels(const Json& obj) { return StringMap(obj, "labels"); }
std::map<std::string, std::string> Annotations(const Json& obj) {
  return StringMap(obj, "annotations");
}

std::optional<std::string> Annotation(const Json& obj, std::string_view key) {
  const Json* node = Find(obj, {"metadata", "annotations", key});
  if (node == nullptr || !node->is_string()) return std::nullopt;
  return node->get<std::string>();
}

std::string PodNodeName(const Json& pod) { return GetString(pod, {"spec", "nodeName"}); }
std::string PodSchedulerName(const Json& pod) { return GetString(pod, {"spec", "schedulerName"}); }
std::string PodPhase(const Json& pod) { return GetString(pod, {"status", "phase"}); }

std::string FormatTimestamp(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

std::string FormatMicroTimestamp(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

absl::StatusOr<absl::Time> ParseTimestamp(std::string_view text) {
  absl::Time t;
  std::string err;
  if (absl::ParseTime(absl::RFC3339_full, std::string(text), &t, &err)) return t;
  return absl::InvalidArgumentError(StrCat("invalid RFC 3339 time '", text, "': ", err));
}

ObjectReference ReferenceTo(const Json& obj, std::string_view kind, std::string_view api_version) {
  ObjectReference ref;
  ref.kind = GetString(obj, {"kind"});
  if (ref.kind.empty()) ref.kind = std::string(kind);
  ref.api_version = GetString(obj, {"apiVersion"});
  if (ref.api_version.empty()) ref.api_version = std::string(api_version);
  ref.namespace_ = Namespace(obj);
  ref.name = Name(obj);
  ref.uid = Uid(obj);
  ref.resource_version = ResourceVersion(obj);
  return ref;
}

Json ToJson(const ObjectReference& ref) {
  Json out = Json::object();
  if (!ref.kind.empty()) out["kind"] = ref.kind;
  if (!ref.api_version.empty()) out["apiVersion"] = ref.api_version;
  if (!ref.namespace_.empty()) out["namespace"] = ref.namespace_;
  if (!ref.name.empty()) out["name"] = ref.name;
  if (!ref.uid.empty()) out["uid"] = ref.uid;
  if (!ref.resource_version.empty()) out["resourceVersion"] = ref.resource_version;
  return out;
}

Json MakeBinding(std::string_view ns, std::string_view pod_name, std::string_view pod_uid,
                 std::string_view node_name,
                 const std::map<std::string, std::string>& annotations) {
  Json metadata = {{"name", pod_name}, {"namespace", ns}};
  if (!pod_uid.empty()) metadata["uid"] = pod_uid;
  if (!annotations.empty()) metadata["annotations"] = annotations;
  return Json{{"apiVersion", "v1"},
              {"kind", "Binding"},
              {"metadata", metadata},
              {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node_name}}}};
}

absl::StatusOr<LeaseSpec> LeaseSpecFromJson(const Json& lease) {
  LeaseSpec spec;
  spec.holder_identity = GetString(lease, {"spec", "holderIdentity"});
  spec.lease_duration_seconds = GetInt(lease, {"spec", "leaseDurationSeconds"}).value_or(0);
  spec.lease_transitions = GetInt(lease, {"spec", "leaseTransitions"}).value_or(0);
  for (auto [field, target] :
       {std::pair{"acquireTime", &spec.acquire_time}, std::pair{"renewTime", &spec.renew_time}}) {
    std::string text = GetString(lease, {"spec", field});
    if (text.empty()) continue;
    auto t = ParseTimestamp(text);
    if (!t.ok()) {
      return absl::InvalidArgumentError(
          StrCat("lease ", Name(lease), " spec.", field, ": ", t.status().message()));
    }
    *target = *t;
  }
  return spec;
}

Json LeaseSpecToJson(const LeaseSpec& spec) {
  Json out = Json::object();
  // holderIdentity is written even when empty: an empty holder is how a lease is released.
  out["holderIdentity"] = spec.holder_identity;
  out["leaseDurationSeconds"] = spec.lease_duration_seconds;
  if (spec.acquire_time) out["acquireTime"] = FormatMicroTimestamp(*spec.acquire_time);
  if (spec.renew_time) out["renewTime"] = FormatMicroTimestamp(*spec.renew_time);
  out["leaseTransitions"] = spec.lease_transitions;
  return out;
}

}  // namespace prism::k8s
