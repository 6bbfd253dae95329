#include "intercept/fake/fake_state.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/quota/limits.h"
#include "intercept/clock.h"
#include "intercept/liveness.h"
#include "intercept/uuid.h"

namespace prism::vgpu::fake {
namespace {

constexpr char kMagic[8] = {'P', 'R', 'S', 'M', 'F', 'G', 'P', 'U'};

std::atomic<Layout*> g_layout{nullptr};
std::atomic<Process*> g_self{nullptr};
std::atomic<pid_t> g_self_pid{0};

[[noreturn]] void Die(const char* what, int err) {
  fprintf(stderr, "fake GPU: %s: %s\n", what, strerror(err));
  abort();
}

uint64_t EnvBytes(const char* name, uint64_t fallback) {
  const char* value = getenv(name);
  if (value == nullptr) return fallback;
  const quota::Parsed<uint64_t> parsed = quota::ParseBytes(value);
  if (!parsed.ok() || parsed.value == 0) {
    fprintf(stderr, "fake GPU: %s=\"%s\" is not a byte count\n", name, value);
    abort();
  }
  return parsed.value;
}

void Initialize(Layout* layout) {
  memset(static_cast<void*>(layout), 0, sizeof(Layout));
  int count = 1;
  if (const char* value = getenv("PRISM_FAKE_GPU_COUNT")) count = atoi(value);
  if (count < 1 || count > kMaxDevices) count = 1;
  const uint64_t memory = EnvBytes("PRISM_FAKE_GPU_MEMORY", uint64_t{143771} << 20);
  int sms = 132;
  if (const char* value = getenv("PRISM_FAKE_GPU_SMS")) sms = atoi(value);
  if (sms < 1) sms = 132;
  // A MIG device: "<uuid>,<profile>".
  uint8_t mig_uuid[16] = {};
  char mig_profile[24] = {};
  const char* mig = getenv("PRISM_FAKE_GPU_MIG");
  if (mig != nullptr && mig[0] != '\0') {
    const char* comma = strchr(mig, ',');
    char uuid_text[64] = {};
    const size_t uuid_length = comma == nullptr ? 0 : static_cast<size_t>(comma - mig);
    if (uuid_length > 0 && uuid_length < sizeof(uuid_text)) memcpy(uuid_text, mig, uuid_length);
    if (comma == nullptr || !ParseNvmlUuid(uuid_text, mig_uuid) || comma[1] == '\0' ||
        strlen(comma + 1) >= sizeof(mig_profile)) {
      fprintf(stderr, "fake GPU: PRISM_FAKE_GPU_MIG=\"%s\" is not \"<MIG UUID>,<profile>\"\n", mig);
      abort();
    }
    snprintf(mig_profile, sizeof(mig_profile), "%s", comma + 1);
    count = 1;
  }
  layout->version = kStateVersion;
  layout->device_count = static_cast<uint32_t>(count);
  for (int i = 0; i < count; ++i) {
    Device& d = layout->devices[i];
    snprintf(d.name, sizeof(d.name), "NVIDIA H200 (fake %d)", i);
    static constexpr uint8_t kUuidBase[16] = {0x50, 0x52, 0x49, 0x53, 0x4d, 0x2d, 0x46, 0x41,
                                              0x4b, 0x45, 0x2d, 0x47, 0x50, 0x55, 0x00, 0x00};
    memcpy(d.uuid, kUuidBase, 16);
    d.uuid[15] = static_cast<uint8_t>(i);
    d.total_memory = memory;
    d.sm_count = sms;
    d.threads_per_sm = 2048;
    d.cc_major = 9;
    d.cc_minor = 0;
    if (mig_profile[0] != '\0') {
      snprintf(d.name, sizeof(d.name), "NVIDIA H200 MIG %s", mig_profile);
      memcpy(d.uuid, mig_uuid, 16);
      d.mig = 1;
    }
  }
  memcpy(layout->magic, kMagic, sizeof(kMagic));
}

Layout* Map() {
  char default_path[128];
  snprintf(default_path, sizeof(default_path), "/tmp/prism-fake-gpu-%d.state",
           static_cast<int>(getuid()));
  const char* path = getenv("PRISM_FAKE_GPU_STATE");
  if (path == nullptr || path[0] == '\0') path = default_path;
  const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) Die(path, errno);
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) Die("flock", errno);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) Die("fstat", errno);
  const bool fresh = st.st_size == 0;
  if (fresh && ftruncate(fd, sizeof(Layout)) != 0) Die("ftruncate", errno);
  if (!fresh && static_cast<size_t>(st.st_size) != sizeof(Layout)) {
    fprintf(stderr, "fake GPU: %s has another layout; delete it\n", path);
    abort();
  }
  void* memory = mmap(nullptr, sizeof(Layout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (memory == MAP_FAILED) Die("mmap", errno);
  Layout* layout = static_cast<Layout*>(memory);
  if (fresh || memcmp(layout->magic, kMagic, sizeof(kMagic)) != 0) Initialize(layout);
  flock(fd, LOCK_UN);
  close(fd);
  return layout;
}

void ReclaimEntry(Layout* layout, Process& p, int32_t pid) {
  int32_t expected = pid;
  if (!p.pid.compare_exchange_strong(expected, -1)) return;  // -1: being reclaimed.
  for (int d = 0; d < kMaxDevices; ++d) {
    const uint64_t bytes = p.used_memory[d].exchange(0);
    if (bytes != 0) layout->devices[d].used_memory.fetch_sub(bytes);
    p.has_context[d].store(0);
  }
  p.pid.store(0);
}

}  // namespace

