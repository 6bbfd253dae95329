// prism_vgpu_probe: a driver-API program for libprism-vgpu's tests (against the fake driver) and
// for tools/gpu-check (against a real GPU). It runs the commands on its command line in order and
// prints one line per command ("<command> key=value ...").
//
//   prism_vgpu_probe [--via=dlsym | --via=procaddr:<version>[:ptds] | --via=procaddr1:<version>]
//                    [--device=N] [--module=PATH] COMMAND...
//
// --via chooses how driver functions are found: dlsym on dlopen("libcuda.so.1") by exported name
// (default), or like the CUDA runtime: dlsym("cuGetProcAddress_v2") (or v1 with procaddr1), ask it
// for "cuGetProcAddress" itself, then ask that for every base name at <version>. Built a second
// time as prism_vgpu_probe_linked, which calls the functions it was linked against (ELF
// interposition). Commands: see kUsage.
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "intercept/cuda_abi.h"
#include "intercept/nvml_subset.h"
#include "intercept/testing/race_shared.h"

namespace {

constexpr char kUsage[] =
    "commands: init | alloc BYTES | free ID|all | fill BYTES | pitch W H | managed BYTES |\n"
    "  async BYTES | poolalloc BYTES | freeasync ID | trim | sync | vmm BYTES | vmmfree ID |\n"
    "  array W H | array3d W H D | arrayfree ID | meminfo | totalmem | nvmlmem |\n"
    "  spin SECONDS ITERS [BLOCKS THREADS] | launches COUNT | launchex | ptds-launch |\n"
    "  ctxsync-at VERSION | counts SYM... | race FILE ROUNDS BYTES | churn SECONDS MAXBYTES SEED "
    "|\n"
    "  forkchild BYTES | sleep MS | wait | step NAME (prints it, reads a line of stdin)\n";

#define PROBE_FUNCTIONS(X)                                                                        \
  X(cuInit, cuInit, cuInit, 2000, (unsigned int))                                                 \
  X(cuDriverGetVersion, cuDriverGetVersion, cuDriverGetVersion, 2020, (int*))                     \
  X(cuDeviceGetCount, cuDeviceGetCount, cuDeviceGetCount, 2000, (int*))                           \
  X(cuDeviceGetAttribute, cuDeviceGetAttribute, cuDeviceGetAttribute, 2000,                       \
    (int*, CUdevice_attribute, CUdevice))                                                         \
  X(cuDeviceTotalMem, cuDeviceTotalMem_v2, cuDeviceTotalMem, 3020, (size_t*, CUdevice))           \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000,           \
    (CUcontext*, CUdevice))                                                                       \
  X(cuCtxSetCurrent, cuCtxSetCurrent, cuCtxSetCurrent, 4000, (CUcontext))                         \
  X(cuCtxSynchronize, cuCtxSynchronize, cuCtxSynchronize, 2000, (void))                           \
  X(cuMemGetInfo, cuMemGetInfo_v2, cuMemGetInfo, 3020, (size_t*, size_t*))                        \
  X(cuMemAlloc, cuMemAlloc_v2, cuMemAlloc, 3020, (CUdeviceptr*, size_t))                          \
  X(cuMemFree, cuMemFree_v2, cuMemFree, 3020, (CUdeviceptr))                                      \
  X(cuMemAllocPitch, cuMemAllocPitch_v2, cuMemAllocPitch, 3020,                                   \
    (CUdeviceptr*, size_t*, size_t, size_t, unsigned int))                                        \
  X(cuMemAllocManaged, cuMemAllocManaged, cuMemAllocManaged, 6000,                                \
    (CUdeviceptr*, size_t, unsigned int))                                                         \
  X(cuMemAllocAsync, cuMemAllocAsync, cuMemAllocAsync, 11020, (CUdeviceptr*, size_t, CUstream))   \
  X(cuMemFreeAsync, cuMemFreeAsync, cuMemFreeAsync, 11020, (CUdeviceptr, CUstream))               \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020,             \
    (CUdeviceptr*, size_t, CUmemoryPool, CUstream))                                               \
  X(cuMemPoolCreate, cuMemPoolCreate, cuMemPoolCreate, 11020,                                     \
    (CUmemoryPool*, const CUmemPoolProps*))                                                       \
  X(cuMemPoolTrimTo, cuMemPoolTrimTo, cuMemPoolTrimTo, 11020, (CUmemoryPool, size_t))             \
  X(cuDeviceGetMemPool, cuDeviceGetMemPool, cuDeviceGetMemPool, 11020, (CUmemoryPool*, CUdevice)) \
  X(cuMemCreate, cuMemCreate, cuMemCreate, 10020,                                                 \
    (CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long))      \
  X(cuMemRelease, cuMemRelease, cuMemRelease, 10020, (CUmemGenericAllocationHandle))              \
  X(cuArrayCreate, cuArrayCreate_v2, cuArrayCreate, 3020,                                         \
    (CUarray*, const CUDA_ARRAY_DESCRIPTOR*))                                                     \
  X(cuArray3DCreate, cuArray3DCreate_v2, cuArray3DCreate, 3020,                                   \
    (CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*))                                                   \
  X(cuArrayDestroy, cuArrayDestroy, cuArrayDestroy, 2000, (CUarray))                              \
  X(cuModuleLoad, cuModuleLoad, cuModuleLoad, 2000, (CUmodule*, const char*))                     \
  X(cuModuleGetFunction, cuModuleGetFunction, cuModuleGetFunction, 2000,                          \
    (CUfunction*, CUmodule, const char*))                                                         \
  X(cuLaunchKernel, cuLaunchKernel, cuLaunchKernel, 4000,                                         \
    (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,  \
     void**, void**))                                                                             \
  X(cuLaunchKernelEx, cuLaunchKernelEx, cuLaunchKernelEx, 11060,                                  \
    (const CUlaunchConfig*, CUfunction, void**, void**))

