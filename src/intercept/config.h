// src/intercept/config.h: the environment contract of libprism-vgpu (docs/intercept.md).
//
// HAMi-core compatible: CUDA_DEVICE_MEMORY_LIMIT[_<i>], CUDA_DEVICE_SM_LIMIT[_<i>],
// CUDA_DEVICE_MEMORY_SHARED_CACHE, CUDA_DISABLE_CONTROL, GPU_CORE_UTILIZATION_POLICY,
// LIBCUDA_LOG_LEVEL. Prism additions: PRISM_VGPU_REAL_LIBCUDA, PRISM_VGPU_REAL_NVML,
// PRISM_VGPU_SM_TICK_MS, PRISM_VGPU_CHARGE_OVERHEAD, PRISM_VGPU_LOCK_TIMEOUT_MS,
// PRISM_VGPU_CONTEXT_ESTIMATE, PRISM_VGPU_TEST_LOCK_STALL_MS (tests only). A malformed value is
// logged as an error naming the variable, the value and the reason. A malformed memory limit never
// weakens a limit: the device fails closed (docs/intercept.md, "Failure policy"); elsewhere the
// default applies. Not on any hot path; no allocation.
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
  // Some CUDA_DEVICE_MEMORY_LIMIT[_<i>] is set to anything but a valid 0: a memory limit was asked
  // for, so when it cannot be enforced the library fails closed instead of passing through.
  bool memory_limit_requested = false;
  // PRISM_VGPU_CONTEXT_ESTIMATE: device memory charged for a new context when NVML cannot
  // measure it (bytes, with the memory-limit units).
  uint64_t context_estimate = uint64_t{256} << 20;
  // PRISM_VGPU_LOCK_TIMEOUT_MS: bound on a wait for the region lock.
  int lock_timeout_ms = 2000;
  char region_path[512] = {};
  char real_libcuda[512] = {};
  char real_nvml[512] = {};
};

// Reads the process-wide settings.
void LoadConfig(Config* config);

enum class LimitSource : uint8_t {
  kUnset = 0,  // Neither variable is set.
  kValue,      // A valid value (0: explicitly no limit).
  kInvalid,    // The deciding variable is malformed: the device fails closed.
};

struct MemoryLimitRequest {
  LimitSource source = LimitSource::kUnset;
  uint64_t bytes = 0;  // For kValue.
};

// The memory limit the environment asks for on container-visible CUDA ordinal `ordinal`:
// CUDA_DEVICE_MEMORY_LIMIT_<ordinal> when set (valid or not: a per-device value is meant for this
// device, so a malformed one is never replaced by the global one), else CUDA_DEVICE_MEMORY_LIMIT.
// A malformed value is logged once, naming the variable, the value and the reason.
MemoryLimitRequest MemoryLimitForOrdinal(int ordinal);

// The SM share of `ordinal` in percent (0: none): CUDA_DEVICE_SM_LIMIT_<ordinal>, else (also when
// the per-device value is malformed) CUDA_DEVICE_SM_LIMIT. 100 means none.
uint32_t SmLimitForOrdinal(int ordinal);

}  // namespace prism::vgpu
