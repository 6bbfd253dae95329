// src/deviceplugin/device_nodes.h: the NVIDIA device nodes a container's CDI spec carries.
//
// NVIDIA's own CDI specs (nvidia-ctk cdi generate) give a container its device nodes, so that a
// runtime with CDI and no NVIDIA hook still yields a working container. Prism's per-allocation
// spec does the same (docs/device-plugin.md#device-nodes):
//   every GPU container: /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools, and
//     /dev/nvidia-modeset where the host has it;
//   a full GPU or slice: /dev/nvidia<minor>;
//   a MIG device: its parent's /dev/nvidia<minor> and /dev/nvidia-caps/nvidia-cap<N> of its GPU
//     instance and of its compute instance, N from <proc>/driver/nvidia-caps/mig-minors
//     ("gpu<minor>/gi<id>/access N", "gpu<minor>/gi<id>/ci<id>/access N").
// Numbers: a node that is a character device under the dev root gives its own; otherwise the
// major comes from <proc>/devices ("nvidia" or, before driver 550, "nvidia-frontend";
// "nvidia-uvm"; "nvidia-caps") and the minor from the driver's fixed numbering (nvidiactl 255,
// modeset 254, uvm 0, uvm-tools 1, GPU = its device minor, caps = mig-minors). With type and
// numbers in the spec the runtime creates the node itself, so a cap node that nvidia-modprobe
// never created on the host still works. The GPU's device minor is read from
// <proc>/driver/nvidia/gpus/*/information ("GPU UUID:", "Device Minor:"), else its NVML index.
// File I/O only; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "deviceplugin/cdi_spec.h"
#include "deviceplugin/container_edits.h"

namespace prism::deviceplugin {

struct DeviceNodeOptions {
  // false: the spec carries no device nodes (hosts where the NVIDIA runtime hook adds them from
  // NVIDIA_VISIBLE_DEVICES).
  bool enabled = true;
  // Where the agent sees the host's /dev (dev/nvidia0 ... below it).
  std::string dev_root = "/";
  // Where the agent sees the host's /proc (devices, driver/nvidia-caps/mig-minors, ...).
  std::string proc_root = "/proc";
};

// Character-device majors by name from /proc/devices text (its "Character devices:" part).
std::map<std::string, uint32_t> ParseProcDevices(std::string_view text);
// "gpu0/gi1/access" -> 12 from mig-minors text. InvalidArgument naming the line on a line that
// is not "<name> <minor>".
absl::StatusOr<std::map<std::string, uint32_t>> ParseMigMinors(std::string_view text);
// The GPU UUID and device minor from a /proc/driver/nvidia/gpus/<bus>/information text;
// nullopt when either is missing.
std::optional<std::pair<std::string, uint32_t>> ParseGpuInformation(std::string_view text);

// The device nodes `devices` need, control nodes first, each once. Errors (FailedPrecondition)
// name the node and where its numbers were looked for.
absl::StatusOr<std::vector<DeviceNodeEdit>> NvidiaDeviceNodes(
    const std::vector<RealizedDevice>& devices, const DeviceNodeOptions& options);

// Adds NvidiaDeviceNodes(devices) to `edits` when enabled and `devices` is not empty.
absl::Status AddDeviceNodes(const std::vector<RealizedDevice>& devices,
                            const DeviceNodeOptions& options, ContainerEdits* edits);

}  // namespace prism::deviceplugin
