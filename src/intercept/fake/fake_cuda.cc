// src/intercept/fake/fake_cuda.cc: a fake CUDA driver (libcuda.so.1) for GPU-free tests of
// libprism-vgpu: host memory stands in for device memory, kernels occupy a simulated per-device
// timeline (fake_state.h) from which the fake NVML derives utilization, and failures can be
// injected. Built twice: as a CUDA 13 driver, and with PRISM_FAKE_CUDA_LEGACY as a CUDA 11.4 driver
// that lacks cuGetProcAddress_v2, cuLaunchKernelEx and cuArrayGetMemoryRequirements.
//
// Environment (read once per process):
//   PRISM_FAKE_CUDA_FAIL="sym:N:code[,sym:*:code]"  the Nth call (1-based, per process) or every
//                                                   call of `sym` returns CUresult `code`
//   PRISM_FAKE_CUDA_ALLOC_DELAY_US   sleep inside every allocation (widens races)
//   PRISM_FAKE_CUDA_CONTEXT_BYTES    device memory a context takes (default 0)
//   PRISM_FAKE_CUDA_PROCADDR_ALIASES=1  cuGetProcAddress hands out internal aliases instead of the
//                                   exported addresses (as some real drivers do)
// Kernels: cuModuleGetFunction accepts any name. "prism_empty" takes no GPU time; "prism_spin"
// takes its first parameter (unsigned long long) nanoseconds per wave; "fake_kernel_<ns>" takes
// <ns> per wave; anything else 1000 ns per wave. A wave is SMs * 64 warps.
// Test control: prismFakeCallCount("cuMemAlloc_v2") returns how often this process called it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/quota/sm_share.h"
#include "intercept/clock.h"
#include "intercept/cuda_abi.h"
#include "intercept/fake/fake_state.h"

