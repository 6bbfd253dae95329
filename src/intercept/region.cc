#include "intercept/region.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/quota/memory.h"
#include "intercept/clock.h"
#include "intercept/liveness.h"
#include "intercept/log.h"

namespace prism::vgpu {

const char* RegionErrorName(RegionError error) {
  switch (error) {
    case RegionError::kNone:
      return "ok";
    case RegionError::kOpenFailed:
      return "cannot open or lock the region file";
    case RegionError::kMapFailed:
      return "cannot map the region file";
    case RegionError::kIncompatible:
      return "the region file has another layout (another version, or not a Prism region)";
    case RegionError::kDamaged:
      return "the region file is damaged";
  }
  return "unknown error";
}

namespace {
// The calling thread's ID and the process it was read in (a forked child must read it again).
thread_local int32_t t_tid = 0;
thread_local pid_t t_tid_pid = 0;
// More bytes than any GPU has or will have (64 PiB): a count above it was never written by Prism.
constexpr uint64_t kImplausibleBytes = uint64_t{1} << 56;
// Kinds of damage to the usage counters, each logged once per process (Region::FirstReport).
constexpr uint32_t kReportUsageLowered = 1;
constexpr uint32_t kReportUsageAbove = 2;
constexpr uint32_t kReportOwnSlotChanged = 4;
constexpr uint32_t kReportOwnSlotLost = 8;
}  // namespace

bool HeaderIsCompatible(const RegionHeader& h) {
  return memcmp(h.magic, kRegionMagic, sizeof(kRegionMagic)) == 0 &&
         h.abi_version == kRegionAbiVersion && h.header_size == sizeof(RegionHeader) &&
         h.device_size == sizeof(RegionDevice) && h.slot_size == sizeof(RegionSlot) &&
         h.max_devices == kMaxDevices && h.max_slots == kMaxSlots &&
         h.total_size == sizeof(RegionLayout);
}

const char* FindDeviceTableDamage(const RegionLayout& layout, int* index) {
  for (int d = 0; d < kMaxDevices; ++d) {
    *index = d;
    const RegionDevice& device = layout.devices[d];
    const uint32_t claimed = device.claimed.load(std::memory_order_acquire);
    if (claimed > 1) return "device entry neither free nor claimed";
    if (claimed == 0) {
      // Identity and limits of a free entry may be mid-claim (and a reader racing a claim may
      // see usage already), so only impossible values count.
      if (device.used.load(std::memory_order_relaxed) > kImplausibleBytes) {
        return "free device entry with usage beyond any GPU";
      }
      continue;
    }
    if (device.sm_limit_percent > 100) return "device SM limit above 100%";
    if (device.policy > 2) return "device utilization policy unknown";
    if (device.used.load(std::memory_order_relaxed) > kImplausibleBytes) {
      return "device usage beyond any GPU";
    }
  }
  *index = -1;
  return nullptr;
}

const char* FindSlotTableDamage(const RegionLayout& layout, int* index) {
  for (int s = 0; s < kMaxSlots; ++s) {
    *index = s;
    const RegionSlot& slot = layout.slots[s];
    const uint32_t state = slot.state.load(std::memory_order_acquire);
    if (state != kSlotFree && state != kSlotLive) return "process slot in an unknown state";
    if (state == kSlotLive && slot.pid <= 0) return "live process slot without a PID";
    for (int d = 0; d < kMaxDevices; ++d) {
      if (slot.used[d].load(std::memory_order_relaxed) > kImplausibleBytes) {
        return "process slot usage beyond any GPU";
      }
    }
  }
  *index = -1;
  return nullptr;
}

class Region::Locker {
 public:
  explicit Locker(Region* region) : region_(region), locked_(region_->Lock()) {}
  ~Locker() {
    if (locked_) region_->Unlock();
  }
  Locker(const Locker&) = delete;
  Locker& operator=(const Locker&) = delete;
  bool locked() const { return locked_; }

 private:
  Region* region_;
  bool locked_;
};

Region::~Region() {
  if (layout_ != nullptr) munmap(layout_, sizeof(RegionLayout));
}

RegionError Region::OpenFile(const char* path, int* sys_errno) {
  *sys_errno = 0;
  const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    *sys_errno = errno;
    return RegionError::kOpenFailed;
  }
  // Every process of the container must be able to join, whatever its umask.
  (void)fchmod(fd, 0666);
  int rc;
  do {
    rc = flock(fd, LOCK_EX);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    *sys_errno = errno;
    close(fd);
    return RegionError::kOpenFailed;
  }
  const RegionError error = MapAndInit(fd, false, sys_errno);
  flock(fd, LOCK_UN);
  close(fd);  // The mapping stays valid.
  return error;
}

RegionError Region::OpenAnonymous(int* sys_errno) {
  *sys_errno = 0;
  return MapAndInit(-1, true, sys_errno);
}

