// src/nvml/nvml.h: Prism's narrow interface to NVIDIA's management library.
//
// `Nvml` is the hardware boundary: everything Prism does to a GPU goes through
// it, in domain terms (GPU index, profile ID, placement start), never NVML
// handles. Two implementations:
//   - DlNvml (dl_nvml.h): the real libnvidia-ml.so.1, loaded with dlopen;
//   - SimNvml (sim_nvml.h): simulated GPUs that enforce the real MIG rules and
//     keep their state in a YAML file, so successive commands see the same GPUs.
// OpenNvml (open_nvml.h) picks one from PRISM_NVML.
//
// Errors carry the NVML call and return code, mapped to Status codes by
// NvmlError (nvml_errors.h): INSUFFICIENT_RESOURCES -> ResourceExhausted,
// IN_USE -> FailedPrecondition, NOT_FOUND -> NotFound, NOT_SUPPORTED and FUNCTION_NOT_FOUND ->
// Unimplemented, INVALID_ARGUMENT -> InvalidArgument, NO_PERMISSION ->
// PermissionDenied, GPU_IS_LOST / UNINITIALIZED -> Unavailable, TIMEOUT ->
// DeadlineExceeded, others Unknown.
//
// Implementations are not thread-safe; callers serialize access. The one
// exception is an XidEventWatcher: its Wait may run on its own thread while
// other calls go on (NVML's event API is thread-safe; the simulator locks its
// file per call), as NVIDIA's device plugin does.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace prism::nvml {

struct GpuInfo {
  int index = 0;
  std::string uuid;               // "GPU-..."
  std::string name;               // nvmlDeviceGetName, e.g. "NVIDIA A100-SXM4-40GB"
  uint32_t pci_device_id = 0;     // 0xDDDDVVVV
  uint32_t pci_subsystem_id = 0;  // 0xSSSSssss
  std::string pci_bus_id;         // "00000000:07:00.0"
  int64_t memory_total_mib = 0;
  bool mig_capable = false;
};

struct MigModeState {
  bool current = false;
  bool pending = false;  // Mode that takes effect after a reset (Ampere); == current when none.
  bool ResetPending() const { return current != pending; }
};

struct EngineInfo {
  int copy = 0;
  int decoder = 0;
  int encoder = 0;
  int jpeg = 0;
  int ofa = 0;
};

// nvmlGpuInstanceProfileInfo_t plus the profile's possible placements.
struct GpuInstanceProfileInfo {
  int index = 0;  // NVML_GPU_INSTANCE_PROFILE_* constant.
  int id = 0;     // info.id.
  int slice_count = 0;
  int instance_count = 0;
  int multiprocessors = 0;
  int64_t memory_mib = 0;
  EngineInfo engines;
  std::vector<int> placement_starts;
  int placement_size = 0;
};

struct ComputeInstanceInfo {
  int id = 0;
  int profile_id = 0;  // CI profile ID (== NVML CI profile index on current drivers).
  int slice_count = 0;
  int start = 0;     // Compute-slice units inside its GPU instance.
  std::string uuid;  // MIG device UUID, "MIG-..."
};

struct GpuInstanceInfo {
  int id = 0;
  int profile_id = 0;
  int start = 0;  // Memory-slice units.
  int size = 0;
  std::vector<ComputeInstanceInfo> compute_instances;
};

struct ProcessInfo {
  uint32_t pid = 0;
  int64_t used_memory_mib = 0;
  int gpu_instance_id = -1;  // -1 when MIG is off.
  int compute_instance_id = -1;
};

// One process's use of a GPU over NVML's last sampling window
// (nvmlProcessUtilizationSample_t).
struct ProcessUtilizationSample {
  uint32_t pid = 0;
  uint64_t timestamp_us = 0;  // When the sample was taken (CPU clock, microseconds).
  int sm_percent = 0;         // Share of the GPU's SM time, 0-100.
  int memory_percent = 0;     // Share of the memory controller's time, 0-100.
};

