#include "intercept/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

namespace prism::vgpu {

std::atomic<int> g_log_level{static_cast<int>(LogLevel::kNotice)};

void SetLogLevel(LogLevel level) { g_log_level.store(static_cast<int>(level)); }

void LogMessage(LogLevel level, const char* format, ...) {
  static constexpr const char* kNames[] = {"ERROR", "WARN", "NOTICE", "INFO", "DEBUG"};
  const int saved_errno = errno;  // Logging must not disturb the caller's errno.
  char line[1024];
  int length = snprintf(line, sizeof(line), "[prism-vgpu %d] %s ", static_cast<int>(getpid()),
                        kNames[static_cast<int>(level)]);
  if (length < 0) length = 0;
  va_list args;
  va_start(args, format);
  const int body =
      vsnprintf(line + length, sizeof(line) - static_cast<size_t>(length) - 1, format, args);
  va_end(args);
  if (body > 0) length += body;
  if (length > static_cast<int>(sizeof(line)) - 2) length = static_cast<int>(sizeof(line)) - 2;
  line[length++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, static_cast<size_t>(length));
  (void)ignored;
  errno = saved_errno;
}

}  // namespace prism::vgpu
