// Initialization and context creation: cuInit tells the process when the driver cannot be used
// (missing, or PRISM_VGPU_REAL_LIBCUDA naming this library, whose wrappers would call themselves);
// a new context's device memory is charged when the context is created (docs/intercept.md,
// "Driver overhead"), not seconds later when NVML shows it.
#include "intercept/hooks.h"
#include "intercept/runtime.h"
#include "intercept/sm_limiter.h"

namespace prism::vgpu {

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
  if (rc == CUDA_SUCCESS && ControlEnabled()) ChargeContextOverhead(DeviceEntryForOrdinal(dev));
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
