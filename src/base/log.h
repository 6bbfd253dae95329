// src/base/log.h: a small structured logger for Prism's processes.
//
// Lines go to stderr as `LEVEL component: message key=value ...` (text) or one
// JSON object per line (`SetLogFormat(LogFormat::kJson)`). Thread-safe. The pure
// core never logs; adapters and binaries do.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/strings.h"

namespace prism {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
enum class LogFormat { kText, kJson };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void SetLogFormat(LogFormat format);
// Parses "debug", "info", "warning"/"warn", "error". Returns false if unknown.
bool ParseLogLevel(std::string_view text, LogLevel* level);

using LogFields = std::vector<std::pair<std::string, std::string>>;

// Writes one record if `level` is enabled.
void LogRecord(LogLevel level, std::string_view component, std::string_view message,
               const LogFields& fields = {});

template <typename... Args>
void LogInfo(std::string_view component, const Args&... args) {
  if (GetLogLevel() <= LogLevel::kInfo) LogRecord(LogLevel::kInfo, component, StrCat(args...));
}
template <typename... Args>
void LogDebug(std::string_view component, const Args&... args) {
  if (GetLogLevel() <= LogLevel::kDebug) LogRecord(LogLevel::kDebug, component, StrCat(args...));
}
template <typename... Args>
void LogWarning(std::string_view component, const Args&... args) {
  if (GetLogLevel() <= LogLevel::kWarning) {
    LogRecord(LogLevel::kWarning, component, StrCat(args...));
  }
}
template <typename... Args>
void LogError(std::string_view component, const Args&... args) {
  LogRecord(LogLevel::kError, component, StrCat(args...));
}

}  // namespace prism
