// src/extender/wire.h: the kube-scheduler extender protocol (k8s.io/kube-scheduler/extender/v1)
// as JSON, and Node objects as the placement engine's inputs (Pods: config/pod_json.h).
//
// kube-scheduler sends Go field names without json tags (`Pod`, `NodeNames`, `PodUID`...) and
// decodes replies case-insensitively, so requests are read the way Go's encoding/json reads them:
// an exact key match first, else the first key that matches ignoring ASCII case; unknown keys are
// ignored. Replies use the exact Go names. Malformed requests are InvalidArgument naming the
// field. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

#include "core/sched/cluster.h"

namespace prism::extender {

using Json = nlohmann::json;

// The member of `object` named `key` as Go's decoder finds it (exact, else ASCII-case-insensitive),
// or nullptr. `object` need not be an object.
const Json* FindField(const Json& object, std::string_view key);

// ExtenderArgs (filter and prioritize). Move-only: the names view storage it owns.
struct ExtenderArgs {
  Json pod;  // The full v1.Pod.
  // nodeCacheCapable: names only. Otherwise `nodes` holds the full v1.Node objects (their names
  // also fill `node_names`). The names are views of `name_bytes`, one buffer for all of them: at
  // 5,000 candidates a string per name was a malloc per name on every Filter.
  std::vector<std::string_view> node_names;
  std::optional<std::vector<Json>> nodes;
  std::unique_ptr<char[]> name_bytes;
};
// Per-request work bounds (docs/scheduler.md, "Limits"). kube-scheduler sends each candidate node
// once; Kubernetes supports clusters of 5,000 nodes and node names are DNS names of at most 253
// bytes.
struct ExtenderLimits {
  size_t max_nodes = 20000;
  size_t max_node_name_bytes = 253;
};
// InvalidArgument naming the field for a malformed request or one over `limits`. The body is
// parsed with simdjson and fully validated (UTF-8, syntax, depth up to 1,024, numbers within
// 64 bits: a pod serialised from Go's types has no other); only the pod (and full nodes, when
// sent) become nlohmann documents.
absl::StatusOr<ExtenderArgs> ParseExtenderArgs(std::string_view body,
                                               const ExtenderLimits& limits = {});

// ExtenderFilterResult. Names and reasons are views (of the request's names and of the texts
// the caller keeps until the reply is written): the reply is built without copying them.
struct FilterResult {
  std::vector<std::string_view> node_names;  // Feasible nodes.
  // Set when the request carried full nodes (not nodeCacheCapable): the feasible ones.
  std::optional<std::vector<Json>> nodes;
  // Node -> reason, in request order (each node at most once).
  using NodeReasons = std::vector<std::pair<std::string_view, std::string_view>>;
  NodeReasons failed_nodes;               // Preemption may help.
  NodeReasons failed_unresolvable_nodes;  // It cannot.
  std::string error;
};
// The reply text. Written directly rather than through a JSON object: at 5,000 candidates the
// reply holds thousands of entries and Filter sits in kube-scheduler's serial cycle.
std::string FilterResultToJson(const FilterResult& result);
// Appends `text` as a JSON string literal (quoted and escaped).
void AppendJsonString(std::string* out, std::string_view text);

// HostPriorityList (prioritize reply): scores 0..10.
// One node's score in a /prioritize reply. `host` views the request's node name (the request
// outlives the reply's serialization).
struct HostPriority {
  std::string_view host;
  int64_t score = 0;
};
// The HostPriorityList kube-scheduler reads: [{"Host":...,"Score":...}, ...], built directly
// (one entry per feasible node: 20,000 at the largest clusters).
std::string HostPriorityListToJson(const std::vector<HostPriority>& list);

// ExtenderPreemptionArgs / ExtenderPreemptionResult (docs/preemption.md). The victims of one
// candidate node, by pod UID (MetaVictims; from full pods' metadata.uid when the request carries
// NodeNameToVictims, as it does for an extender that is not nodeCacheCapable).
struct NodeVictims {
  std::string node;
  std::vector<std::string> uids;
  int64_t pdb_violations = 0;  // NumPDBViolations.
};
struct PreemptionArgs {
  Json pod;                          // The preemptor, the full v1.Pod.
  std::vector<NodeVictims> nodes;    // In the request's order.
};
// kube-scheduler proposes at most max(10 % of the nodes, 100) candidates by default
// (minCandidateNodesPercentage / Absolute) and a node holds at most a few hundred pods; the
// bounds are far above that and far below what would let a body cost much.
struct PreemptionArgsLimits {
  size_t max_nodes = 20000;
  size_t max_victims_per_node = 1024;
  size_t max_victims = 100000;  // Over all nodes.
  size_t max_node_name_bytes = 253;
  size_t max_uid_bytes = 128;  // Pod UIDs are 36-byte UUIDs.
};
// InvalidArgument naming the field for malformed JSON, a missing pod, a node or UID listed twice,
// an empty or oversized name or UID, a negative NumPDBViolations, or a request over `limits`.
absl::StatusOr<PreemptionArgs> ParsePreemptionArgs(std::string_view body,
                                                   const PreemptionArgsLimits& limits = {});
// {"NodeNameToMetaVictims": {node: {"Pods": [{"UID": ...}], "NumPDBViolations": n}}}: what
// kube-scheduler reads from every extender (extender.go, ProcessPreemption).
std::string PreemptionResultToJson(const std::vector<NodeVictims>& nodes);

// ExtenderBindingArgs.
struct BindingArgs {
  std::string pod_name;
  std::string pod_namespace;
  std::string pod_uid;
  std::string node;
};
absl::StatusOr<BindingArgs> ParseBindingArgs(std::string_view body);
// ExtenderBindingResult.
Json BindingResultToJson(std::string_view error);

// A node's GPUs from the node agent's `prism.io/gpu-inventory` annotation, and its CPU and memory
// from status.allocatable. nullopt when the node carries no inventory (not a GPU node);
// InvalidArgument naming the node and the problem for a malformed annotation or quantity.
absl::StatusOr<std::optional<sched::NodeSpec>> NodeSpecFromJson(const Json& node);

}  // namespace prism::extender
