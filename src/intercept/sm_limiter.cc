#include "intercept/sm_limiter.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "core/quota/sm_share.h"
#include "intercept/clock.h"
#include "intercept/liveness.h"
#include "intercept/log.h"
#include "intercept/uuid.h"

namespace prism::vgpu {
namespace {

constexpr int64_t kBurstNs = 20'000'000;              // Budget a container may spend ahead.
constexpr int64_t kMaxLaunchCostNs = 10'000'000'000;  // Cap on one launch's cost.
constexpr int64_t kLeaseStaleNs = 2'000'000'000;      // A holder silent this long is replaced.
constexpr int64_t kReclaimPeriodNs = 1'000'000'000;
constexpr uint64_t kWarpsPerSmWave = 64;  // 2048 resident threads per SM / 32.
constexpr unsigned kOthersActiveThresholdPercent = 2;

std::atomic<bool> g_watcher_started{false};
std::atomic<int> g_single_entry{-1};        // The entry of the only visible device, if just one.
std::atomic<uint32_t> g_mapped_entries{0};  // Bit mask of region entries this process mapped.
std::atomic<bool> g_checked_device_count{false};
std::atomic<bool> g_single_device{false};
// This process's SM limit (percent; 0: none) and policy per region entry, from its own
// environment. The region stores the creator's values too, but anyone in the container can write
// the file, so they are never what this process enforces (issue 14).
std::atomic<uint32_t> g_sm_limit[kMaxDevices];
std::atomic<uint32_t> g_sm_policy[kMaxDevices];

uint64_t DoubleBits(double value) {
  uint64_t bits;
  memcpy(&bits, &value, sizeof(bits));
  return bits;
}

double BitsDouble(uint64_t bits) {
  double value;
  memcpy(&value, &bits, sizeof(value));
  return value;
}

bool DeviceHasLimit(int entry) {
  const uint32_t limit = g_sm_limit[entry].load(std::memory_order_relaxed);
  return limit > 0 && limit < 100 &&
         g_sm_policy[entry].load(std::memory_order_relaxed) !=
             static_cast<uint32_t>(quota::UtilizationPolicy::kDisable);
}

int LaunchEntry() {
  const int single = g_single_entry.load(std::memory_order_relaxed);
  if (single >= 0) return single;
  if (!g_checked_device_count.load(std::memory_order_acquire)) {
    int count = 0;
    if (g_cuda.cuDeviceGetCount != nullptr && g_cuda.cuDeviceGetCount(&count) == CUDA_SUCCESS) {
      g_single_device.store(count == 1, std::memory_order_relaxed);
      g_checked_device_count.store(true, std::memory_order_release);
    }
  }
  if (g_single_device.load(std::memory_order_relaxed)) {
    const int entry = DeviceEntryForOrdinal(0);
    if (entry >= 0) g_single_entry.store(entry, std::memory_order_relaxed);
    return entry;
  }
  return CurrentDeviceEntry();
}

void Pace(RegionDevice& device, uint64_t warps) {
  device.warps_launched.fetch_add(warps, std::memory_order_relaxed);
  const uint64_t ps_per_warp = device.pace_ps_per_warp.load(std::memory_order_relaxed);
  if (ps_per_warp == 0) return;
  const int64_t cost = quota::LaunchCostNs(warps, ps_per_warp, kMaxLaunchCostNs);
  const int64_t now = MonotonicNs();
  int64_t tat = device.pace_tat_ns.load(std::memory_order_relaxed);
  quota::PaceDecision decision;
  do {
    decision = quota::Pace(tat, now, cost, kBurstNs);
  } while (!device.pace_tat_ns.compare_exchange_weak(tat, decision.new_tat_ns,
                                                     std::memory_order_relaxed));
  if (decision.wait_ns <= 0) return;
  device.throttle_events.fetch_add(1, std::memory_order_relaxed);
  device.throttle_ns.fetch_add(static_cast<uint64_t>(decision.wait_ns), std::memory_order_relaxed);
  SleepUntilNs(now + decision.wait_ns);
}

// ---- Watcher -------------------------------------------------------------------------------

struct WatchedDevice {
  bool holding = false;
  nvmlDevice_t nvml = nullptr;
  bool nvml_looked_up = false;
  uint64_t pending_overhead = 0;  // An overhead increase seen once, applied when seen again.
  uint64_t last_warps = 0;
  uint64_t last_throttle_events = 0;
  unsigned long long last_sample_us = 0;
  int64_t last_step_ns = 0;
};

WatchedDevice g_watched[kMaxDevices];
// Serializes overhead updates of the watcher and of context-creating threads.
pthread_mutex_t g_overhead_mutex = PTHREAD_MUTEX_INITIALIZER;

bool HoldLease(RegionDevice& device, int64_t now) {
  const pid_t self = getpid();
  int32_t holder = device.watcher_pid.load(std::memory_order_acquire);
  if (holder == self) {
    device.watcher_heartbeat_ns.store(now, std::memory_order_relaxed);
    return true;
  }
  const bool stale =
      holder == 0 ||
      !IsProcessAlive(holder, device.watcher_start_time.load(std::memory_order_relaxed)) ||
      now - device.watcher_heartbeat_ns.load(std::memory_order_relaxed) > kLeaseStaleNs;
  if (!stale) return false;
  if (!device.watcher_pid.compare_exchange_strong(holder, self, std::memory_order_acq_rel)) {
    return false;
  }
  device.watcher_start_time.store(ProcessStartTime(self), std::memory_order_relaxed);
  device.watcher_heartbeat_ns.store(now, std::memory_order_relaxed);
  PRISM_VGPU_LOG(kInfo, "took over the SM controller lease (previous holder %d)", holder);
  return true;
}

nvmlDevice_t NvmlHandleFor(const RegionDevice& device) {
  unsigned int count = 0;
  if (g_nvml.nvmlDeviceGetCount_v2 == nullptr || g_nvml.nvmlDeviceGetHandleByIndex_v2 == nullptr ||
      g_nvml.nvmlDeviceGetUUID == nullptr || g_nvml.nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS) {
    return nullptr;
  }
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t handle = nullptr;
    char text[PRISM_NVML_DEVICE_UUID_BUFFER_SIZE] = {};
    uint8_t bytes[16];
    if (g_nvml.nvmlDeviceGetHandleByIndex_v2(i, &handle) != NVML_SUCCESS) continue;
    if (g_nvml.nvmlDeviceGetUUID(handle, text, sizeof(text)) != NVML_SUCCESS) continue;
    if (ParseNvmlUuid(text, bytes) && memcmp(bytes, device.uuid, 16) == 0) return handle;
  }
  return nullptr;
}

// Whether NVML's `pid` is one of the container's processes.
bool IsContainerPid(Region* region, unsigned int pid) {
  for (int s = 0; s < kMaxSlots; ++s) {
    const RegionSlot& slot = region->slot(s);
    if (slot.state.load(std::memory_order_acquire) != kSlotLive) continue;
    const int32_t host = slot.host_pid.load(std::memory_order_relaxed);
    if (static_cast<unsigned int>(host != 0 ? host : slot.pid) == pid) return true;
  }
  return false;
}

// Finds the PID NVML reports for this process when /proc did not reveal it (a container with its
// own PID namespace): the only process on our GPUs that no slot of the container accounts for,
// when this is the only process of the container without a known host PID.
void ResolveHostPid(Region* region, nvmlDevice_t handle) {
  const int self_slot = SelfSlot();
  if (self_slot < 0 || region->slot(self_slot).host_pid.load() != 0 || handle == nullptr ||
      g_nvml.nvmlDeviceGetComputeRunningProcesses_v3 == nullptr) {
    return;
  }
  nvmlProcessInfo_t infos[64];
  unsigned int count = 64;
  if (g_nvml.nvmlDeviceGetComputeRunningProcesses_v3(handle, &count, infos) != NVML_SUCCESS) return;
  const unsigned int self = static_cast<unsigned int>(getpid());
  unsigned int candidate = 0;
  int candidates = 0;
  for (unsigned int i = 0; i < count; ++i) {
    if (infos[i].pid == self) {
      region->slot(self_slot).host_pid.store(static_cast<int32_t>(self));
      return;
    }
    if (!IsContainerPid(region, infos[i].pid)) {
      candidate = infos[i].pid;
      ++candidates;
    }
  }
  int unresolved = 0;
  for (int s = 0; s < kMaxSlots; ++s) {
    const RegionSlot& slot = region->slot(s);
    if (slot.state.load(std::memory_order_acquire) == kSlotLive && slot.host_pid.load() == 0) {
      bool visible = false;
      for (unsigned int i = 0; i < count; ++i)
        visible |= infos[i].pid == static_cast<unsigned>(slot.pid);
      if (!visible) ++unresolved;
    }
  }
  if (candidates == 1 && unresolved == 1) {
    region->slot(self_slot).host_pid.store(static_cast<int32_t>(candidate));
    PRISM_VGPU_LOG(kInfo, "NVML knows this process as PID %u", candidate);
  }
}

// The NVML handle of region entry `entry` (looked up once), or nullptr.
nvmlDevice_t NvmlFor(Region* region, int entry) {
  WatchedDevice& watched = g_watched[entry];
  if (!watched.nvml_looked_up) {
    watched.nvml = NvmlHandleFor(region->device(entry));
    watched.nvml_looked_up = true;
    if (watched.nvml == nullptr) {
      PRISM_VGPU_LOG(kWarning,
                     "NVML does not list the GPU of region entry %d; its SM limit and "
                     "the driver's own memory cannot be measured",
                     entry);
    }
  }
  return watched.nvml;
}

// Charges what the driver holds for this process on `entry` beyond its tracked allocations
// (contexts, modules, library workspaces): NVML's per-process usedGpuMemory minus the tracked
// bytes, never negative. An increase must be seen in two consecutive periods, so an allocation
// or free racing the NVML sample is not mistaken for overhead.
void ReconcileOverhead(Region* region, int entry) {
  const int self_slot = SelfSlot();
  nvmlDevice_t handle = NvmlFor(region, entry);
  if (self_slot < 0 || handle == nullptr ||
      g_nvml.nvmlDeviceGetComputeRunningProcesses_v3 == nullptr) {
    return;
  }
  ResolveHostPid(region, handle);
  RegionSlot& slot = region->slot(self_slot);
  const int32_t host = slot.host_pid.load();
  if (host == 0) return;
  nvmlProcessInfo_t infos[64];
  unsigned int count = 64;
  if (g_nvml.nvmlDeviceGetComputeRunningProcesses_v3(handle, &count, infos) != NVML_SUCCESS) return;
  uint64_t measured = 0;
  bool found = false;
  for (unsigned int i = 0; i < count; ++i) {
    if (infos[i].pid != static_cast<unsigned int>(host)) continue;
    if (infos[i].usedGpuMemory == ~0ULL) return;  // NVML_VALUE_NOT_AVAILABLE.
    measured = infos[i].usedGpuMemory;
    found = true;
  }
  if (!found) return;
  const uint64_t overhead = slot.overhead[entry].load();
  const uint64_t used = slot.used[entry].load();
  const uint64_t tracked = used > overhead ? used - overhead : 0;
  uint64_t target = measured > tracked ? measured - tracked : 0;
  WatchedDevice& watched = g_watched[entry];
  if (target > overhead) {
    const uint64_t first_seen = watched.pending_overhead;
    watched.pending_overhead = target;
    if (first_seen == 0) return;
    if (first_seen < target) target = first_seen;
  } else {
    watched.pending_overhead = 0;
  }
  constexpr uint64_t kHysteresis = 2 << 20;
  if ((target > overhead ? target - overhead : overhead - target) < kHysteresis) return;
  const uint64_t device_used = region->SetOverhead(self_slot, entry, target);
  PRISM_VGPU_LOG(kInfo,
                 "device entry %d: the driver holds %llu bytes for this process beyond its "
                 "allocations; container usage now %llu bytes",
                 entry, static_cast<unsigned long long>(target),
                 static_cast<unsigned long long>(device_used));
}

void StepDevice(Region* region, int entry, int64_t now) {
  RegionDevice& device = region->device(entry);
  WatchedDevice& watched = g_watched[entry];
  if (!HoldLease(device, now)) {
    watched.holding = false;
    return;
  }
  if (NvmlFor(region, entry) == nullptr) return;
  ResolveHostPid(region, watched.nvml);
  const uint64_t warps = device.warps_launched.load(std::memory_order_relaxed);
  const uint64_t throttles = device.throttle_events.load(std::memory_order_relaxed);
  if (!watched.holding) {  // Just took the lease: start measuring from now.
    watched.holding = true;
    watched.last_warps = warps;
    watched.last_throttle_events = throttles;
    watched.last_sample_us = RealtimeUs();
    watched.last_step_ns = now;
    return;
  }
  quota::SmObservation obs;
  obs.dt_s = static_cast<double>(now - watched.last_step_ns) / 1e9;
  obs.warps = warps - watched.last_warps;
  obs.throttled = throttles != watched.last_throttle_events;
  watched.last_warps = warps;
  watched.last_throttle_events = throttles;
  watched.last_step_ns = now;

  nvmlProcessUtilizationSample_t samples[256];
  unsigned int count = 256;
  const nvmlReturn_t rc =
      g_nvml.nvmlDeviceGetProcessUtilization(watched.nvml, samples, &count, watched.last_sample_us);
  if (rc == NVML_SUCCESS) {
    // NVML may return several samples per process; average each process's, then sum.
    unsigned int own_sum = 0, own_n = 0, other_sum = 0, other_n = 0;
    unsigned long long newest = watched.last_sample_us;
    for (unsigned int i = 0; i < count; ++i) {
      if (samples[i].timeStamp <= watched.last_sample_us) continue;
      if (samples[i].timeStamp > newest) newest = samples[i].timeStamp;
      unsigned int sum = 0, n = 0;
      bool first = true;
      for (unsigned int j = 0; j < count; ++j) {  // Small n: quadratic is fine.
        if (samples[j].pid != samples[i].pid || samples[j].timeStamp <= watched.last_sample_us) {
          continue;
        }
        if (j < i) first = false;
        sum += samples[j].smUtil;
        ++n;
      }
      if (!first || n == 0) continue;
      if (IsContainerPid(region, samples[i].pid)) {
        own_sum += sum / n;
        ++own_n;
      } else {
        other_sum += sum / n;
        ++other_n;
      }
    }
    watched.last_sample_us = newest;
    obs.util_valid = true;
    obs.own_util = static_cast<double>(own_sum > 100 ? 100 : own_sum) / 100.0;
    obs.others_active = other_sum >= kOthersActiveThresholdPercent;
    (void)own_n;
    (void)other_n;
  } else if (rc != NVML_ERROR_NOT_FOUND) {
    PRISM_VGPU_LOG(kDebug, "nvmlDeviceGetProcessUtilization failed: %d", rc);
  }

  quota::SmControllerConfig config;
  config.limit = g_sm_limit[entry].load(std::memory_order_relaxed) / 100.0;
  config.work_conserving = g_sm_policy[entry].load(std::memory_order_relaxed) ==
                           static_cast<uint32_t>(quota::UtilizationPolicy::kDefault);
  quota::SmControllerState state;
  state.cost_per_warp = BitsDouble(device.controller_cost_bits.load(std::memory_order_relaxed));
  state.correction = BitsDouble(device.controller_correction_bits.load(std::memory_order_relaxed));
  if (state.correction <= 0.0) state.correction = 1.0;
  state.ps_per_warp = device.pace_ps_per_warp.load(std::memory_order_relaxed);
  state.limiting = state.ps_per_warp != 0;
  const quota::SmDecision decision = quota::SmControllerStep(config, state, obs);
  device.controller_cost_bits.store(DoubleBits(state.cost_per_warp), std::memory_order_relaxed);
  device.controller_correction_bits.store(DoubleBits(state.correction), std::memory_order_relaxed);
  device.pace_ps_per_warp.store(decision.limit ? decision.ps_per_warp : 0,
                                std::memory_order_relaxed);
  if (obs.util_valid) {
    device.own_util_permille.store(static_cast<uint32_t>(obs.own_util * 1000.0),
                                   std::memory_order_relaxed);
    device.others_active.store(obs.others_active ? 1 : 0, std::memory_order_relaxed);
  }
  PRISM_VGPU_LOG(kDebug,
                 "sm entry %d: util %.3f valid %d others %d warps %llu throttled %d -> cost %.3g "
                 "corr %.3f ps/warp %llu",
                 entry, obs.own_util, obs.util_valid, obs.others_active,
                 static_cast<unsigned long long>(obs.warps), obs.throttled, state.cost_per_warp,
                 state.correction, static_cast<unsigned long long>(decision.ps_per_warp));
}

void* WatcherMain(void*) {
  const int64_t tick = int64_t{g_config.sm_tick_ms} * 1'000'000;
  bool warned_no_nvml = false;
  int64_t last_reclaim = MonotonicNs();
  for (;;) {
    SleepForNs(tick);
    if (!ControlEnabled()) continue;
    Region* region = EnsureAccounting();
    if (region == nullptr) continue;
    const int64_t now = MonotonicNs();
    const uint32_t mapped = g_mapped_entries.load(std::memory_order_acquire);
    bool any_sm_limit = false;
    for (int entry = 0; entry < kMaxDevices; ++entry) {
      if ((mapped & (1u << entry)) != 0) any_sm_limit |= DeviceHasLimit(entry);
    }
    const bool nvml = EnsureNvml(true) && g_nvml.nvmlDeviceGetProcessUtilization != nullptr;
    if (!nvml && !warned_no_nvml) {
      if (any_sm_limit) {
        PRISM_VGPU_LOG(kWarning,
                       "NVML is not available: GPU utilization cannot be measured, so the SM "
                       "limit is not enforced (memory limits are)");
      } else {
        PRISM_VGPU_LOG(kInfo, "NVML is not available: the driver's own memory is not charged");
      }
      warned_no_nvml = true;
    }
    if (now - last_reclaim >= kReclaimPeriodNs) {
      region->ReclaimDead();  // Returns dead processes' memory promptly.
      last_reclaim = now;
      for (int entry = 0; nvml && g_config.charge_overhead && entry < kMaxDevices; ++entry) {
        if ((mapped & (1u << entry)) == 0 || region->EffectiveLimit(entry) == 0) continue;
        pthread_mutex_lock(&g_overhead_mutex);
        ReconcileOverhead(region, entry);
        pthread_mutex_unlock(&g_overhead_mutex);
      }
    }
    if (!nvml) continue;
    for (int entry = 0; entry < kMaxDevices; ++entry) {
      if ((mapped & (1u << entry)) == 0 || !DeviceHasLimit(entry)) continue;
      StepDevice(region, entry, now);
    }
  }
  return nullptr;
}

void StartWatcher() {
  bool expected = false;
  if (!g_watcher_started.compare_exchange_strong(expected, true)) return;
  // The thread must not take signals meant for the application.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  pthread_t thread;
  const int rc = pthread_create(&thread, &attr, WatcherMain, nullptr);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) {
    PRISM_VGPU_LOG(kError, "cannot start the SM limiter thread (error %d); SM limit not enforced",
                   rc);
    return;
  }
  pthread_setname_np(thread, "prism-vgpu-sm");
}

}  // namespace

