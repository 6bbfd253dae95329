// A fake libnvidia-ml.so.1 for tests: NVML's C ABI over the simulated GPUs of
// src/nvml/sim (the same rules SimNvml enforces), with the state in the YAML
// file named by PRISM_FAKE_NVML_STATE. It lets tests drive the production
// DlNvml backend (dlopen, symbol resolution, struct layouts, handle lifetimes)
// without a GPU. Built four times: complete, with -DPRISM_FAKE_NVML_OLD_DRIVER
// lacking nvmlDeviceCreateGpuInstanceWithPlacement, to test a missing symbol,
// -DPRISM_FAKE_NVML_NO_EVENTS, lacking the event API (a driver that cannot
// report XID events), and -DPRISM_FAKE_NVML_NO_TOPOLOGY, lacking the topology calls.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/status_macros.h"
#include "base/strings.h"
#include "core/mig/gpu_model.h"
#include "nvml/nvml_abi.h"
#include "nvml/nvml_errors.h"
#include "nvml/sim/sim_state.h"
#include "nvml/sim/sim_state_file.h"

#define NVML_API extern "C" __attribute__((visibility("default")))

namespace {

using prism::nvml::sim::SimGpu;
using prism::nvml::sim::SimGpuInstance;
using prism::nvml::sim::SimState;
using prism::nvml::sim::SimStateFile;
namespace sim = prism::nvml::sim;
namespace nv = prism::nvml;

// Handles are tagged integers: kind | gpu << 8 | gpu instance << 16 | compute instance << 24.
enum Kind : uintptr_t { kDevice = 1, kGpuInstance = 2, kComputeInstance = 3, kMigDevice = 4 };

struct Decoded {
  Kind kind;
  int gpu;
  int gi;
  int ci;
};

uintptr_t Encode(Kind kind, int gpu, int gi = 0, int ci = 0) {
  return kind | (static_cast<uintptr_t>(gpu) << 8) | (static_cast<uintptr_t>(gi) << 16) |
         (static_cast<uintptr_t>(ci) << 24);
}

Decoded Decode(const void* handle) {
  const auto v = reinterpret_cast<uintptr_t>(handle);
  return Decoded{static_cast<Kind>(v & 0xff), static_cast<int>((v >> 8) & 0xff),
                 static_cast<int>((v >> 16) & 0xff), static_cast<int>((v >> 24) & 0xff)};
}

template <typename T>
T ToHandle(uintptr_t v) {
  return reinterpret_cast<T>(v);
}

bool g_initialized = false;

// Runs `op` on the state file under its lock; maps file errors to NVML codes.
template <typename Op>
nvmlReturn_t WithState(Op op) {
  if (!g_initialized) return nv::kNvmlErrorUninitialized;
  const char* path = std::getenv("PRISM_FAKE_NVML_STATE");
  if (path == nullptr) return nv::kNvmlErrorDriverNotLoaded;
  int rc = nv::kNvmlErrorUnknown;
  const absl::Status s = SimStateFile(path).Transact([&](SimState& state, bool* changed) {
    rc = op(state, changed);
    return absl::OkStatus();
  });
  return s.ok() ? rc : nv::kNvmlErrorUnknown;
}

bool ValidDevice(const SimState& state, const Decoded& d) {
  return d.gpu >= 0 && static_cast<size_t>(d.gpu) < state.gpus.size();
}

void CopyString(const std::string& s, char* out, unsigned int length) {
  std::strncpy(out, s.c_str(), length);
  if (length > 0) out[length - 1] = '\0';
}

const sim::SimComputeInstance* FindCi(SimGpu& gpu, int gi, int ci) {
  SimGpuInstance* g = sim::FindGpuInstance(gpu, gi);
  if (g == nullptr) return nullptr;
  for (const auto& c : g->compute_instances) {
    if (c.id == ci) return &c;
  }
  return nullptr;
}

void FillProfileInfo(const prism::mig::GpuInstanceProfile& p, nvmlGpuInstanceProfileInfo_t* info) {
  std::memset(info, 0, sizeof(*info));
  info->id = static_cast<unsigned>(p.id);
  info->isP2pSupported = 0;
  info->sliceCount = static_cast<unsigned>(p.compute_slices);
  info->instanceCount = static_cast<unsigned>(p.max_count);
  info->multiprocessorCount = static_cast<unsigned>(p.multiprocessors);
  info->copyEngineCount = static_cast<unsigned>(p.engines.copy);
  info->decoderCount = static_cast<unsigned>(p.engines.decoder);
  info->encoderCount = static_cast<unsigned>(p.engines.encoder);
  info->jpegCount = static_cast<unsigned>(p.engines.jpeg);
  info->ofaCount = static_cast<unsigned>(p.engines.ofa);
  info->memorySizeMB = static_cast<unsigned long long>(p.memory_mib);
}

}  // namespace

