// src/deviceplugin/usage_region.h: reads what a software-slice container uses from the shared
// region libprism-vgpu keeps in its host directory (docs/intercept.md, "The shared region").
//
// The node agent only reads: it never maps the file, takes its lock or writes to it, so a region
// that containers damage, truncate or replace (by a FIFO, a symlink, a file of another size)
// cannot crash or block the agent, and nothing it reads feeds back into a limit (the limits it
// exports are the ones it granted, not the region's). The file is copied with pread(2) and
// validated (magic, ABI version, sizes, then the device and slot tables with the library's own
// checks) before a field is used. Pure apart from the file I/O. Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace prism::deviceplugin {

// One GPU entry of a region, as the library counts it.
struct RegionDeviceUsage {
  std::string gpu_uuid;             // "GPU-…", as NVML spells it.
  uint64_t used_bytes = 0;          // Charged to the container: allocations and driver overhead.
  uint64_t peak_bytes = 0;          // Highest `used_bytes` since the region was created.
  uint64_t memory_limit_bytes = 0;  // The limit the first process stored (0: none).
  int sm_limit_percent = 0;         // 0 or 100: no SM limit.
  uint64_t refusals = 0;            // Allocations the library refused with OUT_OF_MEMORY.
  // The container's share of the GPU's SM time in the SM limiter's last sample (0–1), only while
  // its controller is alive (heartbeat within kUtilizationFreshNs).
  std::optional<double> utilization;
};

struct RegionUsage {
  std::vector<RegionDeviceUsage> devices;  // Claimed entries, in table order.
  // Host PIDs of the container's live processes where the library knows them (for NVML's
  // per-process utilization); filled only when asked for.
  std::vector<uint32_t> host_pids;
};

// How recent the SM limiter's heartbeat must be for its utilization sample to count.
inline constexpr int64_t kUtilizationFreshNs = int64_t{3} * 1'000'000'000;

// Reads the region at `path`. `now_monotonic_ns` is CLOCK_MONOTONIC now (system-wide, as the
// library's heartbeats). Errors: NotFound when there is no region yet (no file, or the agent's
// pre-sized file still all zeros in its header: no CUDA process has run);
// FailedPrecondition when it is not a regular file or has another layout (size, magic, version:
// an older library, HAMi-core's cache); DataLoss when a field holds a value no Prism process
// writes; Unavailable for I/O errors. Each message names the path and what is wrong.
absl::StatusOr<RegionUsage> ReadRegionUsage(const std::string& path, int64_t now_monotonic_ns,
                                            bool with_host_pids);

// CLOCK_MONOTONIC in nanoseconds.
int64_t MonotonicNowNs();

}  // namespace prism::deviceplugin
