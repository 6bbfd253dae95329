// src/intercept/config.h: the environment contract of libprism-vgpu (docs/intercept.md).
//
// HAMi-core compatible: CUDA_DEVICE_MEMORY_LIMIT[_<i>], CUDA_DEVICE_SM_LIMIT[_<i>],
// CUDA_DEVICE_MEMORY_SHARED_CACHE, CUDA_DISABLE_CONTROL, GPU_CORE_UTILIZATION_POLICY,
// LIBCUDA_LOG_LEVEL. Prism additions: PRISM_VGPU_REAL_LIBCUDA, PRISM_VGPU_REAL_NVML,
// PRISM_VGPU_SM_TICK_MS, PRISM_VGPU_CHARGE_OVERHEAD, PRISM_VGPU_TEST_LOCK_STALL_MS (tests only). A
// malformed value is logged as an error naming the variable and the value, and the default applies.
// Not on any hot path; no allocation.
#pragma once

#include <stdint.h>

#include "core/quota/limits.h"

namespace prism::vgpu {

inline constexpr const char* kDefaultRegionPath = "/tmp/cudevshr.cache";

struct Config {
  bool disabled = false;  // CUDA_DISABLE_CONTROL: pass everything through untouched.
  int log_level = 2;
  quota::UtilizationPolicy policy = quota::UtilizationPolicy::kDefault;
  int sm_tick_ms = 100;
  // Some CUDA_DEVICE_SM_LIMIT[_<i>] is in 1..99 and the policy is not "disable": launches must be
  // counted (and maybe paced).
  bool sm_limit_configured = false;
  int test_lock_stall_ms = 0;
  // PRISM_VGPU_CHARGE_OVERHEAD: charge the driver's own per-process memory (contexts, modules),
  // measured through NVML, to the container (default on).
  bool charge_overhead = true;
  char region_path[512] = {};
  char real_libcuda[512] = {};
  char real_nvml[512] = {};
};

// Reads the process-wide settings.
void LoadConfig(Config* config);

// The memory limit of container-visible CUDA ordinal `ordinal` in bytes (0: none):
// CUDA_DEVICE_MEMORY_LIMIT_<ordinal>, else CUDA_DEVICE_MEMORY_LIMIT.
uint64_t MemoryLimitForOrdinal(int ordinal);

// The SM share of `ordinal` in percent (0: none): CUDA_DEVICE_SM_LIMIT_<ordinal>, else
// CUDA_DEVICE_SM_LIMIT. 100 means none.
uint32_t SmLimitForOrdinal(int ordinal);

}  // namespace prism::vgpu
