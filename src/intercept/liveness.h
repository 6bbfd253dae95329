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

// The PID of this process in the outermost PID namespace this /proc shows (the first NSpid
// entry), or 0 when /proc shows only one namespace level.
pid_t OutermostPid();

}  // namespace prism::vgpu