RegionError Region::MapAndInit(int fd, bool anonymous, int* sys_errno) {
  self_pid_ = getpid();
  bool fresh = anonymous;
  if (!anonymous) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
      *sys_errno = errno;
      return RegionError::kOpenFailed;
    }
    if (st.st_size == 0) {
      if (ftruncate(fd, sizeof(RegionLayout)) != 0) {
        *sys_errno = errno;
        return RegionError::kOpenFailed;
      }
      fresh = true;
    } else if (static_cast<size_t>(st.st_size) != sizeof(RegionLayout)) {
      return RegionError::kIncompatible;
    }
  }
  void* memory = mmap(nullptr, sizeof(RegionLayout), PROT_READ | PROT_WRITE,
                      anonymous ? (MAP_SHARED | MAP_ANONYMOUS) : MAP_SHARED, fd, 0);
  if (memory == MAP_FAILED) {
    *sys_errno = errno;
    return RegionError::kMapFailed;
  }
  RegionLayout* layout = static_cast<RegionLayout*>(memory);
  file_backed_ = !anonymous;
  // What "maps the region" looks like in /proc/<pid>/maps, for telling a lock word of a holder
  // from damage (ResetDamagedLockWord). Read once here, before any thread can need it.
  own_mapping_ = MappedFile();
  if (file_backed_ && !FindOwnMapping(layout, &own_mapping_)) own_mapping_ = MappedFile();
  static constexpr char kZeros[8] = {};
  if (fresh || memcmp(layout->header.magic, kZeros, sizeof(kZeros)) == 0) {
    // New, or its creator died before finishing (it held the flock we now hold).
    layout_ = layout;
    InitLocked();
    return RegionError::kNone;
  }
  if (!HeaderIsCompatible(layout->header)) {
    munmap(memory, sizeof(RegionLayout));
    return RegionError::kIncompatible;
  }
  int index = -1;
  const char* damage = FindDeviceTableDamage(*layout, &index);
  if (damage == nullptr) damage = FindSlotTableDamage(*layout, &index);
  if (damage != nullptr) {
    PRISM_VGPU_LOG(kError, "shared region: %s (entry %d)", damage, index);
    munmap(memory, sizeof(RegionLayout));
    return RegionError::kDamaged;
  }
  layout_ = layout;
  return RegionError::kNone;
}

void Region::InitLocked() {
  memset(static_cast<void*>(layout_), 0, sizeof(RegionLayout));
  RegionHeader& h = layout_->header;
  h.abi_version = kRegionAbiVersion;
  h.header_size = sizeof(RegionHeader);
  h.device_size = sizeof(RegionDevice);
  h.slot_size = sizeof(RegionSlot);
  h.max_devices = kMaxDevices;
  h.max_slots = kMaxSlots;
  h.total_size = sizeof(RegionLayout);
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&h.lock.mutex, &attr);
  pthread_mutexattr_destroy(&attr);
  // The magic goes last: a reader that sees it sees a complete header.
  std::atomic_thread_fence(std::memory_order_release);
  memcpy(h.magic, kRegionMagic, sizeof(kRegionMagic));
  std::atomic_thread_fence(std::memory_order_release);
}

bool Region::Lock() {
  pthread_mutex_t* mutex = &layout_->header.lock.mutex;
  int rc = pthread_mutex_trylock(mutex);
  bool reset = false;
  if (rc == EBUSY) {
    // Wait in slices, so a wait on a holder that never gives the lock back (stopped, or a lock
    // word no process holds) ends after the bound instead of wedging the application.
    const int64_t start = MonotonicNs();
    const int64_t bound = int64_t{lock_timeout_ms_} * 1'000'000;
    for (;;) {
      timespec deadline;
      clock_gettime(CLOCK_MONOTONIC, &deadline);
      deadline.tv_nsec += 50'000'000;
      if (deadline.tv_nsec >= 1'000'000'000) {
        deadline.tv_nsec -= 1'000'000'000;
        ++deadline.tv_sec;
      }
      rc = pthread_mutex_clocklock(mutex, CLOCK_MONOTONIC, &deadline);
      if (rc != ETIMEDOUT) break;
      const int64_t waited = MonotonicNs() - start;
      if (waited >= bound) {
        if (ResetDamagedLockWord()) {  // Damage that names no holder: try again.
          reset = true;
          continue;
        }
        layout_->header.lock_timeouts.fetch_add(1, std::memory_order_relaxed);
        ReportStuckLock(waited);
        return false;
      }
    }
  }
  if (rc == EOWNERDEAD) {
    // The owner died holding the lock, maybe halfway through an update. Mark the mutex usable
    // first: if this process dies during the repair, the next locker repairs again.
    pthread_mutex_consistent(mutex);
    layout_->header.lock_recoveries.fetch_add(1, std::memory_order_relaxed);
    PRISM_VGPU_LOG(kWarning, "region lock owner died; recovered the lock and repaired usage");
    RepairLocked();
  } else if (rc == 0 && reset) {
    RepairLocked();  // Whatever wrote that word may have left an update half done.
  } else if (rc != 0) {
    // ENOTRECOVERABLE (a locker died during a repair without marking the mutex consistent, which
    // Prism never does) or garbage in the mutex: the region cannot be locked. Fail closed.
    PRISM_VGPU_LOG(kError, "region lock unusable (error %d); refusing what needs it", rc);
    return false;
  }
  // Cached IDs: gettid/getpid are system calls, which cost microseconds in sandboxed kernels.
  if (t_tid_pid != self_pid_) {
    t_tid = static_cast<int32_t>(syscall(SYS_gettid));
    t_tid_pid = self_pid_;
  }
  layout_->header.holder_pid.store(self_pid_, std::memory_order_relaxed);
  layout_->header.holder_tid.store(t_tid, std::memory_order_relaxed);
  layout_->header.holder_since_ns.store(MonotonicNs(), std::memory_order_relaxed);
  if (stuck_reported_.load(std::memory_order_relaxed)) {
    stuck_reported_.store(false, std::memory_order_relaxed);
    PRISM_VGPU_LOG(kNotice, "region lock available again");
  }
  // Before anything relies on the own slot (pending releases go there): the shared copy against
  // the private record. Sixteen compares when nothing was touched.
  VerifyOwnSlotLocked();
  ApplyPendingReleasesLocked();
  return true;
}

