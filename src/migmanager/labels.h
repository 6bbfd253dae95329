// src/migmanager/labels.h: the node labels and annotations `prism mig-manager` reads and writes.
//
// NVIDIA's keys keep the GPU Operator's exact meaning (mig.md §7.4) so that a cluster moving from
// the operator, and its tooling, see the same contract; Prism's own keys live under `prism.io/`.
// Every key is documented in docs/annotations.md ("MIG manager"). Constants only.
#pragma once

#include <string_view>

namespace prism::migmanager {

// Read: the name of the mig-parted config to apply (watched on this node only).
inline constexpr char kConfigLabel[] = "nvidia.com/mig.config";
// Written: progress of the last reconfiguration.
inline constexpr char kStateLabel[] = "nvidia.com/mig.config.state";
inline constexpr char kStatePending[] = "pending";
inline constexpr char kStateRebooting[] = "rebooting";
inline constexpr char kStateSuccess[] = "success";
inline constexpr char kStateFailed[] = "failed";

// GPU Operator operand switches: DaemonSets select on `<key>=true`; the manager sets them to
// kPausedValue while it changes GPUs and restores the value it found. `false` is never touched.
inline constexpr char kDeployLabelPrefix[] = "nvidia.com/gpu.deploy.";
inline constexpr char kPausedValue[] = "paused-for-mig-change";
// Prism: the switch of Prism's device plugin. Its DaemonSet runs where the label is absent or
// anything but `paused-for-mig-change` / `false` (operands.h: an on-when-absent switch).
inline constexpr char kPrismDevicePluginDeployLabel[] = "prism.io/gpu.deploy.device-plugin";

// Who owns a node's MIG layout (docs/mig-manager.md "Who owns a node's MIG layout"): a node with
// kConfigLabel is this manager's (static); without it the manager never changes the GPUs (they are
// Prism's device plugin's, dynamic MIG). Prism's label `dynamic` marks the whole node as the
// device plugin's explicitly: with kConfigLabel too, the manager refuses (DynamicNode).
inline constexpr char kMigModeLabel[] = "prism.io/mig.mode";
inline constexpr char kMigModeStatic[] = "static";
inline constexpr char kMigModeDynamic[] = "dynamic";
// Prism: on a static node, GPUs (indices or UUIDs, comma-separated) that the device plugin
// manages dynamically; `devices: all` skips them and a config naming one is refused.
inline constexpr char kDynamicGpusAnnotation[] = "prism.io/mig.dynamic-gpus";
// Prism: "true" lets the manager change GPUs that pods on the node are using (it still never
// destroys an instance on which a process runs).
inline constexpr char kForceAnnotation[] = "prism.io/mig.config.force";
// Prism: the manager's record of an in-flight change (what it paused and stopped), so that a
// restart can finish the change and restore everything. JSON; present only mid-change.
inline constexpr char kInFlightAnnotation[] = "prism.io/mig-manager.in-flight";
// Prism: why the last reconfiguration failed (cleared on success), next to the state label.
inline constexpr char kReasonAnnotation[] = "prism.io/mig.config.reason";

}  // namespace prism::migmanager