namespace prism::vgpu::fake {
namespace {

#ifdef PRISM_FAKE_CUDA_LEGACY
constexpr int kDriverVersion = 11040;
#else
constexpr int kDriverVersion = 13000;
#endif
constexpr int64_t kQueueAheadNs = 50'000'000;  // Launches block beyond this much queued work.
constexpr uint64_t kPage = 2 << 20;

uint64_t RoundPage(uint64_t bytes) { return (bytes + kPage - 1) & ~(kPage - 1); }

// ---- Call counting and fault injection ------------------------------------------------------

struct Counter {
  char name[64];
  std::atomic<uint64_t> calls{0};
  uint64_t fail_at = 0;  // 0: never; UINT64_MAX: always.
  CUresult fail_code = CUDA_SUCCESS;
};

constexpr int kMaxCounters = 160;
Counter g_counters[kMaxCounters];
std::atomic<int> g_counter_count{0};
std::mutex g_counter_mutex;

Counter* CounterFor(const char* name) {
  std::lock_guard<std::mutex> lock(g_counter_mutex);
  const int n = g_counter_count.load();
  for (int i = 0; i < n; ++i) {
    if (strcmp(g_counters[i].name, name) == 0) return &g_counters[i];
  }
  if (n == kMaxCounters) abort();
  Counter* c = &g_counters[n];
  snprintf(c->name, sizeof(c->name), "%s", name);
  // Injected failures for this symbol.
  if (const char* spec = getenv("PRISM_FAKE_CUDA_FAIL")) {
    std::string all(spec);
    size_t pos = 0;
    while (pos <= all.size()) {
      const size_t end = all.find(',', pos);
      const std::string rule =
          all.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
      const size_t c1 = rule.find(':');
      const size_t c2 = c1 == std::string::npos ? c1 : rule.find(':', c1 + 1);
      if (c2 != std::string::npos && rule.substr(0, c1) == name) {
        const std::string nth = rule.substr(c1 + 1, c2 - c1 - 1);
        c->fail_at = nth == "*" ? UINT64_MAX : strtoull(nth.c_str(), nullptr, 10);
        c->fail_code = atoi(rule.c_str() + c2 + 1);
      }
      if (end == std::string::npos) break;
      pos = end + 1;
    }
  }
  g_counter_count.store(n + 1);
  return c;
}

// Counts the call; returns the injected error, if any.
inline CUresult Enter(Counter* c) {
  const uint64_t n = c->calls.fetch_add(1, std::memory_order_relaxed) + 1;
  if (c->fail_at != 0 && (c->fail_at == UINT64_MAX || c->fail_at == n)) return c->fail_code;
  return CUDA_SUCCESS;
}

#define FAKE_ENTER(name)                                    \
  static ::prism::vgpu::fake::Counter* const fake_counter = \
      ::prism::vgpu::fake::CounterFor(#name);               \
  if (CUresult injected = ::prism::vgpu::fake::Enter(fake_counter)) return injected

// ---- Process state ---------------------------------------------------------------------------

struct Context {
  int device = 0;
  bool primary = false;
};

struct Pool {
  int device = 0;
  uint64_t reserved = 0;
  uint64_t used = 0;
  uint64_t release_threshold = 0;
};

enum class Kind { kLinear, kPool };

struct Allocation {
  uint64_t physical = 0;  // Bytes taken from the device (0 for pool allocations).
  uint64_t map_size = 0;
  uint64_t pool_bytes = 0;
  int device = 0;
  Kind kind = Kind::kLinear;
  Pool* pool = nullptr;
};

struct Vmm {
  uint64_t size = 0;
  int device = 0;
};

struct Array {
  uint64_t bytes = 0;
  int device = 0;
};

struct Function {
  std::string name;
  int64_t ns_per_wave = 1000;
  bool from_param = false;
};

struct Stream {
  int device = 0;
};

std::atomic<bool> g_initialized{false};
Context g_primary[kMaxDevices];
std::atomic<int> g_primary_refs[kMaxDevices];
thread_local Context* t_current = nullptr;
std::mutex g_mutex;
std::unordered_map<uint64_t, Allocation>* g_allocs = new std::unordered_map<uint64_t, Allocation>;
std::unordered_map<uint64_t, Vmm>* g_vmm = new std::unordered_map<uint64_t, Vmm>;
std::vector<Pool*>* g_pools = new std::vector<Pool*>;
Pool g_default_pools[kMaxDevices];
Pool* g_current_pool[kMaxDevices] = {&g_default_pools[0], &g_default_pools[1], &g_default_pools[2],
                                     &g_default_pools[3]};
std::atomic<uint64_t> g_next_vmm{1};
std::atomic<int64_t> g_last_end_ns{0};

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* value = getenv(name);
  return value == nullptr ? fallback : strtoll(value, nullptr, 10);
}

int64_t AllocDelayUs() {
  static const int64_t delay = EnvInt("PRISM_FAKE_CUDA_ALLOC_DELAY_US", 0);
  return delay;
}

void MaybeDelay() {
  if (AllocDelayUs() > 0) SleepForNs(AllocDelayUs() * 1000);
}

bool ValidDevice(CUdevice dev) { return dev >= 0 && dev < static_cast<int>(State()->device_count); }

CUresult CurrentDevice(int* device) {
  if (!g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *device = t_current->device;
  return CUDA_SUCCESS;
}

void* MapHost(uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

CUresult AllocateLinear(CUdeviceptr* dptr, uint64_t bytes, int device) {
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t physical = RoundPage(bytes);
  if (!TakeMemory(device, physical)) return CUDA_ERROR_OUT_OF_MEMORY;
  MaybeDelay();
  void* p = MapHost(physical);
  if (p == nullptr) {
    GiveMemory(device, physical);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  Allocation a;
  a.physical = physical;
  a.map_size = physical;
  a.device = device;
  (*g_allocs)[reinterpret_cast<uint64_t>(p)] = a;
  *dptr = reinterpret_cast<uint64_t>(p);
  return CUDA_SUCCESS;
}

CUresult FreePointer(CUdeviceptr dptr) {
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_allocs->find(dptr);
    if (it == g_allocs->end()) return CUDA_ERROR_INVALID_VALUE;
    a = it->second;
    g_allocs->erase(it);
    if (a.kind == Kind::kPool) a.pool->used -= a.pool_bytes;
  }
  munmap(reinterpret_cast<void*>(dptr), a.map_size);
  if (a.physical != 0) GiveMemory(a.device, a.physical);
  return CUDA_SUCCESS;
}

// Gives a pool's unused reservation above `keep` back to the device (g_mutex held).
void TrimPoolLocked(Pool* pool, uint64_t keep) {
  const uint64_t floor = pool->used > keep ? pool->used : keep;
  if (pool->reserved <= floor) return;
  const uint64_t release = pool->reserved - floor;
  pool->reserved -= release;
  GiveMemory(pool->device, release);
}

int StreamDevice(CUstream stream, int current) {
  if (stream == nullptr || stream == PRISM_CU_STREAM_LEGACY ||
      stream == PRISM_CU_STREAM_PER_THREAD) {
    return current;
  }
  return reinterpret_cast<Stream*>(stream)->device;
}

CUresult AllocateFromPool(CUdeviceptr* dptr, uint64_t bytes, Pool* pool) {
  if (dptr == nullptr || bytes == 0 || pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t need = RoundPage(bytes);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (pool->reserved - pool->used < need) {
    const uint64_t grow = need - (pool->reserved - pool->used);
    if (!TakeMemory(pool->device, grow)) return CUDA_ERROR_OUT_OF_MEMORY;
    pool->reserved += grow;
  }
  MaybeDelay();
  void* p = MapHost(need);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  pool->used += need;
  Allocation a;
  a.map_size = need;
  a.pool_bytes = need;
  a.device = pool->device;
  a.kind = Kind::kPool;
  a.pool = pool;
  (*g_allocs)[reinterpret_cast<uint64_t>(p)] = a;
  *dptr = reinterpret_cast<uint64_t>(p);
  return CUDA_SUCCESS;
}

void SynchronizeProcess() {
  const int64_t end = g_last_end_ns.load();
  if (end > MonotonicNs()) SleepUntilNs(end);
  // Pools give their unused reservation back at synchronization (release threshold).
  std::lock_guard<std::mutex> lock(g_mutex);
  for (Pool& pool : g_default_pools) TrimPoolLocked(&pool, pool.release_threshold);
  for (Pool* pool : *g_pools) TrimPoolLocked(pool, pool->release_threshold);
}

CUresult Launch(CUfunction f, uint64_t warps, void** params) {
  int device = 0;
  if (CUresult rc = CurrentDevice(&device)) return rc;
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const Function* fn = reinterpret_cast<const Function*>(f);
  int64_t per_wave = fn->ns_per_wave;
  if (fn->from_param) {
    per_wave = (params != nullptr && params[0] != nullptr)
                   ? static_cast<int64_t>(*static_cast<unsigned long long*>(params[0]))
                   : 0;
  }
  if (per_wave <= 0 || warps == 0) return CUDA_SUCCESS;
  Device& d = State()->devices[device];
  const uint64_t wave_warps = static_cast<uint64_t>(d.sm_count) * (d.threads_per_sm / 32);
  const int64_t waves = static_cast<int64_t>((warps + wave_warps - 1) / wave_warps);
  const int64_t duration = waves * per_wave;
  const int64_t now = MonotonicNs();
  int64_t busy = d.busy_until_ns.load();
  int64_t start;
  do {
    start = busy > now ? busy : now;
  } while (!d.busy_until_ns.compare_exchange_weak(busy, start + duration));
  RecordBusy(Self(), device, start, start + duration);
  int64_t last = g_last_end_ns.load();
  while (last < start + duration && !g_last_end_ns.compare_exchange_weak(last, start + duration)) {
  }
  if (start - now > kQueueAheadNs) SleepUntilNs(start - kQueueAheadNs);
  return CUDA_SUCCESS;
}

CUresult RetainContextMemory(int device) {
  const int64_t bytes = EnvInt("PRISM_FAKE_CUDA_CONTEXT_BYTES", 0);
  if (bytes > 0 && !TakeMemory(device, static_cast<uint64_t>(bytes))) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Self()->has_context[device].store(1);
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace prism::vgpu::fake

using prism::vgpu::fake::AllocateFromPool;
using prism::vgpu::fake::AllocateLinear;
using prism::vgpu::fake::Array;
using prism::vgpu::fake::Context;
using prism::vgpu::fake::CurrentDevice;
using prism::vgpu::fake::FreePointer;
using prism::vgpu::fake::Function;
using prism::vgpu::fake::Pool;
using prism::vgpu::fake::State;
using prism::vgpu::fake::Stream;
using prism::vgpu::fake::ValidDevice;
using prism::vgpu::fake::Vmm;
namespace fake = prism::vgpu::fake;

extern "C" {

// ---- Test control --------------------------------------------------------------------------

unsigned long long prismFakeCallCount(const char* name) {
  std::lock_guard<std::mutex> lock(fake::g_counter_mutex);
  for (int i = 0; i < fake::g_counter_count.load(); ++i) {
    if (strcmp(fake::g_counters[i].name, name) == 0) return fake::g_counters[i].calls.load();
  }
  return 0;
}

// ---- Initialization and devices --------------------------------------------------------------

CUresult cuInit(unsigned int flags) {
  FAKE_ENTER(cuInit);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State();
  for (int d = 0; d < fake::kMaxDevices; ++d) fake::g_default_pools[d].device = d;
  fake::g_initialized.store(true);
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* version) {
  FAKE_ENTER(cuDriverGetVersion);
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = fake::kDriverVersion;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char** text) {
  FAKE_ENTER(cuGetErrorString);
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS:
      *text = "no error";
      break;
    case CUDA_ERROR_OUT_OF_MEMORY:
      *text = "out of memory";
      break;
    case CUDA_ERROR_NOT_FOUND:
      *text = "named symbol not found";
      break;
    default:
      *text = "fake error";
  }
  return CUDA_SUCCESS;
}

CUresult cuGetExportTable(const void** table, const void* id) {
  FAKE_ENTER(cuGetExportTable);
  (void)table;
  (void)id;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuDeviceGetCount(int* count) {
  FAKE_ENTER(cuDeviceGetCount);
  if (!fake::g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(State()->device_count);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  FAKE_ENTER(cuDeviceGet);
  if (!fake::g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int length, CUdevice dev) {
  FAKE_ENTER(cuDeviceGetName);
  if (!fake::g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (name == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, static_cast<size_t>(length), "%s", State()->devices[dev].name);
  return CUDA_SUCCESS;
}

static CUresult FakeDeviceUuid(CUuuid* uuid, CUdevice dev) {
  if (!fake::g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  memcpy(uuid->bytes, State()->devices[dev].uuid, 16);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  FAKE_ENTER(cuDeviceGetUuid);
  return FakeDeviceUuid(uuid, dev);
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  FAKE_ENTER(cuDeviceGetUuid_v2);
  return FakeDeviceUuid(uuid, dev);
}

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice dev) {
  FAKE_ENTER(cuDeviceGetAttribute);
  if (!fake::g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const fake::Device& d = State()->devices[dev];
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = 1024;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *value = 32;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = d.sm_count;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      *value = d.threads_per_sm;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *value = d.cc_major;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *value = d.cc_minor;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      *value = 1;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  FAKE_ENTER(cuDeviceTotalMem_v2);
  if (!fake::g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *bytes = State()->devices[dev].total_memory;
  return CUDA_SUCCESS;
}

// ---- Contexts --------------------------------------------------------------------------------

CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  FAKE_ENTER(cuDevicePrimaryCtxRetain);
  if (!fake::g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (fake::g_primary_refs[dev].fetch_add(1) == 0) {
    if (CUresult rc = fake::RetainContextMemory(dev)) {
      fake::g_primary_refs[dev].fetch_sub(1);
      return rc;
    }
  }
  fake::g_primary[dev].device = dev;
  fake::g_primary[dev].primary = true;
  *ctx = reinterpret_cast<CUcontext>(&fake::g_primary[dev]);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  FAKE_ENTER(cuDevicePrimaryCtxRelease_v2);
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  fake::g_primary_refs[dev].fetch_sub(1);
  return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned int flags, CUdevice dev) {
  FAKE_ENTER(cuCtxCreate_v2);
  (void)flags;
  if (!fake::g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = fake::RetainContextMemory(dev)) return rc;
  Context* c = new Context;
  c->device = dev;
  fake::t_current = c;
  *ctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
  FAKE_ENTER(cuCtxDestroy_v2);
  Context* c = reinterpret_cast<Context*>(ctx);
  if (c == nullptr || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
  if (fake::t_current == c) fake::t_current = nullptr;
  delete c;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  FAKE_ENTER(cuCtxSetCurrent);
  if (!fake::g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  fake::t_current = reinterpret_cast<Context*>(ctx);
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* ctx) {
  FAKE_ENTER(cuCtxGetCurrent);
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = reinterpret_cast<CUcontext>(fake::t_current);
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* device) {
  FAKE_ENTER(cuCtxGetDevice);
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CurrentDevice(device);
}

CUresult cuCtxSynchronize(void) {
  FAKE_ENTER(cuCtxSynchronize);
  int device = 0;
  if (CUresult rc = CurrentDevice(&device)) return rc;
  fake::SynchronizeProcess();
  return CUDA_SUCCESS;
}

#ifndef PRISM_FAKE_CUDA_LEGACY
// CUDA 13's form, taking the context: a newer ABI of cuCtxSynchronize that libprism-vgpu does not
// wrap and must pass through.
CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  FAKE_ENTER(cuCtxSynchronize_v2);
  if (ctx == nullptr && fake::t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  fake::SynchronizeProcess();
  return CUDA_SUCCESS;
}
#endif

// ---- Memory ----------------------------------------------------------------------------------

CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  FAKE_ENTER(cuMemGetInfo_v2);
  int device = 0;
  if (CUresult rc = CurrentDevice(&device)) return rc;
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  fake::ReclaimDeadProcesses();
  const fake::Device& d = State()->devices[device];
  const uint64_t used = d.used_memory.load();
  *total = d.total_memory;
  *free = used < d.total_memory ? d.total_memory - used : 0;
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  FAKE_ENTER(cuMemAlloc_v2);
  int device = 0;
  if (CUresult rc = CurrentDevice(&device)) return rc;
  return AllocateLinear(dptr, bytesize, device);
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  FAKE_ENTER(cuMemAllocManaged);
  (void)flags;
  int device = 0;
  if (CUresult rc = CurrentDevice(&device)) return rc;
  return AllocateLinear(dptr, bytesize, device);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                            unsigned int element_size) {
  FAKE_ENTER(cuMemAllocPitch_v2);
  int device = 0;
  if (CUresult rc = CurrentDevice(&device)) return rc;
  if (pitch == nullptr || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_size != 4 && element_size != 8 && element_size != 16) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const size_t row = (width + 511) & ~size_t{511};
  const CUresult rc = AllocateLinear(dptr, row * height, device);
  if (rc == CUDA_SUCCESS) *pitch = row;
  return rc;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  FAKE_ENTER(cuMemFree_v2);
  if (!fake::g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (dptr == 0) return CUDA_SUCCESS;
  return FreePointer(dptr);
}

static Pool* DefaultPoolOf(int device) { return fake::g_current_pool[device]; }

static CUresult MemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {
  int device = 0;
  if (CUresult rc = CurrentDevice(&device)) return rc;
  device = fake::StreamDevice(stream, device);
  return AllocateFromPool(dptr, bytesize, DefaultPoolOf(device));
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {
  FAKE_ENTER(cuMemAllocAsync);
  return MemAllocAsync(dptr, bytesize, stream);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {
  FAKE_ENTER(cuMemAllocAsync_ptsz);
  return MemAllocAsync(dptr, bytesize, stream);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                 CUstream stream) {
  FAKE_ENTER(cuMemAllocFromPoolAsync);
  (void)stream;
  if (!fake::g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  return AllocateFromPool(dptr, bytesize, reinterpret_cast<Pool*>(pool));
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream stream) {
  FAKE_ENTER(cuMemAllocFromPoolAsync_ptsz);
  (void)stream;
  if (!fake::g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  return AllocateFromPool(dptr, bytesize, reinterpret_cast<Pool*>(pool));
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  FAKE_ENTER(cuMemFreeAsync);
  (void)stream;
  if (!fake::g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  return FreePointer(dptr);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  FAKE_ENTER(cuMemFreeAsync_ptsz);
  (void)stream;
  if (!fake::g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  return FreePointer(dptr);
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  FAKE_ENTER(cuDeviceGetDefaultMemPool);
  if (!ValidDevice(dev) || pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  fake::g_default_pools[dev].device = dev;
  *pool = reinterpret_cast<CUmemoryPool>(&fake::g_default_pools[dev]);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  FAKE_ENTER(cuDeviceGetMemPool);
  if (!ValidDevice(dev) || pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  fake::g_default_pools[dev].device = dev;
  *pool = reinterpret_cast<CUmemoryPool>(fake::g_current_pool[dev]);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  FAKE_ENTER(cuMemPoolCreate);
  if (pool == nullptr || props == nullptr || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      !ValidDevice(props->location.id)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Pool* p = new Pool;
  p->device = props->location.id;
  std::lock_guard<std::mutex> lock(fake::g_mutex);
  fake::g_pools->push_back(p);
  *pool = reinterpret_cast<CUmemoryPool>(p);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  FAKE_ENTER(cuMemPoolDestroy);
  Pool* p = reinterpret_cast<Pool*>(pool);
  std::lock_guard<std::mutex> lock(fake::g_mutex);
  for (size_t i = 0; i < fake::g_pools->size(); ++i) {
    if ((*fake::g_pools)[i] != p) continue;
    fake::g_pools->erase(fake::g_pools->begin() + static_cast<long>(i));
    fake::TrimPoolLocked(p, 0);
    // Memory still allocated from a destroyed pool is freed with it.
    for (auto it = fake::g_allocs->begin(); it != fake::g_allocs->end();) {
      if (it->second.pool == p) {
        munmap(reinterpret_cast<void*>(it->first), it->second.map_size);
        it = fake::g_allocs->erase(it);
      } else {
        ++it;
      }
    }
    if (p->reserved != 0) fake::GiveMemory(p->device, p->reserved);
    delete p;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  FAKE_ENTER(cuMemPoolGetAttribute);
  Pool* p = reinterpret_cast<Pool*>(pool);
  if (p == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(fake::g_mutex);
  cuuint64_t* out = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      *out = p->reserved;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *out = p->used;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *out = p->release_threshold;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  FAKE_ENTER(cuMemPoolSetAttribute);
  Pool* p = reinterpret_cast<Pool*>(pool);
  if (p == nullptr || value == nullptr || attr != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lock(fake::g_mutex);
  p->release_threshold = *static_cast<cuuint64_t*>(value);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  FAKE_ENTER(cuMemPoolTrimTo);
  Pool* p = reinterpret_cast<Pool*>(pool);
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(fake::g_mutex);
  fake::TrimPoolLocked(p, keep);
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  FAKE_ENTER(cuMemCreate);
  (void)flags;
  if (!fake::g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (handle == nullptr || prop == nullptr || size == 0 || size % fake::kPage != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int device = 0;
  if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    if (!ValidDevice(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
    device = prop->location.id;
    if (!fake::TakeMemory(device, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  } else {
    device = -1;  // Host memory.
  }
  fake::MaybeDelay();
  const uint64_t id = fake::g_next_vmm.fetch_add(1);
  std::lock_guard<std::mutex> lock(fake::g_mutex);
  (*fake::g_vmm)[id] = Vmm{size, device};
  *handle = id;
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  FAKE_ENTER(cuMemRelease);
  Vmm v;
  {
    std::lock_guard<std::mutex> lock(fake::g_mutex);
    auto it = fake::g_vmm->find(handle);
    if (it == fake::g_vmm->end()) return CUDA_ERROR_INVALID_VALUE;
    v = it->second;
    fake::g_vmm->erase(it);
  }
  if (v.device >= 0) fake::GiveMemory(v.device, v.size);
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       int option) {
  FAKE_ENTER(cuMemGetAllocationGranularity);
  (void)option;
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *granularity = fake::kPage;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  FAKE_ENTER(cuMemAddressReserve);
  (void)alignment;
  (void)addr;
  (void)flags;
  if (ptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  *ptr = reinterpret_cast<uint64_t>(p);
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  FAKE_ENTER(cuMemAddressFree);
  munmap(reinterpret_cast<void*>(ptr), size);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  FAKE_ENTER(cuMemMap);
  (void)ptr;
  (void)size;
  (void)offset;
  (void)flags;
  std::lock_guard<std::mutex> lock(fake::g_mutex);
  return fake::g_vmm->count(handle) != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  FAKE_ENTER(cuMemUnmap);
  (void)ptr;
  (void)size;
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const void* desc, size_t count) {
  FAKE_ENTER(cuMemSetAccess);
  (void)desc;
  (void)count;
  if (ptr == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  return mprotect(reinterpret_cast<void*>(ptr), size, PROT_READ | PROT_WRITE) == 0
             ? CUDA_SUCCESS
             : CUDA_ERROR_INVALID_VALUE;
}

static uint64_t ArrayBytes(uint64_t w, uint64_t h, uint64_t d, int format, unsigned channels) {
  const uint64_t element =
      (format == CU_AD_FORMAT_UNSIGNED_INT8 || format == CU_AD_FORMAT_SIGNED_INT8) ? 1
      : (format == CU_AD_FORMAT_UNSIGNED_INT16 || format == CU_AD_FORMAT_SIGNED_INT16 ||
         format == CU_AD_FORMAT_HALF)
          ? 2
          : 4;
  // Rows padded to 512 bytes, like texture memory layouts.
  const uint64_t row = ((w * element * channels) + 511) & ~uint64_t{511};
  return fake::RoundPage(row * (h == 0 ? 1 : h) * (d == 0 ? 1 : d));
}

static CUresult CreateArray(CUarray* handle, uint64_t bytes) {
  int device = 0;
  if (CUresult rc = CurrentDevice(&device)) return rc;
  if (handle == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!fake::TakeMemory(device, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  Array* a = new Array{bytes, device};
  *handle = reinterpret_cast<CUarray>(a);
  return CUDA_SUCCESS;
}

CUresult cuArrayCreate_v2(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  FAKE_ENTER(cuArrayCreate_v2);
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CreateArray(handle,
                     ArrayBytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels));
}

CUresult cuArray3DCreate_v2(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  FAKE_ENTER(cuArray3DCreate_v2);
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CreateArray(
      handle, ArrayBytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels));
}

CUresult cuArrayDestroy(CUarray handle) {
  FAKE_ENTER(cuArrayDestroy);
  Array* a = reinterpret_cast<Array*>(handle);
  if (a == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  fake::GiveMemory(a->device, a->bytes);
  delete a;
  return CUDA_SUCCESS;
}

#ifndef PRISM_FAKE_CUDA_LEGACY
CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* requirements, CUarray array,
                                      CUdevice device) {
  FAKE_ENTER(cuArrayGetMemoryRequirements);
  (void)device;
  const Array* a = reinterpret_cast<const Array*>(array);
  if (requirements == nullptr || a == nullptr) return CUDA_ERROR_INVALID_VALUE;
  memset(requirements, 0, sizeof(*requirements));
  requirements->size = a->bytes;
  requirements->alignment = fake::kPage;
  return CUDA_SUCCESS;
}
#endif

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  FAKE_ENTER(cuPointerGetAttribute);
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(fake::g_mutex);
  auto it = fake::g_allocs->find(ptr);
  if (it == fake::g_allocs->end()) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = it->second.device;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      *static_cast<CUmemoryPool*>(data) = reinterpret_cast<CUmemoryPool>(it->second.pool);
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

static CUresult Copy(void* dst, const void* src, size_t bytes) {
  if (!fake::g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (bytes != 0) memcpy(dst, src, bytes);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  FAKE_ENTER(cuMemcpyHtoD_v2);
  return Copy(reinterpret_cast<void*>(dst), src, bytes);
}

CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t bytes) {
  FAKE_ENTER(cuMemcpyHtoD_v2_ptds);
  return Copy(reinterpret_cast<void*>(dst), src, bytes);
}

CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  FAKE_ENTER(cuMemcpyDtoH_v2);
  return Copy(dst, reinterpret_cast<const void*>(src), bytes);
}

CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t bytes) {
  FAKE_ENTER(cuMemcpyDtoH_v2_ptds);
  return Copy(dst, reinterpret_cast<const void*>(src), bytes);
}

// ---- Streams, modules, launches -----------------------------------------------------------------

CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  FAKE_ENTER(cuStreamCreate);
  (void)flags;
  int device = 0;
  if (CUresult rc = CurrentDevice(&device)) return rc;
  if (stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *stream = reinterpret_cast<CUstream>(new Stream{device});
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream stream) {
  FAKE_ENTER(cuStreamDestroy_v2);
  delete reinterpret_cast<Stream*>(stream);
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream stream) {
  FAKE_ENTER(cuStreamSynchronize);
  (void)stream;
  if (!fake::g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  fake::SynchronizeProcess();
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize_ptsz(CUstream stream) {
  FAKE_ENTER(cuStreamSynchronize_ptsz);
  (void)stream;
  if (!fake::g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  fake::SynchronizeProcess();
  return CUDA_SUCCESS;
}

CUresult cuModuleLoad(CUmodule* module, const char* path) {
  FAKE_ENTER(cuModuleLoad);
  if (module == nullptr || path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (access(path, R_OK) != 0) return CUDA_ERROR_FILE_NOT_FOUND;
  *module = reinterpret_cast<CUmodule>(new int(0));
  return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  FAKE_ENTER(cuModuleLoadData);
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *module = reinterpret_cast<CUmodule>(new int(0));
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule module) {
  FAKE_ENTER(cuModuleUnload);
  delete reinterpret_cast<int*>(module);
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  FAKE_ENTER(cuModuleGetFunction);
  if (function == nullptr || module == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Function* f = new Function;
  f->name = name;
  if (f->name == "prism_empty") {
    f->ns_per_wave = 0;
  } else if (f->name == "prism_spin") {
    f->from_param = true;
  } else if (f->name.rfind("fake_kernel_", 0) == 0) {
    f->ns_per_wave = strtoll(name + 12, nullptr, 10);
  }
  *function = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                        CUstream stream, void** params, void** extra) {
  FAKE_ENTER(cuLaunchKernel);
  (void)shared;
  (void)stream;
  (void)extra;
  return fake::Launch(f, prism::quota::WarpsForLaunch(gx, gy, gz, bx, by, bz), params);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                             CUstream stream, void** params, void** extra) {
  FAKE_ENTER(cuLaunchKernel_ptsz);
  (void)shared;
  (void)stream;
  (void)extra;
  return fake::Launch(f, prism::quota::WarpsForLaunch(gx, gy, gz, bx, by, bz), params);
}

#ifndef PRISM_FAKE_CUDA_LEGACY
CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  FAKE_ENTER(cuLaunchKernelEx);
  (void)extra;
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return fake::Launch(
      f,
      prism::quota::WarpsForLaunch(config->gridDimX, config->gridDimY, config->gridDimZ,
                                   config->blockDimX, config->blockDimY, config->blockDimZ),
      params);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                               void** extra) {
  FAKE_ENTER(cuLaunchKernelEx_ptsz);
  (void)extra;
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return fake::Launch(
      f,
      prism::quota::WarpsForLaunch(config->gridDimX, config->gridDimY, config->gridDimZ,
                                   config->blockDimX, config->blockDimY, config->blockDimZ),
      params);
}
#endif

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz,
                                   unsigned int shared, CUstream stream, void** params) {
  FAKE_ENTER(cuLaunchCooperativeKernel);
  (void)shared;
  (void)stream;
  return fake::Launch(f, prism::quota::WarpsForLaunch(gx, gy, gz, bx, by, bz), params);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                        unsigned int gz, unsigned int bx, unsigned int by,
                                        unsigned int bz, unsigned int shared, CUstream stream,
                                        void** params) {
  FAKE_ENTER(cuLaunchCooperativeKernel_ptsz);
  (void)shared;
  (void)stream;
  return fake::Launch(f, prism::quota::WarpsForLaunch(gx, gy, gz, bx, by, bz), params);
}

// ---- Entry points ------------------------------------------------------------------------------

CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags);
#ifndef PRISM_FAKE_CUDA_LEGACY
CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status);
#endif

}  // extern "C"

// The table cuGetProcAddress answers from: (base name, version that introduced the ABI,
// per-thread flavour, concrete function).
#define FAKE_PROC_TABLE(X)                                                  \
  X(cuInit, 2000, 0, cuInit)                                                \
  X(cuDriverGetVersion, 2020, 0, cuDriverGetVersion)                        \
  X(cuGetErrorString, 6000, 0, cuGetErrorString)                            \
  X(cuGetExportTable, 3000, 0, cuGetExportTable)                            \
  X(cuDeviceGet, 2000, 0, cuDeviceGet)                                      \
  X(cuDeviceGetCount, 2000, 0, cuDeviceGetCount)                            \
  X(cuDeviceGetName, 2000, 0, cuDeviceGetName)                              \
  X(cuDeviceGetUuid, 9020, 0, cuDeviceGetUuid)                              \
  X(cuDeviceGetUuid, 11040, 0, cuDeviceGetUuid_v2)                          \
  X(cuDeviceGetAttribute, 2000, 0, cuDeviceGetAttribute)                    \
  X(cuDeviceTotalMem, 3020, 0, cuDeviceTotalMem_v2)                         \
  X(cuDevicePrimaryCtxRetain, 7000, 0, cuDevicePrimaryCtxRetain)            \
  X(cuDevicePrimaryCtxRelease, 11000, 0, cuDevicePrimaryCtxRelease_v2)      \
  X(cuCtxCreate, 3020, 0, cuCtxCreate_v2)                                   \
  X(cuCtxDestroy, 4000, 0, cuCtxDestroy_v2)                                 \
  X(cuCtxSetCurrent, 4000, 0, cuCtxSetCurrent)                              \
  X(cuCtxGetCurrent, 4000, 0, cuCtxGetCurrent)                              \
  X(cuCtxGetDevice, 2000, 0, cuCtxGetDevice)                                \
  X(cuCtxSynchronize, 2000, 0, cuCtxSynchronize)                            \
  X(cuMemGetInfo, 3020, 0, cuMemGetInfo_v2)                                 \
  X(cuMemAlloc, 3020, 0, cuMemAlloc_v2)                                     \
  X(cuMemAllocManaged, 6000, 0, cuMemAllocManaged)                          \
  X(cuMemAllocPitch, 3020, 0, cuMemAllocPitch_v2)                           \
  X(cuMemFree, 3020, 0, cuMemFree_v2)                                       \
  X(cuMemAllocAsync, 11020, 0, cuMemAllocAsync)                             \
  X(cuMemAllocAsync, 11020, 1, cuMemAllocAsync_ptsz)                        \
  X(cuMemAllocFromPoolAsync, 11020, 0, cuMemAllocFromPoolAsync)             \
  X(cuMemAllocFromPoolAsync, 11020, 1, cuMemAllocFromPoolAsync_ptsz)        \
  X(cuMemFreeAsync, 11020, 0, cuMemFreeAsync)                               \
  X(cuMemFreeAsync, 11020, 1, cuMemFreeAsync_ptsz)                          \
  X(cuDeviceGetDefaultMemPool, 11020, 0, cuDeviceGetDefaultMemPool)         \
  X(cuDeviceGetMemPool, 11020, 0, cuDeviceGetMemPool)                       \
  X(cuMemPoolCreate, 11020, 0, cuMemPoolCreate)                             \
  X(cuMemPoolDestroy, 11020, 0, cuMemPoolDestroy)                           \
  X(cuMemPoolGetAttribute, 11020, 0, cuMemPoolGetAttribute)                 \
  X(cuMemPoolSetAttribute, 11020, 0, cuMemPoolSetAttribute)                 \
  X(cuMemPoolTrimTo, 11020, 0, cuMemPoolTrimTo)                             \
  X(cuMemCreate, 10020, 0, cuMemCreate)                                     \
  X(cuMemRelease, 10020, 0, cuMemRelease)                                   \
  X(cuMemGetAllocationGranularity, 10020, 0, cuMemGetAllocationGranularity) \
  X(cuMemAddressReserve, 10020, 0, cuMemAddressReserve)                     \
  X(cuMemAddressFree, 10020, 0, cuMemAddressFree)                           \
  X(cuMemMap, 10020, 0, cuMemMap)                                           \
  X(cuMemUnmap, 10020, 0, cuMemUnmap)                                       \
  X(cuMemSetAccess, 10020, 0, cuMemSetAccess)                               \
  X(cuArrayCreate, 3020, 0, cuArrayCreate_v2)                               \
  X(cuArray3DCreate, 3020, 0, cuArray3DCreate_v2)                           \
  X(cuArrayDestroy, 2000, 0, cuArrayDestroy)                                \
  X(cuPointerGetAttribute, 4000, 0, cuPointerGetAttribute)                  \
  X(cuMemcpyHtoD, 3020, 0, cuMemcpyHtoD_v2)                                 \
  X(cuMemcpyHtoD, 7000, 1, cuMemcpyHtoD_v2_ptds)                            \
  X(cuMemcpyDtoH, 3020, 0, cuMemcpyDtoH_v2)                                 \
  X(cuMemcpyDtoH, 7000, 1, cuMemcpyDtoH_v2_ptds)                            \
  X(cuStreamCreate, 2000, 0, cuStreamCreate)                                \
  X(cuStreamDestroy, 4000, 0, cuStreamDestroy_v2)                           \
  X(cuStreamSynchronize, 2000, 0, cuStreamSynchronize)                      \
  X(cuStreamSynchronize, 7000, 1, cuStreamSynchronize_ptsz)                 \
  X(cuModuleLoad, 2000, 0, cuModuleLoad)                                    \
  X(cuModuleLoadData, 2000, 0, cuModuleLoadData)                            \
  X(cuModuleUnload, 2000, 0, cuModuleUnload)                                \
  X(cuModuleGetFunction, 2000, 0, cuModuleGetFunction)                      \
  X(cuLaunchKernel, 4000, 0, cuLaunchKernel)                                \
  X(cuLaunchKernel, 7000, 1, cuLaunchKernel_ptsz)                           \
  X(cuLaunchCooperativeKernel, 9000, 0, cuLaunchCooperativeKernel)          \
  X(cuLaunchCooperativeKernel, 9000, 1, cuLaunchCooperativeKernel_ptsz)     \
  X(cuGetProcAddress, 11030, 0, cuGetProcAddress)

#define FAKE_PROC_TABLE_CUDA12(X)                                         \
  X(cuCtxSynchronize, 13000, 0, cuCtxSynchronize_v2)                      \
  X(cuArrayGetMemoryRequirements, 11060, 0, cuArrayGetMemoryRequirements) \
  X(cuLaunchKernelEx, 11060, 0, cuLaunchKernelEx)                         \
  X(cuLaunchKernelEx, 11060, 1, cuLaunchKernelEx_ptsz)                    \
  X(cuGetProcAddress, 12000, 0, cuGetProcAddress_v2)

// Aliases: distinct addresses that jump to the exported functions, handed out by
// cuGetProcAddress when PRISM_FAKE_CUDA_PROCADDR_ALIASES=1.
#if defined(__x86_64__)
#define FAKE_ALIAS(base, version, variant, symbol)                                        \
  extern "C" void prism_fake_alias_##symbol();                                            \
  __asm__(".text\n.globl prism_fake_alias_" #symbol "\n.hidden prism_fake_alias_" #symbol \
          "\n.type prism_fake_alias_" #symbol ",@function\nprism_fake_alias_" #symbol     \
          ":\n  jmp " #symbol "@PLT\n");
#elif defined(__aarch64__)
#define FAKE_ALIAS(base, version, variant, symbol)                                        \
  extern "C" void prism_fake_alias_##symbol();                                            \
  __asm__(".text\n.globl prism_fake_alias_" #symbol "\n.hidden prism_fake_alias_" #symbol \
          "\n.type prism_fake_alias_" #symbol ",%function\nprism_fake_alias_" #symbol     \
          ":\n  b " #symbol "\n");
#endif

#ifdef FAKE_ALIAS
FAKE_PROC_TABLE(FAKE_ALIAS)
#ifndef PRISM_FAKE_CUDA_LEGACY
FAKE_PROC_TABLE_CUDA12(FAKE_ALIAS)
#endif
#endif

namespace prism::vgpu::fake {
namespace {

struct ProcRow {
  const char* base;
  int version;
  int per_thread;
  void* fn;
  void* alias;
};

#ifdef FAKE_ALIAS
#define FAKE_ROW(base, version, variant, symbol)                \
  {#base, version, variant, reinterpret_cast<void*>(&::symbol), \
   reinterpret_cast<void*>(&::prism_fake_alias_##symbol)},
#else
#define FAKE_ROW(base, version, variant, symbol) \
  {#base, version, variant, reinterpret_cast<void*>(&::symbol), reinterpret_cast<void*>(&::symbol)},
#endif

const ProcRow kProcRows[] = {FAKE_PROC_TABLE(FAKE_ROW)
#ifndef PRISM_FAKE_CUDA_LEGACY
                                 FAKE_PROC_TABLE_CUDA12(FAKE_ROW)
#endif
};

bool UseAliases() {
  static const bool aliases = EnvInt("PRISM_FAKE_CUDA_PROCADDR_ALIASES", 0) != 0;
  return aliases;
}

CUresult Lookup(const char* symbol, void** pfn, int version, cuuint64_t flags,
                CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const ProcRow* best = nullptr;
  bool known = false;
  for (int pass = 0; pass < 2 && best == nullptr; ++pass) {
    const int wanted = pass == 0 && per_thread ? 1 : 0;
    if (pass == 1 && wanted == 0 && !per_thread) break;
    for (const ProcRow& row : kProcRows) {
      if (strcmp(row.base, symbol) != 0) continue;
      known = true;
      if (row.per_thread != wanted || row.version > version) continue;
      if (best == nullptr || row.version > best->version) best = &row;
    }
  }
  if (best == nullptr) {
    if (status != nullptr) {
      *status =
          known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return CUDA_ERROR_NOT_FOUND;
  }
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  *pfn = UseAliases() ? best->alias : best->fn;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace prism::vgpu::fake

extern "C" {

CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  FAKE_ENTER(cuGetProcAddress);
  return fake::Lookup(symbol, pfn, version, flags, nullptr);
}

#ifndef PRISM_FAKE_CUDA_LEGACY
CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  FAKE_ENTER(cuGetProcAddress_v2);
  return fake::Lookup(symbol, pfn, version, flags, status);
}
#endif

}  // extern "C"
