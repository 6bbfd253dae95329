// src/intercept/fake/fake_nvml.cc: a fake libnvidia-ml.so.1 over the same simulated GPUs as the
// fake libcuda.so.1 (fake_state.h), for libprism-vgpu's tests: devices with the same UUIDs,
// physical memory use, the processes holding a context, and per-process SM utilization derived
// from the kernels each process ran. This is not the MIG-focused NVML simulator in src/nvml.
//
// Environment:
//   PRISM_FAKE_NVML_PID_OFFSET  added to every PID NVML reports, like a container's PID namespace
//                               hides host PIDs (default 0)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "intercept/clock.h"
#include "intercept/fake/fake_state.h"
#include "intercept/nvml_subset.h"
#include "intercept/uuid.h"

namespace prism::vgpu::fake {
namespace {

std::atomic<int> g_init_count{0};

// Device handles are pointers to the devices in the state file.
Device* DeviceOf(nvmlDevice_t handle) {
  Layout* layout = State();
  Device* d = reinterpret_cast<Device*>(handle);
  if (d < &layout->devices[0] || d >= &layout->devices[layout->device_count]) return nullptr;
  return d;
}

int IndexOf(const Device* d) { return static_cast<int>(d - &State()->devices[0]); }

unsigned int PidOffset() {
  static const unsigned int offset = [] {
    const char* value = getenv("PRISM_FAKE_NVML_PID_OFFSET");
    return value == nullptr ? 0u : static_cast<unsigned int>(strtoul(value, nullptr, 10));
  }();
  return offset;
}

// Converts an NVML timestamp (CPU realtime in microseconds) to the monotonic clock of the
// timeline.
int64_t MonotonicFromRealtimeUs(unsigned long long realtime_us) {
  const int64_t now_mono = MonotonicNs();
  const int64_t now_real_us = static_cast<int64_t>(RealtimeUs());
  return now_mono - (now_real_us - static_cast<int64_t>(realtime_us)) * 1000;
}

}  // namespace
}  // namespace prism::vgpu::fake

namespace fake = prism::vgpu::fake;

extern "C" {

nvmlReturn_t nvmlInit_v2(void) {
  fake::State();
  fake::g_init_count.fetch_add(1);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  (void)flags;
  return nvmlInit_v2();
}

nvmlReturn_t nvmlShutdown(void) {
  if (fake::g_init_count.load() == 0) return NVML_ERROR_UNINITIALIZED;
  fake::g_init_count.fetch_sub(1);
  return NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    default:
      return "Fake NVML error";
  }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (fake::g_init_count.load() == 0) return NVML_ERROR_UNINITIALIZED;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = fake::State()->device_count;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (fake::g_init_count.load() == 0) return NVML_ERROR_UNINITIALIZED;
  if (device == nullptr || index >= fake::State()->device_count) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *device = reinterpret_cast<nvmlDevice_t>(&fake::State()->devices[index]);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  fake::Device* d = fake::DeviceOf(device);
  if (d == nullptr || index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *index = static_cast<unsigned int>(fake::IndexOf(d));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  fake::Device* d = fake::DeviceOf(device);
  if (d == nullptr || uuid == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (length < prism::vgpu::kNvmlUuidLength + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  prism::vgpu::FormatNvmlUuid(d->uuid, uuid);
  if (d->mig != 0) memcpy(uuid, "MIG", 3);  // A MIG device's handle: "MIG-...".
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  fake::Device* d = fake::DeviceOf(device);
  if (d == nullptr || name == nullptr || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
  snprintf(name, length, "%s", d->name);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  fake::Device* d = fake::DeviceOf(device);
  if (d == nullptr || memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  fake::ReclaimDeadProcesses();
  const uint64_t used = d->used_memory.load();
  memory->total = d->total_memory;
  memory->used = used;
  memory->free = used < d->total_memory ? d->total_memory - used : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  fake::Device* d = fake::DeviceOf(device);
  if (d == nullptr || memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != kNvmlMemoryV2Version) return NVML_ERROR_INVALID_ARGUMENT;
  fake::ReclaimDeadProcesses();
  const uint64_t used = d->used_memory.load();
  memory->total = d->total_memory;
  memory->reserved = 0;
  memory->used = used;
  memory->free = used < d->total_memory ? d->total_memory - used : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                     nvmlProcessInfo_t* infos) {
  fake::Device* d = fake::DeviceOf(device);
  if (d == nullptr || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  fake::ReclaimDeadProcesses();
  const int index = fake::IndexOf(d);
  unsigned int n = 0;
  for (const fake::Process& p : fake::State()->processes) {
    if (p.pid.load() > 0 && p.has_context[index].load() != 0) ++n;
  }
  if (infos == nullptr || *count < n) {
    *count = n;
    return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
  }
  unsigned int i = 0;
  for (const fake::Process& p : fake::State()->processes) {
    const int32_t pid = p.pid.load();
    if (pid <= 0 || p.has_context[index].load() == 0 || i == n) continue;
    infos[i].pid = static_cast<unsigned int>(pid) + fake::PidOffset();
    infos[i].usedGpuMemory = p.used_memory[index].load();
    infos[i].gpuInstanceId = 0xFFFFFFFF;
    infos[i].computeInstanceId = 0xFFFFFFFF;
    ++i;
  }
  *count = i;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t* samples,
                                             unsigned int* count, unsigned long long last_seen_us) {
  fake::Device* d = fake::DeviceOf(device);
  if (d == nullptr || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const int index = fake::IndexOf(d);
  const int64_t now = prism::vgpu::MonotonicNs();
  const unsigned long long now_us = prism::vgpu::RealtimeUs();
  // One sample per process: its busy fraction since the caller's last sample (at most 1 s back).
  int64_t from = now - 1'000'000'000;
  if (last_seen_us != 0) {
    const int64_t since = fake::MonotonicFromRealtimeUs(last_seen_us);
    if (since > from) from = since;
  }
  unsigned int n = 0;
  nvmlProcessUtilizationSample_t found[fake::kMaxProcesses];
  for (const fake::Process& p : fake::State()->processes) {
    const int32_t pid = p.pid.load();
    if (pid <= 0) continue;
    const double busy = fake::BusyFraction(p, index, from, now);
    if (busy <= 0.0) continue;
    nvmlProcessUtilizationSample_t& s = found[n++];
    s.pid = static_cast<unsigned int>(pid) + fake::PidOffset();
    s.timeStamp = now_us;
    s.smUtil = static_cast<unsigned int>(busy * 100.0 + 0.5);
    s.memUtil = 0;
    s.encUtil = 0;
    s.decUtil = 0;
  }
  if (n == 0) {
    *count = 0;
    return NVML_ERROR_NOT_FOUND;
  }
  if (samples == nullptr || *count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  memcpy(samples, found, n * sizeof(found[0]));
  *count = n;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  fake::Device* d = fake::DeviceOf(device);
  if (d == nullptr || utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const int index = fake::IndexOf(d);
  const int64_t now = prism::vgpu::MonotonicNs();
  double busy = 0.0;
  for (const fake::Process& p : fake::State()->processes) {
    if (p.pid.load() > 0) busy += fake::BusyFraction(p, index, now - 1'000'000'000, now);
  }
  utilization->gpu = static_cast<unsigned int>((busy > 1.0 ? 1.0 : busy) * 100.0 + 0.5);
  utilization->memory = 0;
  return NVML_SUCCESS;
}

}  // extern "C"
