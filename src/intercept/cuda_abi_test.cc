// cuda_abi.h must match the CUDA toolkit's cuda.h exactly (built only where one is installed; the
// project itself never needs it).
#include "intercept/cuda_abi.h"

#include <stddef.h>

#include <map>
#include <string>

#include "gtest/gtest.h"

std::map<std::string, long long> ToolkitCudaAbi();

namespace prism::vgpu {
namespace {

TEST(CudaAbiTest, MatchesTheToolkitHeader) {
  std::map<std::string, long long> ours;
#define PRISM_ABI_VALUE(name) ours[#name] = static_cast<long long>(name);
#include "intercept/cuda_abi_values.inc"
#undef PRISM_ABI_VALUE
  ours["sizeof CUDA_ARRAY_DESCRIPTOR"] = sizeof(CUDA_ARRAY_DESCRIPTOR);
  ours["sizeof CUDA_ARRAY3D_DESCRIPTOR"] = sizeof(CUDA_ARRAY3D_DESCRIPTOR);
  ours["sizeof CUDA_ARRAY_MEMORY_REQUIREMENTS"] = sizeof(CUDA_ARRAY_MEMORY_REQUIREMENTS);
  ours["sizeof CUmemAllocationProp"] = sizeof(CUmemAllocationProp);
  ours["offsetof CUmemAllocationProp.location"] = offsetof(CUmemAllocationProp, location);
  ours["sizeof CUmemPoolProps"] = sizeof(CUmemPoolProps);
  ours["offsetof CUmemPoolProps.location"] = offsetof(CUmemPoolProps, location);
  ours["sizeof CUlaunchConfig"] = sizeof(CUlaunchConfig);
  ours["offsetof CUlaunchConfig.hStream"] = offsetof(CUlaunchConfig, hStream);
  ours["offsetof CUDA_ARRAY3D_DESCRIPTOR.Format"] = offsetof(CUDA_ARRAY3D_DESCRIPTOR, Format);
  ours["sizeof CUuuid"] = sizeof(CUuuid);
  ours["sizeof CUdeviceptr"] = sizeof(CUdeviceptr);
  ours["sizeof CUmemGenericAllocationHandle"] = sizeof(CUmemGenericAllocationHandle);
  const std::map<std::string, long long> toolkit = ToolkitCudaAbi();
  EXPECT_GE(toolkit.at("CUDA_VERSION"), 12000);
  for (const auto& [name, value] : ours) {
    ASSERT_EQ(toolkit.count(name), 1u) << name;
    EXPECT_EQ(value, toolkit.at(name)) << name;
  }
}

}  // namespace
}  // namespace prism::vgpu