void Region::Unlock() {
  layout_->header.holder_tid.store(0, std::memory_order_relaxed);
  layout_->header.holder_pid.store(0, std::memory_order_relaxed);
  pthread_mutex_unlock(&layout_->header.lock.mutex);
}

bool Region::ResetDamagedLockWord() {
#if defined(__GLIBC__)
  // glibc keeps the futex word (owner TID | FUTEX_WAITERS | FUTEX_OWNER_DIED) first in the mutex.
  // A word that names a thread with no Prism process recorded as holder and no OWNER_DIED mark
  // (the kernel sets it when a holder dies) is reset, with a compare-and-swap (so one waiter does
  // it), only when that thread cannot be a holder:
  //  - it does not exist: nobody can ever release the word;
  //  - it exists, was seen not stopped at two bound expiries at least a bound apart, holder still
  //    unrecorded and the word unchanged, and its process does not map the region. A real holder
  //    records itself a few instructions after taking the lock unless it is stopped right there,
  //    and above all it maps the region: only a process that maps the file can hold, release or
  //    ever touch that word. A stopped holder, or one whose maps cannot be read, is never robbed.
  static_assert(sizeof(int) == 4);
  auto* word = reinterpret_cast<std::atomic<int>*>(&layout_->header.lock.mutex.__data.__lock);
  int observed = word->load(std::memory_order_acquire);
  const int tid = observed & 0x3fffffff;           // FUTEX_TID_MASK.
  if (tid == 0 || (observed & 0x40000000) != 0 ||  // FUTEX_OWNER_DIED.
      layout_->header.holder_pid.load(std::memory_order_relaxed) != 0) {
    suspect_word_.store(0, std::memory_order_relaxed);
    return false;
  }
  const char* why = "does not exist";
  if (kill(tid, 0) == 0 || errno != ESRCH) {
    const char state = ProcessState(tid);
    if (!file_backed_ || state == 0 || state == 'T' || state == 't') {
      // Private regions are shared only with forked children; state 0: /proc cannot tell.
      suspect_word_.store(0, std::memory_order_relaxed);
      return false;
    }
    const int64_t now = MonotonicNs();
    if (suspect_word_.exchange(observed, std::memory_order_relaxed) != observed) {
      suspect_since_ns_.store(now, std::memory_order_relaxed);
      return false;  // First sighting: look again after another bound.
    }
    if (now - suspect_since_ns_.load(std::memory_order_relaxed) <
        int64_t{lock_timeout_ms_} * 1'000'000) {
      return false;
    }
    if (own_mapping_.path[0] == '\0' && own_mapping_.dev_inode[0] == '\0') {
      return false;  // Cannot tell what "maps the region" looks like: never reset.
    }
    const int maps = ProcessMapsFile(tid, own_mapping_);
    if (maps != 0) {
      if (maps == 1 && !live_word_reported_.exchange(true, std::memory_order_relaxed)) {
        PRISM_VGPU_LOG(kError,
                       "region lock word names thread %d, which maps the region but never "
                       "recorded holding the lock (a holder stopped before recording itself "
                       "looks the same); not reset, allocations are refused until it is released",
                       tid);
      }
      return false;
    }
    why =
        "is not stopped, has not recorded holding it for two lock bounds and whose process "
        "does not map the region";
  }
  if (!word->compare_exchange_strong(observed, 0, std::memory_order_acq_rel)) return false;
  layout_->header.lock.mutex.__data.__owner = 0;
  suspect_word_.store(0, std::memory_order_relaxed);
  layout_->header.lock_recoveries.fetch_add(1, std::memory_order_relaxed);
  PRISM_VGPU_LOG(kError, "region lock word named thread %d, which %s (damaged region); reset it",
                 tid, why);
  return true;
#else
  return false;
#endif
}

