// src/nvml/sim/sim_state.h: simulated GPUs that follow NVML's MIG rules.
//
// The state of a set of simulated GPUs (models, MIG mode, GPU and compute
// instances, processes, injected faults) and the operations NVML offers on
// them, returning real nvmlReturn_t codes. Both the SimNvml backend and the
// fake libnvidia-ml.so.1 (used to test the real dlopen backend) are thin
// front ends over these functions, so they behave identically.
//
// Rules enforced (mig.md §2-§4), written here from NVIDIA's documentation and
// not borrowed from the layout engine (mig::CanAdd), so tests comparing the two
// check each other: MIG must be on to create instances; profile IDs and
// placements must be legal for the model; overlapping placements, too many
// compute slices, a profile over its max count, a second +me / +me.all
// instance, or a +me.all next to anything but -me instances give
// INSUFFICIENT_RESOURCES; GPU-instance IDs follow the placement (as the
// driver numbers them); a GPU instance with compute instances or processes,
// and a compute instance with processes, is IN_USE; Ampere MIG mode changes
// stay pending until a reset, Hopper and later apply at once; a mode change
// with instances or processes present is IN_USE; resets fail while processes
// run and destroy every instance.
//
// The state is a plain value: callers own locking and persistence
// (SimStateFile). Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "core/mig/gpu_model.h"
#include "nvml/sim/sim_models.h"
#include "nvml/sim/sim_topology.h"

namespace prism::nvml::sim {

struct SimComputeInstance {
  int id = 0;
  int profile_index = 0;  // NVML CI profile index (also its ID).
  int slice_count = 0;
  int start = 0;
  std::string uuid;
};

struct SimGpuInstance {
  int id = 0;
  int profile_id = 0;
  int start = 0;
  int size = 0;
  std::vector<SimComputeInstance> compute_instances;
};

struct SimProcess {
  uint32_t pid = 0;
  int64_t used_memory_mib = 0;
  int gpu_instance_id = -1;
  int compute_instance_id = -1;
  // Share of the GPU's SM time in the last sample, percent (nvmlDeviceGetProcessUtilization's
  // smUtil); -1: the process has no utilization sample.
  int sm_util_percent = -1;
};

struct SimGpu {
  std::string model;      // Simulated model's name, or any name for a GPU without MIG.
  SimModelPtr mig_model;  // NVML's tables of the model (sim_models.h); null when not MIG capable.
  std::string name;       // nvmlDeviceGetName.
  std::string uuid;
  std::string pci_bus_id;
  uint32_t pci_device_id = 0;
  int64_t memory_mib = 0;
  bool mig_current = false;
  bool mig_pending = false;
  bool reset_supported = true;   // false: a passthrough VM where resets do nothing.
  bool events_supported = true;  // false: the driver reports no XID events for this GPU.
  std::vector<SimGpuInstance> gpu_instances;
  std::vector<SimProcess> processes;
};

// Makes the `skip`+1 .. `skip`+`count`-th calls of `call` fail with `code`, or, with `then` set,
// lets them run and then stops the calling process: after the call's result is in the file,
// "kill" SIGKILLs it and "hang" blocks it (for a test to kill it while it hangs). Crash tests use
// it to stop a process between two NVML calls, e.g. a GPU instance made and its compute instance
// not yet.
struct SimFault {
  std::string call;
  int skip = 0;
  int count = 1;
  int code = 0;
  std::string then;  // "", "kill" or "hang".

  friend bool operator==(const SimFault&, const SimFault&) = default;
};

// A critical XID waiting to be reported by an event-set wait (injected by tests).
struct SimXidEvent {
  int gpu = 0;
  uint64_t xid = 0;
  int gpu_instance_id = -1;  // -1: the whole GPU.
  int compute_instance_id = -1;