NVML_API nvmlReturn_t nvmlInit_v2(void) {
  if (std::getenv("PRISM_FAKE_NVML_STATE") == nullptr) return nv::kNvmlErrorDriverNotLoaded;
  g_initialized = true;
  return nv::kNvmlSuccess;
}

NVML_API nvmlReturn_t nvmlShutdown(void) {
  g_initialized = false;
  return nv::kNvmlSuccess;
}

NVML_API const char* nvmlErrorString(nvmlReturn_t result) {
  return nv::NvmlReturnName(result).data();
}

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  CopyString("580.0-prism-fake", version, length);
  return nv::kNvmlSuccess;
}

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  return WithState([&](SimState& s, bool*) -> int {
    *count = static_cast<unsigned>(s.gpus.size());
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  return WithState([&](SimState& s, bool*) -> int {
    if (index >= s.gpus.size()) return nv::kNvmlErrorInvalidArgument;
    *device = ToHandle<nvmlDevice_t>(Encode(kDevice, static_cast<int>(index)));
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(device);
    if (d.kind != kDevice || !ValidDevice(s, d)) return nv::kNvmlErrorInvalidArgument;
    CopyString(s.gpus[d.gpu].name, name, length);
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(device);
    if (!ValidDevice(s, d)) return nv::kNvmlErrorInvalidArgument;
    if (d.kind == kDevice) {
      CopyString(s.gpus[d.gpu].uuid, uuid, length);
      return nv::kNvmlSuccess;
    }
    if (d.kind != kMigDevice) return nv::kNvmlErrorInvalidArgument;
    const auto* ci = FindCi(s.gpus[d.gpu], d.gi, d.ci);
    if (ci == nullptr) return nv::kNvmlErrorNotFound;
    CopyString(ci->uuid, uuid, length);
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(device);
    if (d.kind != kDevice || !ValidDevice(s, d)) return nv::kNvmlErrorInvalidArgument;
    std::memset(pci, 0, sizeof(*pci));
    const SimGpu& g = s.gpus[d.gpu];
    pci->pciDeviceId = g.pci_device_id;
    CopyString(g.pci_bus_id, pci->busId, sizeof(pci->busId));
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(device);
    if (d.kind != kDevice || !ValidDevice(s, d)) return nv::kNvmlErrorInvalidArgument;
    const SimGpu& g = s.gpus[d.gpu];
    unsigned long long used = 0;
    for (const auto& p : g.processes)
      used += static_cast<unsigned long long>(p.used_memory_mib) << 20;
    memory->total = static_cast<unsigned long long>(g.memory_mib) << 20;
    memory->used = used;
    memory->free = memory->total - used;
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current,
                                           unsigned int* pending) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(device);
    if (d.kind != kDevice || !ValidDevice(s, d)) return nv::kNvmlErrorInvalidArgument;
    bool cur = false;
    bool pend = false;
    const int rc = sim::GetMigMode(s, d.gpu, &cur, &pend);
    *current = cur ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *pending = pend ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return rc;
  });
}

