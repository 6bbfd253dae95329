// src/deviceplugin/cdi_spec.h: the per-allocation CDI spec files the node agent writes.
//
// Allocate answers with the CDI device "prism.io/allocation=<allocation ID>"; once the agent has
// worked out which container the allocation serves, it writes
// <cdi-dir>/prism.io-allocation-<ID>.json, one device named <ID> whose containerEdits carry that
// container's env, mounts and NVIDIA device nodes (docs/device-plugin.md). The container runtime resolves the name
// when it creates the container. Files are written atomically (a dot-file that CDI ignores,
// then rename), so a runtime never reads half a spec. File I/O only; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace prism::deviceplugin {

inline constexpr char kCdiKind[] = "prism.io/allocation";
// containerEdits env, mounts and deviceNodes (path, type, major, minor, fileMode, permissions)
// exist since CDI 0.3; 0.5.0 is understood by containerd >= 1.7 and CRI-O >= 1.28.
inline constexpr char kCdiVersion[] = "0.5.0";

struct MountEdit {
  std::string host_path;
  std::string container_path;
  bool read_only = true;
  friend bool operator==(const MountEdit&, const MountEdit&) = default;
};

// A character device the runtime creates in the container (mknod with these numbers, so the
// node need not exist on the host) and allows in its device cgroup with `permissions`.
struct DeviceNodeEdit {
  std::string path;  // In the container, and on the host.
  uint32_t major = 0;
  uint32_t minor = 0;
  uint32_t file_mode = 0666;  // Permission bits of the node in the container.
  std::string permissions = "rwm";
  friend bool operator==(const DeviceNodeEdit&, const DeviceNodeEdit&) = default;
};

struct ContainerEdits {
  std::vector<std::pair<std::string, std::string>> env;  // In order; later entries win.
  std::vector<MountEdit> mounts;
  std::vector<DeviceNodeEdit> device_nodes;
  friend bool operator==(const ContainerEdits&, const ContainerEdits&) = default;
};

// "prism.io/allocation=<id>".
std::string CdiDeviceName(std::string_view allocation_id);
// "<cdi_dir>/prism.io-allocation-<id>.json".
std::string CdiSpecPath(std::string_view cdi_dir, std::string_view allocation_id);
// The spec's JSON text.
std::string CdiSpecJson(std::string_view allocation_id, const ContainerEdits& edits);

// Writes (or replaces) the spec of `allocation_id`. Internal naming the path on I/O errors.
absl::Status WriteCdiSpec(const std::string& cdi_dir, std::string_view allocation_id,
                          const ContainerEdits& edits);
// Removes it; OK if it does not exist.
absl::Status RemoveCdiSpec(const std::string& cdi_dir, std::string_view allocation_id);
// Allocation IDs of every Prism spec file in `cdi_dir`.
std::vector<std::string> ListCdiSpecIds(const std::string& cdi_dir);

}  // namespace prism::deviceplugin