void PaceLaunch(uint64_t warps) {
  Region* region = EnsureAccounting();
  if (region == nullptr) return;
  const int entry = LaunchEntry();
  if (entry < 0 || !DeviceHasLimit(entry)) return;
  Pace(region->device(entry), warps);
}

void PaceGraphLaunch() {
  Region* region = EnsureAccounting();
  if (region == nullptr) return;
  const int entry = LaunchEntry();
  if (entry < 0 || !DeviceHasLimit(entry)) return;
  RegionDevice& device = region->device(entry);
  const uint64_t sms = device.sm_count != 0 ? device.sm_count : 1;
  Pace(device, sms * kWarpsPerSmWave);
}

void SmLimiterDeviceMapped(int entry, uint32_t sm_limit_percent, uint32_t policy) {
  Region* region = EnsureAccounting();
  if (region == nullptr || entry < 0 || entry >= kMaxDevices) return;
  g_sm_limit[entry].store(sm_limit_percent, std::memory_order_relaxed);
  g_sm_policy[entry].store(policy, std::memory_order_relaxed);
  g_mapped_entries.fetch_or(1u << entry, std::memory_order_release);
  // The watcher runs the SM controller; for memory-limited devices it also charges the driver's
  // own memory and returns dead processes' memory promptly.
  if (DeviceHasLimit(entry) || (region->EffectiveLimit(entry) != 0 && g_config.charge_overhead)) {
    StartWatcher();
  }
}

