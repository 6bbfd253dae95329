// NVML memory queries report the container's limit and usage, like cuMemGetInfo, so in-container
// nvidia-smi and pynvml agree with CUDA.
#include <string.h>

#include "core/quota/memory.h"
#include "intercept/hooks.h"
#include "intercept/runtime.h"
#include "intercept/uuid.h"

namespace prism::vgpu {
namespace {

// The region entry of an NVML device: found by UUID, or claimed with the environment's limits
// for its NVML index (which is the container's CUDA ordinal order for identical GPUs; a CUDA
// process claiming it first by its ordinal takes precedence).
int EntryForNvmlDevice(Region* region, nvmlDevice_t device) {
  if (g_nvml.nvmlDeviceGetUUID == nullptr) return -1;
  char text[PRISM_NVML_DEVICE_UUID_BUFFER_SIZE] = {};
  uint8_t uuid[16];
  if (g_nvml.nvmlDeviceGetUUID(device, text, sizeof(text)) != NVML_SUCCESS ||
      !ParseNvmlUuid(text, uuid)) {
    return -1;
  }
  for (int d = 0; d < kMaxDevices; ++d) {
    const RegionDevice& entry = region->device(d);
    if (entry.claimed.load(std::memory_order_acquire) != 0 && memcmp(entry.uuid, uuid, 16) == 0) {
      return d;
    }
  }
  unsigned int index = 0;
  if (g_nvml.nvmlDeviceGetIndex == nullptr ||
      g_nvml.nvmlDeviceGetIndex(device, &index) != NVML_SUCCESS) {
    return -1;
  }
  const int ordinal = static_cast<int>(index);
  bool mismatch = false;
  const MemoryLimitRequest request = MemoryLimitForOrdinal(ordinal);
  const int entry = region->ClaimDevice(
      uuid, request.source == LimitSource::kValue ? request.bytes : 0, SmLimitForOrdinal(ordinal),
      static_cast<uint32_t>(g_config.policy), 0, &mismatch);
  if (entry < 0) return -1;
  if (request.source == LimitSource::kValue) region->SetLocalLimit(entry, request.bytes);
  if (request.source == LimitSource::kInvalid) region->SetFailClosed(entry);
  return entry;
}

// Virtualizes total/free/used in place. Returns false when the device has no limit.
bool Virtualize(nvmlDevice_t device, unsigned long long* total, unsigned long long* free,
                unsigned long long* used) {
  Region* region = ControlEnabled() ? EnsureAccounting() : nullptr;
  if (region == nullptr) return false;
  const int entry = EntryForNvmlDevice(region, device);
  if (entry < 0) return false;
  const RegionDevice& d = region->device(entry);
  const uint64_t limit = region->EffectiveLimit(entry);
  if (region->FailsClosed(entry)) {
    *used = *total - *free;
    *free = 0;
    return true;
  }
  if (limit == 0) return false;
  const quota::MemoryView view =
      quota::VirtualizeMemory(limit, d.used.load(std::memory_order_relaxed), *total, *free);
  *total = view.total;
  *free = view.free;
  *used = view.used;
  return true;
}

}  // namespace

extern "C" {

PRISM_VGPU_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  if (!EnsureNvml(false)) return NVML_ERROR_LIBRARY_NOT_FOUND;
  if (g_nvml.nvmlDeviceGetMemoryInfo == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  const nvmlReturn_t rc = g_nvml.nvmlDeviceGetMemoryInfo(device, memory);
  if (rc == NVML_SUCCESS && memory != nullptr) {
    Virtualize(device, &memory->total, &memory->free, &memory->used);
  }
  return rc;
}

PRISM_VGPU_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                          nvmlMemory_v2_t* memory) {
  if (!EnsureNvml(false)) return NVML_ERROR_LIBRARY_NOT_FOUND;
  if (g_nvml.nvmlDeviceGetMemoryInfo_v2 == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  const nvmlReturn_t rc = g_nvml.nvmlDeviceGetMemoryInfo_v2(device, memory);
  if (rc == NVML_SUCCESS && memory != nullptr) {
    Virtualize(device, &memory->total, &memory->free, &memory->used);
  }
  return rc;
}

}  // extern "C"
}  // namespace prism::vgpu