NVML_API nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode,
                                           nvmlReturn_t* activation) {
  return WithState([&](SimState& s, bool* changed) -> int {
    const Decoded d = Decode(device);
    if (d.kind != kDevice || !ValidDevice(s, d) || mode > 1) return nv::kNvmlErrorInvalidArgument;
    int act = 0;
    const int rc = sim::SetMigMode(s, d.gpu, mode == NVML_DEVICE_MIG_ENABLE, &act);
    *activation = act;
    *changed = rc == nv::kNvmlSuccess;
    return rc;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                          nvmlGpuInstanceProfileInfo_t* info) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(device);
    if (d.kind != kDevice || !ValidDevice(s, d)) return nv::kNvmlErrorInvalidArgument;
    const prism::mig::GpuInstanceProfile* p = nullptr;
    const int rc = sim::GetProfileByIndex(s, d.gpu, static_cast<int>(profile), &p);
    if (rc == nv::kNvmlSuccess) FillProfileInfo(*p, info);
    return rc;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nvmlDevice_t device, unsigned int profile_id, nvmlGpuInstancePlacement_t* placements,
    unsigned int* count) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(device);
    if (d.kind != kDevice || !ValidDevice(s, d) || count == nullptr) {
      return nv::kNvmlErrorInvalidArgument;
    }
    const prism::mig::GpuInstanceProfile* p = nullptr;
    if (int rc = sim::GetProfileById(s, d.gpu, static_cast<int>(profile_id), &p); rc != 0)
      return rc;
    const unsigned n = static_cast<unsigned>(p->starts.size());
    if (placements == nullptr) {
      *count = n;
      return nv::kNvmlSuccess;
    }
    if (*count < n) {
      *count = n;
      return nv::kNvmlErrorInsufficientSize;
    }
    for (unsigned i = 0; i < n; ++i) {
      placements[i].start = static_cast<unsigned>(p->starts[i]);
      placements[i].size = static_cast<unsigned>(p->memory_slices);
    }
    *count = n;
    return nv::kNvmlSuccess;
  });
}

