// src/deviceplugin/dra_driver.h: what the DRA kubelet plugin does for a claim (docs/dra-design.md §1.6).
//
// Prepare, per claim and independently of the other claims of the kubelet's call:
//   1. the kubelet's reference is held to the API's name rules (it names files below);
//   2. a claim already in the checkpoint (dra_checkpoint.h) gets the answer recorded for it, with
//      no API call: the kubelet asks again after its own restart or a lost answer, and a claim's
//      UID never names another object;
//   3. otherwise the claim is read from the API server (resource.k8s.io/v1) and decoded
//      (dra_claim.h); it must exist with the kubelet's UID and be allocated, and name at least one
//      device of this driver. Results of other drivers are left alone: the kubelet sends a claim
//      to every driver its allocation names, each prepares its own. Each result of this driver
//      must name this node's pool, a device this node has and that no other prepared claim holds;
//   4. the claim's CDI spec <cdi-dir>/prism.io-claim-<uid>.json (kind prism.io/claim, one device
//      "<uid>-<device>" per allocated device) is written, then the claim is recorded, then the
//      answer is given: per device its pool, name, base request name and CDI ID.
// What is prepared: whole GPUs, devices "gpu-<minor>" (minor: the driver's device minor,
// /proc/driver/nvidia/gpus/*/information, else the NVML index; NVIDIA's DRA driver names GPUs the
// same way), and MIG partitions "gpu-<minor>-mig-<profile>-<profileID>-<start>" of GPUs in MIG
// mode (DraMigDevices): the claim is recorded as preparing before any NVML call, the instance is
// made profile@start by the node agent's MIG realizer (the device-plugin path's own, so neither
// path takes what the other holds), and the record completed with its UUID. A GPU in MIG mode
// has no whole-GPU device. Shares of a GPU (a result with a shareID, with consumable capacity
// on: DraDriverOptions::consumable_capacity) are checked against the GPU's memory, cores and
// slots together with every share prepared on it (under the driver's lock: concurrent calls
// cannot overcommit it), recorded as preparing, given their region file
// (<vgpu host dir>/regions/<claim-uid>_<device>_<shareID>) and the limits of libprism-vgpu exactly
// as the device-plugin path gives a slice (container_edits.h: the same code), CDI device
// "<uid>-<device>-<shareID>"; a whole GPU and a share of it never both. The CDI devices carry
// device nodes and the toolkit's device-list mounts, which compose when a container gets
// several; NVIDIA_VISIBLE_DEVICES is "void" once for the spec, as the NVIDIA container toolkit's
// CDI specs have it (nvcdi wrapper.go, GetCommonEdits). Errors start with
// "ResourceClaim <ns>/<name>: " and name the result ("status.allocation.devices.results[i]").
// Unprepare removes the claim's region files, releases its MIG instances (destroyed unless
// processes run on them or the agent keeps them idle for reuse, --max-idle-instances), then
// removes its spec and record; a claim never prepared (or already unprepared) is success, as the
// kubelet expects. Thread-safe: claims may be prepared concurrently; the
// local part (checks, spec, record) runs under one lock so that two claims cannot both take a
// device.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

#include "config/dra_names.h"
#include "core/mig/gpu_model.h"
#include "deviceplugin/cdi_spec.h"
#include "deviceplugin/container_edits.h"
#include "deviceplugin/device_nodes.h"
#include "deviceplugin/dra_checkpoint.h"
#include "deviceplugin/dra_claim.h"
#include "deviceplugin/gpu_holds.h"
#include "deviceplugin/mig_realizer.h"

namespace prism::k8s {
class Client;
}  // namespace prism::k8s
namespace prism::nvml {
class Nvml;
}  // namespace prism::nvml

