// src/extender/dra_allocator.h: Prism's engine as the allocator of its own DRA devices (docs/dra.md
// §2.4, issue 32). kube-scheduler's DynamicResources plugin would allocate an unallocated claim
// first fit; a claim that is already allocated it only checks against the node
// (PreFilter/Filter: allocation.nodeSelector) and reserves (PreBind). So Prism allocates first:
//
//   webhook       pod CREATE whose claims (or templates) use a class of Prism's, or are not
//                 known yet: + scheduling gate prism.io/allocate (NeedsGate)
//   leader loop   for a gated pod whose claims all exist: the engine decides node and devices for
//                 the pod's own containers plus its unallocated Prism claims (jointly, as Filter
//                 does), the claims are charged at once (SchedulerCache::AllocateDra), then per
//                 claim: + finalizer prism.io/dra-allocation, status.allocation written (results,
//                 Prism's FromClass marker with this claim's part of the decision, nodeSelector);
//                 then the gate is removed. An ungated pod of Prism's scheduler whose Prism claim
//                 lost its allocation (kube-scheduler's PostFilter, an admin) is allocated again.
//   extender      Filter passes a pod with Prism claims only on the node they were allocated to
//                 (PodNode), so kube-scheduler never allocates Prism's devices itself for it
//   deallocation  a claim with Prism's finalizer, reserved by nobody, whose pod is gone (or that
//                 is being deleted) gets its allocation cleared, then loses the finalizer (the
//                 resourceclaim controller deallocates only claims with Kubernetes' own
//                 finalizer, controller.go syncClaim)
//
// Every replica charges every allocated claim in its cache (OnClaim), so a new leader decides
// with the state the old one left. Allocations of Prism's devices without Prism's marker
// (another allocator's) are never charged as Prism's: they are counted and reported, and the node
// agent refuses to prepare them. Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "config/dra_allocation.h"
#include "core/sched/device_config.h"
#include "extender/cache.h"
#include "k8s/client.h"
#include "k8s/event_recorder.h"
#include "k8s/informer.h"

namespace prism::extender {

// At most this many combinations of a pod's prioritized-list alternatives are searched per
// attempt (8 alternatives per request, 32 requests: the product is unbounded otherwise).
inline constexpr size_t kMaxDraChoices = 64;

struct DraAllocatorOptions {
  std::string scheduler_name = "prism-scheduler";
  absl::Duration watch_timeout = absl::Minutes(5);
  // How often the leader retries a pod whose allocation failed (no room, an API error).
  absl::Duration retry_interval = absl::Seconds(2);
};

// What a ResourceClaim's allocation charges in the cache: nullopt when it holds none of Prism's
// making (not allocated, or allocated by someone else); InvalidArgument naming the field for a
// malformed allocation or marker. The one reader the scheduler's claim informer and `prism
// status` share.
absl::StatusOr<std::optional<DraClaimCharge>> DraChargeOf(const k8s::Json& claim);

// (reason, message) events about an object; the scheduler's recorder.
using DraEventSink = std::function<void(const k8s::Json& object, std::string_view kind,
                                        k8s::EventType type, std::string_view reason,
                                        std::string_view message)>;

struct DraAllocatorStats {
  int64_t allocations = 0;       // Pods whose claims Prism allocated.
  int64_t allocation_failures = 0;
  int64_t gates_removed = 0;
  int64_t deallocations = 0;
  int64_t reallocations = 0;     // Claims allocated again after losing their allocation.
  int foreign_allocations = 0;   // Claims holding Prism's devices without Prism's marker (now).
};

class DraAllocator {
 public:
  // `cache`, `client`, `pods` and `nodes` must outlive the allocator; `pods` and `nodes` are the
  // scheduler's informers (a pod handler is added to `pods`).
  DraAllocator(DraAllocatorOptions options, k8s::Client* client, SchedulerCache* cache,
               k8s::Informer* pods, k8s::Informer* nodes, DraEventSink events);
  ~DraAllocator();  // Stops.
  DraAllocator(const DraAllocator&) = delete;
  DraAllocator& operator=(const DraAllocator&) = delete;

