// src/nvml/dl_nvml.h: the Nvml interface over the real libnvidia-ml.so.1.
//
// Open() dlopens the library (RTLD_NOW | RTLD_LOCAL), resolves every entry
// point in nvml_symbols.def and calls nvmlInit_v2. No NVML type escapes this
// class. GPU resets (which NVML does not offer) run `nvidia-smi -r -i <bus IDs>`,
// as mig-parted does; PRISM_NVIDIA_SMI overrides the program's path.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

#include "nvml/nvml.h"

namespace prism::nvml {

class DlNvml : public Nvml {
 public:
  // Loads `library` (default: the driver's libnvidia-ml.so.1 found by the
  // dynamic loader). FailedPrecondition when the library cannot be loaded
  // (driver missing) or lacks a required symbol (named in the message);
  // the NVML error when nvmlInit fails.
  static absl::StatusOr<std::unique_ptr<DlNvml>> Open(
      const std::string& library = "libnvidia-ml.so.1");
  ~DlNvml() override;
  DlNvml(const DlNvml&) = delete;
  DlNvml& operator=(const DlNvml&) = delete;

  absl::StatusOr<std::vector<GpuInfo>> ListGpus() override;
  absl::StatusOr<MigModeState> GetMigMode(int gpu) override;
  absl::StatusOr<MigModeState> SetMigMode(int gpu, bool enabled) override;
  absl::Status ResetGpus(const std::vector<int>& gpus) override;
  absl::StatusOr<std::vector<GpuInstanceProfileInfo>> ListGpuInstanceProfiles(int gpu) override;
  absl::StatusOr<std::vector<GpuInstanceInfo>> ListGpuInstances(int gpu) override;
  absl::StatusOr<GpuInstanceInfo> CreateGpuInstance(int gpu, int profile_id, int start) override;
  absl::StatusOr<ComputeInstanceInfo> CreateComputeInstance(int gpu, int gpu_instance_id,
                                                            int slice_count) override;
  absl::Status DestroyComputeInstance(int gpu, int gpu_instance_id,
                                      int compute_instance_id) override;
  absl::Status DestroyGpuInstance(int gpu, int gpu_instance_id) override;
  absl::StatusOr<std::vector<ProcessInfo>> ListProcesses(int gpu) override;
  // nvmlDeviceGetProcessUtilization (optional in the driver: Unimplemented without it).
  absl::StatusOr<std::vector<ProcessUtilizationSample>> ProcessUtilization(
      int gpu, uint64_t since_us) override;
  // nvmlEventSetCreate + nvmlDeviceRegisterEvents(nvmlEventTypeXidCriticalError);
  // the watcher waits with nvmlEventSetWait_v2 and frees the set when destroyed.
  absl::StatusOr<std::unique_ptr<XidEventWatcher>> WatchXidEvents(
      const std::vector<int>& gpus) override;

  // The PCI device's sysfs numa_node (<sysfs>/bus/pci/devices/<bus id>/numa_node), else
  // nvmlDeviceGetNumaNodeId (which on coherent platforms such as Grace Hopper names the GPU's own
  // memory node, not the CPUs' node the kubelet aligns with: hence second).
  absl::StatusOr<int> NumaNode(int gpu) override;
  absl::StatusOr<std::string> CpuAffinity(int gpu) override;
  absl::StatusOr<std::vector<NvLinkRemote>> ActiveNvLinks(int gpu) override;
  absl::StatusOr<bool> NvLinkP2P(int gpu_a, int gpu_b) override;
  absl::StatusOr<PcieLevel> PcieCommonAncestor(int gpu_a, int gpu_b) override;

  // The driver version, or "unknown".
  std::string DriverVersion();

  // Where sysfs is mounted ("/sys"); tests point it at a tree of their own.
  void set_sysfs_root_for_test(std::string root) { sysfs_root_ = std::move(root); }

 private:
  struct Symbols;
  DlNvml(void* handle, std::unique_ptr<Symbols> symbols);

  void* handle_;
  std::unique_ptr<Symbols> sym_;
  std::string sysfs_root_ = "/sys";
};

}  // namespace prism::nvml
