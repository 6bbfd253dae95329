// src/kubelet/dra/constants.h: names of the kubelet's DRA plugin API that both sides use.
//
// Upstream (k8s.io/kubelet v0.36.0):
//   pkg/apis/pluginregistration/v1/constants.go  DRAPlugin = "DRAPlugin" (PluginInfo.type)
//   pkg/apis/dra/v1/types.go                     DRAPluginService = "v1.DRAPlugin"
//   pkg/apis/dra/v1beta1/types.go                DRAPluginService = "v1beta1.DRAPlugin"
//   dynamic-resource-allocation/kubeletplugin/draplugin.go
//                                                KubeletRegistryDir, KubeletPluginsDir
// The "supported versions" a DRA plugin registers are these gRPC service names; 1.34+ kubelets
// take the first of the plugin's list they know (dra_plugin_manager.go,
// validateSupportedServices), so a plugin lists the newest first.
#pragma once

namespace prism::kubelet {

inline constexpr char kDraPluginType[] = "DRAPlugin";
inline constexpr char kDraV1Service[] = "v1.DRAPlugin";
inline constexpr char kDraV1beta1Service[] = "v1beta1.DRAPlugin";
inline constexpr char kKubeletRegistryDir[] = "/var/lib/kubelet/plugins_registry";
inline constexpr char kKubeletPluginsDir[] = "/var/lib/kubelet/plugins";

}  // namespace prism::kubelet
