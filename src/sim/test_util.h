// src/sim/test_util.h: small clusters and pods for the simulator's tests (test-only).
#pragma once

#include <string>
#include <vector>

#include "base/check.h"
#include "core/mig/gpu_model.h"
#include "sim/cluster.h"
#include "sim/workload.h"

namespace prism::sim::testing {

// `gpus_per_node[i]` GPUs of model "M0" on node "node-<i>", 64 cores, 256 GiB.
inline Cluster SmallCluster(const std::vector<int>& gpus_per_node) {
  std::vector<NodeSpec> nodes;
  for (size_t i = 0; i < gpus_per_node.size(); ++i) {
    NodeSpec n;
    n.name = "node-" + std::to_string(i);
    n.milli_cpu = 64000;
    n.memory_mib = 262144;
    n.gpu_count = gpus_per_node[i];
    n.model = gpus_per_node[i] > 0 ? 0 : -1;
    nodes.push_back(n);
  }
  auto c = Cluster::FromNodes(std::move(nodes), {"M0"});
  PRISM_CHECK(c.ok());
  return *std::move(c);
}

inline const mig::GpuModel& A100() {
  const mig::GpuModel* m = mig::FindModel("A100-SXM4-80GB");
  PRISM_CHECK(m != nullptr);
  return *m;
}

inline PodRequest Pod(std::string name, int gpu_count, int gpu_milli, int64_t cpu = 1000,
                      int64_t memory = 1024) {
  PodRequest p;
  p.name = std::move(name);
  p.milli_cpu = cpu;
  p.memory_mib = memory;
  p.gpu_count = gpu_count;
  p.gpu_milli = gpu_count > 0 ? gpu_milli : 0;
  return p;
}

inline int Profile(const mig::GpuModel& model, const char* name) {
  const int p = model.FindProfile(name);
  PRISM_CHECK(p >= 0);
  return p;
}

// `pods` in this order, as the trace's pods too; node i gets tie-break rank count-1-i (the last
// node wins ties).
inline Workload Sequence(const Cluster& c, std::vector<PodRequest> pods) {
  Workload w;
  w.trace_pods = pods;
  w.pods = std::move(pods);
  for (int i = 0; i < c.node_count(); ++i) w.node_rank.push_back(c.node_count() - 1 - i);
  return w;
}

}  // namespace prism::sim::testing
