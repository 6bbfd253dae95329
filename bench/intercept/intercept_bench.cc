// intercept_bench: what libprism-vgpu adds to a kernel launch and to a cuMemAlloc/cuMemFree pair,
// measured in one process against the fake driver (src/intercept/fake), with and without the
// library, and printed as ratios at the end.
//
// "native" calls the fake libcuda.so.1 directly. The "intercepted" variants call the same fake
// through a private copy of libprism-vgpu.so each (dlopen'ed copies have their own globals, so
// each reads its own environment):
//   intercepted           no SM limit: a launch costs one branch in the wrapper
//   intercepted_sm_count  an SM limit is configured but not binding (lone container, default
//                         policy): launches are counted in the shared region
//   intercepted_sm_paced  launches are paced (the benchmark sets the region's pacing rate itself,
//   to
//                         1 ps per warp, far above the loop's rate): the pacing arithmetic and its
//                         compare-and-swap on the shared clock, never a wait
// The fake's launch of an empty kernel costs a few nanoseconds, far less than a real driver's
// (microseconds), so the ratios here are an upper bound on the relative overhead; the absolute
// nanoseconds added are the meaningful number. tools/gpu-check measures the ratio on a real GPU.
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"

#include "intercept/cuda_abi.h"
#include "intercept/region.h"

namespace {

struct Api {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuModuleLoad)(CUmodule*, const char*);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**);
  CUresult (*cuMemAlloc_v2)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree_v2)(CUdeviceptr);
};

std::string g_dir;
void* g_fake = nullptr;
Api g_native;
std::map<std::string, Api> g_apis;
CUfunction g_empty = nullptr;

template <typename T>
void Resolve(void* handle, const char* name, T* out) {
  *out = reinterpret_cast<T>(dlsym(handle, name));
  if (*out == nullptr) {
    fprintf(stderr, "intercept_bench: %s not found: %s\n", name, dlerror());
    exit(1);
  }
}

Api ResolveApi(void* library, void* driver) {
  Api api;
  Resolve(driver, "cuInit", &api.cuInit);
  Resolve(driver, "cuDevicePrimaryCtxRetain", &api.cuDevicePrimaryCtxRetain);
  Resolve(driver, "cuCtxSetCurrent", &api.cuCtxSetCurrent);
  Resolve(driver, "cuModuleLoad", &api.cuModuleLoad);
  Resolve(driver, "cuModuleGetFunction", &api.cuModuleGetFunction);
  Resolve(library, "cuLaunchKernel", &api.cuLaunchKernel);
  Resolve(library, "cuMemAlloc_v2", &api.cuMemAlloc_v2);
  Resolve(library, "cuMemFree_v2", &api.cuMemFree_v2);
  return api;
}

// Loads a private copy of libprism-vgpu.so configured by `env` (applied before its first call).
void LoadVariant(const std::string& name,
                 const std::vector<std::pair<std::string, std::string>>& env) {
  const std::string copy = g_dir + "/libprism-vgpu-" + name + ".so";
  const std::string cmd = std::string("cp ") + PRISM_VGPU_LIB + " " + copy;
  if (system(cmd.c_str()) != 0) exit(1);
  void* library = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    fprintf(stderr, "intercept_bench: %s\n", dlerror());
    exit(1);
  }
  for (const char* var : {"CUDA_DEVICE_SM_LIMIT", "GPU_CORE_UTILIZATION_POLICY"}) unsetenv(var);
  setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", (g_dir + "/region-" + name).c_str(), 1);
  for (const auto& [var, value] : env) setenv(var.c_str(), value.c_str(), 1);
  Api api = ResolveApi(library, g_fake);
  // The first calls read the environment, open the region and map the device.
  CUdeviceptr ptr = 0;
  if (api.cuMemAlloc_v2(&ptr, 1 << 20) != CUDA_SUCCESS || api.cuMemFree_v2(ptr) != CUDA_SUCCESS ||
      api.cuLaunchKernel(g_empty, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) != CUDA_SUCCESS) {
    fprintf(stderr, "intercept_bench: variant %s does not work\n", name.c_str());
    exit(1);
  }
  g_apis[name] = api;
}

