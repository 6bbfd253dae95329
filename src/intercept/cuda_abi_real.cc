// The values of the toolkit's cuda.h for cuda_abi_test.cc (compiled only where a CUDA toolkit is
// installed). Kept apart: cuda.h and cuda_abi.h declare the same names.
#include <cuda.h>
#include <stddef.h>

#include <map>
#include <string>

std::map<std::string, long long> ToolkitCudaAbi() {
  std::map<std::string, long long> v;
#define PRISM_ABI_VALUE(name) v[#name] = static_cast<long long>(name);
#include "intercept/cuda_abi_values.inc"
#undef PRISM_ABI_VALUE
  v["sizeof CUDA_ARRAY_DESCRIPTOR"] = sizeof(CUDA_ARRAY_DESCRIPTOR);
  v["sizeof CUDA_ARRAY3D_DESCRIPTOR"] = sizeof(CUDA_ARRAY3D_DESCRIPTOR);
  v["sizeof CUDA_ARRAY_MEMORY_REQUIREMENTS"] = sizeof(CUDA_ARRAY_MEMORY_REQUIREMENTS);
  v["sizeof CUmemAllocationProp"] = sizeof(CUmemAllocationProp);
  v["offsetof CUmemAllocationProp.location"] = offsetof(CUmemAllocationProp, location);
  v["sizeof CUmemPoolProps"] = sizeof(CUmemPoolProps);
  v["offsetof CUmemPoolProps.location"] = offsetof(CUmemPoolProps, location);
  v["sizeof CUlaunchConfig"] = sizeof(CUlaunchConfig);
  v["offsetof CUlaunchConfig.hStream"] = offsetof(CUlaunchConfig, hStream);
  v["offsetof CUDA_ARRAY3D_DESCRIPTOR.Format"] = offsetof(CUDA_ARRAY3D_DESCRIPTOR, Format);
  v["sizeof CUuuid"] = sizeof(CUuuid);
  v["sizeof CUdeviceptr"] = sizeof(CUdeviceptr);
  v["sizeof CUmemGenericAllocationHandle"] = sizeof(CUmemGenericAllocationHandle);
  v["CUDA_VERSION"] = CUDA_VERSION;
  return v;
}
