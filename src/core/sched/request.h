// src/core/sched/request.h: what a pod asks of the placement engine.
//
// Pure value types: no I/O, no parsing of Kubernetes objects (src/config/ turns
// pod YAML/JSON and HAMi annotations into a PodRequest). Thread-compatible.
//
// Units. CPU in millicores, host memory in bytes, GPU memory in MiB or in
// per-mille of a GPU, GPU compute in per-mille of a GPU (1000 = a whole GPU;
// HAMi's `nvidia.com/gpucores: 30` is 300). Per-mille rather than HAMi's
// percent keeps the Alibaba trace's `gpu_milli` exact.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/topo/gpu_sets.h"

namespace prism::sched {

inline constexpr int32_t kPermille = 1000;

// How a GPU shares itself out.
enum class GpuMode : uint8_t {
  kHamiCore = 0,  // Software slices: memory and compute shares, hami-core style.
  kMig = 1,       // MIG instances.
};
std::string_view GpuModeName(GpuMode mode);  // "hami-core", "mig".

// Set of modes a request accepts (HAMi's `nvidia.com/vgpu-mode`).
using ModeMask = uint8_t;
inline constexpr ModeMask kModeHamiCore = 1 << 0;
inline constexpr ModeMask kModeMig = 1 << 1;
inline constexpr ModeMask kModeAny = kModeHamiCore | kModeMig;
inline constexpr ModeMask ModeBit(GpuMode mode) {
  return mode == GpuMode::kMig ? kModeMig : kModeHamiCore;
}

// GPU devices one container asks for; every device gets the same share.
struct GpuRequest {
  int32_t count = 0;            // Devices (HAMi `nvidia.com/gpu`). 0 = no GPU.
  int64_t memory_mib = 0;       // Per device; wins over memory_permille when > 0.
  int32_t memory_permille = 0;  // Per device, of the device's memory (0..1000).
  int32_t cores_permille = 0;   // Per device compute share (0..1000); 1000 = the whole GPU.
  // Every device on one known NUMA node, even a single one: a DRA claim's `matchAttribute:
  // resource.kubernetes.io/numaNode` (upstream's constraint refuses a device without the
  // attribute). Not on MIG devices. TopologyRequest::numa_bind is HAMi's pod-wide cousin.
  bool numa_match = false;

  bool Exclusive() const { return cores_permille >= kPermille; }
  friend bool operator==(const GpuRequest&, const GpuRequest&) = default;
};

struct ContainerRequest {
  std::string name;
  // Init containers run one by one before the others. A sidecar (an init container with
  // restartPolicy: Always) is not one here: it runs beside the others for the pod's life.
  bool init = false;
  int64_t cpu_milli = 0;     // requests.cpu (limits when no request is given).
  int64_t memory_bytes = 0;  // requests.memory.
  GpuRequest gpu;
};

// What a pod asks of its multi-GPU containers' interconnect (docs/topology.md, "Placement").
struct TopologyRequest {
  // The interconnect first, over packing: within a node (the best-connected set its GPUs
  // allow) and across nodes (a node that gives a better tier wins). HAMi's
  // `hami.io/gpu-scheduler-policy: topology-aware`, Prism's `prism.io/gpu-topology: preferred`.
  bool preferred = false;
  // Every pair of a container's GPUs meets this tier, or the node is refused
  // (`prism.io/gpu-topology: required[:<tier>]`).
  topo::Tier required = topo::Tier::kAny;
  // Every GPU of a container on one NUMA node (HAMi's `nvidia.com/numa-bind: "true"`).
  bool numa_bind = false;
  bool Any() const { return preferred || required != topo::Tier::kAny || numa_bind; }
  friend bool operator==(const TopologyRequest&, const TopologyRequest&) = default;
};

// A pod as the engine sees it: requests plus the scheduling annotations.
struct PodRequest {
  std::string namespace_name;
  std::string name;
  std::string uid;
  // In pod order: init containers first (as HAMi encodes them), then the others.
  std::vector<ContainerRequest> containers;
  ModeMask modes = kModeAny;             // nvidia.com/vgpu-mode.
  std::vector<std::string> use_types;    // nvidia.com/use-gputype (case-insensitive substrings).
  std::vector<std::string> nouse_types;  // nvidia.com/nouse-gputype.
  std::vector<std::string> use_uuids;    // nvidia.com/use-gpuuuid (exact).
  std::vector<std::string> nouse_uuids;  // nvidia.com/nouse-gpuuuid.
  // Policy names (see policy.h); empty = the engine's default.
  std::string node_policy;  // hami.io/node-scheduler-policy.
  std::string gpu_policy;   // hami.io/gpu-scheduler-policy.
  TopologyRequest topology;
  // `prism.io/mig-sharing`: false ("off") keeps the pod on whole MIG instances where the device
  // config's migSharing would let its containers share one (docs/mig-slices.md).
  bool mig_sharing = true;

  // Kubernetes' effective request: max(largest init container, sum of the others).
  int64_t EffectiveCpuMilli() const;
  int64_t EffectiveMemoryBytes() const;
  bool WantsGpu() const;
  // "namespace/name" (or just the name when the namespace is empty).
  std::string Key() const;
  // Everything that influences placement (not names or uid), as a compact
  // string: pods with equal shapes are placed alike on equal nodes.
  std::string ShapeKey() const;
};

}  // namespace prism::sched
