// Initialization and context creation: cuInit tells the process when the driver cannot be used
// (missing, or PRISM_VGPU_REAL_LIBCUDA naming this library, whose wrappers would call themselves);
// a new context's device memory is charged when the context is created (docs/intercept.md,
// "Driver overhead"), not seconds later when NVML shows it.
#include <unistd.h>

#include <atomic>

#include "intercept/hooks.h"
#include "intercept/runtime.h"
#include "intercept/sm_limiter.h"

namespace prism::vgpu {
namespace {

// The process that last charged the primary context of each ordinal: frameworks retain it again
// and again, and only the first retain in a process creates it (a forked child starts over).
constexpr int kMaxPrimaryOrdinals = 64;
std::atomic<pid_t> g_primary_charged_by[kMaxPrimaryOrdinals];

bool FirstPrimaryRetain(CUdevice dev) {
  if (dev < 0 || dev >= kMaxPrimaryOrdinals) return true;
  const pid_t self = getpid();
  return g_primary_charged_by[dev].exchange(self, std::memory_order_relaxed) != self;
}

}  // namespace

extern "C" {

PRISM_VGPU_EXPORT CUresult cuInit(unsigned int flags) {
  // A driver that cannot be loaded, or that turned out to be this library (its wrappers would
  // call themselves until the stack overflows), fails initialization, before anything else.
  if (!EnsureDriver()) return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
  if (g_cuda.cuInit == nullptr) return CUDA_ERROR_NOT_FOUND;
  return g_cuda.cuInit(flags);
}

PRISM_VGPU_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (!EnsureDriver()) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_cuda.cuDevicePrimaryCtxRetain == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult rc = g_cuda.cuDevicePrimaryCtxRetain(pctx, dev);
  if (rc == CUDA_SUCCESS && ControlEnabled() && FirstPrimaryRetain(dev)) {
    ChargeContextOverhead(DeviceEntryForOrdinal(dev));
  }
  return rc;
}

PRISM_VGPU_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  if (!EnsureDriver()) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_cuda.cuCtxCreate_v2 == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult rc = g_cuda.cuCtxCreate_v2(pctx, flags, dev);
  if (rc == CUDA_SUCCESS && ControlEnabled()) ChargeContextOverhead(DeviceEntryForOrdinal(dev));
  return rc;
}

}  // extern "C"

}  // namespace prism::vgpu
