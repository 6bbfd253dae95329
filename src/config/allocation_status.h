// src/config/allocation_status.h: the `prism.io/allocation-status` pod annotation
// (docs/annotations.md): what each GPU container of a pod got on its node.
//
// The node agent writes it after realizing a container's devices, and reads it back to rebuild
// its allocation ledger when its own state is lost; the scheduler extender reads it to drop the
// charge of a pod whose every GPU container failed. Anyone allowed to edit a pod can edit the
// annotation, so both read it through ParseAllocationStatus: every field checked for type and
// bounds, allocation IDs held to the agent's grammar (they name files on the node), an error
// InvalidArgument naming the field. Nothing throws. Pure; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "core/sched/request.h"

namespace prism::config {

inline constexpr char kAllocationStatusAnnotation[] = "prism.io/allocation-status";

// Bounds a status must respect, far above what a real one holds.
inline constexpr size_t kMaxAllocationStatusBytes = 256 * 1024;  // The API server's limit.
inline constexpr size_t kMaxAllocationStatusContainers = 1024;   // kMaxPodContainers.
// Allocations of one container: one per kubelet Allocate call (the kubelet retries).
inline constexpr size_t kMaxAllocationsPerContainer = 256;
inline constexpr size_t kMaxDeviceIdsPerContainer = 8192;
inline constexpr size_t kMaxDeviceIdBytes = 512;
inline constexpr size_t kMaxAllocatedDevicesPerContainer = 256;
// An allocation ID: "<agent start, base 36>-<sequence number>", e.g. "mx1ogiv5-7".
inline constexpr size_t kMaxAllocationIdBytes = 64;
// No agent allocates 2^53 times (a million a second for 285 years); a larger sequence number is
// forged, and would push the agent's own sequence, which continues after the largest it knows,
// toward overflow.
inline constexpr uint64_t kMaxAllocationSeq = uint64_t{1} << 53;

// One device a container got.
struct AllocatedDevice {
  int32_t index = 0;  // The GPU's NVML index.
  std::string uuid;   // The GPU's.
  sched::GpuMode mode = sched::GpuMode::kHamiCore;
  // MIG: the instance.
  std::string profile;
  int32_t start = -1;  // Memory slice of the placement.
  int32_t gpu_instance_id = -1;
  int32_t compute_instance_id = -1;
  std::string mig_uuid;
  // A slice of a shared MIG instance (docs/mig-slices.md): memory_mib is its limit.
  bool shared = false;
  // Software slices (and slices of shared MIG instances).
  int64_t memory_mib = 0;
  int32_t cores_permille = 0;  // Written as a percent; 0.1 % steps.

  friend bool operator==(const AllocatedDevice&, const AllocatedDevice&) = default;
};

struct ContainerAllocationStatus {
  std::vector<std::string> allocations;  // Allocation IDs (CDI names prism.io/allocation=<ID>).
  std::vector<std::string> device_ids;   // The kubelet's device IDs of those allocations.
  // Settled: `devices` (possibly none) or `error` is final. Unsettled containers carry neither.
  bool settled = false;
  std::vector<AllocatedDevice> devices;
  std::string error;  // Non-empty: the container got no GPU, and why.

  friend bool operator==(const ContainerAllocationStatus&,
                         const ContainerAllocationStatus&) = default;
};

struct AllocationStatus {
  std::string node;
  std::map<std::string, ContainerAllocationStatus> containers;  // By container name.

  friend bool operator==(const AllocationStatus&, const AllocationStatus&) = default;
};

// Parses the annotation's value. InvalidArgument naming the field
// ("prism.io/allocation-status: containers.main.allocations[0]: 'x/../y' is not an allocation
// ID"); unknown fields are ignored.
absl::StatusOr<AllocationStatus> ParseAllocationStatus(std::string_view text);

// The annotation's value; ParseAllocationStatus reads it back equal.
std::string AllocationStatusToJson(const AllocationStatus& status);

// The sequence number of allocation ID `id`, or InvalidArgument when `id` is not
// "<lowercase letters and digits>-<decimal number up to kMaxAllocationSeq>" of at most
// kMaxAllocationIdBytes: IDs become file names (the ledger's, the CDI specs'), so nothing else
// is one.
absl::StatusOr<uint64_t> AllocationIdSeq(std::string_view id);

}  // namespace prism::config
