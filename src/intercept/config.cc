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

// True for "<prefix>" and "<prefix>_<digits>" followed by '=' at `entry` (an environ line).
// Sets `*value` to what follows the '='.
bool IsLimitVariable(const char* entry, const char* prefix, const char** value) {
  const size_t length = strlen(prefix);
  if (strncmp(entry, prefix, length) != 0) return false;
  const char* p = entry + length;
  if (*p == '_') {
    ++p;
    if (*p < '0' || *p > '9') return false;
    while (*p >= '0' && *p <= '9') ++p;
  }
  if (*p != '=') return false;
  *value = p + 1;
  return true;
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
  if (const char* value = getenv("PRISM_VGPU_LOCK_TIMEOUT_MS"); value != nullptr) {
    const int timeout = atoi(value);
    if (timeout >= 10 && timeout <= 600000) {
      config->lock_timeout_ms = timeout;
    } else {
      PRISM_VGPU_LOG(kError, "PRISM_VGPU_LOCK_TIMEOUT_MS=\"%s\": not in 10..600000; using %d",
                     value, config->lock_timeout_ms);
    }
  }
  if (const char* value = getenv("PRISM_VGPU_CONTEXT_ESTIMATE"); value != nullptr) {
    const quota::Parsed<uint64_t> bytes = quota::ParseBytes(value);
    if (bytes.ok()) {
      config->context_estimate = bytes.value;
    } else {
      PRISM_VGPU_LOG(kError, "PRISM_VGPU_CONTEXT_ESTIMATE=\"%s\": %s; using %llu", value,
                     quota::ParseErrorName(bytes.error),
                     static_cast<unsigned long long>(config->context_estimate));
    }
  }
  for (char** env = environ; env != nullptr && *env != nullptr; ++env) {
    const char* value = nullptr;
    if (!IsLimitVariable(*env, "CUDA_DEVICE_MEMORY_LIMIT", &value)) continue;
    const quota::Parsed<uint64_t> bytes = quota::ParseBytes(value);
    if (!bytes.ok() || bytes.value != 0) config->memory_limit_requested = true;
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

MemoryLimitRequest MemoryLimitForOrdinal(int ordinal) {
  MemoryLimitRequest request;
  char name[64];
  snprintf(name, sizeof(name), "CUDA_DEVICE_MEMORY_LIMIT_%d", ordinal);
  const char* value = getenv(name);
  if (value == nullptr) {
    snprintf(name, sizeof(name), "CUDA_DEVICE_MEMORY_LIMIT");
    value = getenv(name);
  }
  if (value == nullptr) return request;
  const quota::Parsed<uint64_t> bytes = quota::ParseBytes(value);
  if (!bytes.ok()) {
    PRISM_VGPU_LOG(kError,
                   "%s=\"%s\": %s; the memory limit of device %d cannot be established, so every "
                   "allocation on it is refused (fail closed)",
                   name, value, quota::ParseErrorName(bytes.error), ordinal);
    request.source = LimitSource::kInvalid;
    return request;
  }
  request.source = LimitSource::kValue;
  request.bytes = bytes.value;
  return request;
}

uint32_t SmLimitForOrdinal(int ordinal) {
  char name[64];
  snprintf(name, sizeof(name), "CUDA_DEVICE_SM_LIMIT_%d", ordinal);
  for (int pass = 0; pass < 2; ++pass) {
    const char* value = getenv(name);
    if (value != nullptr) {
      const quota::Parsed<uint32_t> percent = quota::ParsePercent(value);
      if (percent.ok()) return percent.value == 100 ? 0 : percent.value;
      PRISM_VGPU_LOG(kError, "%s=\"%s\": %s (use a whole number 0..100)%s", name, value,
                     quota::ParseErrorName(percent.error),
                     pass == 0 ? "; trying CUDA_DEVICE_SM_LIMIT" : "; no SM limit");
    }
    snprintf(name, sizeof(name), "CUDA_DEVICE_SM_LIMIT");
  }
  return 0;
}

}  // namespace prism::vgpu