void Region::ReportStuckLock(int64_t waited_ns) {
  // One line per stuck episode (until the lock is taken again), not one per refused call.
  if (stuck_reported_.exchange(true, std::memory_order_relaxed)) return;
  const RegionHeader& h = layout_->header;
  const pid_t holder = h.holder_pid.load(std::memory_order_relaxed);
  int owner_tid = 0;
#if defined(__GLIBC__)
  owner_tid = h.lock.mutex.__data.__owner & 0x3fffffff;  // FUTEX_TID_MASK.
#endif
  const long long waited_ms = static_cast<long long>(waited_ns / 1'000'000);
  if (holder <= 0) {
    PRISM_VGPU_LOG(kError,
                   "region lock not available after %lld ms: its lock word names thread %d but no "
                   "Prism process holds it (damaged region); allocations are refused, frees are "
                   "counted when the lock is back",
                   waited_ms, owner_tid);
    return;
  }
  const char state = ProcessState(holder);
  const int64_t held_ms =
      (MonotonicNs() - h.holder_since_ns.load(std::memory_order_relaxed)) / 1'000'000;
  const char* what = state == 0                     ? "gone"
                     : state == 'T' || state == 't' ? "stopped"
                     : state == 'Z' || state == 'X' ? "exiting"
                                                    : "running";
  PRISM_VGPU_LOG(kError,
                 "region lock not available after %lld ms: process %d (%s) has held it for %lld "
                 "ms; allocations are refused until it is released, frees are counted then",
                 waited_ms, static_cast<int>(holder), what, static_cast<long long>(held_ms));
}

void Region::ApplyPendingReleasesLocked() {
  if (!has_pending_.load(std::memory_order_acquire)) return;
  has_pending_.store(false, std::memory_order_relaxed);
  const int slot = pending_slot_.load(std::memory_order_acquire);
  if (slot < 0) return;
  for (int d = 0; d < kMaxDevices; ++d) {
    const uint64_t charge = pending_charge_[d].exchange(0, std::memory_order_acq_rel);
    // Both sides or neither: a lost slot (VerifyOwnSlotLocked) takes no charges.
    if (charge != 0 && SlotWritableLocked(slot)) {
      RegionDevice& device = layout_->devices[d];
      RegionSlot& own = layout_->slots[slot];
      device.used.store(quota::AddSaturating(device.used.load(std::memory_order_relaxed), charge),
                        std::memory_order_relaxed);
      own.used[d].store(quota::AddSaturating(own.used[d].load(std::memory_order_relaxed), charge),
                        std::memory_order_relaxed);
      MirrorOwnSlotLocked(slot, d);
    }
    const uint64_t bytes = pending_release_[d].exchange(0, std::memory_order_acq_rel);
    if (bytes != 0) ReleaseLocked(slot, d, bytes);
  }
}

void Region::ForgetPendingReleasesAfterFork() {
  self_pid_ = getpid();
  // The parent's slot is not the child's; the child acquires its own.
  own_slot_ = -1;
  own_slot_lost_ = false;
  for (int d = 0; d < kMaxDevices; ++d) own_used_[d] = own_overhead_[d] = 0;
  has_pending_.store(false, std::memory_order_relaxed);
  pending_slot_.store(-1, std::memory_order_relaxed);
  for (auto& bytes : pending_release_) bytes.store(0, std::memory_order_relaxed);
  for (auto& bytes : pending_charge_) bytes.store(0, std::memory_order_relaxed);
  stuck_reported_.store(false, std::memory_order_relaxed);
}

void Region::SetLocalLimit(int device, uint64_t bytes) {
  local_limit_[device].store(bytes, std::memory_order_relaxed);
  local_mode_[device].store(1, std::memory_order_release);
}

void Region::SetFailClosed(int device) { local_mode_[device].store(2, std::memory_order_release); }

bool Region::FailsClosed(int device) const {
  return local_mode_[device].load(std::memory_order_acquire) == 2;
}

uint64_t Region::EffectiveLimit(int device) const {
  switch (local_mode_[device].load(std::memory_order_acquire)) {
    case 1:
      return local_limit_[device].load(std::memory_order_relaxed);
    case 2:
      return 0;
    default:
      return layout_->devices[device].memory_limit;
  }
}