void ChargeContextOverhead(int entry) {
  Region* region = EnsureAccounting();
  const int self_slot = SelfSlot();
  if (region == nullptr || entry < 0 || entry >= kMaxDevices || self_slot < 0 ||
      !g_config.charge_overhead || region->EffectiveLimit(entry) == 0) {
    return;
  }
  pthread_mutex_lock(&g_overhead_mutex);
  RegionSlot& slot = region->slot(self_slot);
  bool measured = false;
  uint64_t target = 0;
  nvmlDevice_t handle = nullptr;
  if (EnsureNvml(true) && g_nvml.nvmlDeviceGetComputeRunningProcesses_v3 != nullptr) {
    handle = NvmlHandleFor(region->device(entry));
  }
  if (handle != nullptr) {
    ResolveHostPid(region, handle);
    const int32_t host = slot.host_pid.load();
    nvmlProcessInfo_t infos[64];
    unsigned int count = 64;
    if (host != 0 &&
        g_nvml.nvmlDeviceGetComputeRunningProcesses_v3(handle, &count, infos) == NVML_SUCCESS) {
      for (unsigned int i = 0; i < count; ++i) {
        if (infos[i].pid != static_cast<unsigned int>(host) || infos[i].usedGpuMemory == ~0ULL) {
          continue;
        }
        const uint64_t overhead = slot.overhead[entry].load();
        const uint64_t used = slot.used[entry].load();
        const uint64_t tracked = used > overhead ? used - overhead : 0;
        target = infos[i].usedGpuMemory > tracked ? infos[i].usedGpuMemory - tracked : 0;
        measured = true;
      }
    }
  }
  if (!measured) {
    const uint64_t overhead = slot.overhead[entry].load();
    target = overhead > g_config.context_estimate ? overhead : g_config.context_estimate;
  }
  if (target != slot.overhead[entry].load()) {
    const uint64_t device_used = region->SetOverhead(self_slot, entry, target);
    PRISM_VGPU_LOG(kInfo,
                   "device entry %d: context created; %s %llu bytes of driver memory, container "
                   "usage now %llu bytes",
                   entry, measured ? "NVML shows" : "charging an estimated",
                   static_cast<unsigned long long>(target),
                   static_cast<unsigned long long>(device_used));
  }
  pthread_mutex_unlock(&g_overhead_mutex);
}

void SmLimiterAfterFork() {
  pthread_mutex_init(&g_overhead_mutex, nullptr);
  g_watcher_started.store(false);
  g_single_entry.store(-1);
  g_mapped_entries.store(0);
  for (int entry = 0; entry < kMaxDevices; ++entry) {
    g_sm_limit[entry].store(0);
    g_sm_policy[entry].store(0);
  }
  g_checked_device_count.store(false);
  for (WatchedDevice& watched : g_watched) watched = WatchedDevice();
}

}  // namespace prism::vgpu