namespace prism::deviceplugin {

using config::kDraDriverName;
inline constexpr char kDraCdiKind[] = "prism.io/claim";

// A MIG instance that exists on a GPU.
struct DraMigInstance {
  int profile_id = 0;
  int start = 0;
  std::string uuid;  // "MIG-...": its (first) compute instance's.
  // Held by the device-plugin path's pod (the MIG realizer's owner is no claim): its memory
  // slices, compute and media are not the DRA pool's to hand out (dra_slices.h).
  bool held_elsewhere = false;
  friend bool operator==(const DraMigInstance&, const DraMigInstance&) = default;
};

// A GPU as the DRA plugin sees it.
struct DraGpu {
  uint32_t minor = 0;
  int index = 0;
  std::string uuid;
  int64_t memory_mib = 0;
  bool mig_enabled = false;
  std::string product_name;  // nvmlDeviceGetName.
  // "0000:07:00.0" (nvml::PciBusIdSysfsForm); empty when NVML's is malformed.
  std::string pci_bus_id;
  // The GPU's NUMA node (Nvml::NumaNode); -1 when the machine reports none or NVML cannot say.
  int numa_node = -1;
  // False while the node agent reports the GPU unhealthy to the kubelet (a critical XID, a
  // failing probe, a fault: NodeAgent::UnservedGpus). Its devices are withdrawn from the
  // ResourceSlices and Prepare refuses them; claims already prepared on it are left alone.
  bool healthy = true;
  // In MIG mode (current, not only pending): the model (nvml::ModelForGpu), whether the agent
  // owns the layout (docs/mig-manager.md) and the instances that exist.
  std::shared_ptr<const mig::GpuModel> mig_model;
  bool mig_dynamic = false;
  std::vector<DraMigInstance> mig_instances;
  friend bool operator==(const DraGpu&, const DraGpu&) = default;
};

// A device of a GPU in MIG mode: on a dynamic GPU every profile x legal start, consuming
// counters of the GPU's counter set (dra_mig.h); on a static GPU each existing instance, fixed
// (no counters, its UUID known).
struct DraMigDevice {
  std::string device;  // gpu-<minor>-mig-<profile>-<profileID>-<start>
  int profile = -1;    // Index into the model's profiles.
  int start = 0;
  bool fixed = false;
  std::string mig_uuid;                     // Fixed devices.
  std::map<std::string, int64_t> consumes;  // Partitions.
};
// Empty when the GPU is not in MIG mode or its model is unknown.
std::vector<DraMigDevice> DraMigDevices(const DraGpu& gpu);

// Unavailable naming `field` and `device` when `gpu` is unhealthy (DraGpu::healthy).
absl::Status RefuseUnhealthy(const std::string& field, std::string_view device, const DraGpu& gpu);

// "gpu-<minor>" (config/dra_names.h, shared with the scheduler side).
using config::DraGpuDeviceName;

// The node's GPUs from NVML (index, UUID, memory, MIG mode) with their device minors from
// <proc_root>/driver/nvidia/gpus/*/information (the NVML index where that is missing). Not
// thread-safe (NVML): call it where the caller serializes NVML.
// `dynamic` says whether the agent owns a GPU's MIG layout (by NVML index); unset: every GPU.
// `held_elsewhere(index, start)` whether an instance is held outside DRA (DraMigInstance);
// unset: none.
absl::StatusOr<std::vector<DraGpu>> ReadDraGpus(
    nvml::Nvml* nvml, const std::string& proc_root, const std::function<bool(int)>& dynamic = {},
    const std::function<bool(int, int)>& held_elsewhere = {});
// ReadDraGpus with what the node agent's MIG realizer knows: the GPUs whose layout it owns, and
// the instances the device-plugin path's pods hold. Call where the realizer lives (the agent's
// worker).
absl::StatusOr<std::vector<DraGpu>> ReadDraGpusWithRealizer(nvml::Nvml* nvml,
                                                            const std::string& proc_root,
                                                            const MigRealizer& realizer);

struct DraDriverOptions {
  std::string driver_name = kDraDriverName;
  // The pool: one per node, named after the node.
  std::string node_name;
  std::string cdi_dir = "/var/run/cdi";
  // Prepared claims under <state_dir>/claims; empty: in memory only.
  std::string state_dir = "/var/lib/prism/device-plugin";
  DeviceNodeOptions device_nodes;
  VgpuOptions vgpu;
  // The node's GPUs, asked at every Prepare that reaches step 3.
  std::function<absl::StatusOr<std::vector<DraGpu>>()> gpus;
  // Runs MIG work where NVML and the MIG realizer live (NodeAgent::RunOnWorker); unset: MIG
  // partitions are refused. The realizer is the device-plugin path's own, so the two paths see
  // each other's instances: neither takes nor destroys one the other holds.
  std::function<absl::Status(const std::function<void(nvml::Nvml&, MigRealizer&)>&)> mig_worker;
  // GPUs not in MIG mode are published shared (DraPublishOptions::consumable_capacity), so
  // results with a shareID are prepared as shares; off: such results are refused.
  bool consumable_capacity = false;
  // Shares of one GPU at most (the published `slots`, deviceSplitCount).
  int32_t split_count = 10;
  // Prepare only allocations Prism's scheduler wrote: status.allocation.devices.config carries
  // Prism's FromClass marker naming this node (docs/dra-design.md §1.6 step 1). Any other allocation of
  // Prism's devices (kube-scheduler's first fit for a pod that bypassed Prism, another tool's)
  // gets a per-claim error, so it never reaches a container.
  bool require_prism_allocation = true;
  // Shared with the node agent when both paths serve the node (gpu_holds.h): a whole GPU or a
  // share is refused where the device-plugin path's slices leave no room. Null: DRA only.
  GpuHolds* gpu_holds = nullptr;
};

struct DraPrepareResult {
  std::vector<PreparedDevice> devices;
  std::string error;  // Non-empty: the claim was not prepared.
};

// "prism.io/claim=<uid>-<device>".
std::string DraCdiDeviceId(std::string_view claim_uid, std::string_view device);
// A share's region file name in RegionDir: "<claim-uid>_<device>_<shareID>" (RegionFileName of
// the claim UID and "<device>_<shareID>"; none of the three holds '_', and a pod's region name
// "<pod-uid>_<container>" has one '_' only, so no two are the same file).
std::string DraShareRegionName(std::string_view claim_uid, const PreparedDevice& device);
// "<cdi_dir>/prism.io-claim-<uid>.json".
std::string DraCdiSpecPath(std::string_view cdi_dir, std::string_view claim_uid);

class DraDriver {
 public:
  // `client` must outlive the driver.
  DraDriver(DraDriverOptions options, k8s::Client* client);

