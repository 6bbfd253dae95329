// The launch wrappers: each launch's warps go to the SM limiter when the container has an SM
// limit; otherwise a launch costs the driver call plus one predictable branch.
#include "core/quota/sm_share.h"
#include "intercept/hooks.h"
#include "intercept/runtime.h"
#include "intercept/sm_limiter.h"

namespace prism::vgpu {
namespace {

inline bool PacingConfigured() { return g_config.sm_limit_configured && !g_config.disabled; }

}  // namespace

extern "C" {

PRISM_VGPU_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX,
                                          unsigned int gridDimY, unsigned int gridDimZ,
                                          unsigned int blockDimX, unsigned int blockDimY,
                                          unsigned int blockDimZ, unsigned int sharedMemBytes,
                                          CUstream hStream, void** kernelParams, void** extra) {
  if (!EnsureDriver()) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_cuda.cuLaunchKernel == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (PacingConfigured()) {
    PaceLaunch(
        quota::WarpsForLaunch(gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ));
  }
  return g_cuda.cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                               sharedMemBytes, hStream, kernelParams, extra);
}

PRISM_VGPU_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                               unsigned int gridDimY, unsigned int gridDimZ,
                                               unsigned int blockDimX, unsigned int blockDimY,
                                               unsigned int blockDimZ, unsigned int sharedMemBytes,
                                               CUstream hStream, void** kernelParams,
                                               void** extra) {
  if (!EnsureDriver()) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_cuda.cuLaunchKernel_ptsz == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (PacingConfigured()) {
    PaceLaunch(
        quota::WarpsForLaunch(gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ));
  }
  return g_cuda.cuLaunchKernel_ptsz(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                                    blockDimZ, sharedMemBytes, hStream, kernelParams, extra);
}

PRISM_VGPU_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f,
                                            void** kernelParams, void** extra) {
  if (!EnsureDriver()) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_cuda.cuLaunchKernelEx == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (PacingConfigured() && config != nullptr) {
    PaceLaunch(quota::WarpsForLaunch(config->gridDimX, config->gridDimY, config->gridDimZ,
                                     config->blockDimX, config->blockDimY, config->blockDimZ));
  }
  return g_cuda.cuLaunchKernelEx(config, f, kernelParams, extra);
}

PRISM_VGPU_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                                 void** kernelParams, void** extra) {
  if (!EnsureDriver()) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_cuda.cuLaunchKernelEx_ptsz == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (PacingConfigured() && config != nullptr) {
    PaceLaunch(quota::WarpsForLaunch(config->gridDimX, config->gridDimY, config->gridDimZ,
                                     config->blockDimX, config->blockDimY, config->blockDimZ));
  }
  return g_cuda.cuLaunchKernelEx_ptsz(config, f, kernelParams, extra);
}

PRISM_VGPU_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                                     unsigned int gridDimY, unsigned int gridDimZ,
                                                     unsigned int blockDimX, unsigned int blockDimY,
                                                     unsigned int blockDimZ,
                                                     unsigned int sharedMemBytes, CUstream hStream,
                                                     void** kernelParams) {
  if (!EnsureDriver()) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_cuda.cuLaunchCooperativeKernel == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (PacingConfigured()) {
    PaceLaunch(
        quota::WarpsForLaunch(gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ));
  }
  return g_cuda.cuLaunchCooperativeKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                                          blockDimZ, sharedMemBytes, hStream, kernelParams);
}

PRISM_VGPU_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
    unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
    unsigned int sharedMemBytes, CUstream hStream, void** kernelParams) {
  if (!EnsureDriver()) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_cuda.cuLaunchCooperativeKernel_ptsz == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (PacingConfigured()) {
    PaceLaunch(
        quota::WarpsForLaunch(gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ));
  }
  return g_cuda.cuLaunchCooperativeKernel_ptsz(f, gridDimX, gridDimY, gridDimZ, blockDimX,
                                               blockDimY, blockDimZ, sharedMemBytes, hStream,
                                               kernelParams);
}

PRISM_VGPU_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  if (!EnsureDriver()) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_cuda.cuGraphLaunch == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (PacingConfigured()) PaceGraphLaunch();
  return g_cuda.cuGraphLaunch(hGraphExec, hStream);
}

PRISM_VGPU_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  if (!EnsureDriver()) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_cuda.cuGraphLaunch_ptsz == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (PacingConfigured()) PaceGraphLaunch();
  return g_cuda.cuGraphLaunch_ptsz(hGraphExec, hStream);
}

}  // extern "C"
}  // namespace prism::vgpu
