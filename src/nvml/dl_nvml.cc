#include "nvml/dl_nvml.h"

#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "base/status_macros.h"
#include "base/strings.h"
#include "core/mig/gpu_model.h"
#include "core/topo/topology.h"
#include "nvml/nvml_abi.h"
#include "nvml/nvml_errors.h"
#include "nvml/topology.h"

extern char** environ;

namespace prism::nvml {

struct DlNvml::Symbols {
#define NVML_REQUIRED(name) decltype(&::name) name = nullptr;
#define NVML_OPTIONAL(name) decltype(&::name) name = nullptr;
#include "nvml/nvml_symbols.def"
#undef NVML_REQUIRED
#undef NVML_OPTIONAL
};

namespace {

std::string CString(const char* buf, size_t size) { return std::string(buf, strnlen(buf, size)); }

// Runs argv[0] with argv, returning its exit status and what it wrote to
// stdout/stderr (truncated).
absl::Status RunProgram(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return absl::UnavailableError("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    return absl::FailedPreconditionError(StrCat("cannot run ", argv[0], ": ", std::strerror(rc)));
  }
  std::string output;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buf, sizeof(buf))) > 0) {
    if (output.size() < 8192) output.append(buf, static_cast<size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  return absl::UnavailableError(
      StrCat(StrJoin(argv, " "), " failed (status ", status, "): ", StripWhitespace(output)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DlNvml>> DlNvml::Open(const std::string& library) {
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = ::dlerror();
    return absl::FailedPreconditionError(
        StrCat("cannot load ", library,
               " (is the NVIDIA driver installed?): ", err ? err : "unknown error"));
  }
  auto sym = std::make_unique<Symbols>();
  std::vector<std::string> missing;
#define NVML_REQUIRED(name)                                                  \
  sym->name = reinterpret_cast<decltype(sym->name)>(::dlsym(handle, #name)); \
  if (sym->name == nullptr) missing.push_back(#name);
#define NVML_OPTIONAL(name) \
  sym->name = reinterpret_cast<decltype(sym->name)>(::dlsym(handle, #name));
#include "nvml/nvml_symbols.def"
#undef NVML_REQUIRED
#undef NVML_OPTIONAL
  if (!missing.empty()) {
    ::dlclose(handle);
    return absl::FailedPreconditionError(StrCat(
        library, " lacks required NVML entry points (driver too old?): ", StrJoin(missing, ", ")));
  }
  if (auto s = NvmlError(sym->nvmlInit_v2(), "nvmlInit_v2"); !s.ok()) {
    ::dlclose(handle);
    return s;
  }
  return std::unique_ptr<DlNvml>(new DlNvml(handle, std::move(sym)));
}

DlNvml::DlNvml(void* handle, std::unique_ptr<Symbols> symbols)
    : handle_(handle), sym_(std::move(symbols)) {}

DlNvml::~DlNvml() {
  sym_->nvmlShutdown();
  // The library stays loaded: NVML keeps process-wide state, and unloading
  // would strand whatever it allocated (LeakSanitizer reports it as leaked).
  (void)handle_;
}

std::string DlNvml::DriverVersion() {
  char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  if (sym_->nvmlSystemGetDriverVersion == nullptr ||
      sym_->nvmlSystemGetDriverVersion(buf, sizeof(buf)) != 0) {
    return "unknown";
  }
  return CString(buf, sizeof(buf));
}

namespace {

// Resolves a GPU index to its handle.
template <typename Sym>
absl::StatusOr<nvmlDevice_t> Device(const Sym& sym, int gpu) {
  nvmlDevice_t device = nullptr;
  if (gpu < 0) return NvmlError(kNvmlErrorInvalidArgument, "nvmlDeviceGetHandleByIndex_v2");
  RETURN_IF_ERROR(NvmlError(sym.nvmlDeviceGetHandleByIndex_v2(static_cast<unsigned>(gpu), &device),
                            "nvmlDeviceGetHandleByIndex_v2", StrCat("GPU ", gpu)));
  return device;
}

}  // namespace

absl::StatusOr<std::vector<GpuInfo>> DlNvml::ListGpus() {
  unsigned int count = 0;
  RETURN_IF_ERROR(NvmlError(sym_->nvmlDeviceGetCount_v2(&count), "nvmlDeviceGetCount_v2"));
  std::vector<GpuInfo> out;
  for (unsigned int i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(nvmlDevice_t device, Device(*sym_, static_cast<int>(i)));
    GpuInfo info;
    info.index = static_cast<int>(i);
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    RETURN_IF_ERROR(
        NvmlError(sym_->nvmlDeviceGetUUID(device, buf, sizeof(buf)), "nvmlDeviceGetUUID"));
    info.uuid = CString(buf, sizeof(buf));
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    RETURN_IF_ERROR(
        NvmlError(sym_->nvmlDeviceGetName(device, name, sizeof(name)), "nvmlDeviceGetName"));
    info.name = CString(name, sizeof(name));
    nvmlPciInfo_t pci{};
    RETURN_IF_ERROR(
        NvmlError(sym_->nvmlDeviceGetPciInfo_v3(device, &pci), "nvmlDeviceGetPciInfo_v3"));
    info.pci_device_id = pci.pciDeviceId;
    info.pci_subsystem_id = pci.pciSubSystemId;
    info.pci_bus_id = CString(pci.busId, sizeof(pci.busId));
    nvmlMemory_t memory{};
    RETURN_IF_ERROR(
        NvmlError(sym_->nvmlDeviceGetMemoryInfo(device, &memory), "nvmlDeviceGetMemoryInfo"));
    info.memory_total_mib = static_cast<int64_t>(memory.total >> 20);
    unsigned int current = 0;
    unsigned int pending = 0;
    info.mig_capable = sym_->nvmlDeviceGetMigMode(device, &current, &pending) == kNvmlSuccess;
    out.push_back(std::move(info));
  }
  return out;
}

absl::StatusOr<MigModeState> DlNvml::GetMigMode(int gpu) {
  ASSIGN_OR_RETURN(nvmlDevice_t device, Device(*sym_, gpu));
  unsigned int current = 0;
  unsigned int pending = 0;
  RETURN_IF_ERROR(NvmlError(sym_->nvmlDeviceGetMigMode(device, &current, &pending),
                            "nvmlDeviceGetMigMode", StrCat("GPU ", gpu)));
  return MigModeState{current == NVML_DEVICE_MIG_ENABLE, pending == NVML_DEVICE_MIG_ENABLE};
}

absl::StatusOr<MigModeState> DlNvml::SetMigMode(int gpu, bool enabled) {
  ASSIGN_OR_RETURN(nvmlDevice_t device, Device(*sym_, gpu));
  nvmlReturn_t activation = 0;
  RETURN_IF_ERROR(NvmlError(
      sym_->nvmlDeviceSetMigMode(device, enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE,
                                 &activation),
      "nvmlDeviceSetMigMode", StrCat("GPU ", gpu)));
  // The handle may change when the driver resets the device: look it up again.
  return GetMigMode(gpu);
}

absl::Status DlNvml::ResetGpus(const std::vector<int>& gpus) {
  if (gpus.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(auto all, ListGpus());
  std::vector<std::string> bus_ids;
  for (int gpu : gpus) {
    if (gpu < 0 || static_cast<size_t>(gpu) >= all.size()) {
      return absl::InvalidArgumentError(StrCat("GPU reset: no GPU ", gpu));
    }
    bus_ids.push_back(all[gpu].pci_bus_id);
  }
  const char* smi = std::getenv("PRISM_NVIDIA_SMI");
  return RunProgram(
      {smi != nullptr && *smi ? smi : "nvidia-smi", "-r", "-i", StrJoin(bus_ids, ",")});
}

absl::StatusOr<std::vector<GpuInstanceProfileInfo>> DlNvml::ListGpuInstanceProfiles(int gpu) {
  ASSIGN_OR_RETURN(nvmlDevice_t device, Device(*sym_, gpu));
  std::vector<GpuInstanceProfileInfo> out;
  for (unsigned int index = 0; index < NVML_GPU_INSTANCE_PROFILE_COUNT; ++index) {
    nvmlGpuInstanceProfileInfo_t info{};
    const int rc = sym_->nvmlDeviceGetGpuInstanceProfileInfo(device, index, &info);
    // Older drivers define fewer profiles (INVALID_ARGUMENT); absent ones are NOT_SUPPORTED.
    if (rc == kNvmlErrorInvalidArgument) break;
    if (rc == kNvmlErrorNotSupported) continue;
    RETURN_IF_ERROR(NvmlError(rc, "nvmlDeviceGetGpuInstanceProfileInfo",
                              StrCat("GPU ", gpu, " profile index ", index)));
    GpuInstanceProfileInfo p;
    p.index = static_cast<int>(index);
    p.id = static_cast<int>(info.id);
    p.slice_count = static_cast<int>(info.sliceCount);
    p.instance_count = static_cast<int>(info.instanceCount);
    p.multiprocessors = static_cast<int>(info.multiprocessorCount);
    p.memory_mib = static_cast<int64_t>(info.memorySizeMB);
    p.engines = EngineInfo{static_cast<int>(info.copyEngineCount),
                           static_cast<int>(info.decoderCount), static_cast<int>(info.encoderCount),
                           static_cast<int>(info.jpegCount), static_cast<int>(info.ofaCount)};
    unsigned int count = 0;
    RETURN_IF_ERROR(NvmlError(
        sym_->nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, info.id, nullptr, &count),
        "nvmlDeviceGetGpuInstancePossiblePlacements_v2"));
    std::vector<nvmlGpuInstancePlacement_t> placements(count);
    if (count > 0) {
      RETURN_IF_ERROR(NvmlError(sym_->nvmlDeviceGetGpuInstancePossiblePlacements_v2(
                                    device, info.id, placements.data(), &count),
                                "nvmlDeviceGetGpuInstancePossiblePlacements_v2"));
    }
    for (unsigned int i = 0; i < count; ++i) {
      p.placement_starts.push_back(static_cast<int>(placements[i].start));
      p.placement_size = static_cast<int>(placements[i].size);
    }
    out.push_back(std::move(p));
  }
  return out;
}

namespace {

template <typename Sym>
absl::StatusOr<ComputeInstanceInfo> ReadComputeInstance(const Sym& sym, nvmlComputeInstance_t ci) {
  nvmlComputeInstanceInfo_t info{};
  RETURN_IF_ERROR(
      NvmlError(sym.nvmlComputeInstanceGetInfo_v2(ci, &info), "nvmlComputeInstanceGetInfo_v2"));
  ComputeInstanceInfo out;
  out.id = static_cast<int>(info.id);
  out.profile_id = static_cast<int>(info.profileId);
  out.slice_count = static_cast<int>(info.placement.size);
  out.start = static_cast<int>(info.placement.start);
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  RETURN_IF_ERROR(NvmlError(sym.nvmlDeviceGetUUID(info.device, uuid, sizeof(uuid)),
                            "nvmlDeviceGetUUID", "MIG device"));
  out.uuid = CString(uuid, sizeof(uuid));
  return out;
}

template <typename Sym>
absl::StatusOr<GpuInstanceInfo> ReadGpuInstance(const Sym& sym, nvmlGpuInstance_t gi) {
  nvmlGpuInstanceInfo_t info{};
  RETURN_IF_ERROR(NvmlError(sym.nvmlGpuInstanceGetInfo(gi, &info), "nvmlGpuInstanceGetInfo"));
  GpuInstanceInfo out;
  out.id = static_cast<int>(info.id);
  out.profile_id = static_cast<int>(info.profileId);
  out.start = static_cast<int>(info.placement.start);
  out.size = static_cast<int>(info.placement.size);
  for (unsigned int index = 0; index < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ++index) {
    nvmlComputeInstanceProfileInfo_t ci_profile{};
    const int rc = sym.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, index, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_profile);
    if (rc == kNvmlErrorInvalidArgument) break;
    if (rc == kNvmlErrorNotSupported) continue;
    RETURN_IF_ERROR(NvmlError(rc, "nvmlGpuInstanceGetComputeInstanceProfileInfo"));
    unsigned int count = ci_profile.instanceCount;
    std::vector<nvmlComputeInstance_t> cis(count > 0 ? count : 1);
    RETURN_IF_ERROR(
        NvmlError(sym.nvmlGpuInstanceGetComputeInstances(gi, ci_profile.id, cis.data(), &count),
                  "nvmlGpuInstanceGetComputeInstances"));
    for (unsigned int i = 0; i < count; ++i) {
      ASSIGN_OR_RETURN(ComputeInstanceInfo ci, ReadComputeInstance(sym, cis[i]));
      out.compute_instances.push_back(std::move(ci));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<GpuInstanceInfo>> DlNvml::ListGpuInstances(int gpu) {
  ASSIGN_OR_RETURN(nvmlDevice_t device, Device(*sym_, gpu));
  ASSIGN_OR_RETURN(auto profiles, ListGpuInstanceProfiles(gpu));
  std::vector<GpuInstanceInfo> out;
  for (const auto& profile : profiles) {
    unsigned int count = static_cast<unsigned>(profile.instance_count);
    std::vector<nvmlGpuInstance_t> gis(count > 0 ? count : 1);
    RETURN_IF_ERROR(NvmlError(sym_->nvmlDeviceGetGpuInstances(
                                  device, static_cast<unsigned>(profile.id), gis.data(), &count),
                              "nvmlDeviceGetGpuInstances", StrCat("GPU ", gpu)));
    for (unsigned int i = 0; i < count; ++i) {
      ASSIGN_OR_RETURN(GpuInstanceInfo gi, ReadGpuInstance(*sym_, gis[i]));
      out.push_back(std::move(gi));
    }
  }
  return out;
}

absl::StatusOr<GpuInstanceInfo> DlNvml::CreateGpuInstance(int gpu, int profile_id, int start) {
  ASSIGN_OR_RETURN(nvmlDevice_t device, Device(*sym_, gpu));
  ASSIGN_OR_RETURN(auto profiles, ListGpuInstanceProfiles(gpu));
  int size = -1;
  for (const auto& p : profiles) {
    if (p.id == profile_id) size = p.placement_size;
  }
  if (size <= 0) {
    return NvmlError(kNvmlErrorInvalidArgument, "nvmlDeviceCreateGpuInstanceWithPlacement",
                     StrCat("GPU ", gpu, " has no GPU-instance profile ID ", profile_id));
  }
  nvmlGpuInstancePlacement_t placement{static_cast<unsigned>(start), static_cast<unsigned>(size)};
  nvmlGpuInstance_t gi = nullptr;
  RETURN_IF_ERROR(NvmlError(sym_->nvmlDeviceCreateGpuInstanceWithPlacement(
                                device, static_cast<unsigned>(profile_id), &placement, &gi),
                            "nvmlDeviceCreateGpuInstanceWithPlacement",
                            StrCat("GPU ", gpu, " profile ", profile_id, " at ", start)));
  return ReadGpuInstance(*sym_, gi);
}

absl::StatusOr<ComputeInstanceInfo> DlNvml::CreateComputeInstance(int gpu, int gpu_instance_id,
                                                                  int slice_count) {
  ASSIGN_OR_RETURN(nvmlDevice_t device, Device(*sym_, gpu));
  nvmlGpuInstance_t gi = nullptr;
  RETURN_IF_ERROR(NvmlError(
      sym_->nvmlDeviceGetGpuInstanceById(device, static_cast<unsigned>(gpu_instance_id), &gi),
      "nvmlDeviceGetGpuInstanceById", StrCat("GPU ", gpu, " GPU instance ", gpu_instance_id)));
  const int index = mig::ComputeInstanceProfileIndex(slice_count);
  if (index < 0) {
    return NvmlError(kNvmlErrorInvalidArgument, "nvmlGpuInstanceCreateComputeInstance",
                     StrCat("no compute-instance profile of ", slice_count, " slices"));
  }
  nvmlComputeInstanceProfileInfo_t profile{};
  RETURN_IF_ERROR(NvmlError(
      sym_->nvmlGpuInstanceGetComputeInstanceProfileInfo(
          gi, static_cast<unsigned>(index), NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &profile),
      "nvmlGpuInstanceGetComputeInstanceProfileInfo"));
  nvmlComputeInstance_t ci = nullptr;
  RETURN_IF_ERROR(NvmlError(sym_->nvmlGpuInstanceCreateComputeInstance(gi, profile.id, &ci),
                            "nvmlGpuInstanceCreateComputeInstance",
                            StrCat("GPU ", gpu, " GPU instance ", gpu_instance_id)));
  return ReadComputeInstance(*sym_, ci);
}

absl::Status DlNvml::DestroyComputeInstance(int gpu, int gpu_instance_id, int compute_instance_id) {
  ASSIGN_OR_RETURN(nvmlDevice_t device, Device(*sym_, gpu));
  const std::string where = StrCat("GPU ", gpu, " GPU instance ", gpu_instance_id,
                                   " compute instance ", compute_instance_id);
  nvmlGpuInstance_t gi = nullptr;
  RETURN_IF_ERROR(NvmlError(
      sym_->nvmlDeviceGetGpuInstanceById(device, static_cast<unsigned>(gpu_instance_id), &gi),
      "nvmlDeviceGetGpuInstanceById", where));
  nvmlComputeInstance_t ci = nullptr;
  RETURN_IF_ERROR(NvmlError(sym_->nvmlGpuInstanceGetComputeInstanceById(
                                gi, static_cast<unsigned>(compute_instance_id), &ci),
                            "nvmlGpuInstanceGetComputeInstanceById", where));
  return NvmlError(sym_->nvmlComputeInstanceDestroy(ci), "nvmlComputeInstanceDestroy", where);
}

absl::Status DlNvml::DestroyGpuInstance(int gpu, int gpu_instance_id) {
  ASSIGN_OR_RETURN(nvmlDevice_t device, Device(*sym_, gpu));
  const std::string where = StrCat("GPU ", gpu, " GPU instance ", gpu_instance_id);
  nvmlGpuInstance_t gi = nullptr;
  RETURN_IF_ERROR(NvmlError(
      sym_->nvmlDeviceGetGpuInstanceById(device, static_cast<unsigned>(gpu_instance_id), &gi),
      "nvmlDeviceGetGpuInstanceById", where));
  return NvmlError(sym_->nvmlGpuInstanceDestroy(gi), "nvmlGpuInstanceDestroy", where);
}

absl::StatusOr<std::vector<ProcessInfo>> DlNvml::ListProcesses(int gpu) {
  ASSIGN_OR_RETURN(nvmlDevice_t device, Device(*sym_, gpu));
  std::vector<nvmlProcessInfo_t> infos(16);
  for (int attempt = 0;; ++attempt) {
    unsigned int count = static_cast<unsigned>(infos.size());
    const int rc = sym_->nvmlDeviceGetComputeRunningProcesses_v3(device, &count, infos.data());
    if (rc == kNvmlErrorInsufficientSize && attempt < 4) {
      infos.resize(count + 16);  // Processes may start between the two calls.
      continue;
    }
    RETURN_IF_ERROR(NvmlError(rc, "nvmlDeviceGetComputeRunningProcesses_v3", StrCat("GPU ", gpu)));
    std::vector<ProcessInfo> out;
    for (unsigned int i = 0; i < count; ++i) {
      ProcessInfo p;
      p.pid = infos[i].pid;
      p.used_memory_mib = static_cast<int64_t>(infos[i].usedGpuMemory >> 20);
      // Without MIG the driver reports 0xFFFFFFFF for the instance IDs.
      p.gpu_instance_id =
          infos[i].gpuInstanceId == 0xFFFFFFFFu ? -1 : static_cast<int>(infos[i].gpuInstanceId);
      p.compute_instance_id = infos[i].computeInstanceId == 0xFFFFFFFFu
                                  ? -1
                                  : static_cast<int>(infos[i].computeInstanceId);
      out.push_back(p);
    }
    return out;
  }
}

absl::StatusOr<std::vector<ProcessUtilizationSample>> DlNvml::ProcessUtilization(
    int gpu, uint64_t since_us) {
  if (sym_->nvmlDeviceGetProcessUtilization == nullptr) {
    return absl::UnimplementedError(
        "the NVIDIA driver lacks nvmlDeviceGetProcessUtilization: no process utilization");
  }
  ASSIGN_OR_RETURN(nvmlDevice_t device, Device(*sym_, gpu));
  std::vector<nvmlProcessUtilizationSample_t> samples(64);
  for (int attempt = 0;; ++attempt) {
    unsigned int count = static_cast<unsigned>(samples.size());
    const int rc = sym_->nvmlDeviceGetProcessUtilization(device, samples.data(), &count, since_us);
    if (rc == kNvmlErrorInsufficientSize && attempt < 4) {
      samples.resize(count + 16);  // Samples may arrive between the two calls.
      continue;
    }
    if (rc == kNvmlErrorNotFound) return std::vector<ProcessUtilizationSample>{};  // No samples.
    RETURN_IF_ERROR(NvmlError(rc, "nvmlDeviceGetProcessUtilization", StrCat("GPU ", gpu)));
    std::vector<ProcessUtilizationSample> out;
    for (unsigned int i = 0; i < count && i < samples.size(); ++i) {
      ProcessUtilizationSample u;
      u.pid = samples[i].pid;
      u.timestamp_us = samples[i].timeStamp;
      u.sm_percent = static_cast<int>(std::min(samples[i].smUtil, 100u));
      u.memory_percent = static_cast<int>(std::min(samples[i].memUtil, 100u));
      out.push_back(u);
    }
    return out;
  }
}

namespace {

// Owns an NVML event set registered for critical XIDs.
class DlXidEventWatcher final : public XidEventWatcher {
 public:
  using WaitFn = decltype(&::nvmlEventSetWait_v2);
  using FreeFn = decltype(&::nvmlEventSetFree);

  DlXidEventWatcher(nvmlEventSet_t set, WaitFn wait, FreeFn free)
      : set_(set), wait_(wait), free_(free) {}
  ~DlXidEventWatcher() override { free_(set_); }
  DlXidEventWatcher(const DlXidEventWatcher&) = delete;
  DlXidEventWatcher& operator=(const DlXidEventWatcher&) = delete;

  void AddDevice(nvmlDevice_t device, int gpu) { devices_.emplace_back(device, gpu); }
  void AddUnsupported(int gpu) { unsupported_.push_back(gpu); }
  bool empty() const { return devices_.empty(); }

  absl::StatusOr<std::optional<XidEvent>> Wait(absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
      const unsigned int ms = static_cast<unsigned int>(
          std::min<int64_t>(absl::ToInt64Milliseconds(left), int64_t{UINT_MAX} - 1));
      nvmlEventData_t data{};
      const int rc = wait_(set_, &data, ms);
      if (rc == kNvmlErrorTimeout) return std::nullopt;
      RETURN_IF_ERROR(NvmlError(rc, "nvmlEventSetWait_v2"));
      // Only XIDs are registered; anything else is skipped until the deadline.
      if ((static_cast<unsigned long long>(data.eventType) & nvmlEventTypeXidCriticalError) == 0) {
        if (left <= absl::ZeroDuration()) return std::nullopt;
        continue;
      }
      XidEvent event;
      for (const auto& [device, gpu] : devices_) {
        if (device == data.device) event.gpu = gpu;
      }
      if (event.gpu < 0) {
        return absl::InternalError("nvmlEventSetWait_v2 returned an event for an unknown device");
      }
      event.xid = data.eventData;
      event.gpu_instance_id =
          data.gpuInstanceId == 0xFFFFFFFFu ? -1 : static_cast<int>(data.gpuInstanceId);
      event.compute_instance_id =
          data.computeInstanceId == 0xFFFFFFFFu ? -1 : static_cast<int>(data.computeInstanceId);
      return event;
    }
  }

  const std::vector<int>& unsupported_gpus() const override { return unsupported_; }

 private:
  nvmlEventSet_t set_;
  WaitFn wait_;
  FreeFn free_;
  std::vector<std::pair<nvmlDevice_t, int>> devices_;
  std::vector<int> unsupported_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<XidEventWatcher>> DlNvml::WatchXidEvents(
    const std::vector<int>& gpus) {
  std::vector<std::string> missing;
  if (sym_->nvmlEventSetCreate == nullptr) missing.push_back("nvmlEventSetCreate");
  if (sym_->nvmlDeviceGetSupportedEventTypes == nullptr) {
    missing.push_back("nvmlDeviceGetSupportedEventTypes");
  }
  if (sym_->nvmlDeviceRegisterEvents == nullptr) missing.push_back("nvmlDeviceRegisterEvents");
  if (sym_->nvmlEventSetWait_v2 == nullptr) missing.push_back("nvmlEventSetWait_v2");
  if (sym_->nvmlEventSetFree == nullptr) missing.push_back("nvmlEventSetFree");
  if (!missing.empty()) {
    return absl::UnimplementedError(
        StrCat("the NVML library lacks the event API (driver too old?): ", StrJoin(missing, ", ")));
  }
  nvmlEventSet_t set = nullptr;
  RETURN_IF_ERROR(NvmlError(sym_->nvmlEventSetCreate(&set), "nvmlEventSetCreate"));
  auto watcher =
      std::make_unique<DlXidEventWatcher>(set, sym_->nvmlEventSetWait_v2, sym_->nvmlEventSetFree);
  for (int gpu : gpus) {
    ASSIGN_OR_RETURN(nvmlDevice_t device, Device(*sym_, gpu));
    unsigned long long supported = 0;
    int rc = sym_->nvmlDeviceGetSupportedEventTypes(device, &supported);
    if (rc == kNvmlErrorNotSupported ||
        (rc == kNvmlSuccess && (supported & nvmlEventTypeXidCriticalError) == 0)) {
      watcher->AddUnsupported(gpu);
      continue;
    }
    RETURN_IF_ERROR(NvmlError(rc, "nvmlDeviceGetSupportedEventTypes", StrCat("GPU ", gpu)));
    rc = sym_->nvmlDeviceRegisterEvents(device, nvmlEventTypeXidCriticalError, set);
    if (rc == kNvmlErrorNotSupported) {
      watcher->AddUnsupported(gpu);
      continue;
    }
    RETURN_IF_ERROR(NvmlError(rc, "nvmlDeviceRegisterEvents", StrCat("GPU ", gpu)));
    watcher->AddDevice(device, gpu);
  }
  if (watcher->empty()) {
    return absl::UnimplementedError("no GPU supports critical XID events");
  }
  return watcher;
}

// ---- Topology -------------------------------------------------------------------------------

namespace {

absl::Status Missing(std::string_view symbol) {
  return absl::UnimplementedError(StrCat("the NVIDIA driver lacks ", symbol));
}

}  // namespace

absl::StatusOr<int> DlNvml::NumaNode(int gpu) {
  ASSIGN_OR_RETURN(nvmlDevice_t device, Device(*sym_, gpu));
  nvmlPciInfo_t pci{};
  RETURN_IF_ERROR(NvmlError(sym_->nvmlDeviceGetPciInfo_v3(device, &pci), "nvmlDeviceGetPciInfo_v3",
                            StrCat("GPU ", gpu)));
  const std::string path = StrCat(sysfs_root_, "/bus/pci/devices/",
                                  PciBusIdSysfsForm(CString(pci.busId, sizeof(pci.busId))), "/numa_node");
  std::string sysfs_error;
  bool sysfs_said_none = false;
  if (std::ifstream in(path); in) {
    std::string text;
    std::getline(in, text);
    // The kernel writes a decimal, -1 when the firmware assigns the device to no node.
    int node = 0;
    const std::string_view t = StripWhitespace(text);
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), node);
    if (ec == std::errc() && end == t.data() + t.size() && node >= -1 &&
        node <= topo::kMaxNumaNode) {
      if (node >= 0) return node;
      sysfs_error = StrCat(path, " is -1");
      sysfs_said_none = true;
    } else {
      sysfs_error = StrCat(path, " holds ", QuoteBounded(t));
    }
  } else {
    sysfs_error = StrCat("cannot read ", path);
  }
  unsigned int node = 0;
  const int rc = sym_->nvmlDeviceGetNumaNodeId == nullptr
                     ? kNvmlErrorFunctionNotFound
                     : sym_->nvmlDeviceGetNumaNodeId(device, &node);
  if (rc != kNvmlSuccess) {
    if (sysfs_said_none) return -1;
    return Annotate(NvmlError(rc, "nvmlDeviceGetNumaNodeId", StrCat("GPU ", gpu)), sysfs_error);
  }
  // Bad data (0xFFFFFFFF: "none" read as unsigned) is "none", as in sysfs.
  if (node > static_cast<unsigned>(topo::kMaxNumaNode)) return -1;
  return static_cast<int>(node);
}

absl::StatusOr<std::string> DlNvml::CpuAffinity(int gpu) {
  if (sym_->nvmlDeviceGetCpuAffinity == nullptr) return Missing("nvmlDeviceGetCpuAffinity");
  ASSIGN_OR_RETURN(nvmlDevice_t device, Device(*sym_, gpu));
  // 64 words: 4,096 CPUs, more than any machine NVML runs on.
  std::vector<unsigned long> words(64);
  RETURN_IF_ERROR(NvmlError(sym_->nvmlDeviceGetCpuAffinity(
                                device, static_cast<unsigned>(words.size()), words.data()),
                            "nvmlDeviceGetCpuAffinity", StrCat("GPU ", gpu)));
  return topo::CpuListFromMask(std::vector<uint64_t>(words.begin(), words.end()));
}

absl::StatusOr<std::vector<NvLinkRemote>> DlNvml::ActiveNvLinks(int gpu) {
  if (sym_->nvmlDeviceGetNvLinkState == nullptr) return Missing("nvmlDeviceGetNvLinkState");
  if (sym_->nvmlDeviceGetNvLinkRemotePciInfo_v2 == nullptr) {
    return Missing("nvmlDeviceGetNvLinkRemotePciInfo_v2");
  }
  ASSIGN_OR_RETURN(nvmlDevice_t device, Device(*sym_, gpu));
  std::vector<NvLinkRemote> out;
  for (unsigned int link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
    nvmlEnableState_t active = NVML_FEATURE_DISABLED;
    const int rc = sym_->nvmlDeviceGetNvLinkState(device, link, &active);
    // A link the GPU does not have (INVALID_ARGUMENT past its last one), or no NVLink at all
    // (NOT_SUPPORTED). Every index is asked, as NCCL does (a GPU may report a link in the middle
    // so): 36 cheap calls.
    if (rc == kNvmlErrorInvalidArgument || rc == kNvmlErrorNotSupported) continue;
    RETURN_IF_ERROR(NvmlError(rc, "nvmlDeviceGetNvLinkState", StrCat("GPU ", gpu, " link ", link)));
    if (active != NVML_FEATURE_ENABLED) continue;
    NvLinkRemote remote;
    remote.link = static_cast<int>(link);
    nvmlIntNvLinkDeviceType_t type = NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
    if (sym_->nvmlDeviceGetNvLinkRemoteDeviceType != nullptr &&
        sym_->nvmlDeviceGetNvLinkRemoteDeviceType(device, link, &type) == kNvmlSuccess) {
      remote.peer = type == NVML_NVLINK_DEVICE_TYPE_GPU      ? NvLinkPeer::kGpu
                    : type == NVML_NVLINK_DEVICE_TYPE_SWITCH ? NvLinkPeer::kSwitch
                    : type == NVML_NVLINK_DEVICE_TYPE_IBMNPU ? NvLinkPeer::kOther
                                                             : NvLinkPeer::kUnknown;
    }
    nvmlPciInfo_t pci{};
    const int pci_rc = sym_->nvmlDeviceGetNvLinkRemotePciInfo_v2(device, link, &pci);
    if (pci_rc == kNvmlSuccess) {
      remote.pci_bus_id = CString(pci.busId, sizeof(pci.busId));
    } else if (remote.peer != NvLinkPeer::kSwitch) {
      // A switch needs no bus ID (a VM may not see it); any other link must say where it goes.
      RETURN_IF_ERROR(NvmlError(pci_rc, "nvmlDeviceGetNvLinkRemotePciInfo_v2",
                                StrCat("GPU ", gpu, " link ", link)));
    }
    out.push_back(std::move(remote));
  }
  return out;
}

absl::StatusOr<bool> DlNvml::NvLinkP2P(int gpu_a, int gpu_b) {
  if (sym_->nvmlDeviceGetP2PStatus == nullptr) return Missing("nvmlDeviceGetP2PStatus");
  ASSIGN_OR_RETURN(nvmlDevice_t a, Device(*sym_, gpu_a));
  ASSIGN_OR_RETURN(nvmlDevice_t b, Device(*sym_, gpu_b));
  nvmlGpuP2PStatus_t status = NVML_P2P_STATUS_OK;
  RETURN_IF_ERROR(NvmlError(sym_->nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_NVLINK, &status),
                            "nvmlDeviceGetP2PStatus", StrCat("GPUs ", gpu_a, " and ", gpu_b)));
  return status == NVML_P2P_STATUS_OK;
}

absl::StatusOr<PcieLevel> DlNvml::PcieCommonAncestor(int gpu_a, int gpu_b) {
  if (sym_->nvmlDeviceGetTopologyCommonAncestor == nullptr) {
    return Missing("nvmlDeviceGetTopologyCommonAncestor");
  }
  ASSIGN_OR_RETURN(nvmlDevice_t a, Device(*sym_, gpu_a));
  ASSIGN_OR_RETURN(nvmlDevice_t b, Device(*sym_, gpu_b));
  nvmlGpuTopologyLevel_t level = NVML_TOPOLOGY_SYSTEM;
  RETURN_IF_ERROR(NvmlError(sym_->nvmlDeviceGetTopologyCommonAncestor(a, b, &level),
                            "nvmlDeviceGetTopologyCommonAncestor",
                            StrCat("GPUs ", gpu_a, " and ", gpu_b)));
  switch (level) {
    case NVML_TOPOLOGY_INTERNAL:
    case NVML_TOPOLOGY_SINGLE:
    case NVML_TOPOLOGY_MULTIPLE:
    case NVML_TOPOLOGY_HOSTBRIDGE:
    case NVML_TOPOLOGY_NODE:
    case NVML_TOPOLOGY_SYSTEM:
      return static_cast<PcieLevel>(level);
    default:
      return absl::UnknownError(StrCat("nvmlDeviceGetTopologyCommonAncestor: GPUs ", gpu_a, " and ",
                                       gpu_b, ": unknown level ", level));
  }
}

}  // namespace prism::nvml
