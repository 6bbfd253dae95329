// nvml_abi.h and nvml_symbols.def (what DlNvml resolves and the fake libnvidia-ml.so.1 defines)
// against NVIDIA's values in testing/abi/nvml-abi.json, taken from NVIDIA's nvml.h (NVML API 13)
// and sharing none of the project's code (testing/abi/PROVENANCE.md). DlNvml declares its
// function pointers as decltype(&::name) and the fake includes nvml_abi.h, so both are bound to
// the prototypes checked here by the compiler.
#include <dlfcn.h>

#include <map>
#include <regex>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "nvml/nvml_abi.h"
#include "testing/abi/abi_reference.h"

PRISM_ABI_HANDLE_TAG(nvmlDevice_st)
PRISM_ABI_HANDLE_TAG(nvmlGpuInstance_st)
PRISM_ABI_HANDLE_TAG(nvmlComputeInstance_st)
PRISM_ABI_HANDLE_TAG(nvmlEventSet_st)
PRISM_ABI_STRUCT_TYPEDEF(nvmlMemory_t)
PRISM_ABI_STRUCT_TYPEDEF(nvmlPciInfo_t)
PRISM_ABI_STRUCT_TYPEDEF(nvmlGpuInstancePlacement_t)
PRISM_ABI_STRUCT_TYPEDEF(nvmlGpuInstanceProfileInfo_t)
PRISM_ABI_STRUCT_TYPEDEF(nvmlGpuInstanceInfo_t)
PRISM_ABI_STRUCT_TYPEDEF(nvmlComputeInstanceProfileInfo_t)
PRISM_ABI_STRUCT_TYPEDEF(nvmlComputeInstanceInfo_t)
PRISM_ABI_STRUCT_TYPEDEF(nvmlProcessInfo_t)
PRISM_ABI_STRUCT_TYPEDEF(nvmlDeviceAttributes_t)
PRISM_ABI_STRUCT_TYPEDEF(nvmlEventData_t)
PRISM_ABI_STRUCT_TYPEDEF(nvmlProcessUtilizationSample_t)

