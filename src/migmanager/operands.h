// src/migmanager/operands.h: the GPU operands `prism mig-manager` pauses while it changes GPUs,
// the record of what it paused, and what it reads from the pods on its node.
//
// An operand is switched by a node label its DaemonSet selects on (the GPU Operator's
// `nvidia.com/gpu.deploy.<component>`): the manager sets it to `paused-for-mig-change`, waits
// for the operand's pods to leave, and restores it afterwards. Two kinds of switch:
//   - on when `true` (the GPU Operator's): a label that is absent or `false` is never touched;
//   - on unless paused (Prism's device plugin, `prism.io/gpu.deploy.device-plugin`): its
//     DaemonSet runs on every GPU node whose label is not `paused-for-mig-change` or `false`
//     (required node affinity, NotIn), so an absent label means "running"; the manager adds the
//     label to pause it and removes it again afterwards.
// Pure functions and plain data; thread-safe.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "k8s/objects.h"

namespace prism::migmanager {

// An operand the manager pauses: its deploy label, and (optionally) an equality label selector
// ("app=nvidia-device-plugin-daemonset") for its pods. Pods whose nodeSelector or required node
// affinity uses a paused label are waited for too, whatever their labels.
struct DeployComponent {
  std::string label;
  std::string pod_selector;
  // The operand runs while the label is absent (see above); false: only while it is set.
  bool on_when_absent = false;
};
// The GPU Operator's operands: device-plugin, gpu-feature-discovery, dcgm-exporter, dcgm, nvsm
// and the third-party `client` switch.
std::vector<DeployComponent> DefaultDeployComponents();

// Parses `<label>[=<pod selector>]` (the --deploy-label and --pause-label flags).
absl::StatusOr<DeployComponent> ParseDeployComponent(const std::string& text, bool on_when_absent,
                                                     const std::string& flag);

// The record of an in-flight change (annotation prism.io/mig-manager.in-flight).
struct InFlightRecord {
  std::string config;
  std::map<std::string, std::string> labels;  // Deploy label -> value to restore.
  std::vector<std::string> services;          // Host units to start again, in stop order.
  std::set<std::string> added = {};           // Deploy labels that were absent: removed again.
  bool empty() const {
    return config.empty() && labels.empty() && added.empty() && services.empty();
  }
};
std::string EncodeInFlight(const InFlightRecord& record);
absl::StatusOr<InFlightRecord> DecodeInFlight(const std::string& text);

// Whether `labels` match an equality selector "k=v,k2=v2"; InvalidArgument for other syntax.
absl::StatusOr<bool> MatchesSelector(const std::map<std::string, std::string>& labels,
                                     const std::string& selector);

// "namespace/name".
std::string PodKey(const k8s::Json& pod);
// Succeeded or Failed.
bool IsTerminal(const k8s::Json& pod);
// The string values of a JSON object (labels, annotations, nodeSelector).
std::map<std::string, std::string> StringMap(const k8s::Json* obj);
// The extended resources under nvidia.com/ a pod's containers ask for.
std::set<std::string> GpuResources(const k8s::Json& pod);
// The GPUs (UUIDs) a pod placed by Prism holds, from its prism.io/decision annotation; nullopt
// when the pod has no usable decision (then it may use any GPU of the node).
std::optional<std::set<std::string>> DecisionGpus(const k8s::Json& pod);
// Whether the pod's nodeSelector or required node affinity names one of `keys` (it is an
// operand switched by one of them).
bool SelectsOnAnyLabel(const k8s::Json& pod, const std::set<std::string>& keys);

}  // namespace prism::migmanager
