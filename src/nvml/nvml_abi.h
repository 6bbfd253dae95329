// src/nvml/nvml_abi.h: the part of NVML's C ABI that Prism uses.
//
// Declared here (rather than taken from nvml.h) because NVIDIA's header is not
// packaged in Debian main; layouts and constants follow NVML API version 13
// (mig.md §4). DlNvml resolves these names with dlsym; the fake
// libnvidia-ml.so.1 used in tests defines them. Nothing else includes this.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlGpuInstance_st* nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st* nvmlComputeInstance_t;
typedef struct nvmlEventSet_st* nvmlEventSet_t;
// Enums in nvml.h, passed as int (their values below).
typedef int nvmlEnableState_t;
typedef int nvmlGpuTopologyLevel_t;
typedef int nvmlGpuP2PStatus_t;
typedef int nvmlGpuP2PCapsIndex_t;
typedef int nvmlIntNvLinkDeviceType_t;

#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_DEVICE_MIG_DISABLE 0
#define NVML_DEVICE_MIG_ENABLE 1
#define NVML_GPU_INSTANCE_PROFILE_COUNT 0x12
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT 0x9
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0
#define nvmlEventTypeSingleBitEccError 0x0000000000000001LL
#define nvmlEventTypeDoubleBitEccError 0x0000000000000002LL
#define nvmlEventTypePState 0x0000000000000004LL
#define nvmlEventTypeXidCriticalError 0x0000000000000008LL
#define NVML_NVLINK_MAX_LINKS 36
#define NVML_FEATURE_DISABLED 0
#define NVML_FEATURE_ENABLED 1
// nvmlGpuTopologyLevel_t: the closest common ancestor of two GPUs on the PCIe tree.
#define NVML_TOPOLOGY_INTERNAL 0
#define NVML_TOPOLOGY_SINGLE 10
#define NVML_TOPOLOGY_MULTIPLE 20
#define NVML_TOPOLOGY_HOSTBRIDGE 30
#define NVML_TOPOLOGY_NODE 40
#define NVML_TOPOLOGY_SYSTEM 50
#define NVML_P2P_CAPS_INDEX_NVLINK 2
#define NVML_P2P_STATUS_OK 0
#define NVML_NVLINK_DEVICE_TYPE_GPU 0x00
#define NVML_NVLINK_DEVICE_TYPE_IBMNPU 0x01
#define NVML_NVLINK_DEVICE_TYPE_SWITCH 0x02
#define NVML_NVLINK_DEVICE_TYPE_UNKNOWN 0xFF

typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlPciInfo_st {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;  // (device ID << 16) | vendor ID
  unsigned int pciSubSystemId;
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct nvmlGpuInstancePlacement_st {
  unsigned int start;
  unsigned int size;
} nvmlGpuInstancePlacement_t;

typedef struct nvmlGpuInstanceProfileInfo_st {
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

typedef struct nvmlGpuInstanceInfo_st {
  nvmlDevice_t device;
  unsigned int id;
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct nvmlComputeInstancePlacement_st {
  unsigned int start;
  unsigned int size;
} nvmlComputeInstancePlacement_t;

typedef struct nvmlComputeInstanceProfileInfo_st {
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

typedef struct nvmlComputeInstanceInfo_st {
  nvmlDevice_t device;  // The MIG device handle.
  nvmlGpuInstance_t gpuInstance;
  unsigned int id;
  unsigned int profileId;
  nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

typedef struct nvmlProcessInfo_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct nvmlProcessUtilizationSample_st {
  unsigned int pid;
  unsigned long long timeStamp;  // CPU timestamp in microseconds.
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct nvmlDeviceAttributes_st {
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  unsigned int gpuInstanceSliceCount;
  unsigned int computeInstanceSliceCount;
  unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

typedef struct nvmlEventData_st {
  nvmlDevice_t device;  // The physical GPU (also for an event on one of its MIG devices).
  unsigned long long eventType;
  unsigned long long eventData;  // The XID for nvmlEventTypeXidCriticalError.
  unsigned int gpuInstanceId;    // 0xFFFFFFFF: the whole GPU.
  unsigned int computeInstanceId;
} nvmlEventData_t;

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
const char* nvmlErrorString(nvmlReturn_t result);
nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory);
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode,
                                  unsigned int* pendingMode);
nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode,
                                  nvmlReturn_t* activationStatus);
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t* info);
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device,
                                                           unsigned int profileId,
                                                           nvmlGpuInstancePlacement_t* placements,
                                                           unsigned int* count);
nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                      const nvmlGpuInstancePlacement_t* placement,
                                                      nvmlGpuInstance_t* gpuInstance);
nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                       nvmlGpuInstance_t* gpuInstances, unsigned int* count);
nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                          nvmlGpuInstance_t* gpuInstance);
nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t* info);
nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance,
                                                          unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t* info);
nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance,
                                                  unsigned int profileId,
                                                  nvmlComputeInstance_t* computeInstance);
nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance,
                                                unsigned int profileId,
                                                nvmlComputeInstance_t* computeInstances,
                                                unsigned int* count);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t* computeInstance);
nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                           nvmlComputeInstanceInfo_t* info);
nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_t* infos);
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t* utilization,
                                             unsigned int* processSamplesCount,
                                             unsigned long long lastSeenTimeStamp);
nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t* attributes);
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set);
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* eventTypes);
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set);
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms);
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set);
// Topology (docs/topology.md). cpuSetSize counts unsigned longs, not CPUs.
nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int* node);
nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize,
                                      unsigned long* cpuSet);
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                      nvmlEnableState_t* isActive);
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                 nvmlPciInfo_t* pci);
nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                 nvmlIntNvLinkDeviceType_t* pNvLinkDeviceType);
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                    nvmlGpuP2PCapsIndex_t p2pIndex, nvmlGpuP2PStatus_t* p2pStatus);
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 nvmlGpuTopologyLevel_t* pathInfo);

#ifdef __cplusplus
}  // extern "C"
#endif
