// src/intercept/liveness.h: whether the process that registered in a shared region is still the
// same, alive process. A PID alone is not enough (PIDs are reused, core#242): a process is
// identified by (pid, start time), the start time being field 22 of /proc/<pid>/stat (clock ticks
// since boot); a zombie counts as dead (its GPU memory is already released). No allocation;
// thread-safe.
#pragma once

#include <stdint.h>
#include <sys/types.h>

namespace prism::vgpu {

// The start time of `pid`, or 0 when the process does not exist or /proc cannot be read.
uint64_t ProcessStartTime(pid_t pid);

// True while the process registered as (pid, start_time) exists. A process that exists but
// belongs to another user counts as alive. `start_time` 0 skips the reuse check.
bool IsProcessAlive(pid_t pid, uint64_t start_time);

// The state letter of `pid` in /proc/<pid>/stat ('R', 'S', 'T' stopped, 't' traced, 'Z', ...), or
// 0 when the process does not exist or /proc cannot be read.
char ProcessState(pid_t pid);

// A file mapping as /proc/<pid>/maps shows it: "major:minor inode" and the path.
struct MappedFile {
  char dev_inode[48] = {};
  char path[256] = {};
};

// Finds the file mapping of this process that contains `address`. False when there is none or
// /proc/self/maps cannot be read.
bool FindOwnMapping(const void* address, MappedFile* file);

// Whether process `pid` (or the process of thread ID `pid`) maps `file`: the same device and inode,
// or the same path (either is enough: saying "maps it" when unsure is the safe answer for the
// caller). 1: it does, 0: it does not, -1: its maps cannot be read (gone, or not ours to read).
int ProcessMapsFile(pid_t pid, const MappedFile& file);

// The PID of this process in the outermost PID namespace this /proc shows (the first NSpid
// entry), or 0 when /proc shows only one namespace level.
pid_t OutermostPid();

}  // namespace prism::vgpu