  // Starts the informers on claims, claim templates and Prism's ResourceSlices.
  void Start();
  void Stop();
  bool Synced() const;

  // Webhook, pod CREATE: whether the pod must wait for Prism's allocation (docs/dra-design.md §2.4).
  bool NeedsGate(const k8s::Json& pod) const;
  // The claim template as the informer last saw it (nullopt: none, or not seen yet).
  std::optional<k8s::Json> CachedTemplate(std::string_view ns, std::string_view name) const;

  // Extender Filter: for a pod with claims of Prism's classes, the node its claims were
  // allocated to, or why it may go nowhere yet. nullopt: the pod has no Prism claims.
  struct PodNodeVerdict {
    std::string node;    // Empty: no node (see `reason`).
    std::string reason;  // Why no node, for every candidate.
  };
  std::optional<PodNodeVerdict> PodNode(const k8s::Json& pod) const;

  // The leader's pass: allocations for gated (and de-allocated) pods, deallocations.
  void Reconcile();

  // The leader's decision for `pod` (Reconcile's first half): node and devices for its
  // unallocated Prism claims, charged in the cache at once; nothing written to the API. No
  // claims when none is left to allocate. Errors say why the pod must wait (an Event on the
  // pod says so too). Tests and benchmarks call it directly; SchedulerCache::ReleaseDraClaim of
  // each claim undoes it.
  struct DraDecision {
    std::string node;
    std::vector<config::DraClaimSpec> claims;
    std::vector<k8s::Json> allocations;  // status.allocation per claim, in order.
  };
  absl::StatusOr<DraDecision> Decide(const k8s::Json& pod);

  DraAllocatorStats stats() const;

 private:
  struct ClaimState {
    std::string uid;
    bool prism = false;         // Some request names a Prism class.
    std::string spec_error;     // The spec cannot be allocated by Prism (why).
    config::DraClaimSpec spec;  // When spec_error is empty.
    bool allocated = false;
    bool marker = false;        // Allocated by Prism.
    bool foreign = false;       // Prism's devices, allocated by someone else.
    std::string node;           // The marker's node.
    std::string pod_uid;        // The marker's pod.
    std::vector<std::string> reserved_for;
    bool finalizer = false;     // Carries prism.io/dra-allocation.
    bool deleting = false;
    std::string allocation_error;  // A malformed allocation (charged as nothing).
    std::vector<std::string> owner_pods;  // Controller owner references' UIDs.
    int64_t resource_version = -1;        // metadata.resourceVersion as an integer, or -1.
  };
  void OnClaim(const k8s::Json& claim);
  void OnClaimDeleted(const k8s::Json& claim);
  void OnPod(const k8s::Json& pod);
  void OnPodDeleted(const k8s::Json& pod);
  void OnSlice(const k8s::Json& slice);
  void OnSliceDeleted(const k8s::Json& slice);

  // One pod's allocation; OK when nothing is left to do for it now.
  absl::Status AllocateFor(const k8s::Json& pod, bool gated);
  absl::Status RemoveGate(const k8s::Json& pod);
  absl::Status WriteAllocation(const std::string& ns, const std::string& claim,
                               const k8s::Json& allocation);
  void Deallocate(const std::string& key);
  // Nodes that pass the pod's nodeSelector, required node affinity (labels), taints and
  // spec.unschedulable, as kube-scheduler's NodeAffinity, TaintToleration and NodeUnschedulable
  // filters would; the extender Filter later sees kube-scheduler's own verdict as well. nullopt:
  // every node (no node has a taint or is cordoned, and the pod names no node constraint), so
  // the engine searches with its indexes as Filter does.
  std::optional<std::vector<std::string>> CandidateNodes(const k8s::Json& pod) const;
  bool HasNodeRestrictions(const k8s::Json& pod) const;
  bool NodeAdmitsPod(const k8s::Json& pod, const std::string& node) const;
  void OnNode(const k8s::Json& node);
  void OnNodeDeleted(const k8s::Json& node);
  config::DraGpuMinors MinorsOf(const std::string& node) const;
  // OK when every share among `allocations` (results with a shareID) is of a device `node`
  // publishes as shared; else FailedPrecondition naming the device and why (a gate that is off).
  absl::Status SharesArePublished(const std::string& node,
                                  const std::vector<k8s::Json>& allocations) const;
  void Event(const k8s::Json& object, std::string_view kind, k8s::EventType type,
             std::string_view reason, const std::string& message);

