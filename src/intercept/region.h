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
// nobody ever waits on a dead owner (hami#2500, core#86). Nor forever on a live one: a wait ends
// after a bound (a stopped holder, a lock word no process holds) and the operation fails closed,
// a reservation refused, a release remembered and applied the next time this process holds the
// lock; nothing is taken from a live holder, so the invariant holds throughout (issue 14). The
// region's contents are validated (FindDeviceTableDamage, FindSlotTableDamage) on open and on
// every device claim. Since anyone in the container can write the file, the counters are checked
// under the lock too: every locked operation first compares this process's own slot with a
// private record of what it charged (restoring the slot if they differ), and a reservation
// recomputes the device's live-slot sum and never decides on a `used` below it (a lowered
// counter is raised back; a raised one is kept, since the bytes it counts may have been hidden by
// lowering some slot). A reservation checks and adds under the
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

#include "intercept/liveness.h"

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
  // Who holds the lock (written right after taking it, cleared before giving it back), so a waiter
  // that gives up can say why: a stopped holder, a dead one, or a lock word nobody holds (damage).
  std::atomic<int32_t> holder_pid;
  std::atomic<int32_t> holder_tid;
  std::atomic<int64_t> holder_since_ns;  // CLOCK_MONOTONIC (system-wide).
  std::atomic<uint64_t> lock_timeouts;   // Waits that gave up after the bound.
  // Usage counters found written outside Prism and repaired under the lock: a device's `used`
  // below the sum of its live slots, a process's own slot unlike that process's private record
  // (issue 14). In what was padding before, so regions of earlier builds read it as 0.
  std::atomic<uint64_t> usage_repairs;
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
static_assert(offsetof(RegionHeader, holder_pid) == 80);
static_assert(offsetof(RegionHeader, lock_timeouts) == 96);
static_assert(offsetof(RegionHeader, usage_repairs) == 104);
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
  kDamaged,       // The layout is Prism's but a field holds a value no Prism process writes.
};

// Looks for values no Prism process ever writes (a device entry that is neither free nor claimed,
// an SM limit above 100 %, a free entry with usage, a slot in an unknown state, ...), checking
// only invariants that hold at every instant, so a region being updated by other processes is
// never mistaken for a damaged one. Returns nullptr when none is found, else a description of the
// first one (a static string), with the device or slot index in `*index`. Pure; no allocation.
const char* FindDeviceTableDamage(const RegionLayout& layout, int* index);
const char* FindSlotTableDamage(const RegionLayout& layout, int* index);

// Whether the header says "Prism region, this ABI, this size".
bool HeaderIsCompatible(const RegionHeader& header);

const char* RegionErrorName(RegionError error);

// Why a reservation was refused.
enum class Refusal : uint8_t {
  kNone = 0,
  kLimit,        // It does not fit under the limit.
  kFailClosed,   // The device's limit could not be established (Region::SetFailClosed).
  kLockTimeout,  // The region lock was not available within the bound.
};

struct Reservation {
  bool ok = false;
  uint64_t used = 0;   // The device's usage after the reservation (or at refusal).
  uint64_t limit = 0;  // The limit that applied.
  Refusal refusal = Refusal::kNone;
};

// ClaimDevice's answers besides an entry index.
inline constexpr int kClaimTableFull = -1;
inline constexpr int kClaimDamaged = -2;
inline constexpr int kClaimLockTimeout = -3;
// AcquireSlot's answers besides a slot index.
inline constexpr int kSlotsExhausted = -1;
inline constexpr int kSlotLockTimeout = -3;

