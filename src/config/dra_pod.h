// src/config/dra_pod.h: the scheduling half of Prism on DRA reads two things from the cluster
// (docs/dra-design.md §2.4): which ResourceClaims a pod uses, and what a claim's status.allocation says
// (whether Prism wrote it, for which pod and node, with which decision). Both come from objects
// tenants write (the pod, the claim's spec) or that anyone with the claim status right writes, so
// both are decoded typed and bounded, each error naming the field.
//
// Pure: no I/O, threads or clocks. Thread-safe.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

#include "config/dra_allocation.h"

namespace prism::config {

// The scheduling gate Prism's webhook puts on pods whose claims Prism allocates (docs/dra.md
// §2.3, §2.4); Prism's leader removes it once the claims are allocated.
inline constexpr char kDraSchedulingGate[] = "prism.io/allocate";

struct DraPodClaim {
  std::string pod_claim;      // spec.resourceClaims[].name
  std::string claim;          // The ResourceClaim's name ("" when the pod needs none: see below).
  std::string template_name;  // Set when the claim is generated from a ResourceClaimTemplate.
};

struct DraPodClaims {
  std::vector<DraPodClaim> claims;
  // Pod claims from a template whose generated claim status.resourceClaimStatuses does not name
  // yet (the resourceclaim controller has not created it): the pod must wait.
  std::vector<std::string> pending;
};

// spec.resourceClaims resolved as upstream's resourceclaim.Name does
// (k8s.io/dynamic-resource-allocation/resourceclaim/resourceclaim.go): resourceClaimName names
// the claim; resourceClaimTemplateName takes the name the resourceclaim controller recorded in
// status.resourceClaimStatuses[] under the same pod claim name (a null resourceClaimName there
// means no claim is needed; an absent entry is `pending`). At most kMaxDraClaimsPerPod entries;
// names must be DNS subdomains; an entry naming neither or both is InvalidArgument.
absl::StatusOr<DraPodClaims> ReadPodClaims(const nlohmann::json& pod);

// A container given shares of GPUs (class slice.gpu.prism.io) gets their limits as its devices
// 0..n-1 in GPU order (docs/dra.md, "Shares"), which holds only when all its GPUs come from that
// one request: InvalidArgument naming the container when one would get shares from a request
// and any other device of `claims` (Prism's, alternatives resolved) from another request or
// claim. Containers and init containers, by their resources.claims ({name, request}).
absl::Status CheckDraContainerShares(const nlohmann::json& pod, const DraPodClaims& refs,
                                     const std::vector<DraClaimSpec>& claims);

// Whether the pod carries the scheduling gate kDraSchedulingGate.
bool HasDraSchedulingGate(const nlohmann::json& pod);

// What status.allocation of a claim says, as far as Prism is concerned.
struct DraAllocationRecord {
  bool allocated = false;  // status.allocation is set.
  // Some result names driver gpu.prism.io: the claim holds Prism's devices.
  bool prism_devices = false;
  // devices.config carries Prism's marker (source FromClass, opaque driver gpu.prism.io, kind
  // PrismAllocation): Prism wrote this allocation. Only status writers can put it there; a
  // FromClaim entry (which the claim's author writes) never counts.
  bool prism_marker = false;
  std::string pod_uid;  // The marker's pod: the pod Prism allocated the claim for.
  std::string node;     // The marker's node.
  // The marker's decision for this claim's devices, as the prism.io/decision annotation a pod
  // would carry ({"prism.io/decision": <JSON text>}); empty when the marker has none.
  std::map<std::string, std::string> decision;
  std::vector<std::string> devices;  // Results of driver gpu.prism.io: device names, in order.
  std::vector<std::string> requests;  // ... and the requests they serve ("<req>[/<sub>]").
  std::vector<std::string> reserved_for;  // status.reservedFor[].uid
};

// Decodes status.allocation and status.reservedFor of a ResourceClaim. A malformed allocation is
// InvalidArgument naming the field (the caller treats the claim as holding unknown devices).
absl::StatusOr<DraAllocationRecord> ReadDraAllocation(const nlohmann::json& claim);

// The engine request standing for one claim alone (BuildDraPodRequest of the claim with a pod
// that has no containers of its own, each container named DraRequestContainerName): what a
// claim's allocation is charged as, with the decision its marker carries. A prioritized list
// must be resolved first (DraChosenBy).
absl::StatusOr<sched::PodRequest> DraClaimRequest(const DraClaimSpec& claim);

}  // namespace prism::config
