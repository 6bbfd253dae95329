// src/sim/trace.h: the Alibaba cluster-trace-gpu-v2023 ("openb") CSV formats.
//
// Node list: `sn,cpu_milli,memory_mib,gpu,model`.
// Pod list:  `name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,
//             creation_time,deletion_time,scheduled_time]` (the multigpu* files carry
//             only the first five columns).
// Columns are found by their header names, in any order; extra columns are
// ignored. Parsing is pure (text in, values out); errors name the source, line
// and column. The shipped default trace is compiled in (EmbeddedDefaultTrace).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace prism::sim {

struct TraceNode {
  std::string name;
  int64_t milli_cpu = 0;
  int64_t memory_mib = 0;
  int gpus = 0;
  std::string model;  // Empty for a CPU-only node.
};

struct TracePod {
  std::string name;
  int64_t milli_cpu = 0;
  int64_t memory_mib = 0;
  int num_gpu = 0;    // 0..64.
  int gpu_milli = 0;  // Per-GPU share, 1..1000 when num_gpu > 0, else 0.
  // Allowed GPU models, '|'-separated without empty pieces; empty = any model.
  std::string gpu_spec;
  std::string qos;
  std::string phase;
  std::optional<int64_t> creation_time;  // Seconds from the trace start.
  std::optional<int64_t> deletion_time;
  std::optional<int64_t> scheduled_time;

  int64_t TotalGpuMilli() const { return static_cast<int64_t>(num_gpu) * gpu_milli; }
};

struct Trace {
  std::vector<TraceNode> nodes;
  std::vector<TracePod> pods;
};

// `source` names the input in error messages (e.g. a file name).
absl::StatusOr<std::vector<TraceNode>> ParseNodeCsv(std::string_view text, std::string_view source);
absl::StatusOr<std::vector<TracePod>> ParsePodCsv(std::string_view text, std::string_view source);

// The shipped trace (data/traces/): the 1,213 GPU nodes and the default pod list.
const Trace& EmbeddedDefaultTrace();
// Names of the embedded files, for reports.
inline constexpr std::string_view kEmbeddedNodeFile = "openb_node_list_gpu_node.csv";
inline constexpr std::string_view kEmbeddedPodFile = "openb_pod_list_default.csv";

}  // namespace prism::sim
