// src/k8s/objects.h: small typed helpers over Kubernetes objects held as nlohmann::json.
//
// Prism reads and writes only a few fields of a few kinds, so objects stay JSON (unknown fields
// survive a read-modify-write) and these helpers read the common fields without throwing: a
// missing or mistyped field reads as empty. Builders produce the exact wire shape of Binding,
// Event and Lease. Pure; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace prism::k8s {

using Json = nlohmann::json;

// Parses `text` without throwing; InvalidArgument naming `what` and the parser's complaint if it
// is not JSON.
absl::StatusOr<Json> ParseJson(std::string_view text, std::string_view what);

// The string at `path` (e.g. {"metadata", "name"}), or "" if absent or not a string.
std::string GetString(const Json& obj, std::initializer_list<std::string_view> path);
// The integer at `path`, or nullopt if absent or not an integer.
std::optional<int64_t> GetInt(const Json& obj, std::initializer_list<std::string_view> path);
// The node at `path`, or nullptr.
const Json* Find(const Json& obj, std::initializer_list<std::string_view> path);

std::string Name(const Json& obj);
std::string Namespace(const Json& obj);
std::string Uid(const Json& obj);
std::string ResourceVersion(const Json& obj);
// "namespace/name" for namespaced objects, "name" for cluster-scoped ones (client-go's key).
std::string ObjectKey(const Json& obj);
std::string ObjectKey(std::string_view ns, std::string_view name);
// metadata.labels / metadata.annotations as a map; non-string values are skipped.
std::map<std::string, std::string> Labels(const Json& obj);
std::map<std::string, std::string> Annotations(const Json& obj);
// One annotation, or nullopt.
std::optional<std::string> Annotation(const Json& obj, std::string_view key);

// Pod fields Prism routes on.
std::string PodNodeName(const Json& pod);
std::string PodSchedulerName(const Json& pod);
std::string PodPhase(const Json& pod);

// RFC 3339 with second precision, as metav1.Time ("2024-05-01T10:00:00Z").
std::string FormatTimestamp(absl::Time t);
// RFC 3339 with microseconds, as metav1.MicroTime ("2024-05-01T10:00:00.000000Z").
std::string FormatMicroTimestamp(absl::Time t);
// Parses either form (any RFC 3339 offset); InvalidArgument otherwise.
absl::StatusOr<absl::Time> ParseTimestamp(std::string_view text);

// A reference to an object (Event.involvedObject).
struct ObjectReference {
  std::string kind;
  std::string api_version;
  std::string namespace_;
  std::string name;
  std::string uid;
  std::string resource_version;
};
// Reference to `obj`; `kind`/`api_version` fill in when the object lacks them (list items do).
ObjectReference ReferenceTo(const Json& obj, std::string_view kind, std::string_view api_version);
Json ToJson(const ObjectReference& ref);

// A v1 Binding for POST pods/{name}/binding. `pod_uid` (if not empty) is a precondition: the API
// server rejects the binding if the pod was recreated under the same name. `annotations` are
// copied onto the pod by the API server atomically with the bind.
Json MakeBinding(std::string_view ns, std::string_view pod_name, std::string_view pod_uid,
                 std::string_view node_name,
                 const std::map<std::string, std::string>& annotations = {});

// coordination.k8s.io/v1 LeaseSpec.
struct LeaseSpec {
  std::string holder_identity;
  int64_t lease_duration_seconds = 0;
  std::optional<absl::Time> acquire_time;
  std::optional<absl::Time> renew_time;
  int64_t lease_transitions = 0;
  bool operator==(const LeaseSpec&) const = default;
};
// Reads `lease.spec`; InvalidArgument if a time field does not parse.
absl::StatusOr<LeaseSpec> LeaseSpecFromJson(const Json& lease);
Json LeaseSpecToJson(const LeaseSpec& spec);

}  // namespace prism::k8s