namespace prism::nvml {
namespace {

namespace ref = ::prism::abi_reference;

std::map<std::string, ref::Function> DeclaredFunctions(const ref::Json& facts) {
  std::map<std::string, ref::Function> out;
#define NVML_REQUIRED(name)                                                \
  out[#name] = {ref::Signature<decltype(::name)>::Returns(facts),          \
                ref::Signature<decltype(::name)>::Params(facts)};
#define NVML_OPTIONAL(name) NVML_REQUIRED(name)
#include "nvml/nvml_symbols.def"
#undef NVML_REQUIRED
#undef NVML_OPTIONAL
  return out;
}

class NvmlAbiTest : public ::testing::Test {
 protected:
  const ref::Json nvml_ = ref::LoadFacts("nvml-abi.json");
};

TEST_F(NvmlAbiTest, ConstantsMatchNvidia) {
  const std::map<std::string, long long> ours = {
      {"NVML_DEVICE_UUID_V2_BUFFER_SIZE", NVML_DEVICE_UUID_V2_BUFFER_SIZE},
      {"NVML_DEVICE_NAME_V2_BUFFER_SIZE", NVML_DEVICE_NAME_V2_BUFFER_SIZE},
      {"NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE", NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE},
      {"NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE", NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE},
      {"NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE", NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE},
      {"NVML_DEVICE_MIG_DISABLE", NVML_DEVICE_MIG_DISABLE},
      {"NVML_DEVICE_MIG_ENABLE", NVML_DEVICE_MIG_ENABLE},
      {"NVML_GPU_INSTANCE_PROFILE_COUNT", NVML_GPU_INSTANCE_PROFILE_COUNT},
      {"NVML_COMPUTE_INSTANCE_PROFILE_COUNT", NVML_COMPUTE_INSTANCE_PROFILE_COUNT},
      {"NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED", NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED},
      {"nvmlEventTypeSingleBitEccError", nvmlEventTypeSingleBitEccError},
      {"nvmlEventTypeDoubleBitEccError", nvmlEventTypeDoubleBitEccError},
      {"nvmlEventTypePState", nvmlEventTypePState},
      {"nvmlEventTypeXidCriticalError", nvmlEventTypeXidCriticalError},
      {"NVML_NVLINK_MAX_LINKS", NVML_NVLINK_MAX_LINKS},
      {"NVML_FEATURE_DISABLED", NVML_FEATURE_DISABLED},
      {"NVML_FEATURE_ENABLED", NVML_FEATURE_ENABLED},
      {"NVML_TOPOLOGY_INTERNAL", NVML_TOPOLOGY_INTERNAL},
      {"NVML_TOPOLOGY_SINGLE", NVML_TOPOLOGY_SINGLE},
      {"NVML_TOPOLOGY_MULTIPLE", NVML_TOPOLOGY_MULTIPLE},
      {"NVML_TOPOLOGY_HOSTBRIDGE", NVML_TOPOLOGY_HOSTBRIDGE},
      {"NVML_TOPOLOGY_NODE", NVML_TOPOLOGY_NODE},
      {"NVML_TOPOLOGY_SYSTEM", NVML_TOPOLOGY_SYSTEM},
      {"NVML_P2P_CAPS_INDEX_NVLINK", NVML_P2P_CAPS_INDEX_NVLINK},
      {"NVML_P2P_STATUS_OK", NVML_P2P_STATUS_OK},
      {"NVML_NVLINK_DEVICE_TYPE_GPU", NVML_NVLINK_DEVICE_TYPE_GPU},
      {"NVML_NVLINK_DEVICE_TYPE_IBMNPU", NVML_NVLINK_DEVICE_TYPE_IBMNPU},
      {"NVML_NVLINK_DEVICE_TYPE_SWITCH", NVML_NVLINK_DEVICE_TYPE_SWITCH},
      {"NVML_NVLINK_DEVICE_TYPE_UNKNOWN", NVML_NVLINK_DEVICE_TYPE_UNKNOWN},
  };
  ref::ExpectConstantsMatch(nvml_, ours, {});
  ref::ExpectEveryDeclaredConstantChecked(
      ref::DeclaredConstantNames(ref::ReadSource("src/nvml/nvml_abi.h")), ours, {});
}

TEST_F(NvmlAbiTest, TypesMatchNvidia) {
  std::map<std::string, ref::TypeFacts> ours;
  PRISM_ABI_TYPE(ours, nvml_, nvmlReturn_t);
  PRISM_ABI_TYPE(ours, nvml_, nvmlDevice_t);
  PRISM_ABI_TYPE(ours, nvml_, nvmlGpuInstance_t);
  PRISM_ABI_TYPE(ours, nvml_, nvmlComputeInstance_t);
  PRISM_ABI_TYPE(ours, nvml_, nvmlEventSet_t);
  // Enum typedefs: int in nvml_abi.h, an enum (canonically int, size and alignment 4) in nvml.h.
  PRISM_ABI_TYPE(ours, nvml_, nvmlEnableState_t);
  PRISM_ABI_TYPE(ours, nvml_, nvmlGpuTopologyLevel_t);
  PRISM_ABI_TYPE(ours, nvml_, nvmlGpuP2PStatus_t);
  PRISM_ABI_TYPE(ours, nvml_, nvmlGpuP2PCapsIndex_t);
  PRISM_ABI_TYPE(ours, nvml_, nvmlIntNvLinkDeviceType_t);
  ref::ExpectTypesMatch(nvml_, ours, {});
}

TEST_F(NvmlAbiTest, StructLayoutsMatchNvidia) {
  std::map<std::string, ref::Layout> ours;
  PRISM_ABI_LAYOUT(ours, nvmlMemory_t);
  PRISM_ABI_FIELD(ours, nvmlMemory_t, total);
  PRISM_ABI_FIELD(ours, nvmlMemory_t, free);
  PRISM_ABI_FIELD(ours, nvmlMemory_t, used);
  PRISM_ABI_LAYOUT(ours, nvmlPciInfo_t);
  PRISM_ABI_FIELD(ours, nvmlPciInfo_t, busIdLegacy);
  PRISM_ABI_FIELD(ours, nvmlPciInfo_t, domain);
  PRISM_ABI_FIELD(ours, nvmlPciInfo_t, bus);
  PRISM_ABI_FIELD(ours, nvmlPciInfo_t, device);
  PRISM_ABI_FIELD(ours, nvmlPciInfo_t, pciDeviceId);
  PRISM_ABI_FIELD(ours, nvmlPciInfo_t, pciSubSystemId);
  PRISM_ABI_FIELD(ours, nvmlPciInfo_t, busId);
  PRISM_ABI_LAYOUT(ours, nvmlGpuInstancePlacement_t);
  PRISM_ABI_FIELD(ours, nvmlGpuInstancePlacement_t, start);
  PRISM_ABI_FIELD(ours, nvmlGpuInstancePlacement_t, size);
  PRISM_ABI_LAYOUT(ours, nvmlGpuInstanceProfileInfo_t);
  PRISM_ABI_FIELD(ours, nvmlGpuInstanceProfileInfo_t, id);
  PRISM_ABI_FIELD(ours, nvmlGpuInstanceProfileInfo_t, isP2pSupported);
  PRISM_ABI_FIELD(ours, nvmlGpuInstanceProfileInfo_t, sliceCount);
  PRISM_ABI_FIELD(ours, nvmlGpuInstanceProfileInfo_t, instanceCount);
  PRISM_ABI_FIELD(ours, nvmlGpuInstanceProfileInfo_t, multiprocessorCount);
  PRISM_ABI_FIELD(ours, nvmlGpuInstanceProfileInfo_t, copyEngineCount);
  PRISM_ABI_FIELD(ours, nvmlGpuInstanceProfileInfo_t, decoderCount);
  PRISM_ABI_FIELD(ours, nvmlGpuInstanceProfileInfo_t, encoderCount);
  PRISM_ABI_FIELD(ours, nvmlGpuInstanceProfileInfo_t, jpegCount);
  PRISM_ABI_FIELD(ours, nvmlGpuInstanceProfileInfo_t, ofaCount);
  PRISM_ABI_FIELD(ours, nvmlGpuInstanceProfileInfo_t, memorySizeMB);
  PRISM_ABI_LAYOUT(ours, nvmlGpuInstanceInfo_t);
  PRISM_ABI_FIELD(ours, nvmlGpuInstanceInfo_t, device);
  PRISM_ABI_FIELD(ours, nvmlGpuInstanceInfo_t, id);
  PRISM_ABI_FIELD(ours, nvmlGpuInstanceInfo_t, profileId);
  PRISM_ABI_FIELD(ours, nvmlGpuInstanceInfo_t, placement);
  PRISM_ABI_LAYOUT(ours, nvmlComputeInstancePlacement_t);
  PRISM_ABI_FIELD(ours, nvmlComputeInstancePlacement_t, start);
  PRISM_ABI_FIELD(ours, nvmlComputeInstancePlacement_t, size);
  PRISM_ABI_LAYOUT(ours, nvmlComputeInstanceProfileInfo_t);
  PRISM_ABI_FIELD(ours, nvmlComputeInstanceProfileInfo_t, id);
  PRISM_ABI_FIELD(ours, nvmlComputeInstanceProfileInfo_t, sliceCount);
  PRISM_ABI_FIELD(ours, nvmlComputeInstanceProfileInfo_t, instanceCount);
  PRISM_ABI_FIELD(ours, nvmlComputeInstanceProfileInfo_t, multiprocessorCount);
  PRISM_ABI_FIELD(ours, nvmlComputeInstanceProfileInfo_t, sharedCopyEngineCount);
  PRISM_ABI_FIELD(ours, nvmlComputeInstanceProfileInfo_t, sharedDecoderCount);
  PRISM_ABI_FIELD(ours, nvmlComputeInstanceProfileInfo_t, sharedEncoderCount);
  PRISM_ABI_FIELD(ours, nvmlComputeInstanceProfileInfo_t, sharedJpegCount);
  PRISM_ABI_FIELD(ours, nvmlComputeInstanceProfileInfo_t, sharedOfaCount);
  PRISM_ABI_LAYOUT(ours, nvmlComputeInstanceInfo_t);
  PRISM_ABI_FIELD(ours, nvmlComputeInstanceInfo_t, device);
  PRISM_ABI_FIELD(ours, nvmlComputeInstanceInfo_t, gpuInstance);
  PRISM_ABI_FIELD(ours, nvmlComputeInstanceInfo_t, id);
  PRISM_ABI_FIELD(ours, nvmlComputeInstanceInfo_t, profileId);
  PRISM_ABI_FIELD(ours, nvmlComputeInstanceInfo_t, placement);
  PRISM_ABI_LAYOUT(ours, nvmlProcessInfo_t);
  PRISM_ABI_FIELD(ours, nvmlProcessInfo_t, pid);
  PRISM_ABI_FIELD(ours, nvmlProcessInfo_t, usedGpuMemory);
  PRISM_ABI_FIELD(ours, nvmlProcessInfo_t, gpuInstanceId);
  PRISM_ABI_FIELD(ours, nvmlProcessInfo_t, computeInstanceId);
  PRISM_ABI_LAYOUT(ours, nvmlDeviceAttributes_t);
  PRISM_ABI_FIELD(ours, nvmlDeviceAttributes_t, multiprocessorCount);
  PRISM_ABI_FIELD(ours, nvmlDeviceAttributes_t, sharedCopyEngineCount);
  PRISM_ABI_FIELD(ours, nvmlDeviceAttributes_t, sharedDecoderCount);
  PRISM_ABI_FIELD(ours, nvmlDeviceAttributes_t, sharedEncoderCount);
  PRISM_ABI_FIELD(ours, nvmlDeviceAttributes_t, sharedJpegCount);
  PRISM_ABI_FIELD(ours, nvmlDeviceAttributes_t, sharedOfaCount);
  PRISM_ABI_FIELD(ours, nvmlDeviceAttributes_t, gpuInstanceSliceCount);
  PRISM_ABI_FIELD(ours, nvmlDeviceAttributes_t, computeInstanceSliceCount);
  PRISM_ABI_FIELD(ours, nvmlDeviceAttributes_t, memorySizeMB);
  PRISM_ABI_LAYOUT(ours, nvmlEventData_t);
  PRISM_ABI_FIELD(ours, nvmlEventData_t, device);
  PRISM_ABI_FIELD(ours, nvmlEventData_t, eventType);
  PRISM_ABI_FIELD(ours, nvmlEventData_t, eventData);
  PRISM_ABI_FIELD(ours, nvmlEventData_t, gpuInstanceId);
  PRISM_ABI_FIELD(ours, nvmlEventData_t, computeInstanceId);
  PRISM_ABI_LAYOUT(ours, nvmlProcessUtilizationSample_t);
  PRISM_ABI_FIELD(ours, nvmlProcessUtilizationSample_t, pid);
  PRISM_ABI_FIELD(ours, nvmlProcessUtilizationSample_t, timeStamp);
  PRISM_ABI_FIELD(ours, nvmlProcessUtilizationSample_t, smUtil);
  PRISM_ABI_FIELD(ours, nvmlProcessUtilizationSample_t, memUtil);
  PRISM_ABI_FIELD(ours, nvmlProcessUtilizationSample_t, encUtil);
  PRISM_ABI_FIELD(ours, nvmlProcessUtilizationSample_t, decUtil);
  // The interceptor's structs (src/intercept/abi_reference_test.cc compares them).
  ref::ExpectLayoutsMatch(nvml_, ours, {"nvmlMemory_v2_t", "nvmlUtilization_t"});
}

TEST_F(NvmlAbiTest, EveryResolvedFunctionMatchesNvidia) {
  const std::map<std::string, ref::Function> ours = DeclaredFunctions(nvml_);
  ASSERT_GT(ours.size(), 37u);
  for (const auto& [name, prototype] : ours) {
    ref::ExpectPrototypeMatches(nvml_, name, prototype);
    // nvml.h maps no public name to a function we call by its un-suffixed name: we call the
    // version a program compiled against the header would.
    for (const auto& [other, t] : nvml_["functions"].items()) {
      EXPECT_NE(ref::MacroBase(t), name) << "nvml.h maps " << name << " to " << other;
    }
  }
}

// nvml_abi.h declares no function that nvml_symbols.def does not resolve (the loop above checks
// exactly the symbols.def list).
TEST_F(NvmlAbiTest, HeaderDeclaresOnlyResolvedFunctions) {
  const std::map<std::string, ref::Function> ours = DeclaredFunctions(nvml_);
  const std::string header = ref::ReadSource("src/nvml/nvml_abi.h");
  const std::regex prototype(R"((?:nvmlReturn_t|const char\*) (nvml\w+)\()");
  std::set<std::string> declared;
  for (std::sregex_iterator it(header.begin(), header.end(), prototype), end; it != end; ++it) {
    declared.insert((*it)[1]);
  }
  std::set<std::string> resolved;
  for (const auto& [name, p] : ours) resolved.insert(name);
  EXPECT_EQ(declared, resolved);
}

// The complete fake libnvidia-ml.so.1 exports every name DlNvml resolves (its definitions include
// nvml_abi.h, so their prototypes are the checked ones).
TEST_F(NvmlAbiTest, FakeLibraryExportsEveryResolvedName) {
  void* lib = dlopen(PRISM_TEST_BINARY_DIR "/fake-nvml/libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  for (const auto& [name, prototype] : DeclaredFunctions(nvml_)) {
    EXPECT_NE(dlsym(lib, name.c_str()), nullptr) << name;
  }
  dlclose(lib);
}

}  // namespace
}  // namespace prism::nvml