void Region::RepairLocked() {
  // Recompute every device's usage from the slots (the slots are the truth), then reclaim the
  // slots of dead processes, which subtracts their bytes consistently.
  for (int d = 0; d < kMaxDevices; ++d) {
    uint64_t sum = 0;
    for (int s = 0; s < kMaxSlots; ++s) {
      const RegionSlot& slot = layout_->slots[s];
      if (slot.state.load(std::memory_order_relaxed) != kSlotLive) continue;
      sum = quota::AddSaturating(sum, slot.used[d].load(std::memory_order_relaxed));
    }
    layout_->devices[d].used.store(sum, std::memory_order_relaxed);
  }
  ReclaimDeadLocked();
}

void Region::FreeSlotLocked(int index) {
  RegionSlot& slot = layout_->slots[index];
  for (int d = 0; d < kMaxDevices; ++d) {
    const uint64_t bytes = slot.used[d].load(std::memory_order_relaxed);
    if (bytes == 0) continue;
    RegionDevice& device = layout_->devices[d];
    const quota::Subtraction left =
        quota::SubtractSaturating(device.used.load(std::memory_order_relaxed), bytes);
    if (left.underflow) layout_->header.underflows.fetch_add(1, std::memory_order_relaxed);
    device.used.store(left.value, std::memory_order_relaxed);
    slot.used[d].store(0, std::memory_order_relaxed);
    slot.overhead[d].store(0, std::memory_order_relaxed);
  }
  slot.host_pid.store(0, std::memory_order_relaxed);
  slot.state.store(kSlotFree, std::memory_order_release);
  if (index == own_slot_) {
    own_slot_ = -1;
    own_slot_lost_ = false;
    for (int d = 0; d < kMaxDevices; ++d) own_used_[d] = own_overhead_[d] = 0;
  }
}

int Region::ReclaimDeadLocked() {
  int freed = 0;
  const pid_t self = getpid();
  for (int s = 0; s < kMaxSlots; ++s) {
    RegionSlot& slot = layout_->slots[s];
    if (slot.state.load(std::memory_order_acquire) != kSlotLive) continue;
    if (slot.pid == self || IsProcessAlive(slot.pid, slot.start_time)) continue;
    uint64_t bytes = 0;
    for (int d = 0; d < kMaxDevices; ++d) {
      bytes = quota::AddSaturating(bytes, slot.used[d].load(std::memory_order_relaxed));
    }
    PRISM_VGPU_LOG(kInfo, "reclaimed slot %d of dead process %d (%llu bytes)", s, slot.pid,
                   static_cast<unsigned long long>(bytes));
    FreeSlotLocked(s);
    layout_->header.slots_reclaimed.fetch_add(1, std::memory_order_relaxed);
    layout_->header.bytes_reclaimed.fetch_add(bytes, std::memory_order_relaxed);
    ++freed;
  }
  return freed;
}

int Region::ReclaimDead() {
  Locker lock(this);
  if (!lock.locked()) return 0;
  return ReclaimDeadLocked();
}

int Region::AcquireSlot(pid_t pid, uint64_t start_time) {
  Locker lock(this);
  if (!lock.locked()) return kSlotLockTimeout;
  for (int pass = 0; pass < 2; ++pass) {
    int free_index = -1;
    for (int s = 0; s < kMaxSlots; ++s) {
      RegionSlot& slot = layout_->slots[s];
      if (slot.state.load(std::memory_order_acquire) == kSlotLive) {
        if (slot.pid != pid) continue;
        if (slot.start_time == start_time) {  // Already registered.
          AdoptOwnSlotLocked(s, pid, start_time, /*fresh=*/false);
          return s;
        }
        // An earlier process with our PID died without releasing its slot.
        FreeSlotLocked(s);
        layout_->header.slots_reclaimed.fetch_add(1, std::memory_order_relaxed);
      }
      if (free_index < 0) free_index = s;
    }
    if (free_index >= 0) {
      RegionSlot& slot = layout_->slots[free_index];
      slot.pid = pid;
      slot.start_time = start_time;
      slot.host_pid.store(0, std::memory_order_relaxed);
      ++slot.generation;
      for (auto& used : slot.used) used.store(0, std::memory_order_relaxed);
      for (auto& overhead : slot.overhead) overhead.store(0, std::memory_order_relaxed);
      slot.state.store(kSlotLive, std::memory_order_release);
      // Releases this process could not apply belong to its own slot.
      pending_slot_.store(free_index, std::memory_order_release);
      AdoptOwnSlotLocked(free_index, pid, start_time, /*fresh=*/true);
      return free_index;
    }
    if (pass == 0 && ReclaimDeadLocked() == 0) break;
  }
  layout_->header.slot_exhaustions.fetch_add(1, std::memory_order_relaxed);
  return kSlotsExhausted;
}