struct Driver {
#define PROBE_MEMBER(member, exported, base, version, params) CUresult(*member) params = nullptr;
  PROBE_FUNCTIONS(PROBE_MEMBER)
#undef PROBE_MEMBER
};

#ifdef PRISM_PROBE_LINKED
extern "C" {
#define PROBE_DECLARE(member, exported, base, version, params) CUresult exported params;
PROBE_FUNCTIONS(PROBE_DECLARE)
#undef PROBE_DECLARE
}
#endif

Driver g_driver;
void* g_cuda_handle = nullptr;
int g_device = 0;
std::string g_module_path = "/proc/self/exe";
std::vector<CUdeviceptr> g_ptrs;
std::vector<CUmemGenericAllocationHandle> g_vmm;
std::vector<CUarray> g_arrays;
CUmemoryPool g_pool = nullptr;
CUmodule g_module = nullptr;

[[noreturn]] void Fail(const char* what) {
  fprintf(stderr, "prism_vgpu_probe: %s\n%s", what, kUsage);
  exit(2);
}

bool LoadDriver(const std::string& via) {
#ifdef PRISM_PROBE_LINKED
  (void)via;
#define PROBE_LINK(member, exported, base, version, params) g_driver.member = &exported;
  PROBE_FUNCTIONS(PROBE_LINK)
#undef PROBE_LINK
  g_cuda_handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return true;
#else
  g_cuda_handle = dlopen("libcuda.so.1", RTLD_NOW);
  if (g_cuda_handle == nullptr) {
    fprintf(stderr, "prism_vgpu_probe: dlopen(libcuda.so.1): %s\n", dlerror());
    return false;
  }
  if (via == "dlsym") {
#define PROBE_DLSYM(member, exported, base, version, params) \
  g_driver.member = reinterpret_cast<decltype(g_driver.member)>(dlsym(g_cuda_handle, #exported));
    PROBE_FUNCTIONS(PROBE_DLSYM)
#undef PROBE_DLSYM
    return true;
  }
  // "procaddr:<version>[:ptds]" or "procaddr1:<version>": the CUDA runtime's way.
  const bool v1 = via.rfind("procaddr1:", 0) == 0;
  if (!v1 && via.rfind("procaddr:", 0) != 0) Fail("unknown --via");
  const char* rest = via.c_str() + (v1 ? 10 : 9);
  const int version = atoi(rest);
  const cuuint64_t flags = strstr(rest, ":ptds") != nullptr
                               ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                               : CU_GET_PROC_ADDRESS_DEFAULT;
  using V2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  using V1 = CUresult (*)(const char*, void**, int, cuuint64_t);
  V2 get_v2 = nullptr;
  V1 get_v1 = nullptr;
  if (v1) {
    get_v1 = reinterpret_cast<V1>(dlsym(g_cuda_handle, "cuGetProcAddress"));
    if (get_v1 == nullptr) return false;
    void* self = nullptr;  // The runtime asks for the entry point itself first.
    if (get_v1("cuGetProcAddress", &self, version, flags) == CUDA_SUCCESS && self != nullptr) {
      get_v1 = reinterpret_cast<V1>(self);
    }
  } else {
    get_v2 = reinterpret_cast<V2>(dlsym(g_cuda_handle, "cuGetProcAddress_v2"));
    if (get_v2 == nullptr) return false;
    void* self = nullptr;
    CUdriverProcAddressQueryResult status;
    if (get_v2("cuGetProcAddress", &self, version, flags, &status) == CUDA_SUCCESS &&
        self != nullptr) {
      get_v2 = reinterpret_cast<V2>(self);
    }
  }
  auto lookup = [&](const char* base) -> void* {
    void* pfn = nullptr;
    CUdriverProcAddressQueryResult status;
    const CUresult rc =
        v1 ? get_v1(base, &pfn, version, flags) : get_v2(base, &pfn, version, flags, &status);
    return rc == CUDA_SUCCESS ? pfn : nullptr;
  };
#define PROBE_PROC(member, exported, base, version_, params) \
  g_driver.member = reinterpret_cast<decltype(g_driver.member)>(lookup(#base));
  PROBE_FUNCTIONS(PROBE_PROC)
#undef PROBE_PROC
  return true;
#endif
}

#define CALL(member, ...) \
  (g_driver.member == nullptr ? CUDA_ERROR_NOT_FOUND : g_driver.member(__VA_ARGS__))

const char* Arg(std::vector<std::string>& args, size_t& i) {
  if (i + 1 >= args.size()) Fail(("missing argument to " + args[i]).c_str());
  return args[++i].c_str();
}

unsigned long long Bytes(const char* text) {
  char* end = nullptr;
  unsigned long long v = strtoull(text, &end, 10);
  switch (*end) {
    case 'k':
      v <<= 10;
      break;
    case 'm':
      v <<= 20;
      break;
    case 'g':
      v <<= 30;
      break;
    default:
      break;
  }
  return v;
}

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

CUfunction Function(const char* name) {
  if (g_module == nullptr) {
    const CUresult rc = CALL(cuModuleLoad, &g_module, g_module_path.c_str());
    if (rc != CUDA_SUCCESS) {
      fprintf(stderr, "prism_vgpu_probe: cuModuleLoad(%s) = %d\n", g_module_path.c_str(), rc);
      exit(3);
    }
  }
  CUfunction f = nullptr;
  if (CALL(cuModuleGetFunction, &f, g_module, name) != CUDA_SUCCESS) {
    fprintf(stderr, "prism_vgpu_probe: no kernel %s\n", name);
    exit(3);
  }
  return f;
}

int SmCount() {
  int sms = 0;
  CALL(cuDeviceGetAttribute, &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g_device);
  return sms > 0 ? sms : 1;
}

void PrintAlloc(const char* what, CUresult rc, CUdeviceptr ptr) {
  if (rc == CUDA_SUCCESS) {
    g_ptrs.push_back(ptr);
    printf("%s ok id=%zu\n", what, g_ptrs.size() - 1);
  } else {
    printf("%s err=%d\n", what, rc);
  }
}

unsigned long long FakeCount(const char* symbol) {
  using CountFn = unsigned long long (*)(const char*);
  void* handle = g_cuda_handle != nullptr ? g_cuda_handle : dlopen("libcuda.so.1", RTLD_NOW);
  CountFn fn =
      handle != nullptr ? reinterpret_cast<CountFn>(dlsym(handle, "prismFakeCallCount")) : nullptr;
  return fn == nullptr ? 0 : fn(symbol);
}

int Race(const char* path, int rounds, unsigned long long bytes) {
  const int fd = open(path, O_RDWR);
  if (fd < 0) Fail("race: cannot open the shared file");
  void* memory = mmap(nullptr, sizeof(prism::vgpu::testing::RaceShared), PROT_READ | PROT_WRITE,
                      MAP_SHARED, fd, 0);
  close(fd);
  if (memory == MAP_FAILED) Fail("race: mmap");
  auto* shared = static_cast<prism::vgpu::testing::RaceShared*>(memory);
  int wins = 0;
  for (int round = 0; round < rounds && round < prism::vgpu::testing::kMaxRaceRounds; ++round) {
    pthread_barrier_wait(&shared->barrier);
    CUdeviceptr ptr = 0;
    const CUresult rc = CALL(cuMemAlloc, &ptr, bytes);
    if (rc == CUDA_SUCCESS) {
      const int live = shared->live.fetch_add(1) + 1;
      int max = shared->max_live.load();
      while (live > max && !shared->max_live.compare_exchange_weak(max, live)) {
      }
      shared->successes[round].fetch_add(1);
      ++wins;
    } else if (rc != CUDA_ERROR_OUT_OF_MEMORY) {
      printf("race err=%d\n", rc);
      return 1;
    }
    pthread_barrier_wait(&shared->barrier);  // Everyone has tried; winners still hold theirs.
    if (rc == CUDA_SUCCESS) {
      shared->live.fetch_sub(1);
      CALL(cuMemFree, ptr);
    }
  }
  printf("race wins=%d\n", wins);
  return 0;
}

// Counts SIGCONTs: a call during which the process itself was stopped took as long as the stop,
// which says nothing about the library (Churn leaves such calls out of its longest-call figure).
volatile sig_atomic_t g_continued = 0;
void OnContinue(int) { g_continued = g_continued + 1; }

// Allocates and frees at random for `seconds`, then prints how many allocations succeeded and were
// refused and the longest single call (ms), leaving out calls during which this process was
// stopped (`excluded`).
void Churn(double seconds, unsigned long long max_bytes, unsigned seed) {
  struct sigaction action = {};
  action.sa_handler = OnContinue;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGCONT, &action, nullptr);
  std::mt19937_64 rng(seed);
  std::vector<CUdeviceptr> held;
  const double end = Now() + seconds;
  unsigned long long ok = 0, refused = 0, excluded = 0;
  double longest = 0;
  auto timed = [&](auto call) {
    const sig_atomic_t continued = g_continued;
    const double start = Now();
    const CUresult rc = call();
    const double took = Now() - start;
    if (g_continued != continued) {
      ++excluded;
    } else if (took > longest) {
      longest = took;
    }
    return rc;
  };
  while (Now() < end) {
    if (!held.empty() && (rng() % 2 == 0 || held.size() > 16)) {
      const size_t i = rng() % held.size();
      timed([&] { return CALL(cuMemFree, held[i]); });
      held[i] = held.back();
      held.pop_back();
    } else {
      CUdeviceptr ptr = 0;
      const unsigned long long bytes = 1 + rng() % max_bytes;
      if (timed([&] { return CALL(cuMemAlloc, &ptr, bytes); }) == CUDA_SUCCESS) {
        held.push_back(ptr);
        ++ok;
      } else {
        ++refused;
      }
    }
  }
  for (CUdeviceptr p : held) CALL(cuMemFree, p);
  printf("churn ok=%llu refused=%llu max_call_ms=%.1f excluded=%llu\n", ok, refused,
         longest * 1000.0, excluded);
}

int Run(std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& cmd = args[i];
    CUresult rc = CUDA_SUCCESS;
    if (cmd == "init") {
      rc = CALL(cuInit, 0);
      int version = 0, count = 0;
      CALL(cuDriverGetVersion, &version);
      CALL(cuDeviceGetCount, &count);
      CUcontext ctx = nullptr;
      if (rc == CUDA_SUCCESS) rc = CALL(cuDevicePrimaryCtxRetain, &ctx, g_device);
      if (rc == CUDA_SUCCESS) rc = CALL(cuCtxSetCurrent, ctx);
      printf("init %s driver=%d devices=%d err=%d\n", rc == CUDA_SUCCESS ? "ok" : "failed", version,
             count, rc);
      if (rc != CUDA_SUCCESS) return 1;
    } else if (cmd == "alloc") {
      CUdeviceptr ptr = 0;
      rc = CALL(cuMemAlloc, &ptr, Bytes(Arg(args, i)));
      PrintAlloc("alloc", rc, ptr);
    } else if (cmd == "free") {
      const std::string which = Arg(args, i);
      if (which == "all") {
        for (CUdeviceptr& p : g_ptrs) {
          if (p != 0) CALL(cuMemFree, p);
          p = 0;
        }
        printf("free ok\n");
      } else {
        const size_t id = strtoul(which.c_str(), nullptr, 10);
        rc = id < g_ptrs.size() ? CALL(cuMemFree, g_ptrs[id]) : CUDA_ERROR_INVALID_VALUE;
        if (rc == CUDA_SUCCESS) g_ptrs[id] = 0;
        printf(rc == CUDA_SUCCESS ? "free ok\n" : "free err=%d\n", rc);
      }
    } else if (cmd == "fill") {
      const unsigned long long bytes = Bytes(Arg(args, i));
      int count = 0;
      for (;;) {
        CUdeviceptr ptr = 0;
        rc = CALL(cuMemAlloc, &ptr, bytes);
        if (rc != CUDA_SUCCESS) break;
        g_ptrs.push_back(ptr);
        ++count;
      }
      printf("fill count=%d err=%d\n", count, rc);
    } else if (cmd == "pitch") {
      const unsigned long long w = Bytes(Arg(args, i));
      const unsigned long long h = Bytes(Arg(args, i));
      CUdeviceptr ptr = 0;
      size_t pitch = 0;
      rc = CALL(cuMemAllocPitch, &ptr, &pitch, w, h, 4);
      PrintAlloc("pitch", rc, ptr);
    } else if (cmd == "managed") {
      CUdeviceptr ptr = 0;
      rc = CALL(cuMemAllocManaged, &ptr, Bytes(Arg(args, i)), 1);
      PrintAlloc("managed", rc, ptr);
    } else if (cmd == "async") {
      CUdeviceptr ptr = 0;
      rc = CALL(cuMemAllocAsync, &ptr, Bytes(Arg(args, i)), nullptr);
      PrintAlloc("async", rc, ptr);
    } else if (cmd == "poolalloc") {
      if (g_pool == nullptr) {
        CUmemPoolProps props = {};
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = g_device;
        rc = CALL(cuMemPoolCreate, &g_pool, &props);
      }
      CUdeviceptr ptr = 0;
      if (rc == CUDA_SUCCESS) {
        rc = CALL(cuMemAllocFromPoolAsync, &ptr, Bytes(Arg(args, i)), g_pool, nullptr);
      } else {
        Arg(args, i);
      }
      PrintAlloc("poolalloc", rc, ptr);
    } else if (cmd == "freeasync") {
      const size_t id = strtoul(Arg(args, i), nullptr, 10);
      rc =
          id < g_ptrs.size() ? CALL(cuMemFreeAsync, g_ptrs[id], nullptr) : CUDA_ERROR_INVALID_VALUE;
      if (rc == CUDA_SUCCESS) g_ptrs[id] = 0;
      printf(rc == CUDA_SUCCESS ? "freeasync ok\n" : "freeasync err=%d\n", rc);
    } else if (cmd == "trim") {
      CUmemoryPool pool = g_pool;
      if (pool == nullptr) CALL(cuDeviceGetMemPool, &pool, g_device);
      rc = CALL(cuMemPoolTrimTo, pool, 0);
      printf("trim err=%d\n", rc);
    } else if (cmd == "sync") {
      rc = CALL(cuCtxSynchronize);
      printf("sync err=%d\n", rc);
    } else if (cmd == "vmm") {
      CUmemAllocationProp prop = {};
      prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      prop.location.id = g_device;
      CUmemGenericAllocationHandle handle = 0;
      rc = CALL(cuMemCreate, &handle, Bytes(Arg(args, i)), &prop, 0);
      if (rc == CUDA_SUCCESS) {
        g_vmm.push_back(handle);
        printf("vmm ok id=%zu\n", g_vmm.size() - 1);
      } else {
        printf("vmm err=%d\n", rc);
      }
    } else if (cmd == "vmmfree") {
      const size_t id = strtoul(Arg(args, i), nullptr, 10);
      rc = id < g_vmm.size() ? CALL(cuMemRelease, g_vmm[id]) : CUDA_ERROR_INVALID_VALUE;
      printf(rc == CUDA_SUCCESS ? "vmmfree ok\n" : "vmmfree err=%d\n", rc);
    } else if (cmd == "array" || cmd == "array3d") {
      CUarray array = nullptr;
      if (cmd == "array") {
        CUDA_ARRAY_DESCRIPTOR desc = {};
        desc.Width = Bytes(Arg(args, i));
        desc.Height = Bytes(Arg(args, i));
        desc.Format = CU_AD_FORMAT_FLOAT;
        desc.NumChannels = 1;
        rc = CALL(cuArrayCreate, &array, &desc);
      } else {
        CUDA_ARRAY3D_DESCRIPTOR desc = {};
        desc.Width = Bytes(Arg(args, i));
        desc.Height = Bytes(Arg(args, i));
        desc.Depth = Bytes(Arg(args, i));
        desc.Format = CU_AD_FORMAT_FLOAT;
        desc.NumChannels = 1;
        rc = CALL(cuArray3DCreate, &array, &desc);
      }
      if (rc == CUDA_SUCCESS) {
        g_arrays.push_back(array);
        printf("%s ok id=%zu\n", cmd.c_str(), g_arrays.size() - 1);
      } else {
        printf("%s err=%d\n", cmd.c_str(), rc);
      }
    } else if (cmd == "arrayfree") {
      const size_t id = strtoul(Arg(args, i), nullptr, 10);
      rc = id < g_arrays.size() ? CALL(cuArrayDestroy, g_arrays[id]) : CUDA_ERROR_INVALID_VALUE;
      printf(rc == CUDA_SUCCESS ? "arrayfree ok\n" : "arrayfree err=%d\n", rc);
    } else if (cmd == "meminfo") {
      size_t free = 0, total = 0;
      rc = CALL(cuMemGetInfo, &free, &total);
      printf("meminfo free=%zu total=%zu err=%d\n", free, total, rc);
    } else if (cmd == "totalmem") {
      size_t bytes = 0;
      rc = CALL(cuDeviceTotalMem, &bytes, g_device);
      printf("totalmem bytes=%zu err=%d\n", bytes, rc);
    } else if (cmd == "nvmlmem") {
      void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
      if (nvml == nullptr) Fail("cannot load libnvidia-ml.so.1");
      auto init = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(nvml, "nvmlInit_v2"));
      auto handle_of = reinterpret_cast<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(
          dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"));
      auto info = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(
          dlsym(nvml, "nvmlDeviceGetMemoryInfo"));
      auto info_v2 = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*)>(
          dlsym(nvml, "nvmlDeviceGetMemoryInfo_v2"));
      nvmlDevice_t device = nullptr;
      nvmlMemory_t m = {};
      nvmlMemory_v2_t m2 = {};
      m2.version = kNvmlMemoryV2Version;
      const int r1 = init();
      const int r2 = handle_of(static_cast<unsigned>(g_device), &device);
      const int r3 = info(device, &m);
      const int r4 = info_v2 != nullptr ? info_v2(device, &m2) : -1;
      printf(
          "nvmlmem total=%llu free=%llu used=%llu v2total=%llu v2free=%llu v2used=%llu "
          "err=%d,%d,%d,%d\n",
          m.total, m.free, m.used, m2.total, m2.free, m2.used, r1, r2, r3, r4);
    } else if (cmd == "spin") {
      const double seconds = atof(Arg(args, i));
      unsigned long long iters = Bytes(Arg(args, i));
      unsigned blocks = static_cast<unsigned>(SmCount()) * 8;
      unsigned threads = 256;
      if (i + 2 < args.size() && isdigit(static_cast<unsigned char>(args[i + 1][0])) &&
          isdigit(static_cast<unsigned char>(args[i + 2][0]))) {
        blocks = static_cast<unsigned>(atoi(Arg(args, i)));
        threads = static_cast<unsigned>(atoi(Arg(args, i)));
      }
      CUfunction f = Function("prism_spin");
      void* params[] = {&iters};
      const double start = Now();
      double second_half_start = 0;
      long launches = 0, second_half = 0;
      for (double now = start; now - start < seconds; now = Now()) {
        rc = CALL(cuLaunchKernel, f, blocks, 1, 1, threads, 1, 1, 0, nullptr, params, nullptr);
        if (rc != CUDA_SUCCESS) break;
        rc = CALL(cuCtxSynchronize);
        if (rc != CUDA_SUCCESS) break;
        ++launches;
        if (now - start >= seconds / 2) {
          if (second_half == 0) second_half_start = now;
          ++second_half;
        }
      }
      const double end = Now();
      const double elapsed = end - start;
      // The second half's rate excludes the limiter's learning interval at the start.
      printf("spin launches=%ld seconds=%.3f rate=%.3f tail_rate=%.3f err=%d\n", launches, elapsed,
             launches / elapsed, second_half > 0 ? second_half / (end - second_half_start) : 0.0,
             rc);
    } else if (cmd == "launches") {
      const long count = atol(Arg(args, i));
      CUfunction f = Function("prism_empty");
      const double start = Now();
      for (long n = 0; n < count && rc == CUDA_SUCCESS; ++n) {
        rc = CALL(cuLaunchKernel, f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
      }
      if (rc == CUDA_SUCCESS) rc = CALL(cuCtxSynchronize);
      const double elapsed = Now() - start;
      printf("launches count=%ld ns_per_launch=%.1f err=%d\n", count, elapsed * 1e9 / count, rc);
    } else if (cmd == "launchex") {
      CUfunction f = Function("prism_empty");
      CUlaunchConfig config = {};
      config.gridDimX = config.gridDimY = config.gridDimZ = 1;
      config.blockDimX = config.blockDimY = config.blockDimZ = 1;
      rc = CALL(cuLaunchKernelEx, &config, f, nullptr, nullptr);
      printf("launchex err=%d\n", rc);
    } else if (cmd == "ptds-launch") {
      CUfunction f = Function("prism_empty");
      rc = CALL(cuLaunchKernel, f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
      printf("ptds-launch err=%d legacy=%llu ptsz=%llu\n", rc, FakeCount("cuLaunchKernel"),
             FakeCount("cuLaunchKernel_ptsz"));
    } else if (cmd == "ctxsync-at") {
      // cuGetProcAddress("cuCtxSynchronize", VERSION) and call what it returns.
      const int version = atoi(Arg(args, i));
      using V2 =
          CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
      V2 get = reinterpret_cast<V2>(dlsym(g_cuda_handle, "cuGetProcAddress_v2"));
      void* pfn = nullptr;
      CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
      rc = get == nullptr ? CUDA_ERROR_NOT_FOUND
                          : get("cuCtxSynchronize", &pfn, version, 0, &status);
      // Called with a context argument, which the version-1 form ignores.
      const CUresult call_rc = pfn == nullptr
                                   ? CUDA_ERROR_NOT_FOUND
                                   : reinterpret_cast<CUresult (*)(CUcontext)>(pfn)(nullptr);
      // With libprism-vgpu preloaded, dlsym answers wrapped names with the wrapper.
      const bool wrapped = pfn != nullptr && pfn == dlsym(RTLD_DEFAULT, "cuCtxSynchronize");
      printf("ctxsync-at err=%d call=%d wrapped=%d v1=%llu v2=%llu\n", rc, call_rc, wrapped ? 1 : 0,
             FakeCount("cuCtxSynchronize"), FakeCount("cuCtxSynchronize_v2"));
    } else if (cmd == "counts") {
      printf("counts");
      while (i + 1 < args.size() && args[i + 1].rfind("cu", 0) == 0) {
        const char* symbol = Arg(args, i);
        printf(" %s=%llu", symbol, FakeCount(symbol));
      }
      printf("\n");
    } else if (cmd == "race") {
      const char* path = Arg(args, i);
      const int rounds = atoi(Arg(args, i));
      const unsigned long long bytes = Bytes(Arg(args, i));
      fflush(stdout);
      if (Race(path, rounds, bytes) != 0) return 1;
    } else if (cmd == "churn") {
      const double seconds = atof(Arg(args, i));
      const unsigned long long max_bytes = Bytes(Arg(args, i));
      const unsigned seed = static_cast<unsigned>(atoi(Arg(args, i)));
      Churn(seconds, max_bytes, seed);
    } else if (cmd == "forkchild") {
      // A forked child allocates on its own (CUDA contexts do not survive fork; the fake's do).
      const unsigned long long bytes = Bytes(Arg(args, i));
      fflush(stdout);
      const pid_t child = fork();
      if (child == 0) {
        CUdeviceptr ptr = 0;
        const CUresult child_rc = CALL(cuMemAlloc, &ptr, bytes);
        printf("forkchild child alloc=%d\n", child_rc);
        fflush(stdout);
        exit(0);  // Runs the library's exit handler: the child's slot is released.
      }
      int status = 0;
      waitpid(child, &status, 0);
      printf("forkchild exit=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    } else if (cmd == "sleep") {
      usleep(static_cast<useconds_t>(atoi(Arg(args, i)) * 1000));
    } else if (cmd == "step") {
      // Waits for one line on stdin (a test's go-ahead), so one process can act in phases.
      printf("step %s\n", Arg(args, i));
      fflush(stdout);
      char c = 0;
      while (read(STDIN_FILENO, &c, 1) == 1 && c != '\n') {
      }
    } else if (cmd == "wait") {
      printf("waiting\n");
      fflush(stdout);
      char buffer[64];
      while (read(STDIN_FILENO, buffer, sizeof(buffer)) > 0) {
      }
    } else {
      Fail(("unknown command " + cmd).c_str());
    }
    fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string via = "dlsym";
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--via=", 0) == 0) {
      via = arg.substr(6);
    } else if (arg.rfind("--device=", 0) == 0) {
      g_device = atoi(arg.c_str() + 9);
    } else if (arg.rfind("--module=", 0) == 0) {
      g_module_path = arg.substr(9);
    } else if (arg == "--help") {
      printf("%s", kUsage);
      return 0;
    } else {
      args.push_back(arg);
    }
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (!LoadDriver(via)) return 2;
  return Run(args);
}