  // Loads the checkpoint. Errors: the state directory cannot be created.
  absl::Status Start();

  DraPrepareResult Prepare(const DraClaimRef& claim);
  // OK for a claim never prepared; an error only for a malformed reference or a file that
  // cannot be removed.
  absl::Status Unprepare(const DraClaimRef& claim);

  // Takes back, on the realizer, the instances of every checkpointed claim (EnsureMode::kAdopt:
  // processes of the claim's pods may run on them; a missing one is created again). Run on the
  // agent's worker before it trims idle instances (NodeAgentOptions::before_adopt).
  void AdoptMig(nvml::Nvml& nvml, MigRealizer& realizer);

  std::vector<PreparedClaim> Prepared() const { return checkpoint_.All(); }
  const DraDriverOptions& options() const { return options_; }

 private:
  absl::StatusOr<std::vector<PreparedDevice>> PrepareLocked(const DraClaim& claim)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteSpec(const std::string& uid, const std::vector<PreparedDevice>& devices,
                         const std::vector<DraGpu>& gpus) const;
  // Creates (or takes) the MIG instances of `devices` through the realizer, filling in their
  // IDs and UUIDs; on failure releases what it took.
  absl::Status RealizeMig(const std::string& uid, std::vector<PreparedDevice>& devices,
                          const std::vector<DraGpu>& gpus, EnsureMode mode);
  absl::Status ReleaseMig(const std::string& uid);
  // A share of result `r` on whole-GPU device `minor`: the GPU exists and is not in MIG mode,
  // no claim holds it whole, and its consumedCapacity fits next to the shares of other prepared
  // claims and of `in_claim`.
  absl::StatusOr<PreparedDevice> CheckShare(const std::string& claim_uid, const std::string& field,
                                            const DraAllocationResult& r, uint32_t minor,
                                            const std::vector<DraGpu>& gpus,
                                            const std::vector<PreparedDevice>& in_claim) const;
  // The region files of the claim's limited shares (node_files.h), made / removed.
  absl::Status MakeShareRegions(const std::string& uid,
                                const std::vector<PreparedDevice>& devices) const;
  absl::Status RemoveShareRegions(const std::string& uid,
                                  const std::vector<PreparedDevice>& devices) const;
  // A MIG device of result `r`: published on GPU `minor`, not overlapping a partition this
  // claim or another prepared one holds. Returns the device to prepare (no instance yet).
  absl::StatusOr<PreparedDevice> CheckMigDevice(const std::string& claim_uid,
                                                const std::string& field,
                                                const DraAllocationResult& r, uint32_t minor,
                                                const std::vector<DraGpu>& gpus,
                                                const std::vector<PreparedDevice>& in_claim) const;

  const DraDriverOptions options_;
  k8s::Client* const client_;
  DraCheckpoint checkpoint_;
  absl::Mutex mu_;
};

}  // namespace prism::deviceplugin
