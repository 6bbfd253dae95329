// src/deviceplugin/dra_slices.h: the ResourceSlices the DRA plugin publishes (docs/dra-design.md §1.3,
// §1.4), whole GPUs only so far.
//
// One pool per node, named after the node, with spec.nodeName set; one slice per GPU:
//   - not in MIG mode: its device "gpu-<minor>" with attributes type "gpu", uuid, productName,
//     pcieBusID (NVIDIA's DRA driver's names for the same facts), Kubernetes' standard
//     resource.kubernetes.io/pciBusID and numaNode (where the GPU has one), and capacity memory
//     (the GPU's, in Mi);
//     with consumable capacity on (DraPublishOptions, --dra-consumable-capacity; Kubernetes'
//     DRAConsumableCapacity gate, alpha in 1.34/1.35) the same device is shared: it has
//     allowMultipleAllocations: true and capacities memory, cores and slots with their
//     requestPolicy (config/dra_share.h, docs/dra-design.md §1.4);
//   - in MIG mode, layout owned by the agent (dynamic): every partition (DraMigDevices, dra_mig.h),
//     type "mig", parentUUID, profile, placementStart, placementSize, migMode, the parent's
//     productName, pcieBusID, pciBusID, numaNode and computePercent, capacities memory and
//     multiprocessors, each consuming counters of the GPU's counter set; the set holds what the
//     instances the device-plugin path holds leave (AvailableMigCounters), so no set of
//     partitions the pool admits collides with them;
//   - in MIG mode, layout owned by the MIG manager (static): its existing instances, fixed
//     devices (with their uuid) that consume no counters.
// The counter sets go into slices of their own, "<node>-gpu.prism.io-counters-<k>" (at most 8
// sets each): resource.k8s.io/v1 from 1.35 allows a slice devices or sharedCounters, not both
// (pkg/apis/resource/validation/validation.go, validateResourceSliceSpec). Kubernetes 1.34's
// layout (counters beside the devices) is not produced. Slices of GPUs are named
// "<node>-gpu.prism.io-<minor>" (the node part cut, and a hash added, past 253 bytes).
//
// Publish lists the driver's slices of the node (field selectors spec.nodeName and spec.driver,
// as the kubelet's wipe does), and when anything differs from what the node has now, writes every
// slice of the pool with generation + 1 and the new slice count, then deletes the slices it no
// longer needs: consumers use only the highest generation, complete once they hold
// resourceSliceCount slices of it (GatherPools), so a half-written pool is never used. The
// kubelet deletes a node's slices at its start and 30 s after the driver deregisters, so the
// plugin publishes again after every registration. Thread-safe (one publication at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

#include "deviceplugin/dra_driver.h"
#include "deviceplugin/metrics.h"
#include "k8s/resource.h"

namespace prism::k8s {
class Client;
}  // namespace prism::k8s

