// src/deviceplugin/gpu_api.h: which kubelet APIs a node's GPUs are served through, chosen per
// node by the label prism.io/gpu-api (docs/dra.md, "One node value"), so that one DaemonSet
// serves a cluster with device-plugin nodes, DRA nodes and nodes with both.
//
//   prism.io/gpu-api   agent --dra=true                  agent --dra=false
//   (unset)            both                              device plugin
//   both               both                              device plugin (warning: needs --dra)
//   dra                DRA only                          device plugin (warning: needs --dra)
//   device-plugin      device plugin only                device plugin
//   anything else      both (error naming the label)     device plugin (error naming the label)
//
// A bad value falls back to what the flag alone gives rather than stopping the agent: the
// node's GPUs stay served, and both paths on one node never hand out one GPU twice
// (gpu_holds.h). Read once at start: a changed label takes effect when the agent restarts.
// Pure; thread-safe.
#pragma once

#include <map>
#include <string>

namespace prism::deviceplugin {

inline constexpr char kGpuApiLabel[] = "prism.io/gpu-api";

struct GpuApiChoice {
  bool device_plugin = true;  // Register with the kubelet's device-plugin API.
  bool dra = false;           // Register as the DRA driver and publish ResourceSlices.
  std::string warning;        // Non-empty: what to log (the label and why it was not followed).
};

// `labels`: the node's metadata.labels; `dra_flag`: the agent's --dra.
GpuApiChoice ChooseGpuApi(const std::map<std::string, std::string>& labels, bool dra_flag);

}  // namespace prism::deviceplugin