#ifndef PRISM_FAKE_NVML_OLD_DRIVER
NVML_API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t device, unsigned int profile_id, const nvmlGpuInstancePlacement_t* placement,
    nvmlGpuInstance_t* gpu_instance) {
  return WithState([&](SimState& s, bool* changed) -> int {
    const Decoded d = Decode(device);
    if (d.kind != kDevice || !ValidDevice(s, d) || placement == nullptr) {
      return nv::kNvmlErrorInvalidArgument;
    }
    const prism::mig::GpuInstanceProfile* p = nullptr;
    if (int rc = sim::GetProfileById(s, d.gpu, static_cast<int>(profile_id), &p); rc != 0)
      return rc;
    if (placement->size != static_cast<unsigned>(p->memory_slices)) {
      return nv::kNvmlErrorInvalidArgument;
    }
    int id = -1;
    const int rc = sim::CreateGpuInstance(s, d.gpu, static_cast<int>(profile_id),
                                          static_cast<int>(placement->start), &id);
    if (rc != nv::kNvmlSuccess) return rc;
    *changed = true;
    *gpu_instance = ToHandle<nvmlGpuInstance_t>(Encode(kGpuInstance, d.gpu, id));
    return nv::kNvmlSuccess;
  });
}
#endif

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profile_id,
                                                nvmlGpuInstance_t* gpu_instances,
                                                unsigned int* count) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(device);
    if (d.kind != kDevice || !ValidDevice(s, d) || count == nullptr) {
      return nv::kNvmlErrorInvalidArgument;
    }
    SimGpu& g = s.gpus[d.gpu];
    if (g.mig_model == nullptr || !g.mig_current) return nv::kNvmlErrorNotSupported;
    if (int rc = sim::CheckFault(s, "ListGpuInstances"); rc != 0) return rc;
    unsigned n = 0;
    for (const auto& gi : g.gpu_instances) {
      if (gi.profile_id != static_cast<int>(profile_id)) continue;
      if (n >= *count) return nv::kNvmlErrorInsufficientSize;
      gpu_instances[n++] = ToHandle<nvmlGpuInstance_t>(Encode(kGpuInstance, d.gpu, gi.id));
    }
    *count = n;
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                   nvmlGpuInstance_t* gpu_instance) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(device);
    if (d.kind != kDevice || !ValidDevice(s, d)) return nv::kNvmlErrorInvalidArgument;
    SimGpu& g = s.gpus[d.gpu];
    if (g.mig_model == nullptr || !g.mig_current) return nv::kNvmlErrorNotSupported;
    if (sim::FindGpuInstance(g, static_cast<int>(id)) == nullptr) return nv::kNvmlErrorNotFound;
    *gpu_instance = ToHandle<nvmlGpuInstance_t>(Encode(kGpuInstance, d.gpu, static_cast<int>(id)));
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpu_instance,
                                             nvmlGpuInstanceInfo_t* info) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(gpu_instance);
    if (d.kind != kGpuInstance || !ValidDevice(s, d)) return nv::kNvmlErrorInvalidArgument;
    SimGpuInstance* gi = sim::FindGpuInstance(s.gpus[d.gpu], d.gi);
    if (gi == nullptr) return nv::kNvmlErrorNotFound;
    info->device = ToHandle<nvmlDevice_t>(Encode(kDevice, d.gpu));
    info->id = static_cast<unsigned>(gi->id);
    info->profileId = static_cast<unsigned>(gi->profile_id);
    info->placement.start = static_cast<unsigned>(gi->start);
    info->placement.size = static_cast<unsigned>(gi->size);
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpu_instance) {
  return WithState([&](SimState& s, bool* changed) -> int {
    const Decoded d = Decode(gpu_instance);
    if (d.kind != kGpuInstance || !ValidDevice(s, d)) return nv::kNvmlErrorInvalidArgument;
    const int rc = sim::DestroyGpuInstance(s, d.gpu, d.gi);
    *changed = rc == nv::kNvmlSuccess;
    return rc;
  });
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gpu_instance, unsigned int profile, unsigned int eng_profile,
    nvmlComputeInstanceProfileInfo_t* info) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(gpu_instance);
    if (d.kind != kGpuInstance || !ValidDevice(s, d)) return nv::kNvmlErrorInvalidArgument;
    if (profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT || eng_profile != 0) {
      return nv::kNvmlErrorInvalidArgument;
    }
    SimGpu& g = s.gpus[d.gpu];
    SimGpuInstance* gi = sim::FindGpuInstance(g, d.gi);
    if (gi == nullptr) return nv::kNvmlErrorNotFound;
    const auto& gp = g.mig_model->profiles[g.mig_model->FindProfileById(gi->profile_id)];
    for (int c : prism::mig::ValidComputeSlices(gp.compute_slices)) {
      if (prism::mig::ComputeInstanceProfileIndex(c) != static_cast<int>(profile)) continue;
      std::memset(info, 0, sizeof(*info));
      info->id = profile;
      info->sliceCount = static_cast<unsigned>(c);
      info->instanceCount = static_cast<unsigned>(gp.compute_slices / c);
      info->multiprocessorCount = static_cast<unsigned>(gp.multiprocessors * c / gp.compute_slices);
      return nv::kNvmlSuccess;
    }
    return nv::kNvmlErrorNotSupported;
  });
}

