// tests/e2e/harness/driver_preemption.h: the kube-scheduler stand-in's NodeResourcesFit filter and
// DefaultPreemption PostFilter (tests only), following kubernetes/kubernetes (newest stored
// version; docs/preemption.md §1):
//   - NodeResourcesFit (pkg/scheduler/framework/plugins/noderesources/fit.go, fitsRequest): the
//     pod's requests of cpu and memory next to the node's pods' within status.allocatable, and
//     one more pod within `pods`. The pod's request is the sum over its containers of
//     resources.requests (a container with only limits: its limits, as the API server's defaulting
//     copies them). Extended resources are not checked: Prism's are `ignoredByScheduler` in the
//     shipped extender entry (deploy/config/kube-scheduler-config.yaml). Not modelled: init
//     containers and pod overhead, ephemeral storage; a node without status.allocatable, or a
//     quantity it does not name (a test's hand-written node naming only GPUs), is not checked
//     (upstream reads a missing quantity as 0).
//   - DefaultPreemption (pkg/scheduler/framework/preemption/preemption.go, Evaluator.Preempt;
//     plugins/defaultpreemption/default_preemption.go, SelectVictimsOnNode,
//     PodEligibleToPreemptOthers): a pod of policy Never, or one whose nominated node holds a pod
//     terminating by preemption, does not preempt; candidate nodes are those whose failure was
//     Unschedulable (NodeResourcesFit, or the extender's FailedNodes), not
//     UnschedulableAndUnresolvable (the extender's FailedAndUnresolvableNodes); on each, every
//     lower-priority pod is removed, the in-tree filters run (the extenders do not), and the pods
//     are reprieved in MoreImportantPod order (higher priority, then earlier start) while the
//     filters still pass; a node with no victims is no candidate (DryRunPreemption: "expected at
//     least one victim pod"). Then callExtenders (ProcessPreemption: MetaVictims by UID for a
//     nodeCacheCapable extender; an answer's node with no victims is an error, a UID not on the
//     node is an error; nodes left out are dropped), pickOneNodeForPreemption, and
//     prepareCandidate (DisruptionTarget condition, then the victim deleted; lower-priority pods
//     nominated to the node lose their nomination) and the preemptor's status.nominatedNodeName.
//     Not modelled: PDBs (none counted), the candidate sampling of calculateNumCandidates (every
//     potential node is tried: the tests' clusters are small), nominated pods in the filters
//     (RunFilterPluginsWithNominatedPods), waiting pods, asynchronous preemption.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace prism::e2e {

// What the stand-in knows of a pod assigned (or being assigned) to a node.
struct AssignedPod {
  std::string key;  // namespace/name
  std::string namespace_name;
  std::string name;
  std::string uid;
  std::string node;
  int32_t priority = 0;
  int64_t milli_cpu = 0;
  int64_t memory_bytes = 0;
  std::string start_time;  // status.startTime, else metadata.creationTimestamp (RFC 3339).
  bool terminating = false;               // metadata.deletionTimestamp set.
  bool terminating_by_preemption = false;  // ... with DisruptionTarget PreemptionByScheduler.
  std::string nominated_node;             // status.nominatedNodeName.
};

struct NodeAllocatable {
  bool known = false;  // status.allocatable present.
  // -1: not named by the node, not checked.
  int64_t milli_cpu = 0;
  int64_t memory_bytes = 0;
  int64_t pods = 0;
};

AssignedPod DescribePod(const nlohmann::json& pod);
NodeAllocatable DescribeNode(const nlohmann::json& node);

// "" when `pod` fits the node next to `others`, else NodeResourcesFit's reason ("Too many pods",
// "Insufficient cpu", "Insufficient memory", joined by ", ").
std::string FitsRequest(const AssignedPod& pod, const NodeAllocatable& node,
                        const std::vector<const AssignedPod*>& others);

// corev1helpers / util.MoreImportantPod: higher priority first, then the earlier start.
bool MoreImportantPod(const AssignedPod& a, const AssignedPod& b);

// SelectVictimsOnNode without PDBs: the victims (most important first), or nullopt when the node
// is no candidate (no lower-priority pod, the pod does not fit even without them, or no victim
// needed).
std::optional<std::vector<const AssignedPod*>> SelectVictimsOnNode(
    const AssignedPod& preemptor, const NodeAllocatable& node,
    const std::vector<const AssignedPod*>& on_node);

struct PreemptionCandidate {
  std::string node;
  std::vector<const AssignedPod*> victims;  // In the order the last answer gave them.
};

// pickOneNodeForPreemption's order with no PDBs: lowest highest victim priority (victims[0]'s),
// lowest sum of priorities (each + 2^31), fewest victims, latest earliest start time among the
// highest-priority victims, then the first (candidates come sorted by node name).
std::string PickOneNodeForPreemption(const std::vector<PreemptionCandidate>& candidates);

// ExtenderPreemptionArgs for a nodeCacheCapable extender: the pod and NodeNameToMetaVictims.
nlohmann::json PreemptionArgsJson(const nlohmann::json& pod,
                                  const std::vector<PreemptionCandidate>& candidates);

// The extender's ExtenderPreemptionResult read as callExtenders reads it: each node's UIDs turned
// back into the pods on that node (`on_node` by node name). Error text for an empty victim list,
// an unknown node or a UID not on its node.
std::optional<std::vector<PreemptionCandidate>> ReadPreemptionResult(
    const nlohmann::json& result,
    const std::map<std::string, std::vector<const AssignedPod*>>& on_node, std::string* error);

}  // namespace prism::e2e
