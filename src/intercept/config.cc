#include "intercept/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "intercept/log.h"

extern char** environ;

namespace prism::vgpu {
namespace {

void CopyString(char* out, size_t size, const char* value) {
  if (value == nullptr) {
    out[0] = '\0';
    return;
  }
  snprintf(out, size, "%s", value);
}

// Reads `<name>_<ordinal>` if set, else `<name>`. Returns the variable name used in `used_name`.
const char* GetPerDeviceEnv(const char* name, int ordinal, char* used_name, size_t size) {
  snprintf(used_name, size, "%s_%d", name, ordinal);
  const char* value = getenv(used_name);
  if (value != nullptr) return value;
  snprintf(used_name, size, "%s", name);
  return getenv(name);
}

}  // namespace

void LoadConfig(Config* config) {
  *config = Config();
  if (const char* value = getenv("LIBCUDA_LOG_LEVEL"); value != nullptr) {
    const quota::Parsed<int> level = quota::ParseLogLevel(value);
    if (level.ok()) {
      config->log_level = level.value;
    } else {
      PRISM_VGPU_LOG(kError, "LIBCUDA_LOG_LEVEL=\"%s\": %s; using 2", value,
                     quota::ParseErrorName(level.error));
    }
  }
  SetLogLevel(static_cast<LogLevel>(config->log_level));
  if (const char* value = getenv("CUDA_DISABLE_CONTROL"); value != nullptr) {
    const quota::Parsed<bool> disabled = quota::ParseBool(value);
    if (disabled.ok()) {
      config->disabled = disabled.value;
    } else {
      PRISM_VGPU_LOG(kError, "CUDA_DISABLE_CONTROL=\"%s\": %s; limits stay on", value,
                     quota::ParseErrorName(disabled.error));
    }
  }
  if (const char* value = getenv("GPU_CORE_UTILIZATION_POLICY"); value != nullptr) {
    const quota::Parsed<quota::UtilizationPolicy> policy = quota::ParsePolicy(value);
    if (policy.ok()) {
      config->policy = policy.value;
    } else {
      PRISM_VGPU_LOG(kError,
                     "GPU_CORE_UTILIZATION_POLICY=\"%s\": %s (use default, force or disable); "
                     "using default",
                     value, quota::ParseErrorName(policy.error));
    }
  }
  if (const char* value = getenv("PRISM_VGPU_SM_TICK_MS"); value != nullptr) {
    const int tick = atoi(value);
    if (tick >= 10 && tick <= 10000) {
      config->sm_tick_ms = tick;
    } else {
      PRISM_VGPU_LOG(kError, "PRISM_VGPU_SM_TICK_MS=\"%s\": not in 10..10000; using %d", value,
                     config->sm_tick_ms);
    }
  }
  if (const char* value = getenv("PRISM_VGPU_CHARGE_OVERHEAD"); value != nullptr) {
    const quota::Parsed<bool> charge = quota::ParseBool(value);
    if (charge.ok()) {
      config->charge_overhead = charge.value;
    } else {
      PRISM_VGPU_LOG(kError, "PRISM_VGPU_CHARGE_OVERHEAD=\"%s\": %s; charging overhead", value,
                     quota::ParseErrorName(charge.error));
    }
  }
  if (const char* value = getenv("PRISM_VGPU_TEST_LOCK_STALL_MS"); value != nullptr) {
    config->test_lock_stall_ms = atoi(value);
  }
  if (config->policy != quota::UtilizationPolicy::kDisable) {
    constexpr char kPrefix[] = "CUDA_DEVICE_SM_LIMIT";
    for (char** env = environ; env != nullptr && *env != nullptr; ++env) {
      if (strncmp(*env, kPrefix, sizeof(kPrefix) - 1) != 0) continue;
      const char* value = strchr(*env, '=');
      if (value == nullptr) continue;
      const quota::Parsed<uint32_t> percent = quota::ParsePercent(value + 1);
      if (percent.ok() && percent.value > 0 && percent.value < 100) {
        config->sm_limit_configured = true;
      }
    }
  }
  const char* region = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
  CopyString(config->region_path, sizeof(config->region_path),
             (region != nullptr && region[0] != '\0') ? region : kDefaultRegionPath);
  CopyString(config->real_libcuda, sizeof(config->real_libcuda), getenv("PRISM_VGPU_REAL_LIBCUDA"));
  CopyString(config->real_nvml, sizeof(config->real_nvml), getenv("PRISM_VGPU_REAL_NVML"));
}

uint64_t MemoryLimitForOrdinal(int ordinal) {
  char name[64];
  const char* value = GetPerDeviceEnv("CUDA_DEVICE_MEMORY_LIMIT", ordinal, name, sizeof(name));
  if (value == nullptr) return 0;
  const quota::Parsed<uint64_t> bytes = quota::ParseBytes(value);
  if (!bytes.ok()) {
    PRISM_VGPU_LOG(kError, "%s=\"%s\": %s; device %d has no memory limit", name, value,
                   quota::ParseErrorName(bytes.error), ordinal);
    return 0;
  }
  return bytes.value;
}

uint32_t SmLimitForOrdinal(int ordinal) {
  char name[64];
  const char* value = GetPerDeviceEnv("CUDA_DEVICE_SM_LIMIT", ordinal, name, sizeof(name));
  if (value == nullptr) return 0;
  const quota::Parsed<uint32_t> percent = quota::ParsePercent(value);
  if (!percent.ok()) {
    PRISM_VGPU_LOG(kError, "%s=\"%s\": %s (use 0..100); device %d has no SM limit", name, value,
                   quota::ParseErrorName(percent.error), ordinal);
    return 0;
  }
  return percent.value == 100 ? 0 : percent.value;
}

}  // namespace prism::vgpu