NVML_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpu_instance,
                                                           unsigned int profile_id,
                                                           nvmlComputeInstance_t* ci) {
  return WithState([&](SimState& s, bool* changed) -> int {
    const Decoded d = Decode(gpu_instance);
    if (d.kind != kGpuInstance || !ValidDevice(s, d)) return nv::kNvmlErrorInvalidArgument;
    int id = -1;
    const int rc = sim::CreateComputeInstance(s, d.gpu, d.gi, static_cast<int>(profile_id), &id);
    if (rc != nv::kNvmlSuccess) return rc;
    *changed = true;
    *ci = ToHandle<nvmlComputeInstance_t>(Encode(kComputeInstance, d.gpu, d.gi, id));
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpu_instance,
                                                         unsigned int profile_id,
                                                         nvmlComputeInstance_t* cis,
                                                         unsigned int* count) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(gpu_instance);
    if (d.kind != kGpuInstance || !ValidDevice(s, d) || count == nullptr) {
      return nv::kNvmlErrorInvalidArgument;
    }
    SimGpuInstance* gi = sim::FindGpuInstance(s.gpus[d.gpu], d.gi);
    if (gi == nullptr) return nv::kNvmlErrorNotFound;
    unsigned n = 0;
    for (const auto& c : gi->compute_instances) {
      if (c.profile_index != static_cast<int>(profile_id)) continue;
      if (n >= *count) return nv::kNvmlErrorInsufficientSize;
      cis[n++] = ToHandle<nvmlComputeInstance_t>(Encode(kComputeInstance, d.gpu, d.gi, c.id));
    }
    *count = n;
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpu_instance,
                                                            unsigned int id,
                                                            nvmlComputeInstance_t* ci) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(gpu_instance);
    if (d.kind != kGpuInstance || !ValidDevice(s, d)) return nv::kNvmlErrorInvalidArgument;
    if (FindCi(s.gpus[d.gpu], d.gi, static_cast<int>(id)) == nullptr) return nv::kNvmlErrorNotFound;
    *ci = ToHandle<nvmlComputeInstance_t>(
        Encode(kComputeInstance, d.gpu, d.gi, static_cast<int>(id)));
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t ci,
                                                    nvmlComputeInstanceInfo_t* info) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(ci);
    if (d.kind != kComputeInstance || !ValidDevice(s, d)) return nv::kNvmlErrorInvalidArgument;
    const auto* c = FindCi(s.gpus[d.gpu], d.gi, d.ci);
    if (c == nullptr) return nv::kNvmlErrorNotFound;
    info->device = ToHandle<nvmlDevice_t>(Encode(kMigDevice, d.gpu, d.gi, d.ci));
    info->gpuInstance = ToHandle<nvmlGpuInstance_t>(Encode(kGpuInstance, d.gpu, d.gi));
    info->id = static_cast<unsigned>(c->id);
    info->profileId = static_cast<unsigned>(c->profile_index);
    info->placement.start = static_cast<unsigned>(c->start);
    info->placement.size = static_cast<unsigned>(c->slice_count);
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t ci) {
  return WithState([&](SimState& s, bool* changed) -> int {
    const Decoded d = Decode(ci);
    if (d.kind != kComputeInstance || !ValidDevice(s, d)) return nv::kNvmlErrorInvalidArgument;
    const int rc = sim::DestroyComputeInstance(s, d.gpu, d.gi, d.ci);
    *changed = rc == nv::kNvmlSuccess;
    return rc;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                              unsigned int* count,
                                                              nvmlProcessInfo_t* infos) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(device);
    if (d.kind != kDevice || !ValidDevice(s, d) || count == nullptr) {
      return nv::kNvmlErrorInvalidArgument;
    }
    if (int rc = sim::CheckFault(s, "ListProcesses"); rc != 0) return rc;
    const auto& procs = s.gpus[d.gpu].processes;
    if (*count < procs.size()) {
      *count = static_cast<unsigned>(procs.size());
      return nv::kNvmlErrorInsufficientSize;
    }
    for (size_t i = 0; i < procs.size(); ++i) {
      infos[i].pid = procs[i].pid;
      infos[i].usedGpuMemory = static_cast<unsigned long long>(procs[i].used_memory_mib) << 20;
      infos[i].gpuInstanceId = procs[i].gpu_instance_id < 0
                                   ? 0xFFFFFFFFu
                                   : static_cast<unsigned>(procs[i].gpu_instance_id);
      infos[i].computeInstanceId = procs[i].compute_instance_id < 0
                                       ? 0xFFFFFFFFu
                                       : static_cast<unsigned>(procs[i].compute_instance_id);
    }
    *count = static_cast<unsigned>(procs.size());
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                      nvmlProcessUtilizationSample_t* samples,
                                                      unsigned int* count,
                                                      unsigned long long last_seen) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(device);
    if (d.kind != kDevice || !ValidDevice(s, d) || count == nullptr) {
      return nv::kNvmlErrorInvalidArgument;
    }
    if (int rc = sim::CheckFault(s, "ProcessUtilization"); rc != 0) return rc;
    if (s.gpus[d.gpu].mig_current) return nv::kNvmlErrorNotSupported;
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    const auto now_us = static_cast<unsigned long long>(
        std::chrono::duration_cast<std::chrono::microseconds>(now).count());
    std::vector<const sim::SimProcess*> sampled;
    if (now_us > last_seen) {
      for (const auto& p : s.gpus[d.gpu].processes) {
        if (p.sm_util_percent >= 0) sampled.push_back(&p);
      }
    }
    if (sampled.empty()) return nv::kNvmlErrorNotFound;  // As the driver: no sample since then.
    if (samples == nullptr || *count < sampled.size()) {
      *count = static_cast<unsigned>(sampled.size());
      return nv::kNvmlErrorInsufficientSize;
    }
    for (size_t i = 0; i < sampled.size(); ++i) {
      samples[i] = nvmlProcessUtilizationSample_t{};
      samples[i].pid = sampled[i]->pid;
      samples[i].timeStamp = now_us;
      samples[i].smUtil = static_cast<unsigned>(sampled[i]->sm_util_percent);
    }
    *count = static_cast<unsigned>(sampled.size());
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device,
                                                 nvmlDeviceAttributes_t* attributes) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(device);
    if (d.kind != kMigDevice || !ValidDevice(s, d)) return nv::kNvmlErrorNotSupported;
    SimGpu& g = s.gpus[d.gpu];
    SimGpuInstance* gi = sim::FindGpuInstance(g, d.gi);
    const auto* c = FindCi(g, d.gi, d.ci);
    if (gi == nullptr || c == nullptr) return nv::kNvmlErrorNotFound;
    const auto& p = g.mig_model->profiles[g.mig_model->FindProfileById(gi->profile_id)];
    std::memset(attributes, 0, sizeof(*attributes));
    attributes->multiprocessorCount =
        static_cast<unsigned>(p.multiprocessors * c->slice_count / p.compute_slices);
    attributes->sharedCopyEngineCount = static_cast<unsigned>(p.engines.copy);
    attributes->sharedDecoderCount = static_cast<unsigned>(p.engines.decoder);
    attributes->sharedEncoderCount = static_cast<unsigned>(p.engines.encoder);
    attributes->sharedJpegCount = static_cast<unsigned>(p.engines.jpeg);
    attributes->sharedOfaCount = static_cast<unsigned>(p.engines.ofa);
    attributes->gpuInstanceSliceCount = static_cast<unsigned>(p.compute_slices);
    attributes->computeInstanceSliceCount = static_cast<unsigned>(c->slice_count);
    attributes->memorySizeMB = static_cast<unsigned long long>(p.memory_mib);
    return nv::kNvmlSuccess;
  });
}