Layout* State() {
  Layout* layout = g_layout.load(std::memory_order_acquire);
  if (layout != nullptr) return layout;
  Layout* mapped = Map();
  if (g_layout.compare_exchange_strong(layout, mapped)) return mapped;
  munmap(mapped, sizeof(Layout));
  return layout;
}

void ReclaimDeadProcesses() {
  Layout* layout = State();
  for (Process& p : layout->processes) {
    const int32_t pid = p.pid.load();
    if (pid <= 0) continue;
    if (!IsProcessAlive(pid, p.start_time.load())) ReclaimEntry(layout, p, pid);
  }
}

Process* Self() {
  const pid_t pid = getpid();
  Process* self = g_self.load(std::memory_order_acquire);
  if (self != nullptr && g_self_pid.load() == pid) return self;
  Layout* layout = State();
  const uint64_t start_time = ProcessStartTime(pid);
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (Process& p : layout->processes) {
      int32_t current = p.pid.load();
      if (current == pid) {
        if (p.start_time.load() == start_time) {
          self = &p;
          break;
        }
        ReclaimEntry(layout, p, current);  // A dead process that had our PID.
        current = 0;
      }
      // Claimed as -2 ("being set up", skipped by reclaimers) and published with our PID only
      // once the start time is ours: a reclaimer that saw our PID next to the previous occupant's
      // start time took us for a dead process and freed the entry under us (issue 14: the kill
      // tests then saw the device's usage wrap around).
      if (current == 0 && p.pid.compare_exchange_strong(current, -2)) {
        p.start_time.store(start_time);
        for (int d = 0; d < kMaxDevices; ++d) {
          p.used_memory[d].store(0);
          p.has_context[d].store(0);
          for (Bucket& b : p.buckets[d]) b.index.store(-1);
        }
        p.pid.store(pid);
        self = &p;
        break;
      }
    }
    if (self != nullptr) break;
    ReclaimDeadProcesses();
  }
  if (self == nullptr) {
    fprintf(stderr, "fake GPU: more than %d live processes\n", kMaxProcesses);
    abort();
  }
  g_self_pid.store(pid);
  g_self.store(self, std::memory_order_release);
  return self;
}

void RecordBusy(Process* process, int device, int64_t start_ns, int64_t end_ns) {
  for (int64_t t = start_ns; t < end_ns;) {
    const int64_t index = t / kBucketNs;
    const int64_t bucket_end = (index + 1) * kBucketNs;
    const int64_t until = end_ns < bucket_end ? end_ns : bucket_end;
    Bucket& b = process->buckets[device][index % kBuckets];
    int64_t seen = b.index.load();
    if (seen != index) {
      // Recycle the slot for this bucket (only this process writes its own buckets).
      b.busy_ns.store(0);
      b.index.store(index);
    }
    b.busy_ns.fetch_add(until - t);
    t = until;
  }
}

double BusyFraction(const Process& process, int device, int64_t from_ns, int64_t to_ns) {
  if (to_ns <= from_ns) return 0.0;
  if (to_ns - from_ns > (kBuckets - 1) * kBucketNs) from_ns = to_ns - (kBuckets - 1) * kBucketNs;
  int64_t busy = 0;
  for (int64_t index = from_ns / kBucketNs; index <= (to_ns - 1) / kBucketNs; ++index) {
    const Bucket& b = process.buckets[device][index % kBuckets];
    if (b.index.load() != index) continue;
    // Busy time is spread evenly over a bucket for partial overlaps.
    const int64_t lo = from_ns > index * kBucketNs ? from_ns : index * kBucketNs;
    const int64_t hi = to_ns < (index + 1) * kBucketNs ? to_ns : (index + 1) * kBucketNs;
    busy += b.busy_ns.load() * (hi - lo) / kBucketNs;
  }
  const double fraction = static_cast<double>(busy) / static_cast<double>(to_ns - from_ns);
  return fraction > 1.0 ? 1.0 : fraction;
}

bool TakeMemory(int device, uint64_t bytes) {
  Layout* layout = State();
  Device& d = layout->devices[device];
  for (int attempt = 0; attempt < 2; ++attempt) {
    uint64_t used = d.used_memory.load();
    while (used + bytes <= d.total_memory && used + bytes >= used) {
      if (d.used_memory.compare_exchange_weak(used, used + bytes)) {
        Self()->used_memory[device].fetch_add(bytes);
        return true;
      }
    }
    ReclaimDeadProcesses();  // The memory of dead processes comes back, as with a real driver.
  }
  return false;
}

void GiveMemory(int device, uint64_t bytes) {
  // The process's share first: killed in between, the device keeps the bytes (a leak the test
  // would see) instead of losing them twice when the process is reclaimed (a wrap-around).
  Self()->used_memory[device].fetch_sub(bytes);
  State()->devices[device].used_memory.fetch_sub(bytes);
}

}  // namespace prism::vgpu::fake