void Region::ReleaseSlot(int index, pid_t pid, uint64_t start_time) {
  if (index < 0 || index >= kMaxSlots) return;
  Locker lock(this);
  // Without the lock the slot stays: others reclaim it once this process is gone.
  if (!lock.locked()) return;
  RegionSlot& slot = layout_->slots[index];
  if (!SlotWritableLocked(index) || slot.state.load(std::memory_order_acquire) != kSlotLive ||
      slot.pid != pid || slot.start_time != start_time) {
    if (index == own_slot_) own_slot_ = -1;  // Not ours any more: nothing to release.
    return;
  }
  FreeSlotLocked(index);
}

int Region::ClaimDevice(const uint8_t uuid[16], uint64_t memory_limit, uint32_t sm_limit_percent,
                        uint32_t policy, uint32_t sm_count, bool* mismatch) {
  *mismatch = false;
  Locker lock(this);
  if (!lock.locked()) return kClaimLockTimeout;
  int damaged_index = -1;
  if (const char* damage = FindDeviceTableDamage(*layout_, &damaged_index)) {
    PRISM_VGPU_LOG(kError, "shared region: %s (device entry %d)", damage, damaged_index);
    return kClaimDamaged;
  }
  int free_index = -1;
  for (int d = 0; d < kMaxDevices; ++d) {
    RegionDevice& device = layout_->devices[d];
    if (device.claimed.load(std::memory_order_acquire) == 0) {
      if (free_index < 0) free_index = d;
      continue;
    }
    if (memcmp(device.uuid, uuid, 16) != 0) continue;
    if (device.sm_count == 0) device.sm_count = sm_count;  // Claimed by an NVML-only process.
    if (device.memory_limit != memory_limit || device.sm_limit_percent != sm_limit_percent ||
        device.policy != policy) {
      *mismatch = true;
      device.limit_mismatches.fetch_add(1, std::memory_order_relaxed);
    }
    return d;
  }
  if (free_index < 0) return kClaimTableFull;
  RegionDevice& device = layout_->devices[free_index];
  memcpy(device.uuid, uuid, 16);
  device.memory_limit = memory_limit;
  device.sm_limit_percent = sm_limit_percent;
  device.policy = policy;
  device.sm_count = sm_count;
  device.claimed.store(1, std::memory_order_release);
  return free_index;
}

Reservation Region::Reserve(int slot_index, int device_index, uint64_t bytes, bool force) {
  RegionDevice& device = layout_->devices[device_index];
  if (FailsClosed(device_index)) {
    device.refusals.fetch_add(1, std::memory_order_relaxed);
    return {false, device.used.load(std::memory_order_relaxed), 0, Refusal::kFailClosed};
  }
  Locker lock(this);
  if (!lock.locked()) {
    if (force) {
      // A correction for memory already taken: remembered like a release, and charged the next
      // time this process holds the lock.
      pending_slot_.store(slot_index, std::memory_order_release);
      pending_charge_[device_index].fetch_add(bytes, std::memory_order_acq_rel);
      has_pending_.store(true, std::memory_order_release);
    } else {
      device.refusals.fetch_add(1, std::memory_order_relaxed);
    }
    return {false, device.used.load(std::memory_order_relaxed), EffectiveLimit(device_index),
            Refusal::kLockTimeout};
  }
  RegionSlot& slot = layout_->slots[slot_index];
  const uint64_t limit = EffectiveLimit(device_index);
  if (!SlotWritableLocked(slot_index)) {
    // This process's slot now belongs to another process (VerifyOwnSlotLocked logged it): its
    // charges have nowhere to go, so a limited device refuses; an unlimited one is not tracked.
    if (limit == 0) return {true, device.used.load(std::memory_order_relaxed), 0, Refusal::kNone};
    device.refusals.fetch_add(1, std::memory_order_relaxed);
    return {false, device.used.load(std::memory_order_relaxed), limit, Refusal::kFailClosed};
  }
  // Decide on the live slots' sum, not on a counter anyone in the container can lower.
  if (!force) ReconcileUsageLocked(device_index);
  quota::Reservation fit =
      quota::TryReserve(device.used.load(std::memory_order_relaxed), limit, bytes);
  if (!fit.fits && ReclaimDeadLocked() > 0) {
    fit = quota::TryReserve(device.used.load(std::memory_order_relaxed), limit, bytes);
  }
  if (!fit.fits && !force) {
    device.refusals.fetch_add(1, std::memory_order_relaxed);
    return {false, device.used.load(std::memory_order_relaxed), limit, Refusal::kLimit};
  }
  const uint64_t new_used =
      fit.fits ? fit.new_used
               : quota::AddSaturating(device.used.load(std::memory_order_relaxed), bytes);
  device.used.store(new_used, std::memory_order_relaxed);
  if (stall_in_lock_ms_ > 0) {
    // Between the two halves of the update: the worst place to die (the repair must fix it).
    PRISM_VGPU_LOG(kNotice, "test: stalling %d ms inside the region lock", stall_in_lock_ms_);
    SleepForNs(int64_t{stall_in_lock_ms_} * 1'000'000);
  }
  slot.used[device_index].store(
      quota::AddSaturating(slot.used[device_index].load(std::memory_order_relaxed), bytes),
      std::memory_order_relaxed);
  MirrorOwnSlotLocked(slot_index, device_index);
  uint64_t peak = device.peak_used.load(std::memory_order_relaxed);
  if (new_used > peak) device.peak_used.store(new_used, std::memory_order_relaxed);
  return {fit.fits, new_used, limit, fit.fits ? Refusal::kNone : Refusal::kLimit};
}