#ifndef PRISM_FAKE_NVML_NO_EVENTS
// An event set: the GPUs registered for critical XIDs. Waits take the state
// file's pending `xid_events` on those GPUs.
struct nvmlEventSet_st {
  std::vector<int> gpus;
};

NVML_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  if (!g_initialized) return nv::kNvmlErrorUninitialized;
  if (set == nullptr) return nv::kNvmlErrorInvalidArgument;
  *set = new nvmlEventSet_st();
  return nv::kNvmlSuccess;
}

NVML_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  if (set == nullptr) return nv::kNvmlErrorInvalidArgument;
  delete set;
  return nv::kNvmlSuccess;
}

NVML_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                       unsigned long long* types) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(device);
    if (d.kind != kDevice || !ValidDevice(s, d) || types == nullptr) {
      return nv::kNvmlErrorInvalidArgument;
    }
    *types =
        s.gpus[d.gpu].events_supported
            ? static_cast<unsigned long long>(nvmlEventTypeXidCriticalError | nvmlEventTypePState)
            : static_cast<unsigned long long>(nvmlEventTypePState);
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                               nvmlEventSet_t set) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(device);
    if (d.kind != kDevice || !ValidDevice(s, d) || set == nullptr) {
      return nv::kNvmlErrorInvalidArgument;
    }
    if ((types & static_cast<unsigned long long>(nvmlEventTypeXidCriticalError)) != 0 &&
        !s.gpus[d.gpu].events_supported) {
      return nv::kNvmlErrorNotSupported;
    }
    set->gpus.push_back(d.gpu);
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                          unsigned int timeout_ms) {
  if (set == nullptr || data == nullptr) return nv::kNvmlErrorInvalidArgument;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    sim::SimXidEvent event;
    const nvmlReturn_t rc = WithState([&](SimState& s, bool* changed) -> int {
      const auto faults_before = s.faults;
      const int taken = sim::TakeXidEvent(s, set->gpus, &event);
      *changed = taken == nv::kNvmlSuccess || s.faults != faults_before;
      return taken;
    });
    if (rc == nv::kNvmlSuccess) {
      std::memset(data, 0, sizeof(*data));
      data->device = ToHandle<nvmlDevice_t>(Encode(kDevice, event.gpu));
      data->eventType = static_cast<unsigned long long>(nvmlEventTypeXidCriticalError);
      data->eventData = event.xid;
      data->gpuInstanceId =
          event.gpu_instance_id < 0 ? 0xFFFFFFFFu : static_cast<unsigned>(event.gpu_instance_id);
      data->computeInstanceId = event.compute_instance_id < 0
                                    ? 0xFFFFFFFFu
                                    : static_cast<unsigned>(event.compute_instance_id);
      return rc;
    }
    if (rc != nv::kNvmlErrorTimeout) return rc;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return nv::kNvmlErrorTimeout;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        deadline - now, std::chrono::milliseconds(10)));
  }
}
#endif  // PRISM_FAKE_NVML_NO_EVENTS

