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

// Calls `line(text)` for every line of /proc/<pid>/maps (`pid` 0: self), each cut at 511 bytes.
// Stops early when `line` returns true. Returns false when the file cannot be opened.
template <typename Fn>
bool ForEachMapsLine(pid_t pid, Fn line) {
  char path[64];
  if (pid == 0) {
    snprintf(path, sizeof(path), "/proc/self/maps");
  } else {
    snprintf(path, sizeof(path), "/proc/%d/maps", static_cast<int>(pid));
  }
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char chunk[4096];
  char text[512];
  size_t length = 0;
  bool done = false;
  bool ok = true;
  while (!done) {
    const ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ok = false;  // Not read is not "maps nothing".
    if (n <= 0) break;
    for (ssize_t i = 0; i < n && !done; ++i) {
      if (chunk[i] != '\n') {
        if (length + 1 < sizeof(text)) text[length++] = chunk[i];
        continue;
      }
      text[length] = '\0';
      done = line(text);
      length = 0;
    }
  }
  if (!done && length > 0) {
    text[length] = '\0';
    line(text);
  }
  close(fd);
  return ok;
}

// Splits a maps line ("start-end perms offset dev inode   path") into its address range, its
// "dev inode" ("" for an anonymous mapping, whose inode is 0) and its path. False for a line it
// cannot read.
bool ParseMapsLine(const char* text, uintptr_t* start, uintptr_t* end, MappedFile* file) {
  // Parsed by hand: sscanf may allocate, and the library never does.
  auto hex = [](const char*& p, uintptr_t* value) {
    const char* first = p;
    uintptr_t v = 0;
    for (;; ++p) {
      const char c = *p;
      const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (digit < 0) break;
      v = v * 16 + static_cast<uintptr_t>(digit);
    }
    *value = v;
    return p != first;
  };
  auto field = [](const char*& p, const char** first, size_t* length) {
    while (*p == ' ' || *p == '\t') ++p;
    *first = p;
    while (*p != ' ' && *p != '\t' && *p != '\0') ++p;
    *length = static_cast<size_t>(p - *first);
    return *length > 0;
  };
  const char* p = text;
  if (!hex(p, start) || *p++ != '-' || !hex(p, end)) return false;
  const char* perms;
  const char* offset;
  const char* dev;
  const char* inode;
  size_t perms_length, offset_length, dev_length, inode_length;
  if (!field(p, &perms, &perms_length) || !field(p, &offset, &offset_length) ||
      !field(p, &dev, &dev_length) || !field(p, &inode, &inode_length)) {
    return false;
  }
  file->dev_inode[0] = '\0';
  const bool anonymous = inode_length == 1 && inode[0] == '0';
  if (!anonymous && dev_length + 1 + inode_length < sizeof(file->dev_inode)) {
    memcpy(file->dev_inode, dev, dev_length);
    file->dev_inode[dev_length] = ' ';
    memcpy(file->dev_inode + dev_length + 1, inode, inode_length);
    file->dev_inode[dev_length + 1 + inode_length] = '\0';
  }
  while (*p == ' ' || *p == '\t') ++p;
  const size_t path_length = strnlen(p, sizeof(file->path) - 1);
  memcpy(file->path, p, path_length);
  file->path[path_length] = '\0';
  return true;
}

}  // namespace

bool FindOwnMapping(const void* address, MappedFile* file) {
  const uintptr_t target = reinterpret_cast<uintptr_t>(address);
  bool found = false;
  ForEachMapsLine(0, [&](const char* text) {
    uintptr_t start = 0, end = 0;
    MappedFile entry;
    if (!ParseMapsLine(text, &start, &end, &entry) || target < start || target >= end) {
      return false;
    }
    *file = entry;
    found = true;
    return true;
  });
  return found;
}

int ProcessMapsFile(pid_t pid, const MappedFile& file) {
  if (pid <= 0) return -1;
  bool maps = false;
  const bool readable = ForEachMapsLine(pid, [&](const char* text) {
    uintptr_t start = 0, end = 0;
    MappedFile entry;
    if (!ParseMapsLine(text, &start, &end, &entry)) return false;
    const bool same_inode =
        file.dev_inode[0] != '\0' && strcmp(entry.dev_inode, file.dev_inode) == 0;
    const bool same_path = file.path[0] == '/' && strcmp(entry.path, file.path) == 0;
    maps = same_inode || same_path;
    return maps;
  });
  if (!readable) return -1;
  return maps ? 1 : 0;
}

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
