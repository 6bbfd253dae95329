#include "nvml/sim_nvml.h"

#include <algorithm>

#include "absl/time/clock.h"

#include "base/status_macros.h"
#include "base/strings.h"
#include "core/mig/gpu_model.h"
#include "nvml/nvml_errors.h"

namespace prism::nvml {
namespace {

absl::Status CheckIndex(const sim::SimState& state, int gpu, std::string_view call) {
  if (gpu < 0 || static_cast<size_t>(gpu) >= state.gpus.size()) {
    return NvmlError(kNvmlErrorInvalidArgument, call,
                     StrCat("no GPU ", gpu, " (", state.gpus.size(), " simulated)"));
  }
  return absl::OkStatus();
}

GpuInstanceInfo ToInfo(const sim::SimGpuInstance& gi) {
  GpuInstanceInfo info;
  info.id = gi.id;
  info.profile_id = gi.profile_id;
  info.start = gi.start;
  info.size = gi.size;
  for (const auto& ci : gi.compute_instances) {
    info.compute_instances.push_back(
        ComputeInstanceInfo{ci.id, ci.profile_index, ci.slice_count, ci.start, ci.uuid});
  }
  return info;
}

}  // namespace

absl::StatusOr<std::vector<GpuInfo>> SimNvml::ListGpus() {
  ASSIGN_OR_RETURN(sim::SimState state, file_.Read());
  std::vector<GpuInfo> out;
  for (size_t i = 0; i < state.gpus.size(); ++i) {
    const sim::SimGpu& g = state.gpus[i];
    GpuInfo info;
    info.index = static_cast<int>(i);
    info.uuid = g.uuid;
    info.name = g.name;
    info.pci_device_id = g.pci_device_id;
    info.pci_bus_id = g.pci_bus_id;
    info.memory_total_mib = g.memory_mib;
    info.mig_capable = g.mig_model != nullptr;
    out.push_back(std::move(info));
  }
  return out;
}

absl::StatusOr<MigModeState> SimNvml::GetMigMode(int gpu) {
  MigModeState mode;
  RETURN_IF_ERROR(file_.Transact([&](sim::SimState& s, bool*) -> absl::Status {
    RETURN_IF_ERROR(CheckIndex(s, gpu, "nvmlDeviceGetMigMode"));
    return NvmlError(sim::GetMigMode(s, gpu, &mode.current, &mode.pending), "nvmlDeviceGetMigMode");
  }));
  return mode;
}

absl::StatusOr<MigModeState> SimNvml::SetMigMode(int gpu, bool enabled) {
  MigModeState mode;
  RETURN_IF_ERROR(file_.Transact([&](sim::SimState& s, bool* changed) -> absl::Status {
    RETURN_IF_ERROR(CheckIndex(s, gpu, "nvmlDeviceSetMigMode"));
    int activation = 0;
    const int rc = sim::SetMigMode(s, gpu, enabled, &activation);
    *changed = rc == kNvmlSuccess;
    RETURN_IF_ERROR(NvmlError(rc, "nvmlDeviceSetMigMode"));
    mode.current = s.gpus[gpu].mig_current;
    mode.pending = s.gpus[gpu].mig_pending;
    return absl::OkStatus();
  }));
  return mode;
}

absl::Status SimNvml::ResetGpus(const std::vector<int>& gpus) {
  return file_.Transact([&](sim::SimState& s, bool* changed) -> absl::Status {
    for (int gpu : gpus) RETURN_IF_ERROR(CheckIndex(s, gpu, "GPU reset"));
    for (int gpu : gpus) {
      if (!s.gpus[gpu].processes.empty()) {
        return NvmlError(
            kNvmlErrorInUse, "GPU reset",
            StrCat("GPU ", gpu, " has ", s.gpus[gpu].processes.size(), " running processes"));
      }
    }
    for (int gpu : gpus) {
      const int rc = sim::ResetGpu(s, gpu);
      *changed = *changed || rc == kNvmlSuccess;
      RETURN_IF_ERROR(NvmlError(rc, "GPU reset", StrCat("GPU ", gpu)));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<GpuInstanceProfileInfo>> SimNvml::ListGpuInstanceProfiles(int gpu) {
  std::vector<GpuInstanceProfileInfo> out;
  RETURN_IF_ERROR(file_.Transact([&](sim::SimState& s, bool*) -> absl::Status {
    RETURN_IF_ERROR(CheckIndex(s, gpu, "nvmlDeviceGetGpuInstanceProfileInfo"));
    // Like a real caller: walk the profile indices until INVALID_ARGUMENT,
    // skipping NOT_SUPPORTED.
    for (int index = 0;; ++index) {
      const mig::GpuInstanceProfile* p = nullptr;
      const int rc = sim::GetProfileByIndex(s, gpu, index, &p);
      if (rc == kNvmlErrorInvalidArgument) break;
      if (rc == kNvmlErrorNotSupported && s.gpus[gpu].mig_model != nullptr) continue;
      RETURN_IF_ERROR(NvmlError(rc, "nvmlDeviceGetGpuInstanceProfileInfo"));
      GpuInstanceProfileInfo info;
      info.index = p->nvml_index;
      info.id = p->id;
      info.slice_count = p->compute_slices;
      info.instance_count = p->max_count;
      info.multiprocessors = p->multiprocessors;
      info.memory_mib = p->memory_mib;
      info.engines = EngineInfo{p->engines.copy, p->engines.decoder, p->engines.encoder,
                                p->engines.jpeg, p->engines.ofa};
      info.placement_starts = p->starts;
      info.placement_size = p->memory_slices;
      out.push_back(std::move(info));
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<GpuInstanceInfo>> SimNvml::ListGpuInstances(int gpu) {
  std::vector<GpuInstanceInfo> out;
  RETURN_IF_ERROR(file_.Transact([&](sim::SimState& s, bool*) -> absl::Status {
    RETURN_IF_ERROR(CheckIndex(s, gpu, "nvmlDeviceGetGpuInstances"));
    RETURN_IF_ERROR(NvmlError(sim::CheckFault(s, "ListGpuInstances"), "nvmlDeviceGetGpuInstances"));
    const sim::SimGpu& g = s.gpus[gpu];
    if (g.mig_model == nullptr || !g.mig_current) {
      return NvmlError(kNvmlErrorNotSupported, "nvmlDeviceGetGpuInstances", "MIG mode is disabled");
    }
    for (const auto& gi : g.gpu_instances) out.push_back(ToInfo(gi));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<GpuInstanceInfo> SimNvml::CreateGpuInstance(int gpu, int profile_id, int start) {
  GpuInstanceInfo out;
  RETURN_IF_ERROR(file_.Transact([&](sim::SimState& s, bool* changed) -> absl::Status {
    constexpr std::string_view kCall = "nvmlDeviceCreateGpuInstanceWithPlacement";
    RETURN_IF_ERROR(CheckIndex(s, gpu, kCall));
    int id = -1;
    const int rc = sim::CreateGpuInstance(s, gpu, profile_id, start, &id);
    RETURN_IF_ERROR(
        NvmlError(rc, kCall, StrCat("GPU ", gpu, " profile ", profile_id, " at ", start)));
    *changed = true;
    out = ToInfo(*sim::FindGpuInstance(s.gpus[gpu], id));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<ComputeInstanceInfo> SimNvml::CreateComputeInstance(int gpu, int gpu_instance_id,
                                                                   int slice_count) {
  ComputeInstanceInfo out;
  RETURN_IF_ERROR(file_.Transact([&](sim::SimState& s, bool* changed) -> absl::Status {
    constexpr std::string_view kCall = "nvmlGpuInstanceCreateComputeInstance";
    RETURN_IF_ERROR(CheckIndex(s, gpu, kCall));
    const int index = mig::ComputeInstanceProfileIndex(slice_count);
    if (index < 0) {
      return NvmlError(kNvmlErrorInvalidArgument, kCall,
                       StrCat("no compute-instance profile of ", slice_count, " slices"));
    }
    int id = -1;
    const int rc = sim::CreateComputeInstance(s, gpu, gpu_instance_id, index, &id);
    RETURN_IF_ERROR(NvmlError(rc, kCall, StrCat("GPU ", gpu, " GPU instance ", gpu_instance_id)));
    *changed = true;
    for (const auto& ci : sim::FindGpuInstance(s.gpus[gpu], gpu_instance_id)->compute_instances) {
      if (ci.id == id)
        out = ComputeInstanceInfo{ci.id, ci.profile_index, ci.slice_count, ci.start, ci.uuid};
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::Status SimNvml::DestroyComputeInstance(int gpu, int gpu_instance_id,
                                             int compute_instance_id) {
  return file_.Transact([&](sim::SimState& s, bool* changed) -> absl::Status {
    constexpr std::string_view kCall = "nvmlComputeInstanceDestroy";
    RETURN_IF_ERROR(CheckIndex(s, gpu, kCall));
    const int rc = sim::DestroyComputeInstance(s, gpu, gpu_instance_id, compute_instance_id);
    *changed = rc == kNvmlSuccess;
    return NvmlError(rc, kCall,
                     StrCat("GPU ", gpu, " GPU instance ", gpu_instance_id, " compute instance ",
                            compute_instance_id));
  });
}

absl::Status SimNvml::DestroyGpuInstance(int gpu, int gpu_instance_id) {
  return file_.Transact([&](sim::SimState& s, bool* changed) -> absl::Status {
    constexpr std::string_view kCall = "nvmlGpuInstanceDestroy";
    RETURN_IF_ERROR(CheckIndex(s, gpu, kCall));
    const int rc = sim::DestroyGpuInstance(s, gpu, gpu_instance_id);
    *changed = rc == kNvmlSuccess;
    return NvmlError(rc, kCall, StrCat("GPU ", gpu, " GPU instance ", gpu_instance_id));
  });
}

absl::StatusOr<std::vector<ProcessInfo>> SimNvml::ListProcesses(int gpu) {
  std::vector<ProcessInfo> out;
  RETURN_IF_ERROR(file_.Transact([&](sim::SimState& s, bool*) -> absl::Status {
    constexpr std::string_view kCall = "nvmlDeviceGetComputeRunningProcesses_v3";
    RETURN_IF_ERROR(CheckIndex(s, gpu, kCall));
    RETURN_IF_ERROR(NvmlError(sim::CheckFault(s, "ListProcesses"), kCall));
    for (const auto& p : s.gpus[gpu].processes) {
      out.push_back(
          ProcessInfo{p.pid, p.used_memory_mib, p.gpu_instance_id, p.compute_instance_id});
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<ProcessUtilizationSample>> SimNvml::ProcessUtilization(
    int gpu, uint64_t since_us) {
  std::vector<ProcessUtilizationSample> out;
  RETURN_IF_ERROR(file_.Transact([&](sim::SimState& s, bool*) -> absl::Status {
    constexpr std::string_view kCall = "nvmlDeviceGetProcessUtilization";
    RETURN_IF_ERROR(CheckIndex(s, gpu, kCall));
    RETURN_IF_ERROR(NvmlError(sim::CheckFault(s, "ProcessUtilization"), kCall));
    if (s.gpus[gpu].mig_current) {
      return NvmlError(kNvmlErrorNotSupported, kCall, StrCat("GPU ", gpu, " (MIG mode)"));
    }
    const uint64_t now_us = static_cast<uint64_t>(absl::ToUnixMicros(absl::Now()));
    if (now_us <= since_us) return absl::OkStatus();
    for (const auto& p : s.gpus[gpu].processes) {
      if (p.sm_util_percent < 0) continue;
      out.push_back(ProcessUtilizationSample{p.pid, now_us, p.sm_util_percent, 0});
    }
    return absl::OkStatus();
  }));
  return out;
}

namespace {

class SimXidEventWatcher final : public XidEventWatcher {
 public:
  SimXidEventWatcher(std::string path, std::vector<int> gpus, std::vector<int> unsupported)
      : file_(std::move(path)), gpus_(std::move(gpus)), unsupported_(std::move(unsupported)) {}

  absl::StatusOr<std::optional<XidEvent>> Wait(absl::Duration timeout) override {
    // How often the file is re-read while waiting: the events come from another writer.
    constexpr absl::Duration kPoll = absl::Milliseconds(10);
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      sim::SimXidEvent taken;
      int rc = kNvmlErrorUnknown;
      RETURN_IF_ERROR(file_.Transact([&](sim::SimState& s, bool* changed) -> absl::Status {
        const std::vector<sim::SimFault> faults_before = s.faults;
        rc = sim::TakeXidEvent(s, gpus_, &taken);
        *changed = rc == kNvmlSuccess || s.faults != faults_before;
        return absl::OkStatus();
      }));
      if (rc == kNvmlSuccess) {
        return XidEvent{taken.gpu, taken.xid, taken.gpu_instance_id, taken.compute_instance_id};
      }
      if (rc != kNvmlErrorTimeout) return NvmlError(rc, "nvmlEventSetWait_v2");
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return std::nullopt;
      absl::SleepFor(std::min(left, kPoll));
    }
  }

  const std::vector<int>& unsupported_gpus() const override { return unsupported_; }

 private:
  sim::SimStateFile file_;
  std::vector<int> gpus_;
  std::vector<int> unsupported_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<XidEventWatcher>> SimNvml::WatchXidEvents(
    const std::vector<int>& gpus) {
  std::vector<int> watched;
  std::vector<int> unsupported;
  RETURN_IF_ERROR(file_.Transact([&](sim::SimState& s, bool*) -> absl::Status {
    for (int gpu : gpus) {
      RETURN_IF_ERROR(CheckIndex(s, gpu, "nvmlDeviceRegisterEvents"));
      (s.gpus[gpu].events_supported ? watched : unsupported).push_back(gpu);
    }
    return absl::OkStatus();
  }));
  if (watched.empty()) return absl::UnimplementedError("no GPU supports critical XID events");
  return std::unique_ptr<XidEventWatcher>(std::make_unique<SimXidEventWatcher>(
      file_.path(), std::move(watched), std::move(unsupported)));
}

// ---- Topology -------------------------------------------------------------------------------

absl::StatusOr<int> SimNvml::NumaNode(int gpu) {
  int node = -1;
  RETURN_IF_ERROR(file_.Transact([&](sim::SimState& s, bool*) -> absl::Status {
    constexpr std::string_view kCall = "nvmlDeviceGetNumaNodeId";
    RETURN_IF_ERROR(CheckIndex(s, gpu, kCall));
    return NvmlError(sim::GetNumaNode(s, gpu, &node), kCall, StrCat("GPU ", gpu));
  }));
  return node;
}

absl::StatusOr<std::string> SimNvml::CpuAffinity(int gpu) {
  std::string cpus;
  RETURN_IF_ERROR(file_.Transact([&](sim::SimState& s, bool*) -> absl::Status {
    constexpr std::string_view kCall = "nvmlDeviceGetCpuAffinity";
    RETURN_IF_ERROR(CheckIndex(s, gpu, kCall));
    return NvmlError(sim::GetCpuAffinity(s, gpu, &cpus), kCall, StrCat("GPU ", gpu));
  }));
  return cpus;
}

absl::StatusOr<std::vector<NvLinkRemote>> SimNvml::ActiveNvLinks(int gpu) {
  std::vector<NvLinkRemote> out;
  RETURN_IF_ERROR(file_.Transact([&](sim::SimState& s, bool*) -> absl::Status {
    constexpr std::string_view kCall = "nvmlDeviceGetNvLinkState";
    RETURN_IF_ERROR(CheckIndex(s, gpu, kCall));
    std::vector<sim::SimNvLink> links;
    RETURN_IF_ERROR(NvmlError(sim::GetNvLinks(s, gpu, &links), kCall, StrCat("GPU ", gpu)));
    for (size_t i = 0; i < links.size(); ++i) {
      out.push_back(NvLinkRemote{static_cast<int>(i), links[i].remote_pci_bus_id,
                                 links[i].to_switch ? NvLinkPeer::kSwitch : NvLinkPeer::kGpu});
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<bool> SimNvml::NvLinkP2P(int gpu_a, int gpu_b) {
  bool ok = false;
  RETURN_IF_ERROR(file_.Transact([&](sim::SimState& s, bool*) -> absl::Status {
    constexpr std::string_view kCall = "nvmlDeviceGetP2PStatus";
    RETURN_IF_ERROR(CheckIndex(s, gpu_a, kCall));
    RETURN_IF_ERROR(CheckIndex(s, gpu_b, kCall));
    return NvmlError(sim::GetNvLinkP2P(s, gpu_a, gpu_b, &ok), kCall,
                     StrCat("GPUs ", gpu_a, " and ", gpu_b));
  }));
  return ok;
}

absl::StatusOr<PcieLevel> SimNvml::PcieCommonAncestor(int gpu_a, int gpu_b) {
  int level = 0;
  RETURN_IF_ERROR(file_.Transact([&](sim::SimState& s, bool*) -> absl::Status {
    constexpr std::string_view kCall = "nvmlDeviceGetTopologyCommonAncestor";
    RETURN_IF_ERROR(CheckIndex(s, gpu_a, kCall));
    RETURN_IF_ERROR(CheckIndex(s, gpu_b, kCall));
    return NvmlError(sim::GetCommonAncestor(s, gpu_a, gpu_b, &level), kCall,
                     StrCat("GPUs ", gpu_a, " and ", gpu_b));
  }));
  return static_cast<PcieLevel>(level);
}

}  // namespace prism::nvml