#ifndef PRISM_FAKE_NVML_NO_TOPOLOGY
// ---- Topology: the state file's `topology:` (sim_topology.h) ----------------------------------

namespace {

// "0-19,40-59" -> 64-bit words of a CPU mask (the list was validated when the file was read).
void FillCpuMask(const std::string& list, unsigned int words, unsigned long* out) {
  std::memset(out, 0, sizeof(unsigned long) * words);
  for (std::string_view range : prism::StrSplit(list, ',')) {
    const size_t dash = range.find('-');
    const int lo = std::atoi(std::string(range.substr(0, dash)).c_str());
    const int hi =
        dash == std::string_view::npos ? lo : std::atoi(std::string(range.substr(dash + 1)).c_str());
    for (int cpu = lo; cpu <= hi; ++cpu) {
      if (static_cast<unsigned>(cpu / 64) < words) out[cpu / 64] |= 1ul << (cpu % 64);
    }
  }
}

// The links of a GPU as the state describes them, without a fault check (the driver's per-link
// calls check once per GPU, on link 0's state).
int Links(const SimState& s, const Decoded& d, std::vector<sim::SimNvLink>* links) {
  if (d.kind != kDevice || !ValidDevice(s, d)) return nv::kNvmlErrorInvalidArgument;
  if (!s.topology.configured()) return nv::kNvmlErrorNotSupported;
  *links = sim::NvLinksOf(s, d.gpu);
  return nv::kNvmlSuccess;
}

}  // namespace

NVML_API nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int* node) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(device);
    if (d.kind != kDevice || !ValidDevice(s, d) || node == nullptr) {
      return nv::kNvmlErrorInvalidArgument;
    }
    int value = -1;
    const int rc = sim::GetNumaNode(s, d.gpu, &value);
    // -1 as an unsigned int: the bad data a driver may return for "none".
    if (rc == nv::kNvmlSuccess) *node = static_cast<unsigned int>(value);
    return rc;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize,
                                               unsigned long* cpuSet) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(device);
    if (d.kind != kDevice || !ValidDevice(s, d) || cpuSetSize == 0 || cpuSet == nullptr) {
      return nv::kNvmlErrorInvalidArgument;
    }
    std::string cpus;
    const int rc = sim::GetCpuAffinity(s, d.gpu, &cpus);
    if (rc == nv::kNvmlSuccess) FillCpuMask(cpus, cpuSetSize, cpuSet);
    return rc;
  });
}

