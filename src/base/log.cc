#include "base/log.h"

#include <atomic>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>

#include "base/strings.h"

namespace prism {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> g_format{static_cast<int>(LogFormat::kText)};
std::mutex g_write_mu;

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarning:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
  }
  return "?";
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }
void SetLogFormat(LogFormat format) { g_format.store(static_cast<int>(format)); }

bool ParseLogLevel(std::string_view text, LogLevel* level) {
  if (text == "debug") {
    *level = LogLevel::kDebug;
  } else if (text == "info") {
    *level = LogLevel::kInfo;
  } else if (text == "warning" || text == "warn") {
    *level = LogLevel::kWarning;
  } else if (text == "error") {
    *level = LogLevel::kError;
  } else {
    return false;
  }
  return true;
}

void LogRecord(LogLevel level, std::string_view component, std::string_view message,
               const LogFields& fields) {
  if (static_cast<int>(level) < g_level.load()) return;
  std::string line;
  if (static_cast<LogFormat>(g_format.load()) == LogFormat::kJson) {
    nlohmann::json record;
    record["ts"] = static_cast<long long>(std::time(nullptr));
    record["level"] = LevelName(level);
    record["component"] = std::string(component);
    record["msg"] = std::string(message);
    for (const auto& [key, value] : fields) record[key] = value;
    line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    line = StrCat(LevelName(level), " ", component, ": ", message);
    for (const auto& [key, value] : fields) StrAppend(&line, " ", key, "=", value);
  }
  line.push_back('\n');
  std::lock_guard<std::mutex> lock(g_write_mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace prism
