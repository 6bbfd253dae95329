#include "intercept/region.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
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
  }
  return "unknown error";
}

class Region::Locker {
 public:
  explicit Locker(Region* region) : region_(region) { region_->Lock(); }
  ~Locker() { region_->Unlock(); }
  Locker(const Locker&) = delete;
  Locker& operator=(const Locker&) = delete;

 private:
  Region* region_;
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
  static constexpr char kZeros[8] = {};
  if (fresh || memcmp(layout->header.magic, kZeros, sizeof(kZeros)) == 0) {
    // New, or its creator died before finishing (it held the flock we now hold).
    layout_ = layout;
    InitLocked();
    return RegionError::kNone;
  }
  const RegionHeader& h = layout->header;
  if (memcmp(h.magic, kRegionMagic, sizeof(kRegionMagic)) != 0 ||
      h.abi_version != kRegionAbiVersion || h.header_size != sizeof(RegionHeader) ||
      h.device_size != sizeof(RegionDevice) || h.slot_size != sizeof(RegionSlot) ||
      h.max_devices != kMaxDevices || h.max_slots != kMaxSlots ||
      h.total_size != sizeof(RegionLayout)) {
    munmap(memory, sizeof(RegionLayout));
    return RegionError::kIncompatible;
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

void Region::Lock() {
  const int rc = pthread_mutex_lock(&layout_->header.lock.mutex);
  if (rc == 0) return;
  if (rc == EOWNERDEAD) {
    // The owner died holding the lock, maybe halfway through an update. Mark the mutex usable
    // first: if this process dies during the repair, the next locker repairs again.
    pthread_mutex_consistent(&layout_->header.lock.mutex);
    layout_->header.lock_recoveries.fetch_add(1, std::memory_order_relaxed);
    PRISM_VGPU_LOG(kWarning, "region lock owner died; recovered the lock and repaired usage");
    RepairLocked();
    return;
  }
  // Only ENOTRECOVERABLE is possible here, which no Prism process causes. Proceeding unlocked
  // degrades exactness but never wedges the application.
  PRISM_VGPU_LOG(kError, "region lock unusable (error %d); continuing without it", rc);
}

void Region::Unlock() { pthread_mutex_unlock(&layout_->header.lock.mutex); }

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
  return ReclaimDeadLocked();
}

int Region::AcquireSlot(pid_t pid, uint64_t start_time) {
  Locker lock(this);
  for (int pass = 0; pass < 2; ++pass) {
    int free_index = -1;
    for (int s = 0; s < kMaxSlots; ++s) {
      RegionSlot& slot = layout_->slots[s];
      if (slot.state.load(std::memory_order_acquire) == kSlotLive) {
        if (slot.pid != pid) continue;
        if (slot.start_time == start_time) return s;  // Already registered.
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
      return free_index;
    }
    if (pass == 0 && ReclaimDeadLocked() == 0) break;
  }
  layout_->header.slot_exhaustions.fetch_add(1, std::memory_order_relaxed);
  return -1;
}

void Region::ReleaseSlot(int index, pid_t pid, uint64_t start_time) {
  if (index < 0 || index >= kMaxSlots) return;
  Locker lock(this);
  RegionSlot& slot = layout_->slots[index];
  if (slot.state.load(std::memory_order_acquire) != kSlotLive || slot.pid != pid ||
      slot.start_time != start_time) {
    return;
  }
  FreeSlotLocked(index);
}

int Region::ClaimDevice(const uint8_t uuid[16], uint64_t memory_limit, uint32_t sm_limit_percent,
                        uint32_t policy, uint32_t sm_count, bool* mismatch) {
  *mismatch = false;
  Locker lock(this);
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
  if (free_index < 0) return -1;
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
  Locker lock(this);
  RegionDevice& device = layout_->devices[device_index];
  RegionSlot& slot = layout_->slots[slot_index];
  const uint64_t limit = device.memory_limit;
  quota::Reservation fit =
      quota::TryReserve(device.used.load(std::memory_order_relaxed), limit, bytes);
  if (!fit.fits && ReclaimDeadLocked() > 0) {
    fit = quota::TryReserve(device.used.load(std::memory_order_relaxed), limit, bytes);
  }
  if (!fit.fits && !force) {
    device.refusals.fetch_add(1, std::memory_order_relaxed);
    return {false, device.used.load(std::memory_order_relaxed), limit};
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
  uint64_t peak = device.peak_used.load(std::memory_order_relaxed);
  if (new_used > peak) device.peak_used.store(new_used, std::memory_order_relaxed);
  return {fit.fits, new_used, limit};
}

void Region::Release(int slot_index, int device_index, uint64_t bytes) {
  Locker lock(this);
  RegionDevice& device = layout_->devices[device_index];
  RegionSlot& slot = layout_->slots[slot_index];
  const uint64_t held = slot.used[device_index].load(std::memory_order_relaxed);
  const quota::Subtraction slot_left = quota::SubtractSaturating(held, bytes);
  const uint64_t removed = slot_left.underflow ? held : bytes;
  if (slot_left.underflow) layout_->header.underflows.fetch_add(1, std::memory_order_relaxed);
  slot.used[device_index].store(slot_left.value, std::memory_order_relaxed);
  const quota::Subtraction device_left =
      quota::SubtractSaturating(device.used.load(std::memory_order_relaxed), removed);
  if (device_left.underflow) layout_->header.underflows.fetch_add(1, std::memory_order_relaxed);
  device.used.store(device_left.value, std::memory_order_relaxed);
}

uint64_t Region::SetOverhead(int slot_index, int device_index, uint64_t bytes) {
  Locker lock(this);
  RegionDevice& device = layout_->devices[device_index];
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
  device.used.store(device_used, std::memory_order_relaxed);
  if (device_used > device.peak_used.load(std::memory_order_relaxed)) {
    device.peak_used.store(device_used, std::memory_order_relaxed);
  }
  return device_used;
}

}  // namespace prism::vgpu
