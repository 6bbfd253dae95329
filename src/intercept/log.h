// src/intercept/log.h: the interception library's logger. Lines go to stderr with a
// "[prism-vgpu <pid>] LEVEL " prefix, formatted into a stack buffer and written with one write(2)
// (no allocation, no stdio locks, safe in any thread). The level comes from LIBCUDA_LOG_LEVEL
// (HAMi-core's variable), read once: 0 errors, 1 warnings, 2 notices (default), 3 info, 4 debug.
#pragma once

#include <atomic>

namespace prism::vgpu {

enum class LogLevel : int { kError = 0, kWarning = 1, kNotice = 2, kInfo = 3, kDebug = 4 };

// The configured level; messages above it are dropped before formatting.
extern std::atomic<int> g_log_level;

void SetLogLevel(LogLevel level);

void LogMessage(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace prism::vgpu

#define PRISM_VGPU_LOG(level, ...)                                            \
  do {                                                                        \
    if (static_cast<int>(::prism::vgpu::LogLevel::level) <=                   \
        ::prism::vgpu::g_log_level.load(std::memory_order_relaxed)) {         \
      ::prism::vgpu::LogMessage(::prism::vgpu::LogLevel::level, __VA_ARGS__); \
    }                                                                         \
  } while (0)
