// src/intercept/region.h: the shared region of one container: per-GPU limits and usage, and one
// slot per process, in a file every process of the container maps
// (CUDA_DEVICE_MEMORY_SHARED_CACHE).
//
// Layout (ABI version 1, docs/intercept.md): a fixed header, kMaxDevices device entries keyed by
// GPU UUID and kMaxSlots process slots; every offset is pinned by static_asserts and a golden test.
// Slots never move: a slot belongs to one (pid, start time) from acquisition to release or
// reclamation (HAMi-core's swap-compaction left other processes pointing at moved slots, core#242).
//
// Invariant: for every device, `used` == the sum of `used[device]` over live slots. Both sides
// change together, only while holding the region lock, a process-shared *robust* mutex. If a
// process dies holding it, the next locker gets EOWNERDEAD, marks it consistent and recomputes
// every device's `used` from the slots (idempotent, so dying during the repair is also safe);
// nobody ever waits on a dead owner (hami#2500, core#86). A reservation checks and adds under the
// lock, so two processes can never both pass the check (core#273). Slots of dead processes
// (liveness.h) are reclaimed under the lock before a reservation is refused, when slots run out,
// and periodically; their bytes return to their devices. Counters saturate at 0 (an underflow is
// counted, never wrapped).
//
// Thread-safety: all methods are safe from any thread of any process mapping the region.
// No allocation (the library runs inside foreign processes).
#pragma once

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <atomic>

namespace prism::vgpu {

inline constexpr char kRegionMagic[8] = {'P', 'R', 'S', 'M', 'V', 'G', 'P', 'U'};
inline constexpr uint32_t kRegionAbiVersion = 1;
inline constexpr int kMaxDevices = 16;
inline constexpr int kMaxSlots = 1024;

enum SlotState : uint32_t { kSlotFree = 0, kSlotLive = 1 };

// One GPU, identified by its UUID. Identity and limits are written once, under the lock, by the
// first process that sees the GPU ("the creator's limits win", as in HAMi-core); `claimed` is
// stored last with release order.
struct alignas(64) RegionDevice {
  std::atomic<uint32_t> claimed;
  uint32_t sm_limit_percent;  // 0 or 100: no SM limit.
  uint8_t uuid[16];
  uint64_t memory_limit;  // Bytes; 0: no memory limit.
  uint32_t policy;        // quota::UtilizationPolicy.
  uint32_t sm_count;
  std::atomic<uint64_t> used;  // Written under the lock; read anywhere.
  std::atomic<uint64_t> peak_used;
  std::atomic<uint64_t> refusals;          // Allocations refused for the limit.
  std::atomic<uint64_t> limit_mismatches;  // Later processes that asked for other limits.
  std::atomic<uint64_t> untracked_frees;   // Frees of pointers no process had charged.

  // SM limiter, on their own cache lines (written on every paced launch).
  alignas(64) std::atomic<int64_t> pace_tat_ns;  // GCRA theoretical arrival time.
  std::atomic<uint64_t> pace_ps_per_warp;        // 0: launches are not paced.
  alignas(64) std::atomic<uint64_t> warps_launched;
  std::atomic<uint64_t> throttle_events;
  std::atomic<uint64_t> throttle_ns;
  // The process that runs the controller for this device (one per container).
  alignas(64) std::atomic<int32_t> watcher_pid;
  uint32_t reserved0;
  std::atomic<uint64_t> watcher_start_time;
  std::atomic<int64_t> watcher_heartbeat_ns;
  std::atomic<uint64_t> controller_cost_bits;        // double: utilization-seconds per warp.
  std::atomic<uint64_t> controller_correction_bits;  // double.
  std::atomic<uint32_t> own_util_permille;           // Last sample, for tools and tests.
  std::atomic<uint32_t> others_active;
};

// One process of the container.
struct alignas(64) RegionSlot {
  std::atomic<uint32_t> state;              // SlotState.
  int32_t pid;                              // In the container's PID namespace.
  uint64_t start_time;                      // /proc/<pid>/stat field 22.
  std::atomic<int32_t> host_pid;            // The PID NVML reports for this process; 0: unknown.
  uint32_t generation;                      // Incremented on every acquisition.
  std::atomic<uint64_t> used[kMaxDevices];  // Bytes charged per device entry, overhead included.
  // Of `used`: memory the driver took for this process beyond its allocations (contexts, modules),
  // measured through NVML (SetOverhead).
  std::atomic<uint64_t> overhead[kMaxDevices];
};

struct RegionHeader {
  char magic[8];
  uint32_t abi_version;
  uint32_t header_size;
  uint32_t device_size;
  uint32_t slot_size;
  uint32_t max_devices;
  uint32_t max_slots;
  uint64_t total_size;
  std::atomic<uint64_t> lock_recoveries;  // EOWNERDEAD repairs.
  std::atomic<uint64_t> slots_reclaimed;  // Slots of dead processes freed by others.
  std::atomic<uint64_t> bytes_reclaimed;
  std::atomic<uint64_t> underflows;  // Releases of more than was charged (clamped at 0).
  std::atomic<uint64_t> slot_exhaustions;
  alignas(64) union {
    pthread_mutex_t mutex;
    unsigned char bytes[64];
  } lock;
};

struct RegionLayout {
  RegionHeader header;
  RegionDevice devices[kMaxDevices];
  RegionSlot slots[kMaxSlots];
};

static_assert(sizeof(pthread_mutex_t) <= 64);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int64_t>::is_always_lock_free);
// The layout is an ABI between processes (and tools): any change needs a new kRegionAbiVersion.
static_assert(sizeof(RegionHeader) == 192);
static_assert(offsetof(RegionHeader, lock) == 128);
static_assert(sizeof(RegionDevice) == 320);
static_assert(offsetof(RegionDevice, used) == 40);
static_assert(offsetof(RegionDevice, pace_tat_ns) == 128);
static_assert(offsetof(RegionDevice, warps_launched) == 192);
static_assert(offsetof(RegionDevice, watcher_pid) == 256);
static_assert(offsetof(RegionSlot, overhead) == 152);
static_assert(sizeof(RegionSlot) == 320);
static_assert(offsetof(RegionSlot, used) == 24);
static_assert(offsetof(RegionLayout, devices) == 192);
static_assert(offsetof(RegionLayout, slots) == 192 + 16 * 320);
static_assert(sizeof(RegionLayout) == 192 + 16 * 320 + 1024 * 320);

