// src/sim/embedded_trace_data.h: the shipped trace files (data/traces/), compiled
// into the binary so `prism sim` runs without any file at run time.
// The definitions are generated at build time by src/sim/embed_file.cmake.
#pragma once

#include <string_view>

namespace prism::sim {

// data/traces/openb_node_list_gpu_node.csv, byte for byte.
std::string_view EmbeddedNodeCsv();
// data/traces/openb_pod_list_default.csv, byte for byte.
std::string_view EmbeddedPodCsv();

}  // namespace prism::sim
