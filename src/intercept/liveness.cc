#include "intercept/liveness.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

namespace prism::vgpu {
namespace {

// Reads up to `size - 1` bytes of `path` into `buffer` (NUL-terminated). Returns the length or -1.
ssize_t ReadSmallFile(const char* path, char* buffer, size_t size) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t total = 0;
  while (total + 1 < size) {
    const ssize_t n = read(fd, buffer + total, size - 1 - total);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    total += static_cast<size_t>(n);
  }
  close(fd);
  buffer[total] = '\0';
  return static_cast<ssize_t>(total);
}

}  // namespace

// Reads the state (field 3) and start time (field 22) of `pid`. Returns false if it has no entry.
bool ReadProcessStat(pid_t pid, char* state, uint64_t* start_time) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  char buffer[1024];
  if (ReadSmallFile(path, buffer, sizeof(buffer)) <= 0) return false;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so fields are counted from
  // the last ')'.
  const char* p = strrchr(buffer, ')');
  if (p == nullptr) return false;
  ++p;
  for (int field = 3; field <= 22; ++field) {
    while (*p == ' ') ++p;
    if (*p == '\0') return false;
    if (field == 3) *state = *p;
    if (field == 22) {
      uint64_t value = 0;
      while (*p >= '0' && *p <= '9') value = value * 10 + static_cast<uint64_t>(*p++ - '0');
      *start_time = value;
      return true;
    }
    while (*p != ' ' && *p != '\0') ++p;
  }
  return false;
}

uint64_t ProcessStartTime(pid_t pid) {
  char state = 0;
  uint64_t start_time = 0;
  return ReadProcessStat(pid, &state, &start_time) ? start_time : 0;
}

char ProcessState(pid_t pid) {
  char state = 0;
  uint64_t start_time = 0;
  return ReadProcessStat(pid, &state, &start_time) ? state : 0;
}

bool IsProcessAlive(pid_t pid, uint64_t start_time) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  char state = 0;
  uint64_t now_start = 0;
  if (!ReadProcessStat(pid, &state, &now_start)) {
    // No /proc entry although kill() found it: /proc may not be this PID namespace's. Trust kill().
    return true;
  }
  // A zombie has exited: the driver already released its memory, and its PID cannot be reused
  // before it is reaped, so its registration is safe to reclaim.
  if (state == 'Z' || state == 'X') return false;
  return start_time == 0 || now_start == start_time;
}

pid_t OutermostPid() {
  char buffer[4096];
  if (ReadSmallFile("/proc/self/status", buffer, sizeof(buffer)) <= 0) return 0;
  const char* line = strstr(buffer, "\nNSpid:");
  if (line == nullptr) return 0;
  line += 7;
  int count = 0;
  long first = 0;
  while (*line != '\n' && *line != '\0') {
    while (*line == ' ' || *line == '\t') ++line;
    if (*line < '0' || *line > '9') break;
    long value = 0;
    while (*line >= '0' && *line <= '9') value = value * 10 + (*line++ - '0');
    if (count == 0) first = value;
    ++count;
  }
  return count > 1 ? static_cast<pid_t>(first) : 0;
}

}  // namespace prism::vgpu