enum class RegionError : int {
  kNone = 0,
  kOpenFailed,    // open/flock/ftruncate failed (errno in `sys_errno`).
  kMapFailed,     // mmap failed.
  kIncompatible,  // The file holds another layout (wrong magic, version or size).
};

const char* RegionErrorName(RegionError error);

struct Reservation {
  bool ok = false;
  uint64_t used = 0;   // The device's usage after the reservation (or at refusal).
  uint64_t limit = 0;  // The device's limit.
};

class Region {
 public:
  Region() = default;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region();

  // Maps the region file at `path`, creating and initializing it if it is new or empty. An
  // initializer that dies midway leaves no trace: creation happens under flock(2), which the
  // kernel drops with the process. On error, `sys_errno` holds the errno where there is one.
  RegionError OpenFile(const char* path, int* sys_errno);

  // Maps a fresh, process-private region (MAP_SHARED | MAP_ANONYMOUS: still shared with children
  // forked afterwards).
  RegionError OpenAnonymous(int* sys_errno);

  bool is_open() const { return layout_ != nullptr; }
  RegionLayout* layout() const { return layout_; }
  RegionDevice& device(int index) const { return layout_->devices[index]; }
  RegionSlot& slot(int index) const { return layout_->slots[index]; }

  // Takes a slot for (pid, start_time), replacing a stale slot of an earlier process with the same
  // PID. Returns the slot index, or -1 when all slots belong to live processes.
  int AcquireSlot(pid_t pid, uint64_t start_time);

  // Returns every byte the slot holds to its devices and frees it. No-op for a slot that is no
  // longer (pid, start_time)'s, e.g. one already reclaimed.
  void ReleaseSlot(int slot, pid_t pid, uint64_t start_time);

  // Finds or claims the entry of the GPU `uuid`. A new entry takes the given limits; an existing
  // one keeps its own, and `*mismatch` tells whether they differ from the given ones. Returns the
  // entry index, or -1 when the table is full.
  int ClaimDevice(const uint8_t uuid[16], uint64_t memory_limit, uint32_t sm_limit_percent,
                  uint32_t policy, uint32_t sm_count, bool* mismatch);

  // Charges `bytes` on `device` to `slot` if they fit under the device's limit (reclaiming dead
  // processes' bytes first if they do not). With `force`, charges even over the limit (for
  // corrections after the fact); the result's `ok` then tells whether it fit.
  Reservation Reserve(int slot, int device, uint64_t bytes, bool force = false);

  // Returns `bytes` on `device` from `slot`, clamping both counters at 0.
  void Release(int slot, int device, uint64_t bytes);

  // Sets the slot's overhead on `device` (memory the driver took beyond the tracked allocations),
  // adjusting the slot's and the device's usage by the difference, even past the limit: it is
  // memory already taken. Returns the device's usage afterwards.
  uint64_t SetOverhead(int slot, int device, uint64_t bytes);

  // Frees the slots of dead processes and returns their bytes. Returns the number of slots freed.
  int ReclaimDead();

  // Test hook: while > 0, Reserve() sleeps this long holding the lock (after logging a notice
  // saying so), so tests can kill a process at exactly that point.
  void set_stall_in_lock_ms_for_test(int ms) { stall_in_lock_ms_ = ms; }

 private:
  class Locker;
  RegionError MapAndInit(int fd, bool anonymous, int* sys_errno);
  void InitLocked();
  void Lock();
  void Unlock();
  void RepairLocked();
  int ReclaimDeadLocked();
  void FreeSlotLocked(int slot);

  RegionLayout* layout_ = nullptr;
  int stall_in_lock_ms_ = 0;
};

}  // namespace prism::vgpu