// A critical XID error NVML reported on a GPU (nvmlEventTypeXidCriticalError).
struct XidEvent {
  int gpu = -1;      // GPU index.
  uint64_t xid = 0;  // The XID (nvmlEventData_t.eventData).
  // The MIG instance the error hit; -1 when it concerns the whole GPU (NVML
  // reports 0xFFFFFFFF) or MIG is off.
  int gpu_instance_id = -1;
  int compute_instance_id = -1;
};

// What is at the other end of an NVLink (nvmlDeviceGetNvLinkRemoteDeviceType).
enum class NvLinkPeer {
  kGpu,
  kSwitch,
  kOther,    // An IBM NPU.
  kUnknown,  // The driver does not say (the call is missing or fails).
};

// One active NVLink of a GPU and what is at its other end.
struct NvLinkRemote {
  int link = 0;
  std::string pci_bus_id;  // The remote device's (nvmlDeviceGetNvLinkRemotePciInfo_v2); may be
                           // empty for an NVSwitch, which a VM may not show.
  NvLinkPeer peer = NvLinkPeer::kUnknown;
};

// nvmlGpuTopologyLevel_t: the closest common ancestor of two GPUs on the PCIe tree (values as NVML).
enum class PcieLevel : int {
  kInternal = 0,      // One board.
  kSingle = 10,       // One PCIe switch.
  kMultiple = 20,     // Several PCIe switches, no host bridge.
  kHostBridge = 30,   // One host bridge.
  kNode = 40,         // One NUMA node, several host bridges.
  kSystem = 50,       // Across NUMA nodes (the CPUs' interconnect).
};

// An NVML event set registered for critical XID events on some GPUs.
// Wait may run on a thread of its own (see above); the watcher must not
// outlive the Nvml that made it.
class XidEventWatcher {
 public:
  virtual ~XidEventWatcher() = default;
  // The next event, or nullopt when none arrives within `timeout` (also for a
  // zero timeout: a poll). An error for anything else (GPU_IS_LOST: Unavailable).
  virtual absl::StatusOr<std::optional<XidEvent>> Wait(absl::Duration timeout) = 0;
  // GPUs the driver cannot report XID events for (left out of the set).
  virtual const std::vector<int>& unsupported_gpus() const = 0;
};

class Nvml {
 public:
  virtual ~Nvml() = default;

  // True for a backend whose GPUs are not real (the simulator): the node agent and the MIG
  // manager say so in their logs (SimulatedGpusWarning) and the agent in its inventory, so
  // simulated GPUs are never mistaken for real ones.
  virtual bool simulated() const { return false; }

  // Every GPU NVML sees, in index order.
  virtual absl::StatusOr<std::vector<GpuInfo>> ListGpus() = 0;

  // Unimplemented if the GPU is not MIG capable.
  virtual absl::StatusOr<MigModeState> GetMigMode(int gpu) = 0;
  // Requests MIG mode and returns the mode afterwards. On Ampere the change
  // stays pending until ResetGpus; Hopper and later switch at once.
  // FailedPrecondition (IN_USE) while GPU instances or processes exist.
  virtual absl::StatusOr<MigModeState> SetMigMode(int gpu, bool enabled) = 0;
  // Resets the GPUs (applies pending MIG modes; all instances vanish).
  // FailedPrecondition while processes run on any of them.
  virtual absl::Status ResetGpus(const std::vector<int>& gpus) = 0;