  const DraAllocatorOptions options_;
  k8s::Client* const client_;
  SchedulerCache* const cache_;
  k8s::Informer* const pods_;
  k8s::Informer* const nodes_;
  const DraEventSink events_;
  std::unique_ptr<k8s::Informer> claims_;
  std::unique_ptr<k8s::Informer> templates_;
  std::unique_ptr<k8s::Informer> slices_;

  // Serializes the claim feed (informer events and the leader's own writes) with its cache
  // updates, so that a claim's charge follows the order of its versions. Taken before the
  // cache's lock and mu_.
  absl::Mutex claim_feed_mu_;
  mutable absl::Mutex mu_;
  std::map<std::string, ClaimState, std::less<>> claim_states_ ABSL_GUARDED_BY(mu_);
  // Claims the leader has charged and is writing (Decide to the end of AllocateFor).
  std::set<std::string, std::less<>> allocating_ ABSL_GUARDED_BY(mu_);
  // Pods with spec.resourceClaims not bound yet (key -> uid), and every live pod with claims by
  // UID (for deallocation: is the pod a claim was allocated for still there?).
  std::map<std::string, std::string, std::less<>> unbound_pods_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string, std::less<>> pods_by_uid_ ABSL_GUARDED_BY(mu_);
  // Per node, what the node filters read (labels, taints, unschedulable, and "restricted":
  // a NoSchedule/NoExecute taint or cordoned), and how many nodes are restricted.
  std::map<std::string, k8s::Json, std::less<>> node_facts_ ABSL_GUARDED_BY(mu_);
  int restricted_nodes_ ABSL_GUARDED_BY(mu_) = 0;
  // Nodes carrying the node agent's GPU inventory annotation.
  int gpu_nodes_ ABSL_GUARDED_BY(mu_) = 0;
  // Per node, GPU UUID -> device minor, and the devices published as shared
  // (allowMultipleAllocations: the node's API server keeps DRAConsumableCapacity's fields), from
  // Prism's published ResourceSlices, by slice name.
  struct PublishedSlice {
    std::string node;
    config::DraGpuMinors minors;
    std::set<std::string, std::less<>> shared_devices;
  };
  std::map<std::string, PublishedSlice, std::less<>> slice_minors_ ABSL_GUARDED_BY(mu_);
  // Per node, how many of its slices publish a shared device: share requests go only to these
  // (a node whose API server drops DRAConsumableCapacity's fields publishes whole GPUs only).
  std::map<std::string, int, std::less<>> sharing_slices_ ABSL_GUARDED_BY(mu_);
  // Per node, how many slices it publishes at all: when every such node shares, a share request
  // keeps the engine's indexed search over all nodes.
  std::map<std::string, int, std::less<>> node_slices_ ABSL_GUARDED_BY(mu_);
  void CountSliceLocked(const PublishedSlice& slice, int delta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Last event message per pod UID (one event per distinct problem) and when each pod may be
  // tried again.
  std::map<std::string, std::string> last_message_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Time> retry_at_ ABSL_GUARDED_BY(mu_);
  DraAllocatorStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prism::extender
