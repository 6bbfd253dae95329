#include "intercept/runtime.h"

#include <dlfcn.h>
#include <string.h>
#include <unistd.h>

#include <new>

#include "intercept/hooks.h"
#include "intercept/liveness.h"
#include "intercept/log.h"
#include "intercept/sm_limiter.h"

namespace prism::vgpu {

RealCuda g_cuda = {};
RealNvml g_nvml = {};
Config g_config;

namespace {

constexpr int kMaxOrdinals = 64;
// g_ordinal_entry holds entry + 1, so that zero-initialized storage means "not mapped yet".
constexpr int16_t kEntryUnknown = 0;
constexpr int16_t kEntryFailed = -1;

const HookEntry kHookEntries[] = {
#define CU_HOOK(name, params, args, base, version, variant) \
  {#name,                                                   \
   reinterpret_cast<void*>(&::name),                        \
   reinterpret_cast<void* const*>(&g_cuda.name),            \
   #base,                                                   \
   version,                                                 \
   Variant::variant},
#define NVML_HOOK(name, params, args)            \
  {#name,                                        \
   reinterpret_cast<void*>(&::name),             \
   reinterpret_cast<void* const*>(&g_nvml.name), \
   nullptr,                                      \
   0,                                            \
   Variant::kLegacy},
#include "intercept/symbols.def"
};

// Initialization states of the lazily built parts.
enum InitState : int { kUninitialized = 0, kReady = 1, kUnavailable = 2 };

pthread_mutex_t g_init_mutex = PTHREAD_MUTEX_INITIALIZER;
std::atomic<int> g_config_state{kUninitialized};
std::atomic<int> g_driver_state{kUninitialized};
std::atomic<int> g_nvml_state{kUninitialized};
std::atomic<int> g_accounting_state{kUninitialized};
std::atomic<bool> g_shutting_down{false};
std::atomic<bool> g_fail_closed{false};
thread_local bool t_loading = false;  // Re-entrancy guard while dlopen runs our hooks.

void* g_driver_handle = nullptr;
void* g_nvml_handle = nullptr;

alignas(Region) unsigned char g_region_storage[sizeof(Region)];
Region* g_region = nullptr;
int g_slot = -1;
pid_t g_slot_pid = 0;
uint64_t g_slot_start_time = 0;

std::atomic<int16_t> g_ordinal_entry[kMaxOrdinals];
pthread_mutex_t g_tables_mutex = PTHREAD_MUTEX_INITIALIZER;
alignas(AllocTable) unsigned char g_table_storage[sizeof(AllocTable)];
AllocTable* g_table = nullptr;
bool g_atfork_registered = false;

void ResetOrdinalMap() {
  for (auto& entry : g_ordinal_entry) entry.store(kEntryUnknown, std::memory_order_relaxed);
}

void ForkPrepare() { pthread_mutex_lock(&g_tables_mutex); }
void ForkParent() { pthread_mutex_unlock(&g_tables_mutex); }
void ForkChild() {
  // The child has one thread and its own PID: it gets its own slot on first use and owns none of
  // its parent's allocations (CUDA does not carry contexts across fork).
  pthread_mutex_init(&g_tables_mutex, nullptr);
  pthread_mutex_init(&g_init_mutex, nullptr);
  if (g_table != nullptr) g_table->Clear();
  g_slot = -1;
  g_slot_pid = 0;
  g_slot_start_time = 0;
  if (g_accounting_state.load() == kReady) g_accounting_state.store(kUninitialized);
  if (g_region != nullptr) g_region->ForgetPendingReleasesAfterFork();
  ResetOrdinalMap();
  SmLimiterAfterFork();
}

void ResolveCuda(void* handle) {
#define CU_HOOK(name, params, args, base, version, variant) \
  g_cuda.name = reinterpret_cast<decltype(g_cuda.name)>(RealDlsym(handle, #name));
#define CU_REAL(name, params) \
  g_cuda.name = reinterpret_cast<decltype(g_cuda.name)>(RealDlsym(handle, #name));
#include "intercept/symbols.def"
}

void ResolveNvml(void* handle) {
#define NVML_HOOK(name, params, args) \
  g_nvml.name = reinterpret_cast<decltype(g_nvml.name)>(RealDlsym(handle, #name));
#define NVML_REAL(name, params) \
  g_nvml.name = reinterpret_cast<decltype(g_nvml.name)>(RealDlsym(handle, #name));
#include "intercept/symbols.def"
}

__attribute__((destructor)) void ReleaseSlotAtExit() {
  g_shutting_down.store(true);
  if (g_accounting_state.load() != kReady || g_region == nullptr || g_slot < 0) return;
  if (getpid() != g_slot_pid) return;
  g_region->ReleaseSlot(g_slot, g_slot_pid, g_slot_start_time);
}

// Switches the process to refusing allocations (once; the first reason is logged).
void FailClosed(const char* reason) {
  if (g_fail_closed.exchange(true)) return;
  PRISM_VGPU_LOG(kError,
                 "a memory limit was asked for but cannot be enforced (%s); every GPU memory "
                 "allocation of this process is refused (fail closed)",
                 reason);
}

// True when `handle` (from dlopen) is this library: PRISM_VGPU_REAL_LIBCUDA (or
// PRISM_VGPU_REAL_NVML) pointing at libprism-vgpu.so itself would make every wrapper call itself
// until the stack overflows.
bool IsThisLibrary(void* handle, const char* probe_symbol, void* own_function) {
  Dl_info self;
  if (dladdr(reinterpret_cast<void*>(&IsThisLibrary), &self) != 0 && self.dli_fname != nullptr) {
    void* own_handle = dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (own_handle != nullptr) {
      dlclose(own_handle);
      if (own_handle == handle) return true;
    }
  }
  return RealDlsym(handle, probe_symbol) == own_function;
}

}  // namespace

bool AccountingFailsClosed() { return g_fail_closed.load(std::memory_order_relaxed); }

const HookEntry* HookEntries(size_t* count) {
  *count = sizeof(kHookEntries) / sizeof(kHookEntries[0]);
  return kHookEntries;
}

const HookEntry* FindHook(const char* name) {
  for (const HookEntry& entry : kHookEntries) {
    if (strcmp(entry.name, name) == 0) return &entry;
  }
  return nullptr;
}

const Config& EnsureConfig() {
  if (g_config_state.load(std::memory_order_acquire) == kReady) return g_config;
  pthread_mutex_lock(&g_init_mutex);
  if (g_config_state.load(std::memory_order_relaxed) != kReady) {
    LoadConfig(&g_config);
    g_config_state.store(kReady, std::memory_order_release);
  }
  pthread_mutex_unlock(&g_init_mutex);
  return g_config;
}

bool EnsureDriver() {
  const int state = g_driver_state.load(std::memory_order_acquire);
  if (state != kUninitialized) return state == kReady;
  if (t_loading) return false;
  EnsureConfig();
  pthread_mutex_lock(&g_init_mutex);
  if (g_driver_state.load(std::memory_order_relaxed) == kUninitialized) {
    t_loading = true;
    const char* path = g_config.real_libcuda[0] != '\0' ? g_config.real_libcuda : "libcuda.so.1";
    g_driver_handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (g_driver_handle == nullptr) {
      PRISM_VGPU_LOG(kError, "cannot load the CUDA driver %s: %s", path, dlerror());
      g_driver_state.store(kUnavailable, std::memory_order_release);
    } else if (IsThisLibrary(g_driver_handle, "cuMemAlloc_v2",
                             reinterpret_cast<void*>(&::cuMemAlloc_v2))) {
      PRISM_VGPU_LOG(kError,
                     "the CUDA driver %s is libprism-vgpu itself (check PRISM_VGPU_REAL_LIBCUDA); "
                     "CUDA is unavailable in this process",
                     path);
      dlclose(g_driver_handle);
      g_driver_handle = nullptr;
      g_driver_state.store(kUnavailable, std::memory_order_release);
    } else {
      ResolveCuda(g_driver_handle);
      g_driver_state.store(kReady, std::memory_order_release);
      PRISM_VGPU_LOG(kDebug, "loaded the CUDA driver %s", path);
    }
    t_loading = false;
  }
  pthread_mutex_unlock(&g_init_mutex);
  return g_driver_state.load(std::memory_order_acquire) == kReady;
}

bool EnsureNvml(bool init) {
  int state = g_nvml_state.load(std::memory_order_acquire);
  if (state == kUninitialized && !t_loading) {
    EnsureConfig();
    pthread_mutex_lock(&g_init_mutex);
    if (g_nvml_state.load(std::memory_order_relaxed) == kUninitialized) {
      t_loading = true;
      const char* path = g_config.real_nvml[0] != '\0' ? g_config.real_nvml : "libnvidia-ml.so.1";
      g_nvml_handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (g_nvml_handle == nullptr) {
        PRISM_VGPU_LOG(kInfo, "cannot load NVML %s: %s", path, dlerror());
        g_nvml_state.store(kUnavailable, std::memory_order_release);
      } else if (IsThisLibrary(g_nvml_handle, "nvmlDeviceGetMemoryInfo",
                               reinterpret_cast<void*>(&::nvmlDeviceGetMemoryInfo))) {
        // The same trap as the driver's: every NVML wrapper would call itself.
        PRISM_VGPU_LOG(kError,
                       "NVML %s is libprism-vgpu itself (check PRISM_VGPU_REAL_NVML); NVML is "
                       "unavailable in this process (memory limits still hold, SM limits cannot "
                       "be measured)",
                       path);
        dlclose(g_nvml_handle);
        g_nvml_handle = nullptr;
        g_nvml_state.store(kUnavailable, std::memory_order_release);
      } else {
        ResolveNvml(g_nvml_handle);
        g_nvml_state.store(kReady, std::memory_order_release);
      }
      t_loading = false;
    }
    pthread_mutex_unlock(&g_init_mutex);
    state = g_nvml_state.load(std::memory_order_acquire);
  }
  if (state != kReady) return false;
  if (!init) return true;
  // nvmlInit is reference counted: initialize once for the library, never shut down.
  static std::atomic<int> initialized{kUninitialized};
  int done = initialized.load(std::memory_order_acquire);
  if (done == kUninitialized) {
    const bool ok = g_nvml.nvmlInit_v2 != nullptr && g_nvml.nvmlInit_v2() == NVML_SUCCESS;
    int expected = kUninitialized;
    initialized.compare_exchange_strong(expected, ok ? kReady : kUnavailable);
    done = initialized.load(std::memory_order_acquire);
  }
  return done == kReady;
}

bool ControlEnabled() {
  EnsureConfig();
  return !g_config.disabled && !g_shutting_down.load(std::memory_order_relaxed);
}

Region* EnsureAccounting() {
  const int state = g_accounting_state.load(std::memory_order_acquire);
  if (state == kReady) return g_region;
  if (state == kUnavailable || !ControlEnabled()) return nullptr;
  pthread_mutex_lock(&g_init_mutex);
  if (g_accounting_state.load(std::memory_order_relaxed) == kUninitialized) {
    if (!g_atfork_registered) {
      pthread_atfork(ForkPrepare, ForkParent, ForkChild);
      g_atfork_registered = true;
    }
    if (g_table == nullptr) g_table = new (g_table_storage) AllocTable();
    if (g_region == nullptr) {
      g_region = new (g_region_storage) Region();
      int sys_errno = 0;
      const RegionError error = g_region->OpenFile(g_config.region_path, &sys_errno);
      if (error != RegionError::kNone && g_config.memory_limit_requested) {
        // The container's limit lives in that region: limiting this process alone would let
        // the container as a whole exceed it.
        PRISM_VGPU_LOG(kError, "shared region %s: %s (%s)", g_config.region_path,
                       RegionErrorName(error), strerror(sys_errno));
        FailClosed("the shared region is unusable");
      } else if (error != RegionError::kNone) {
        PRISM_VGPU_LOG(kError,
                       "shared region %s: %s (%s); usage of this process is tracked alone (no "
                       "memory limit was asked for)",
                       g_config.region_path, RegionErrorName(error), strerror(sys_errno));
        if (g_region->OpenAnonymous(&sys_errno) != RegionError::kNone) {
          PRISM_VGPU_LOG(kError, "cannot map a private region (%s)", strerror(sys_errno));
        }
      }
      if (g_region->is_open()) {
        g_region->set_stall_in_lock_ms_for_test(g_config.test_lock_stall_ms);
        g_region->set_lock_timeout_ms(g_config.lock_timeout_ms);
      }
    }
    bool retry = false;
    if (g_region->is_open()) {
      g_slot_pid = getpid();
      g_slot_start_time = ProcessStartTime(g_slot_pid);
      g_slot = g_region->AcquireSlot(g_slot_pid, g_slot_start_time);
      if (g_slot == kSlotLockTimeout) {
        retry = true;  // Try again on the next call; this one fails closed if a limit applies.
        g_slot = -1;
      } else if (g_slot < 0 && g_config.memory_limit_requested) {
        PRISM_VGPU_LOG(kError, "all %d process slots of %s belong to live processes", kMaxSlots,
                       g_config.region_path);
        FailClosed("no process slot in the shared region");
      } else if (g_slot < 0) {
        PRISM_VGPU_LOG(kError,
                       "all %d process slots of %s belong to live processes; usage of this "
                       "process is not tracked",
                       kMaxSlots, g_config.region_path);
      } else {
        const pid_t outer = OutermostPid();
        if (outer > 0) g_region->slot(g_slot).host_pid.store(outer);
      }
    }
    if (!retry) {
      g_accounting_state.store(g_slot >= 0 ? kReady : kUnavailable, std::memory_order_release);
    }
  }
  const bool ready = g_accounting_state.load(std::memory_order_acquire) == kReady;
  pthread_mutex_unlock(&g_init_mutex);
  return ready ? g_region : nullptr;
}

// Whether an allocation must be refused while accounting is not (yet) available: a limit was
// asked for and either the process fails closed or the region lock is busy.
bool RefuseWithoutAccounting() {
  return ControlEnabled() && g_config.memory_limit_requested &&
         (AccountingFailsClosed() ||
          g_accounting_state.load(std::memory_order_acquire) == kUninitialized);
}

int SelfSlot() { return g_slot; }

int DeviceEntryForOrdinal(int ordinal) {
  if (ordinal < 0 || ordinal >= kMaxOrdinals) return kNoEntry;
  const int16_t known = g_ordinal_entry[ordinal].load(std::memory_order_acquire);
  if (known == kEntryFailed) return AccountingFailsClosed() ? kRefuseEntry : kNoEntry;
  if (known != kEntryUnknown) return known - 1;
  Region* region = EnsureAccounting();
  if (region == nullptr) return RefuseWithoutAccounting() ? kRefuseEntry : kNoEntry;
  CUuuid uuid;
  CUresult rc = CUDA_ERROR_NOT_FOUND;
  if (g_cuda.cuDeviceGetUuid_v2 != nullptr) rc = g_cuda.cuDeviceGetUuid_v2(&uuid, ordinal);
  if (rc != CUDA_SUCCESS && g_cuda.cuDeviceGetUuid != nullptr) {
    rc = g_cuda.cuDeviceGetUuid(&uuid, ordinal);
  }
  if (rc != CUDA_SUCCESS) return kNoEntry;  // Not cached: the driver may not be initialized yet.
  int sm_count = 0;
  if (g_cuda.cuDeviceGetAttribute != nullptr) {
    g_cuda.cuDeviceGetAttribute(&sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ordinal);
  }
  const MemoryLimitRequest request = MemoryLimitForOrdinal(ordinal);
  const uint64_t memory_limit = request.source == LimitSource::kValue ? request.bytes : 0;
  const uint32_t sm_limit = SmLimitForOrdinal(ordinal);
  const uint32_t policy = static_cast<uint32_t>(g_config.policy);
  bool mismatch = false;  // Each limit is compared with the entry's below.
  const int entry =
      region->ClaimDevice(reinterpret_cast<const uint8_t*>(uuid.bytes), memory_limit, sm_limit,
                          policy, static_cast<uint32_t>(sm_count), &mismatch);
  const bool limited = request.source != LimitSource::kUnset || g_config.memory_limit_requested;
  if (entry == kClaimLockTimeout) {
    // Not cached: the next call tries again.
    return limited ? kRefuseEntry : kNoEntry;
  }
  if (entry < 0) {
    const char* why = entry == kClaimDamaged ? "the region's device table is damaged"
                                             : "the region's device table is full";
    if (limited) {
      FailClosed(why);
    } else {
      PRISM_VGPU_LOG(kError, "%s; device %d is not tracked (no memory limit was asked for)", why,
                     ordinal);
    }
    g_ordinal_entry[ordinal].store(kEntryFailed, std::memory_order_release);
    return limited ? kRefuseEntry : kNoEntry;
  }
  const RegionDevice& device = region->device(entry);
  if (request.source == LimitSource::kInvalid) {
    region->SetFailClosed(entry);  // MemoryLimitForOrdinal logged why.
  } else if (request.source == LimitSource::kValue) {
    // The environment is the authority for this process: a region whose stored limit differs
    // (another creator's environment, or a write to the shared file) is never obeyed.
    region->SetLocalLimit(entry, request.bytes);
    if (device.memory_limit != request.bytes) {
      PRISM_VGPU_LOG(kError,
                     "device %d: the shared region stores memory limit %llu but this process's "
                     "environment asks for %llu; the region is not trusted for this limit and the "
                     "environment's applies",
                     ordinal, static_cast<unsigned long long>(device.memory_limit),
                     static_cast<unsigned long long>(request.bytes));
    }
  }
  // The SM limit and policy follow the same rule as the memory limit: this process's
  // environment decides, and a region that stores others (another creator's environment, or a
  // write to the shared file) is reported, never obeyed.
  const uint32_t stored_sm = device.sm_limit_percent >= 100 ? 0 : device.sm_limit_percent;
  if (stored_sm != sm_limit || (sm_limit != 0 && device.policy != policy)) {
    PRISM_VGPU_LOG(kError,
                   "device %d: the shared region stores SM limit %u%%, policy %u but this "
                   "process's environment asks for %u%%, policy %u; the region is not trusted for "
                   "them and the environment's apply",
                   ordinal, device.sm_limit_percent, device.policy, sm_limit, policy);
  }
  // Before the entry is published: a launch that finds the entry finds its SM limit too.
  SmLimiterDeviceMapped(entry, sm_limit, policy);
  g_ordinal_entry[ordinal].store(static_cast<int16_t>(entry + 1), std::memory_order_release);
  PRISM_VGPU_LOG(kInfo, "device %d -> region entry %d (memory limit %llu%s, SM limit %u%%)",
                 ordinal, entry, static_cast<unsigned long long>(region->EffectiveLimit(entry)),
                 region->FailsClosed(entry) ? ", fail closed" : "", sm_limit);
  return entry;
}

int CurrentDeviceEntry() {
  if (g_cuda.cuCtxGetDevice == nullptr) return kNoEntry;
  CUdevice device = -1;
  if (g_cuda.cuCtxGetDevice(&device) != CUDA_SUCCESS) return kNoEntry;
  return DeviceEntryForOrdinal(device);
}

int OrdinalForEntry(int entry) {
  for (int i = 0; i < kMaxOrdinals; ++i) {
    if (g_ordinal_entry[i].load(std::memory_order_relaxed) == entry + 1) return i;
  }
  return -1;
}

AllocTable& Allocations() { return *g_table; }
void LockTables() { pthread_mutex_lock(&g_tables_mutex); }
void UnlockTables() { pthread_mutex_unlock(&g_tables_mutex); }

}  // namespace prism::vgpu