  // The GPU-instance profiles the GPU supports, with their placements.
  virtual absl::StatusOr<std::vector<GpuInstanceProfileInfo>> ListGpuInstanceProfiles(int gpu) = 0;
  // Existing GPU instances with their compute instances.
  virtual absl::StatusOr<std::vector<GpuInstanceInfo>> ListGpuInstances(int gpu) = 0;
  // Creates a GPU instance of `profile_id` at memory slice `start`.
  // ResourceExhausted when the placement is taken or limits are reached.
  virtual absl::StatusOr<GpuInstanceInfo> CreateGpuInstance(int gpu, int profile_id, int start) = 0;
  // Creates a compute instance of `slice_count` compute slices in a GPU instance.
  virtual absl::StatusOr<ComputeInstanceInfo> CreateComputeInstance(int gpu, int gpu_instance_id,
                                                                    int slice_count) = 0;
  // FailedPrecondition (IN_USE) while processes run on it.
  virtual absl::Status DestroyComputeInstance(int gpu, int gpu_instance_id,
                                              int compute_instance_id) = 0;
  // FailedPrecondition (IN_USE) while it has compute instances or processes.
  virtual absl::Status DestroyGpuInstance(int gpu, int gpu_instance_id) = 0;

  // Compute processes running on the GPU (on any of its MIG devices).
  virtual absl::StatusOr<std::vector<ProcessInfo>> ListProcesses(int gpu) = 0;

  // Per-process utilization samples taken after `since_us` (0: every sample the driver keeps;
  // nvmlDeviceGetProcessUtilization). Empty when there are none. Unimplemented where the driver
  // cannot say: it lacks the call, or the GPU is in MIG mode (NVML does not report process
  // utilization on MIG devices).
  virtual absl::StatusOr<std::vector<ProcessUtilizationSample>> ProcessUtilization(
      int gpu, uint64_t since_us) {
    (void)gpu;
    (void)since_us;
    return absl::UnimplementedError("this NVML backend does not report process utilization");
  }

  // ---- Topology (nvml/topology.h puts these together; docs/topology.md) ----
  // A backend or driver that cannot answer returns Unimplemented (the default here); callers treat
  // every error as "unknown", never as a reason to fail the node.

  // The GPU's NUMA node: the node its PCI device hangs off (what the kubelet's Topology Manager
  // aligns CPUs with). -1 when the machine reports none.
  virtual absl::StatusOr<int> NumaNode(int gpu) {
    (void)gpu;
    return absl::UnimplementedError("this NVML backend does not report NUMA nodes");
  }
  // The CPUs closest to the GPU (nvmlDeviceGetCpuAffinity) as a CPU list, e.g. "0-19,40-59".
  virtual absl::StatusOr<std::string> CpuAffinity(int gpu) {
    (void)gpu;
    return absl::UnimplementedError("this NVML backend does not report CPU affinity");
  }
  // The GPU's active NVLinks (nvmlDeviceGetNvLinkState, ...RemotePciInfo_v2,
  // ...RemoteDeviceType); empty for a GPU without NVLink.
  virtual absl::StatusOr<std::vector<NvLinkRemote>> ActiveNvLinks(int gpu) {
    (void)gpu;
    return absl::UnimplementedError("this NVML backend does not report NVLinks");
  }
  // Whether peer-to-peer over NVLink works between two GPUs (nvmlDeviceGetP2PStatus with
  // NVML_P2P_CAPS_INDEX_NVLINK): what tells that two GPUs on NVSwitch reach each other.
  virtual absl::StatusOr<bool> NvLinkP2P(int gpu_a, int gpu_b) {
    (void)gpu_a;
    (void)gpu_b;
    return absl::UnimplementedError("this NVML backend does not report P2P status");
  }
  // nvmlDeviceGetTopologyCommonAncestor.
  virtual absl::StatusOr<PcieLevel> PcieCommonAncestor(int gpu_a, int gpu_b) {
    (void)gpu_a;
    (void)gpu_b;
    return absl::UnimplementedError("this NVML backend does not report the PCIe topology");
  }

  // Registers for critical XID events on `gpus`. GPUs whose driver does not
  // support them are skipped (unsupported_gpus); Unimplemented when the driver
  // lacks the event API (the message names the missing entry points) or no GPU
  // supports it.
  virtual absl::StatusOr<std::unique_ptr<XidEventWatcher>> WatchXidEvents(
      const std::vector<int>& gpus) {
    (void)gpus;
    return absl::UnimplementedError("this NVML backend does not report XID events");
  }
};

}  // namespace prism::nvml