// Link numbers run over the GPU's active links; the one past the last is INVALID_ARGUMENT (as a
// link the GPU does not have), and a GPU without NVLink answers NOT_SUPPORTED for link 0.
NVML_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                               nvmlEnableState_t* isActive) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded d = Decode(device);
    if (d.kind != kDevice || !ValidDevice(s, d) || isActive == nullptr) {
      return nv::kNvmlErrorInvalidArgument;
    }
    if (link == 0) {  // One fault check per GPU, as SimNvml makes one call per GPU.
      if (int rc = sim::CheckFault(s, "NvLinks"); rc != nv::kNvmlSuccess) return rc;
    }
    std::vector<sim::SimNvLink> links;
    if (int rc = Links(s, d, &links); rc != nv::kNvmlSuccess) return rc;
    if (links.empty()) return link == 0 ? nv::kNvmlErrorNotSupported : nv::kNvmlErrorInvalidArgument;
    if (link >= links.size()) return nv::kNvmlErrorInvalidArgument;
    *isActive = NVML_FEATURE_ENABLED;
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                          nvmlPciInfo_t* pci) {
  return WithState([&](SimState& s, bool*) -> int {
    std::vector<sim::SimNvLink> links;
    if (pci == nullptr) return nv::kNvmlErrorInvalidArgument;
    if (int rc = Links(s, Decode(device), &links); rc != nv::kNvmlSuccess) return rc;
    if (link >= links.size()) return nv::kNvmlErrorInvalidArgument;
    std::memset(pci, 0, sizeof(*pci));
    CopyString(links[link].remote_pci_bus_id, pci->busId, sizeof(pci->busId));
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(
    nvmlDevice_t device, unsigned int link, nvmlIntNvLinkDeviceType_t* pNvLinkDeviceType) {
  return WithState([&](SimState& s, bool*) -> int {
    std::vector<sim::SimNvLink> links;
    if (pNvLinkDeviceType == nullptr) return nv::kNvmlErrorInvalidArgument;
    if (int rc = Links(s, Decode(device), &links); rc != nv::kNvmlSuccess) return rc;
    if (link >= links.size()) return nv::kNvmlErrorInvalidArgument;
    *pNvLinkDeviceType =
        links[link].to_switch ? NVML_NVLINK_DEVICE_TYPE_SWITCH : NVML_NVLINK_DEVICE_TYPE_GPU;
    return nv::kNvmlSuccess;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                             nvmlGpuP2PCapsIndex_t p2pIndex,
                                             nvmlGpuP2PStatus_t* p2pStatus) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded a = Decode(device1);
    const Decoded b = Decode(device2);
    if (a.kind != kDevice || b.kind != kDevice || !ValidDevice(s, a) || !ValidDevice(s, b) ||
        p2pStatus == nullptr) {
      return nv::kNvmlErrorInvalidArgument;
    }
    // Only the NVLink capability is simulated.
    if (p2pIndex != NVML_P2P_CAPS_INDEX_NVLINK) return nv::kNvmlErrorNotSupported;
    bool ok = false;
    const int rc = sim::GetNvLinkP2P(s, a.gpu, b.gpu, &ok);
    // Any status but OK will do for "no": NVML_P2P_STATUS_NOT_SUPPORTED is 5.
    if (rc == nv::kNvmlSuccess) *p2pStatus = ok ? NVML_P2P_STATUS_OK : 5;
    return rc;
  });
}

NVML_API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1,
                                                          nvmlDevice_t device2,
                                                          nvmlGpuTopologyLevel_t* pathInfo) {
  return WithState([&](SimState& s, bool*) -> int {
    const Decoded a = Decode(device1);
    const Decoded b = Decode(device2);
    if (a.kind != kDevice || b.kind != kDevice || !ValidDevice(s, a) || !ValidDevice(s, b) ||
        pathInfo == nullptr) {
      return nv::kNvmlErrorInvalidArgument;
    }
    int level = 0;
    const int rc = sim::GetCommonAncestor(s, a.gpu, b.gpu, &level);
    if (rc == nv::kNvmlSuccess) *pathInfo = level;
    return rc;
  });
}
#endif  // PRISM_FAKE_NVML_NO_TOPOLOGY