// Default bound on a wait for the region lock (PRISM_VGPU_LOCK_TIMEOUT_MS).
inline constexpr int kDefaultLockTimeoutMs = 2000;

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
  // PID. Returns the slot index, kSlotsExhausted when all slots belong to live processes, or
  // kSlotLockTimeout.
  int AcquireSlot(pid_t pid, uint64_t start_time);

  // Returns every byte the slot holds to its devices and frees it. No-op for a slot that is no
  // longer (pid, start_time)'s, e.g. one already reclaimed.
  void ReleaseSlot(int slot, pid_t pid, uint64_t start_time);

  // Finds or claims the entry of the GPU `uuid`. A new entry takes the given limits; an existing
  // one keeps its own, and `*mismatch` tells whether they differ from the given ones. Returns the
  // entry index, kClaimTableFull, kClaimDamaged (the device table fails FindDeviceTableDamage) or
  // kClaimLockTimeout.
  int ClaimDevice(const uint8_t uuid[16], uint64_t memory_limit, uint32_t sm_limit_percent,
                  uint32_t policy, uint32_t sm_count, bool* mismatch);

  // Charges `bytes` on `device` to `slot` if they fit under the limit that applies in this process
  // (EffectiveLimit; reclaiming dead processes' bytes first if they do not). With `force`, charges
  // even over the limit (for corrections after the fact); the result's `ok` then tells whether it
  // fit. Refused without waiting longer than the lock bound, and always on a fail-closed device;
  // a forced charge that cannot take the lock is remembered and applied with the next lock.
  Reservation Reserve(int slot, int device, uint64_t bytes, bool force = false);

  // Returns `bytes` on `device` from `slot`, clamping both counters at 0. If the lock is not
  // available within the bound, the bytes are remembered and returned the next time this process
  // takes the lock (the usage stays conservative meanwhile, never too low).
  void Release(int slot, int device, uint64_t bytes);

  // This process's view of a device's limit: the environment is the authority for the process
  // that set it (a region whose stored limit differs is never obeyed to raise it); without a
  // local limit the region's stored one applies. A fail-closed device refuses every reservation.
  void SetLocalLimit(int device, uint64_t bytes);
  void SetFailClosed(int device);
  bool FailsClosed(int device) const;
  uint64_t EffectiveLimit(int device) const;

  // Bound on waits for the region lock; a wait that gives up logs one line saying why (holder
  // stopped, dead, or a lock word nobody holds) and the operation fails closed.
  void set_lock_timeout_ms(int ms) { lock_timeout_ms_ = ms > 0 ? ms : kDefaultLockTimeoutMs; }

  // In a forked child: forget the parent's remembered releases (they belong to the parent's slot)
  // and the parent's PID.
  void ForgetPendingReleasesAfterFork();

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
  bool Lock();  // False when the lock was not available within the bound.
  void Unlock();
  void ReportStuckLock(int64_t waited_ns);
  bool ResetDamagedLockWord();
  void ReleaseLocked(int slot, int device, uint64_t bytes);
  void ApplyPendingReleasesLocked();
  void RepairLocked();
  int ReclaimDeadLocked();
  void FreeSlotLocked(int slot);
  void AdoptOwnSlotLocked(int slot, pid_t pid, uint64_t start_time, bool fresh);
  void MirrorOwnSlotLocked(int slot, int device);
  bool SlotWritableLocked(int slot) const { return !own_slot_lost_ || slot != own_slot_; }
  void VerifyOwnSlotLocked();
  void ReconcileUsageLocked(int device);
  // True the first time this process sees the kind of damage `bit` (one log line per kind).
  bool FirstReport(uint32_t bit) {
    return (tampering_reported_.fetch_or(bit, std::memory_order_relaxed) & bit) == 0;
  }

  RegionLayout* layout_ = nullptr;
  bool file_backed_ = false;
  int stall_in_lock_ms_ = 0;
  int lock_timeout_ms_ = kDefaultLockTimeoutMs;
  std::atomic<bool> stuck_reported_{false};
  // A lock word naming a live thread that is not a recorded holder, as first seen (0: none), and
  // when; the region's own mapping as /proc shows it (read when the region is mapped).
  std::atomic<int> suspect_word_{0};
  std::atomic<int64_t> suspect_since_ns_{0};
  std::atomic<bool> live_word_reported_{false};
  MappedFile own_mapping_;
  // Process-local: limits from this process's environment, fail-closed devices, and releases that
  // could not take the lock (slot, bytes per device).
  std::atomic<uint64_t> local_limit_[kMaxDevices] = {};
  std::atomic<uint8_t> local_mode_[kMaxDevices] = {};  // 0: region's limit, 1: local, 2: closed.
  pid_t self_pid_ = 0;                                 // Cached: getpid() is a system call.
  std::atomic<bool> has_pending_{false};
  std::atomic<int> pending_slot_{-1};
  std::atomic<uint64_t> pending_release_[kMaxDevices] = {};
  std::atomic<uint64_t> pending_charge_[kMaxDevices] = {};  // Forced charges (Reserve's `force`).
  // What this process charged to its own slot (the last one AcquireSlot gave it), kept here,
  // where nobody else can write it, to check the shared copy against. Read and written only under
  // the region lock, which also serializes this process's threads.
  int own_slot_ = -1;
  pid_t own_pid_ = 0;
  uint64_t own_start_time_ = 0;
  uint64_t own_used_[kMaxDevices] = {};
  uint64_t own_overhead_[kMaxDevices] = {};
  // The own slot was taken over by another live process after being freed outside Prism: this
  // process's bytes are no longer in the region, and it must not write that slot.
  bool own_slot_lost_ = false;
  std::atomic<uint32_t> tampering_reported_{0};
};

}  // namespace prism::vgpu
