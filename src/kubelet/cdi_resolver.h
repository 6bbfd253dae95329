// src/kubelet/cdi_resolver.h: resolves CDI device names against spec files, as a container
// runtime does when it creates a container (containerd's and CRI-O's use of the CDI library).
//
// A test double for the runtime, written from the CDI specification (SPEC.md) rather than from
// Prism's writer, so it catches a writer that drifts from the format: every `*.json` / `*.yaml`
// file in the directory is a spec with `cdiVersion`, `kind` ("vendor.com/class"), `devices`
// (each with a valid `name` and non-empty `containerEdits`) and optional spec-level
// `containerEdits`. Resolving "vendor.com/class=name" applies the spec-level edits, then the
// device's. A name defined twice, an unparsable or invalid spec, or an unknown name is an error
// (the runtime refuses to create the container). Reads files only; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace prism::kubelet {

struct CdiMount {
  std::string host_path;
  std::string container_path;
  std::vector<std::string> options;
};

// A device node as the runtime puts it into the OCI spec (linux.devices plus a device-cgroup
// allow rule with `permissions`). Type, numbers and mode left out of the spec are read from the
// host node (hostPath, else path), as the CDI library does; a node that is then still unknown is
// an error.
struct CdiDeviceNode {
  std::string path;
  std::string host_path;
  std::string type;  // "c", "b", "u" or "p".
  int64_t major = 0;
  int64_t minor = 0;
  uint32_t file_mode = 0;
  std::string permissions;  // Subset of "rwm"; the CDI default is "rwm".
};

struct CdiEdits {
  std::vector<std::string> env;  // "KEY=VALUE", in application order.
  std::vector<CdiMount> mounts;
  std::vector<CdiDeviceNode> device_nodes;
};

// True for a valid fully qualified name "vendor.com/class=name".
bool IsQualifiedCdiName(std::string_view name);
// True for a valid device name (alphanumerics, '-', '_', '.', ':'; alphanumeric first and last).
bool IsValidCdiDeviceName(std::string_view name);

// The edits `names` make, in order. NotFound naming the device for an unresolvable name;
// InvalidArgument naming the file for a malformed spec.
absl::StatusOr<CdiEdits> ResolveCdiDevices(const std::string& cdi_dir,
                                           const std::vector<std::string>& names);

// Applies `env` entries ("K=V") over `base`: a later value for a key replaces the earlier one,
// as the OCI spec generator does.
void ApplyEnv(const std::vector<std::string>& env, std::map<std::string, std::string>* base);

}  // namespace prism::kubelet
