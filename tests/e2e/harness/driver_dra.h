// tests/e2e/harness/driver_dra.h: the kube-scheduler stand-in's DRA half (tests only), following
// kube-scheduler's DynamicResources plugin and SchedulingGates plugin (kubernetes/kubernetes,
// pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go, newest stored version;
// docs/dra-design.md §2.1):
//   - SchedulingGates.PreEnqueue: a pod with any spec.schedulingGates is not scheduled; it comes
//     back when an update removes them (the driver's informer sees the update).
//   - DynamicResources.PreEnqueue: every claim the pod names must exist (template claims: named in
//     status.resourceClaimStatuses); otherwise the pod waits.
//   - PreFilter/Filter: an allocated claim admits only the nodes its allocation.nodeSelector
//     names (matchFields metadata.name In; the form allocators write for node-local devices);
//     for an unallocated claim each node is tried with the allocator, which takes the first
//     full solution: devices in slice-list order, the first not allocated to any claim that
//     the class admits. The class test is the stand-in's: a device of driver gpu.prism.io whose
//     attribute `type` is "gpu" (class gpu.prism.io) or "mig" with the claim's profile
//     (mig.gpu.prism.io); other classes admit nothing. Counters and capacity are not checked
//     (the stand-in's first fit is the competitor a test shows refused, not a second allocator
//     to rely on).
//   - PreBind (bindClaim): a claim this cycle allocated gets finalizer
//     resource.kubernetes.io/delete-protection, then status.allocation and the pod in
//     status.reservedFor; a re-read that finds an allocation is "allocated elsewhere in the
//     meantime" (the pod is retried). An allocated claim only gets the pod in reservedFor.
// Not modelled: Reserve/Unreserve's in-flight bookkeeping across concurrent cycles (the stand-in
// schedules one pod at a time), PostFilter's deallocation, device taints, admin access.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

#include "k8s/client.h"

namespace prism::e2e {

// The finalizer kube-scheduler puts on claims it allocated (resourceapi.Finalizer).
inline constexpr char kDeleteProtectionFinalizer[] = "resource.kubernetes.io/delete-protection";

bool SchedulingGated(const nlohmann::json& pod);

// What the DynamicResources plugin decided for one pod before the extenders run.
struct DraCycle {
  bool has_claims = false;
  // Nodes the pod may go to, from the claims' allocations and the first fit (nullopt: any).
  std::optional<std::vector<std::string>> nodes;
  // Per node, the allocations this cycle would write (claim name -> status.allocation).
  std::map<std::string, std::map<std::string, nlohmann::json>> allocations;
};

// PreEnqueue + PreFilter + Filter over `nodes`. Unavailable: a claim does not exist yet.
absl::StatusOr<DraCycle> DraFilter(k8s::Client* client, const nlohmann::json& pod,
                                   const std::vector<std::string>& nodes);

// PreBind for the chosen `node`.
absl::Status DraPreBind(k8s::Client* client, const nlohmann::json& pod, const DraCycle& cycle,
                        const std::string& node);

}  // namespace prism::e2e
