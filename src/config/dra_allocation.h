// src/config/dra_allocation.h: Prism's engine chooses the devices of a pod's DRA claims
// (docs/dra-design.md §2.4, issue 32): a ResourceClaim's spec decoded into what Prism supports, the
// pod's claims turned into the engine's PodRequest, and the engine's Decision turned back into
// each claim's status.allocation.
//
// Claim spec (resource.k8s.io/v1, staging/src/k8s.io/api/resource/v1/types.go: ResourceClaimSpec,
// DeviceClaim, DeviceRequest, ExactDeviceRequest, DeviceSelector, CELDeviceSelector), decoded
// typed and bounded with upstream's limits, each error naming the field
// ("spec.devices.requests[1].exactly.count: ..."):
//   requests[]            at most DeviceRequestsMaxSize = 32; `name` a DNS label, unique
//   exactly               deviceClassName one of Prism's classes (gpu.prism.io: whole GPU;
//                         mig.gpu.prism.io: MIG partition; slice.gpu.prism.io: a share of a
//                         GPU, config/dra_share.h); allocationMode "" or ExactCount;
//                         count 1..32, and at most AllocationResultsMaxSize = 32 devices in
//                         the claim (one result each); selectors at most 32, each a CEL
//                         expression of at most CELSelectorExpressionMaxLength = 10 KiB in one
//                         of the forms below
//   selectors (CEL)       only these forms (whitespace free, quotes ' or "):
//                           device.attributes["gpu.prism.io"].profile == "<profile>"
//                             MIG class only: exactly this MIG profile (a plain catalog
//                             profile such as "2g.10gb": the attribute dra_slices publishes)
//                           device.attributes["gpu.prism.io"].computePercent >= <0-100>
//                             MIG class only: a partition with at least that share of its
//                             GPU's compute (the attribute dra_slices publishes,
//                             DraComputePercent); HAMi's gpucores for a partition
//                           device.capacity["gpu.prism.io"].memory.compareTo(quantity("<q>")) >= 0
//                             a device with at least that much memory (the published capacity
//                             `memory`; upstream's own spelling of a capacity minimum, see
//                             CapacityRequirements in types.go); not for slices, which ask
//                             capacity.requests.memory instead
//                         anything else is InvalidArgument quoting the expression (bounded)
//   capacity              slice class only: requests {memory, cores[, slots: 1]}
//                         (ParseDraCapacityRequests)
// Refused with Unimplemented naming the field (valid Kubernetes that Prism does not allocate
// yet): allocationMode All, adminAccess, capacity of whole GPUs and MIG partitions,
// derivedAttributes, constraints, and config for driver gpu.prism.io (Prism defines no claim
// parameters).
// firstAvailable (at most 8 alternatives, each decoded as `exactly` is) is read into
// DraDeviceRequest::first_available. Ignored: tolerations (Prism's devices carry no taints yet) and config of other
// drivers (a claim Prism allocates holds only Prism's devices, so no other driver sees it).
// A claim none of whose requests names a class of Prism's (gpu.prism.io or *.gpu.prism.io) is
// not Prism's: decoded as `prism = false`, nothing else read. A claim mixing Prism's and other
// classes is refused (a claim is allocated whole, by one allocator).
//
// Pure: no I/O, threads or clocks. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

#include "config/dra_share.h"
#include "core/sched/cluster.h"
#include "core/sched/decision.h"
#include "core/sched/request.h"