namespace prism::deviceplugin {

using k8s::kResourceSlices;
// resource/v1 types.go: ResourceSliceMaxDevices, ResourceSliceMaxAttributesAndCapacitiesPerDevice.
inline constexpr size_t kMaxDevicesPerSlice = 128;
inline constexpr size_t kMaxAttributesAndCapacities = 32;
// ResourceSliceMaxDevicesWithTaintsOrConsumesCounters, ResourceSliceMaxCounterSets,
// ResourceSliceMaxCountersPerCounterSet (= ...PerDeviceCounterConsumption),
// ResourceSliceMaxDeviceCounterConsumptionsPerDevice.
inline constexpr size_t kMaxDevicesPerSliceWithCounters = 64;
inline constexpr size_t kMaxCounterSetsPerSlice = 8;
inline constexpr size_t kMaxCountersPerSet = 32;
inline constexpr size_t kMaxCounterConsumptionsPerDevice = 2;

// Kubernetes' standard device attributes the slices carry (deviceattribute/constants.go).
inline constexpr char kDraAttributePciBusId[] = "resource.kubernetes.io/pciBusID";
inline constexpr char kDraAttributeNumaNode[] = "resource.kubernetes.io/numaNode";

struct DraPublishOptions {
  // Publish GPUs not in MIG mode as shared devices (docs/dra-design.md §1.4). Off by default: the
  // examples' Kubernetes (1.34) has DRAConsumableCapacity off, and its API server drops the
  // fields on write.
  bool consumable_capacity = false;
  // The `slots` capacity: shares of one GPU at most (deviceSplitCount).
  int32_t split_count = 10;
  // Publish the partitions of MIG GPUs whose layout the agent owns (they need their counters:
  // Kubernetes' DRAPartitionableDevices gate). false: such GPUs publish nothing; static
  // instances are published either way.
  bool partitionable = true;
};

// The feature gates whose fields a write lost: `sent` as written, `stored` as the API server
// answered (pkg/registry/resource/resourceslice/strategy.go, dropDisabledFields, drops a disabled
// gate's fields on create and on an update that did not use them already):
// "DRAPartitionableDevices" (sharedCounters, consumesCounters), "DRAConsumableCapacity"
// (allowMultipleAllocations, requestPolicy). Sorted, each once.
inline constexpr char kDraPartitionableGate[] = "DRAPartitionableDevices";
inline constexpr char kDraConsumableCapacityGate[] = "DRAConsumableCapacity";
std::vector<std::string> DroppedDraFeatureGates(const nlohmann::json& sent,
                                                const nlohmann::json& stored);

// The slices (objects without resourceVersion) the node has now, at `generation`.
// The counter values of dynamic MIG GPU `g`'s set: BuildMigCounters' less what its instances
// held outside DRA consume (each is a partition, profile@start). Exact: the counters admit a set
// of partitions exactly when NVIDIA's rules do (DraMigTest), so these admit a set S exactly when
// S with the held instances is a valid layout. Instances of prepared claims are not subtracted:
// the allocator counts allocated claims' consumption itself.
std::map<std::string, int64_t> AvailableMigCounters(const DraGpu& g);

std::vector<nlohmann::json> BuildWholeGpuSlices(const std::string& driver, const std::string& node,
                                                const std::vector<DraGpu>& gpus,
                                                int64_t generation,
                                                const DraPublishOptions& options = {});

// The API's rules that, broken, make a pool unusable or a write fail (§1.3): driver and pool
// names, nodeName, one generation and resourceSliceCount across the slices, that count equal
// to the number of slices, device names DNS labels unique in the pool, at most 128 devices per
// slice (64 when a device consumes counters) and 32 attributes and capacities per device; devices
// or sharedCounters in a slice, not both; at most 8 counter sets per slice, 1..32 counters per
// set, set names unique in the pool; at most 2 consumesCounters per device, each naming a set and
// counters the pool has (validation.go validateResourceSliceSpec, validateCounterSet,
// validateDeviceCounterConsumption; the allocator's buildPool); a capacity's requestPolicy only
// on a device with allowMultipleAllocations, with a default, validValues (sorted, at most 10,
// none past the capacity, the default among them) or validRange (min, default >= min, max
// between min and the capacity, min + step within the capacity, default and max on the step)
// but not both (validateMultiAllocatableDeviceCapacity, validateRequestPolicy,
// validateRequestPolicyRange, validateRequestPolicyValidValues). InvalidArgument naming the
// slice and field.
absl::Status ValidatePoolSlices(const std::vector<nlohmann::json>& slices);

class DraSlicePublisher {
 public:
  // `client` (and `metrics`, where given) must outlive the publisher. `metrics` gets the gauge
  // prism_dra_feature_gate_missing{gate} (docs/metrics.md).
  DraSlicePublisher(std::string driver, std::string node, k8s::Client* client,
                    DraPublishOptions options = {}, MetricsRegistry* metrics = nullptr);

  // Makes the node's published slices those of `gpus` (see above). Returns the generation the
  // pool has afterwards. When the API server's answer shows that it dropped a feature gate's
  // fields (DroppedDraFeatureGates), the gate is remembered for the publisher's life, logged, and
  // the pool is published again at once without what needs it.
  absl::StatusOr<int64_t> Publish(const std::vector<DraGpu>& gpus);
  // The gates found off so far (sorted).
  std::vector<std::string> MissingFeatureGates() const;

 private:
  // `*degraded`: a gate was found off by this publication (effective_ changed).
  absl::StatusOr<int64_t> PublishLocked(const std::vector<DraGpu>& gpus, bool* degraded)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string driver_;
  const std::string node_;
  k8s::Client* const client_;
  const DraPublishOptions options_;
  MetricsRegistry* const metrics_;
  mutable absl::Mutex mu_;
  // options_ less what the API server showed it cannot store.
  DraPublishOptions effective_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> missing_gates_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prism::deviceplugin