void Region::Release(int slot_index, int device_index, uint64_t bytes) {
  Locker lock(this);
  if (!lock.locked()) {
    // Remembered, and returned the next time this process holds the lock: until then the usage
    // is too high, never too low.
    pending_slot_.store(slot_index, std::memory_order_release);
    pending_release_[device_index].fetch_add(bytes, std::memory_order_acq_rel);
    has_pending_.store(true, std::memory_order_release);
    return;
  }
  ReleaseLocked(slot_index, device_index, bytes);
}

void Region::ReleaseLocked(int slot_index, int device_index, uint64_t bytes) {
  // A lost slot holds another process's bytes now; this process's were never in it.
  if (!SlotWritableLocked(slot_index)) return;
  RegionDevice& device = layout_->devices[device_index];
  RegionSlot& slot = layout_->slots[slot_index];
  const uint64_t held = slot.used[device_index].load(std::memory_order_relaxed);
  const quota::Subtraction slot_left = quota::SubtractSaturating(held, bytes);
  const uint64_t removed = slot_left.underflow ? held : bytes;
  if (slot_left.underflow) layout_->header.underflows.fetch_add(1, std::memory_order_relaxed);
  slot.used[device_index].store(slot_left.value, std::memory_order_relaxed);
  MirrorOwnSlotLocked(slot_index, device_index);
  const quota::Subtraction device_left =
      quota::SubtractSaturating(device.used.load(std::memory_order_relaxed), removed);
  if (device_left.underflow) layout_->header.underflows.fetch_add(1, std::memory_order_relaxed);
  device.used.store(device_left.value, std::memory_order_relaxed);
}

uint64_t Region::SetOverhead(int slot_index, int device_index, uint64_t bytes) {
  RegionDevice& device = layout_->devices[device_index];
  Locker lock(this);
  // Without the lock, the measurement is applied at the next sample.
  if (!lock.locked() || !SlotWritableLocked(slot_index)) {
    return device.used.load(std::memory_order_relaxed);
  }
  RegionSlot& slot = layout_->slots[slot_index];
  const uint64_t old = slot.overhead[device_index].load(std::memory_order_relaxed);
  uint64_t slot_used = slot.used[device_index].load(std::memory_order_relaxed);
  uint64_t device_used = device.used.load(std::memory_order_relaxed);
  if (bytes >= old) {
    slot_used = quota::AddSaturating(slot_used, bytes - old);
    device_used = quota::AddSaturating(device_used, bytes - old);
  } else {
    const quota::Subtraction s = quota::SubtractSaturating(slot_used, old - bytes);
    const quota::Subtraction d = quota::SubtractSaturating(device_used, old - bytes);
    if (s.underflow || d.underflow)
      layout_->header.underflows.fetch_add(1, std::memory_order_relaxed);
    slot_used = s.value;
    device_used = d.value;
  }
  slot.overhead[device_index].store(bytes, std::memory_order_relaxed);
  slot.used[device_index].store(slot_used, std::memory_order_relaxed);
  MirrorOwnSlotLocked(slot_index, device_index);
  device.used.store(device_used, std::memory_order_relaxed);
  if (device_used > device.peak_used.load(std::memory_order_relaxed)) {
    device.peak_used.store(device_used, std::memory_order_relaxed);
  }
  return device_used;
}

void Region::AdoptOwnSlotLocked(int index, pid_t pid, uint64_t start_time, bool fresh) {
  if (index == own_slot_ && !fresh) return;  // Already tracked.
  own_slot_ = index;
  own_pid_ = pid;
  own_start_time_ = start_time;
  own_slot_lost_ = false;
  // A slot this Region object did not fill itself (a second Region object of the same process)
  // is taken as it is: from here on, what this object charges is mirrored.
  const RegionSlot& slot = layout_->slots[index];
  for (int d = 0; d < kMaxDevices; ++d) {
    own_used_[d] = fresh ? 0 : slot.used[d].load(std::memory_order_relaxed);
    own_overhead_[d] = fresh ? 0 : slot.overhead[d].load(std::memory_order_relaxed);
  }
}

