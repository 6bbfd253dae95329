// src/core/sched/test_util.h: builders for placement-engine tests (test-only).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/check.h"
#include "core/sched/cluster.h"
#include "core/sched/device_config.h"
#include "core/sched/engine.h"
#include "core/sched/request.h"

namespace prism::sched::testing {

inline constexpr int64_t kGiB = int64_t{1} << 30;

// HAMi v2.9's default knownMigGeometries for A30 and A100-40GB (chart values).
inline DeviceConfig HamiDefaultConfig() {
  DeviceConfig c;
  c.known_mig_geometries.push_back(
      {{"A30"},
       {{{"1g.6gb", 6144, 25, 4}}, {{"2g.12gb", 12288, 50, 2}}, {{"4g.24gb", 24576, 100, 1}}}});
  c.known_mig_geometries.push_back({{"A100-SXM4-40GB", "A100-40GB-PCIe", "A100-PCIE-40GB"},
                                    {{{"1g.5gb", 5120, 14, 7}},
                                     {{"1g.5gb", 5120, 14, 1}, {"2g.10gb", 10240, 28, 3}},
                                     {{"3g.20gb", 20480, 42, 2}},
                                     {{"7g.40gb", 40960, 100, 1}}}});
  return c;
}

inline GpuSpec Gpu(std::string model, std::optional<GpuMode> mode = std::nullopt,
                   int64_t memory_mib = 0) {
  GpuSpec g;
  g.model = std::move(model);
  g.mode = mode;
  g.memory_mib = memory_mib;
  return g;
}

inline NodeSpec Node(std::string name, int64_t cpus, int64_t mem_gib, std::vector<GpuSpec> gpus) {
  NodeSpec n;
  n.name = std::move(name);
  n.cpu_milli = cpus * 1000;
  n.memory_bytes = mem_gib * kGiB;
  n.gpus = std::move(gpus);
  return n;
}

inline NodeSpec Node(std::string name, int64_t cpus, int64_t mem_gib, int count,
                     const GpuSpec& gpu) {
  return Node(std::move(name), cpus, mem_gib, std::vector<GpuSpec>(count, gpu));
}

// One container asking for `count` GPUs of `memory_mib` MiB and `cores` percent.
inline PodRequest GpuPod(std::string name, int32_t count, int64_t memory_mib, int32_t cores = 0,
                         ModeMask modes = kModeAny) {
  PodRequest p;
  p.namespace_name = "default";
  p.name = std::move(name);
  ContainerRequest c;
  c.name = "main";
  c.cpu_milli = 1000;
  c.memory_bytes = kGiB;
  c.gpu.count = count;
  c.gpu.memory_mib = memory_mib;
  c.gpu.cores_permille = cores * 10;
  p.containers.push_back(c);
  p.modes = modes;
  return p;
}

// A pod asking for CPU and host memory only.
inline PodRequest CpuPod(std::string name, int64_t cpu_milli) {
  PodRequest p;
  p.namespace_name = "default";
  p.name = std::move(name);
  ContainerRequest c;
  c.name = "main";
  c.cpu_milli = cpu_milli;
  c.memory_bytes = kGiB;
  p.containers.push_back(c);
  return p;
}

// A pod asking for a fraction of one GPU (the Alibaba trace's gpu_milli).
inline PodRequest SharePod(std::string name, int32_t milli, int64_t cpu_milli = 1000,
                           int32_t count = 1) {
  PodRequest p = CpuPod(std::move(name), cpu_milli);
  GpuRequest& gpu = p.containers[0].gpu;
  gpu.count = count;
  gpu.memory_permille = milli;
  gpu.cores_permille = milli;
  return p;
}

inline Engine MakeEngine(const std::vector<NodeSpec>& nodes, const DeviceConfig& config,
                         EngineOptions options = {}) {
  auto state = ClusterState::Build(nodes, config);
  PRISM_CHECK(state.ok());
  return Engine(std::move(*state), config, options);
}

}  // namespace prism::sched::testing