namespace prism::config {

// resource/v1 types.go: DeviceRequestsMaxSize (= AllocationResultsMaxSize), DeviceSelectorsMaxSize,
// CELSelectorExpressionMaxLength, AllocationResultsMaxSize.
inline constexpr size_t kMaxDraRequests = 32;
inline constexpr size_t kMaxDraSelectors = 32;
inline constexpr size_t kMaxDraCelBytes = 10 * 1024;
inline constexpr int64_t kMaxDraResults = 32;
// FirstAvailableDeviceRequestMaxSize: alternatives of one request.
inline constexpr size_t kMaxDraSubrequests = 8;
// DeviceConstraintsMaxSize: constraints of one claim (and requests one constraint names).
inline constexpr size_t kMaxDraConstraints = 32;
// The one constraint Prism evaluates (docs/dra.md, "Constraints"): Kubernetes' standard NUMA
// attribute (k8s.io/dynamic-resource-allocation/deviceattribute, StandardDeviceAttributeNUMANode).
inline constexpr char kDraNumaNodeAttribute[] = "resource.kubernetes.io/numaNode";
// Prism's own bound on the claims of one pod it allocates for.
inline constexpr size_t kMaxDraClaimsPerPod = 32;
// The marker in status.allocation.devices.config (docs/dra-design.md §2.4).
inline constexpr char kDraMarkerApiVersion[] = "gpu.prism.io/v1alpha1";
inline constexpr char kDraMarkerKind[] = "PrismAllocation";

// kSlice: a share of a GPU not in MIG mode (class slice.gpu.prism.io, docs/dra-design.md §1.4).
enum class DraDeviceKind : uint8_t { kWholeGpu, kMigPartition, kSlice };

struct DraDeviceRequest {
  std::string name;  // requests[].name
  std::string device_class;
  DraDeviceKind kind = DraDeviceKind::kWholeGpu;
  int32_t count = 1;
  std::string mig_profile;     // MIG: exactly this profile ("2g.10gb"); empty: any.
  int64_t min_memory_mib = 0;  // The memory selector, rounded up to MiB; 0: none.
  // firstAvailable: the alternatives, in order, each named "<request>/<subrequest>" (as the
  // allocation's results name it); the fields above are then unused but `name` and `count`
  // (the largest alternative's). Resolved by DraChoose before BuildDraPodRequest.
  std::vector<DraDeviceRequest> first_available;
  DraShareRequest share;  // Slices: capacity.requests.
  // A constraint `matchAttribute: resource.kubernetes.io/numaNode` covers this request alone:
  // every device it gets on one NUMA node the node publishes (sched::GpuRequest::numa_match).
  bool numa_match = false;
  int32_t min_compute_percent = 0;  // MIG: the computePercent selector; 0: none.
  friend bool operator==(const DraDeviceRequest&, const DraDeviceRequest&) = default;
};

struct DraClaimSpec {
  std::string namespace_name;
  std::string name;
  std::string uid;
  bool prism = false;  // Some request names a class of Prism's.
  std::vector<DraDeviceRequest> requests;
};

// Decodes a ResourceClaim object (metadata and spec; status is not read). See above.
absl::StatusOr<DraClaimSpec> ParseDraClaim(const nlohmann::json& claim);
// The same for a spec alone (a ResourceClaimTemplate's spec.spec), errors named under `field`.
absl::StatusOr<DraClaimSpec> ParseDraClaimSpec(const nlohmann::json& spec, std::string_view field);

// Prioritized lists (firstAvailable, KEP-4816): the number of combinations of the claims'
// alternatives (1 without any), and combination `choice` (0 .. count-1) with each listed request
// replaced by its chosen alternative. Combinations go in the order of upstream's allocator,
// which takes the first full solution of a depth-first search over requests in order (earlier
// requests' earlier alternatives first).
size_t DraChoiceCount(const std::vector<DraClaimSpec>& claims);
std::vector<DraClaimSpec> DraChoose(const std::vector<DraClaimSpec>& claims, size_t choice);
// The claim with each listed request replaced by the alternative its allocation chose (a result
// naming "<request>/<subrequest>"); InvalidArgument when no result names one.
absl::StatusOr<DraClaimSpec> DraChosenBy(const DraClaimSpec& claim,
                                         const std::vector<std::string>& result_requests);
// The name of request `request`'s container in the decision a claim's marker carries.
std::string DraRequestContainerName(size_t request);

// Which engine container stands for which claim request.
struct DraRequestSlot {
  size_t claim = 0;        // Index into the claims given.
  size_t request = 0;      // Index into that claim's requests.
  int32_t container = -1;  // Index into PodRequest::containers.
};

struct DraPodRequest {
  sched::PodRequest request;
  std::vector<DraRequestSlot> slots;
};

// `base` (the pod's own containers, config::BuildPodRequest) plus one container without CPU or
// memory per request of Prism's claims, named "claim:<claim>/<request>", asking for:
//   whole GPU: count GPUs, cores 1000/1000 (exclusive), memory the selector's or 1000/1000;
//   MIG:       count instances of memory max(the profile's smallest memory over the catalog
//              models that have it, the selector's, 1 MiB) and, with a profile, its compute share;
//   slice:     count GPUs (distinct, as for nvidia.com/gpu), each with the share's memory (MiB;
//              unset: all of it, 1000/1000) and cores (percent x 10; unset: 1000/1000), exactly
//              what a HAMi pod asking nvidia.com/gpumem and nvidia.com/gpucores gets.
// The engine takes the smallest plain profile that covers a MIG request, so a profile selector
// gets that profile wherever it can be placed on a model that has it; the pod is therefore kept
// to the catalog models that have every profile its requests name (PodRequest::use_types, unless
// the pod sets nvidia.com/use-gputype itself; none: InvalidArgument), and BuildDraAllocations
// checks the profile and refuses a decision that placed another. The pod's mode (PodRequest::
// modes) is one for all its GPUs, so a pod asks either for whole GPUs or for MIG partitions,
// (whole GPUs and slices are both the hami-core mode and mix), and not besides
// extended-resource GPUs (InvalidArgument naming the claim and request); the
// mode must be one `base.modes` (nvidia.com/vgpu-mode) allows. Claims with `prism = false`
// are skipped.
absl::StatusOr<DraPodRequest> BuildDraPodRequest(sched::PodRequest base,
                                                 const std::vector<DraClaimSpec>& claims);

// Prism's marker, the entry of status.allocation.devices.config that says Prism allocated the
// claim (docs/dra-design.md §2.4): {source FromClass, requests [], opaque {driver gpu.prism.io,
// parameters {apiVersion gpu.prism.io/v1alpha1, kind PrismAllocation, pod, node[, decision]}}}.
// Only writers of the claim's status can put it there; the node agent prepares nothing without
// it (config/dra_pod.h ReadDraAllocation reads it back).
nlohmann::json DraAllocationMarker(std::string_view pod_uid, std::string_view node,
                                   nlohmann::json decision = nullptr);

// A GPU's device minor (what its published names carry, DraGpu::minor in the node agent) by
// GPU UUID, for the decided node.
using DraGpuMinors = std::map<std::string, uint32_t, std::less<>>;

// status.allocation for each claim in `claims` (empty JSON for claims with `prism = false`), from
// `decision` for `pod` (BuildDraPodRequest's result, decided on `cluster`):
//   devices.results[]  {request, driver gpu.prism.io, pool <node>, device <published name>} per
//                      device, in request order (config/dra_names.h, the node agent's names);
//                      a slice's result also has shareID (DraShareId of the claim's UID, the
//                      request and the result's index) and consumedCapacity (what the decision
//                      grants: memory MiB, cores percent rounded up, slots 1)
//   devices.config[]   Prism's marker: {source FromClass, opaque {driver gpu.prism.io,
//                      parameters {apiVersion gpu.prism.io/v1alpha1, kind PrismAllocation,
//                      pod <uid>, node <node>}}} (docs/dra-design.md §2.4)
//   nodeSelector       {nodeSelectorTerms: [{matchFields: [{key metadata.name, operator In,
//                      values [<node>]}]}]}, as upstream's allocator writes it for devices of a
//                      node-local slice (structured/internal/*/allocator_*.go, createNodeSelector)
// FailedPrecondition naming the claim and request when the decision does not give a request
// what it asked (a MIG instance for a whole GPU or the reverse, another profile, too little
// memory, a different device count) or names a GPU missing from `minors`; InvalidArgument for
// a decision that does not match `pod`.
absl::StatusOr<std::vector<nlohmann::json>> BuildDraAllocations(
    const DraPodRequest& pod, const std::vector<DraClaimSpec>& claims,
    const sched::Decision& decision, const sched::ClusterState& cluster,
    const DraGpuMinors& minors);

}  // namespace prism::config
