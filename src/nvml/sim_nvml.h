// src/nvml/sim_nvml.h: the Nvml interface over simulated GPUs kept in a YAML file.
//
// Selected with PRISM_NVML=sim:<file>. The file's `gpus:` list names each GPU's
// model (`- model: A100-SXM4-40GB` is enough); MIG mode, instances, processes,
// injected faults and counters of mutating calls live in the same file, so
// successive commands and processes see the same GPUs. Format:
// docs/nvml-simulator.md. Behaviour: sim_state.h.
#pragma once

#include <memory>
#include <string>

#include "nvml/nvml.h"
#include "nvml/sim/sim_state_file.h"

namespace prism::nvml {

class SimNvml : public Nvml {
 public:
  // The file must exist when the first call is made.
  explicit SimNvml(std::string path) : file_(std::move(path)) {}

  bool simulated() const override { return true; }

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
  // The `sm_util` of the GPU's processes that have one, stamped now; Unimplemented in MIG mode
  // (as the driver: NOT_SUPPORTED).
  absl::StatusOr<std::vector<ProcessUtilizationSample>> ProcessUtilization(
      int gpu, uint64_t since_us) override;
  // From the file's `topology:` (sim/sim_topology.h); Unimplemented without one.
  absl::StatusOr<int> NumaNode(int gpu) override;
  absl::StatusOr<std::string> CpuAffinity(int gpu) override;
  absl::StatusOr<std::vector<NvLinkRemote>> ActiveNvLinks(int gpu) override;
  absl::StatusOr<bool> NvLinkP2P(int gpu_a, int gpu_b) override;
  absl::StatusOr<PcieLevel> PcieCommonAncestor(int gpu_a, int gpu_b) override;
  // Waits take the file's pending `xid_events` for the watched GPUs, polling
  // the file (another process, e.g. a test, appends them).
  absl::StatusOr<std::unique_ptr<XidEventWatcher>> WatchXidEvents(
      const std::vector<int>& gpus) override;

  // The backing file, for tests and tools that inspect or edit the state
  // (add a process, inject a fault, read call counters).
  const sim::SimStateFile& file() const { return file_; }

 private:
  sim::SimStateFile file_;
};

}  // namespace prism::nvml
