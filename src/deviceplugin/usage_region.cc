#include "deviceplugin/usage_region.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>

#include "base/strings.h"
#include "intercept/region.h"
#include "intercept/uuid.h"

namespace prism::deviceplugin {
namespace {

using vgpu::RegionLayout;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads exactly `size` bytes at `offset`; false on a short read (the file shrank) or an error.
bool ReadAt(int fd, void* out, size_t size, off_t offset, int* err) {
  auto* bytes = static_cast<unsigned char*>(out);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, bytes + done, size - done, offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *err = n < 0 ? errno : 0;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int64_t MonotonicNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

absl::StatusOr<RegionUsage> ReadRegionUsage(const std::string& path, int64_t now_monotonic_ns,
                                            bool with_host_pids) {
  // O_NONBLOCK: a FIFO put in the region's place must not block the agent; O_NOFOLLOW: nor may a
  // symlink make it read another host file.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(StrCat(path, ": no region yet"));
    if (err == ELOOP) return absl::FailedPreconditionError(StrCat(path, ": is a symbolic link"));
    return absl::UnavailableError(StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return absl::UnavailableError(StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(StrCat(path, ": not a regular file"));
  }
  if (static_cast<uint64_t>(st.st_size) != sizeof(RegionLayout)) {
    return absl::FailedPreconditionError(
        StrCat(path, ": ", st.st_size, " bytes, not the ", sizeof(RegionLayout),
               " of a region of ABI version ", vgpu::kRegionAbiVersion));
  }
  // Header and device table always; the slot table only when its PIDs are wanted (it is 98 % of
  // the file). Unread parts stay zero, which validation accepts.
  auto layout = std::make_unique<RegionLayout>();
  constexpr size_t kHead = offsetof(RegionLayout, slots);
  int err = 0;
  if (!ReadAt(fd.get(), layout.get(), kHead, 0, &err) ||
      (with_host_pids && !ReadAt(fd.get(), reinterpret_cast<unsigned char*>(layout.get()) + kHead,
                                 sizeof(RegionLayout) - kHead, static_cast<off_t>(kHead), &err))) {
    return absl::UnavailableError(
        StrCat(path, ": short read", err != 0 ? StrCat(": ", std::strerror(err)) : ""));
  }
  // The agent creates the file at its size before the container starts (node_files.h): zeros
  // until the first CUDA process initializes it, which is "no region yet", not a foreign one.
  static constexpr char kNoMagic[sizeof(layout->header.magic)] = {};
  if (std::memcmp(layout->header.magic, kNoMagic, sizeof(kNoMagic)) == 0) {
    return absl::NotFoundError(StrCat(path, ": no region yet (not initialized)"));
  }
  if (!vgpu::HeaderIsCompatible(layout->header)) {
    return absl::FailedPreconditionError(StrCat(path, ": not a region of ABI version ",
                                                vgpu::kRegionAbiVersion,
                                                " (magic, version or table sizes differ)"));
  }
  int index = -1;
  if (const char* damage = vgpu::FindDeviceTableDamage(*layout, &index)) {
    return absl::DataLossError(StrCat(path, ": damaged: ", damage, " (device entry ", index, ")"));
  }
  if (with_host_pids) {
    if (const char* damage = vgpu::FindSlotTableDamage(*layout, &index)) {
      return absl::DataLossError(StrCat(path, ": damaged: ", damage, " (slot ", index, ")"));
    }
  }

  RegionUsage out;
  for (const vgpu::RegionDevice& d : layout->devices) {
    if (d.claimed.load(std::memory_order_relaxed) != 1) continue;
    RegionDeviceUsage u;
    char uuid[vgpu::kNvmlUuidLength + 1];
    vgpu::FormatNvmlUuid(d.uuid, uuid);
    u.gpu_uuid = uuid;
    u.used_bytes = d.used.load(std::memory_order_relaxed);
    u.peak_bytes = std::max(d.peak_used.load(std::memory_order_relaxed), u.used_bytes);
    u.memory_limit_bytes = d.memory_limit;
    u.sm_limit_percent = static_cast<int>(d.sm_limit_percent);
    u.refusals = d.refusals.load(std::memory_order_relaxed);
    const int64_t heartbeat = d.watcher_heartbeat_ns.load(std::memory_order_relaxed);
    const uint32_t permille = d.own_util_permille.load(std::memory_order_relaxed);
    if (d.watcher_pid.load(std::memory_order_relaxed) > 0 && heartbeat > 0 &&
        now_monotonic_ns - heartbeat <= kUtilizationFreshNs && heartbeat <= now_monotonic_ns &&
        permille <= 1000) {
      u.utilization = permille / 1000.0;
    }
    out.devices.push_back(std::move(u));
  }
  if (with_host_pids) {
    for (const vgpu::RegionSlot& s : layout->slots) {
      if (s.state.load(std::memory_order_relaxed) != vgpu::kSlotLive) continue;
      const int32_t host = s.host_pid.load(std::memory_order_relaxed);
      if (host > 0) out.host_pids.push_back(static_cast<uint32_t>(host));
    }
  }
  return out;
}

}  // namespace prism::deviceplugin