void Region::MirrorOwnSlotLocked(int index, int device) {
  if (index != own_slot_) return;
  const RegionSlot& slot = layout_->slots[index];
  own_used_[device] = slot.used[device].load(std::memory_order_relaxed);
  own_overhead_[device] = slot.overhead[device].load(std::memory_order_relaxed);
}

void Region::VerifyOwnSlotLocked() {
  if (own_slot_ < 0 || own_slot_lost_) return;
  RegionSlot& slot = layout_->slots[own_slot_];
  // Every write of this slot by Prism happens under the lock and is mirrored in the private
  // record, so under the lock they agree unless someone wrote the file.
  const bool identity = slot.state.load(std::memory_order_acquire) == kSlotLive &&
                        slot.pid == own_pid_ && slot.start_time == own_start_time_;
  if (!identity && slot.state.load(std::memory_order_acquire) == kSlotLive &&
      slot.pid != own_pid_ && IsProcessAlive(slot.pid, slot.start_time)) {
    // Freed outside Prism and acquired since by another process, whose bytes it now holds: it
    // cannot be restored without losing theirs. This process's own bytes are not in the region
    // any more, so its limited devices refuse from now on (Reserve).
    own_slot_lost_ = true;
    layout_->header.usage_repairs.fetch_add(1, std::memory_order_relaxed);
    if (FirstReport(kReportOwnSlotLost)) {
      PRISM_VGPU_LOG(kError,
                     "shared region: this process's slot %d was freed outside Prism and now "
                     "belongs to process %d (damaged region); its memory limits fail closed",
                     own_slot_, static_cast<int>(slot.pid));
    }
    return;
  }
  uint32_t restored = 0;
  for (int d = 0; d < kMaxDevices; ++d) {
    if (slot.used[d].load(std::memory_order_relaxed) != own_used_[d] ||
        slot.overhead[d].load(std::memory_order_relaxed) != own_overhead_[d] ||
        (!identity && own_used_[d] != 0)) {
      slot.used[d].store(own_used_[d], std::memory_order_relaxed);
      slot.overhead[d].store(own_overhead_[d], std::memory_order_relaxed);
      restored |= 1u << d;
    }
  }
  if (!identity) {
    slot.pid = own_pid_;
    slot.start_time = own_start_time_;
    slot.state.store(kSlotLive, std::memory_order_release);
  }
  if (restored == 0 && identity) return;
  layout_->header.usage_repairs.fetch_add(1, std::memory_order_relaxed);
  if (FirstReport(kReportOwnSlotChanged)) {
    PRISM_VGPU_LOG(kError,
                   "shared region: this process's slot %d was written outside Prism (damaged "
                   "region); restored it from the process's own record",
                   own_slot_);
  }
  // The device totals may have been lowered along with the slot.
  for (int d = 0; d < kMaxDevices; ++d) {
    if ((restored & (1u << d)) != 0) ReconcileUsageLocked(d);
  }
}

void Region::ReconcileUsageLocked(int index) {
  // Under the lock `used` equals the live slots' sum (every writer changes both together), so a
  // difference means the file was written outside Prism.
  uint64_t sum = 0;
  for (int s = 0; s < kMaxSlots; ++s) {
    const RegionSlot& slot = layout_->slots[s];
    if (slot.state.load(std::memory_order_relaxed) != kSlotLive) continue;
    sum = quota::AddSaturating(sum, slot.used[index].load(std::memory_order_relaxed));
  }
  RegionDevice& device = layout_->devices[index];
  const uint64_t used = device.used.load(std::memory_order_relaxed);
  if (used == sum) return;
  if (used > sum) {
    // Either the counter was raised (costs the container room, nothing else) or some slot was
    // lowered to hide bytes that are still allocated: the higher figure is the safe one.
    if (FirstReport(kReportUsageAbove)) {
      PRISM_VGPU_LOG(kError,
                     "shared region: device entry %d counts %llu bytes in use but its live "
                     "processes' slots only %llu (written outside Prism); the higher figure stays "
                     "charged",
                     index, static_cast<unsigned long long>(used),
                     static_cast<unsigned long long>(sum));
    }
    return;
  }
  device.used.store(sum, std::memory_order_relaxed);
  if (sum > device.peak_used.load(std::memory_order_relaxed)) {
    device.peak_used.store(sum, std::memory_order_relaxed);
  }
  layout_->header.usage_repairs.fetch_add(1, std::memory_order_relaxed);
  if (FirstReport(kReportUsageLowered)) {
    PRISM_VGPU_LOG(kError,
                   "shared region: device entry %d counted %llu bytes in use but its live "
                   "processes hold %llu (lowered outside Prism: damaged region); repaired from the "
                   "slots",
                   index, static_cast<unsigned long long>(used),
                   static_cast<unsigned long long>(sum));
  }
}

}  // namespace prism::vgpu