  friend bool operator==(const SimXidEvent&, const SimXidEvent&) = default;
};

struct SimState {
  // Models the file defines from NVML tables alone (docs/nvml-simulator.md), by name; GPUs name
  // them like built-in ones, which they take precedence over.
  std::vector<SimModelPtr> models;
  std::vector<SimGpu> gpus;
  // How the GPUs are wired (`topology:`); not configured: the topology calls are NOT_SUPPORTED.
  SimTopology topology;
  std::vector<SimFault> faults;
  std::vector<SimXidEvent> xid_events;  // Pending, oldest first.
  std::map<std::string, int> calls;     // Mutating calls made, by operation name.
  uint64_t generation = 0;              // Feeds MIG UUIDs: a re-created instance gets a new one.
  // Mixed into the GPUs' default UUIDs (a node's name), so that the nodes of one cluster seeded
  // from one file have distinct GPUs; empty: the UUIDs depend on model and index alone.
  std::string uuid_seed;
  // The `then` of a fault that fired in this operation, for the file layer to act on once the
  // state is written; never serialized.
  std::string then_pending;
};

// Parses the YAML state file (format in docs/nvml-simulator.md). Fills in
// defaults (UUIDs, bus IDs, names) for GPUs that only name a model.
// InvalidArgument naming the offending key or value.
absl::StatusOr<SimState> ParseSimState(const std::string& yaml_text);
// How many times this process has called ParseSimState (tests: the file layer parses a file
// once, not once per NVML call).
int64_t SimStateParseCount();
std::string SerializeSimState(const SimState& state);

// Operation names used in `faults` and `calls`: GetMigMode, SetMigMode, ResetGpu,
// CreateGpuInstance, DestroyGpuInstance, CreateComputeInstance,
// DestroyComputeInstance, ListGpuInstances, ListProcesses, ProcessUtilization, WaitXidEvent,
// and the topology reads NumaNode, CpuAffinity, NvLinks, P2PStatus, CommonAncestor. The
// parser rejects any other name (a misspelt fault would never fire, and the test
// injecting it would pass without exercising the failure).
const std::vector<std::string>& SimCallNames();
//
// Each function returns an NVML return code. `gpu` is an index into state.gpus.
int GetMigMode(SimState& state, int gpu, bool* current, bool* pending);
// `*activation` gets NVML_ERROR_RESET_REQUIRED when the change is pending.
int SetMigMode(SimState& state, int gpu, bool enabled, int* activation);
int ResetGpu(SimState& state, int gpu);
// NOT_SUPPORTED if the model lacks the profile index, INVALID_ARGUMENT past the last index.
int GetProfileByIndex(SimState& state, int gpu, int index, const mig::GpuInstanceProfile** out);
int GetProfileById(SimState& state, int gpu, int profile_id, const mig::GpuInstanceProfile** out);
int CreateGpuInstance(SimState& state, int gpu, int profile_id, int start, int* gpu_instance_id);
int DestroyGpuInstance(SimState& state, int gpu, int gpu_instance_id);
int CreateComputeInstance(SimState& state, int gpu, int gpu_instance_id, int ci_profile_index,
                          int* compute_instance_id);
int DestroyComputeInstance(SimState& state, int gpu, int gpu_instance_id, int compute_instance_id);
// Takes the oldest pending XID event on one of `gpus` into `*out`:
// NVML_SUCCESS, or NVML_ERROR_TIMEOUT when there is none (or an injected fault
// of WaitXidEvent). Events on other GPUs stay queued.
int TakeXidEvent(SimState& state, const std::vector<int>& gpus, SimXidEvent* out);
// Topology (sim_topology.cc). Each checks its fault (NumaNode, CpuAffinity, NvLinks, P2PStatus,
// CommonAncestor) and answers NOT_SUPPORTED without a configured topology.
struct SimNvLink {
  std::string remote_pci_bus_id;
  bool to_switch = false;
};
// `*node` may be -1 (the machine reports none).
int GetNumaNode(SimState& state, int gpu, int* node);
int GetCpuAffinity(SimState& state, int gpu, std::string* cpus);
// The GPU's active links: per peer GPU its count, then its NVSwitch links. NvLinksOf: the same
// without the fault check (empty without a topology).
std::vector<SimNvLink> NvLinksOf(const SimState& state, int gpu);
int GetNvLinks(SimState& state, int gpu, std::vector<SimNvLink>* links);
// P2P over NVLink works (directly or through NVSwitch).
int GetNvLinkP2P(SimState& state, int gpu_a, int gpu_b, bool* ok);
// nvmlGpuTopologyLevel_t value; NOT_SUPPORTED for a pair spelled "?".
int GetCommonAncestor(SimState& state, int gpu_a, int gpu_b, int* level);

// Fault check for read-only operations; mutating ones check internally.
int CheckFault(SimState& state, const std::string& call);
// A host reboot: instances vanish; Ampere applies a pending mode (it lives in
// the InfoROM), Hopper and later come back with MIG off (mode is lost when the
// driver unloads).
void Reboot(SimState& state);

SimGpuInstance* FindGpuInstance(SimGpu& gpu, int gpu_instance_id);
// GPU-instance ID of a placement: the driver numbers placements as a binary
// tree over the memory slices (full GPU 0, halves 1-2, quarters 3-6, eighths 7-14).
int GpuInstanceIdForPlacement(int memory_slices, int start, int size);

}  // namespace prism::nvml::sim