void Setup() {
  char dir[] = "/tmp/prism-intercept-bench-XXXXXX";
  if (mkdtemp(dir) == nullptr) exit(1);
  g_dir = dir;
  setenv("PRISM_FAKE_GPU_STATE", (g_dir + "/gpu.state").c_str(), 1);
  setenv("PRISM_VGPU_REAL_LIBCUDA", PRISM_FAKE_LIBCUDA, 1);
  setenv("LIBCUDA_LOG_LEVEL", "0", 1);
  setenv("PRISM_VGPU_REAL_NVML", "/nonexistent", 1);  // Keep the SM controller passive.
  g_fake = dlopen(PRISM_FAKE_LIBCUDA, RTLD_NOW | RTLD_LOCAL);
  if (g_fake == nullptr) {
    fprintf(stderr, "intercept_bench: %s\n", dlerror());
    exit(1);
  }
  g_native = ResolveApi(g_fake, g_fake);
  CUcontext ctx = nullptr;
  CUmodule module = nullptr;
  if (g_native.cuInit(0) != CUDA_SUCCESS || g_native.cuDevicePrimaryCtxRetain(&ctx, 0) ||
      g_native.cuCtxSetCurrent(ctx) || g_native.cuModuleLoad(&module, "/proc/self/exe") ||
      g_native.cuModuleGetFunction(&g_empty, module, "prism_empty")) {
    fprintf(stderr, "intercept_bench: fake driver setup failed\n");
    exit(1);
  }
  g_apis["native"] = g_native;
  LoadVariant("intercepted", {{"CUDA_DEVICE_MEMORY_LIMIT", "64g"}});
  LoadVariant("intercepted_sm_count",
              {{"CUDA_DEVICE_MEMORY_LIMIT", "64g"}, {"CUDA_DEVICE_SM_LIMIT", "50"}});
  LoadVariant("intercepted_sm_paced", {{"CUDA_DEVICE_MEMORY_LIMIT", "64g"},
                                       {"CUDA_DEVICE_SM_LIMIT", "50"},
                                       {"GPU_CORE_UTILIZATION_POLICY", "force"}});
  // Without NVML the controller never publishes a rate; publish one so launches are paced.
  const std::string region = g_dir + "/region-intercepted_sm_paced";
  const int fd = open(region.c_str(), O_RDWR);
  void* memory = fd < 0 ? MAP_FAILED
                        : mmap(nullptr, sizeof(prism::vgpu::RegionLayout), PROT_READ | PROT_WRITE,
                               MAP_SHARED, fd, 0);
  if (memory == MAP_FAILED) {
    fprintf(stderr, "intercept_bench: cannot map %s\n", region.c_str());
    exit(1);
  }
  close(fd);
  auto* layout = static_cast<prism::vgpu::RegionLayout*>(memory);
  for (prism::vgpu::RegionDevice& device : layout->devices) device.pace_ps_per_warp.store(1);
}

void BM_LaunchKernel(benchmark::State& state, const std::string& variant) {
  const Api& api = g_apis.at(variant);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        api.cuLaunchKernel(g_empty, 132, 1, 1, 256, 1, 1, 0, nullptr, nullptr, nullptr));
  }
}

void BM_MemAllocFree(benchmark::State& state, const std::string& variant) {
  const Api& api = g_apis.at(variant);
  for (auto _ : state) {
    CUdeviceptr ptr = 0;
    if (api.cuMemAlloc_v2(&ptr, 2 << 20) != CUDA_SUCCESS) state.SkipWithError("alloc failed");
    api.cuMemFree_v2(ptr);
  }
}

// Collects each run's time to print the ratios after the table.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      // With --benchmark_repetitions the median stands for the benchmark.
      if (run.run_type == Run::RT_Iteration) {
        times_[run.run_name.str()] = run.GetAdjustedCPUTime();
      } else if (run.aggregate_name == "median") {
        times_[run.run_name.str()] = run.GetAdjustedCPUTime();
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void PrintRatios() const {
    printf("\nOverhead against the fake driver (CPU time; ratio = intercepted / native):\n");
    for (const char* op : {"BM_LaunchKernel", "BM_MemAllocFree"}) {
      const auto native = times_.find(std::string(op) + "/native");
      if (native == times_.end()) continue;
      for (const auto& [name, time] : times_) {
        if (name.rfind(std::string(op) + "/intercepted", 0) != 0) continue;
        printf("  %-45s %6.3fx  %+8.1f ns per call\n", name.c_str(), time / native->second,
               time - native->second);
      }
    }
  }

 private:
  std::map<std::string, double> times_;
};

}  // namespace

int main(int argc, char** argv) {
  Setup();
  for (const char* variant :
       {"native", "intercepted", "intercepted_sm_count", "intercepted_sm_paced"}) {
    benchmark::RegisterBenchmark((std::string("BM_LaunchKernel/") + variant).c_str(),
                                 BM_LaunchKernel, std::string(variant));
  }
  for (const char* variant : {"native", "intercepted"}) {
    benchmark::RegisterBenchmark((std::string("BM_MemAllocFree/") + variant).c_str(),
                                 BM_MemAllocFree, std::string(variant));
  }
  benchmark::Initialize(&argc, argv);
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios();
  const std::string cmd = "rm -rf " + g_dir;
  return system(cmd.c_str()) == 0 ? 0 : 1;
}
