// src/migparted/config.h: NVIDIA mig-parted's v1 configuration format.
//
//   version: v1
//   mig-configs:
//     <name>:
//       - device-filter: ["0x20B010DE"]   # optional: string or list, 0xDDDDVVVV[:0xSSSSssss]
//         devices: all                    # or a list of GPU indices
//         mig-enabled: true
//         mig-devices: {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
//
// Parsing is strict like mig-parted's (unknown keys are errors) and takes
// NVIDIA's default config unchanged. Thread-compatible value types.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace prism::migparted {

// One device-filter entry: a PCI device+vendor ID, optionally with the
// subsystem device+vendor ID.
struct DeviceFilter {
  uint32_t device_id = 0;  // 0xDDDDVVVV
  std::optional<uint32_t> subsystem_id;
  bool Matches(uint32_t device, uint32_t subsystem) const;
  std::string ToString() const;
  friend bool operator==(const DeviceFilter&, const DeviceFilter&) = default;
};

struct MigConfigSpec {
  std::vector<DeviceFilter> device_filter;  // Empty: every GPU.
  bool all_devices = false;                 // devices: all
  std::vector<int> devices;                 // devices: [i, ...] when !all_devices
  bool mig_enabled = false;
  std::map<std::string, int> mig_devices;  // Profile name -> count, as written.
  bool has_mig_devices = false;            // The key was present.

  // Whether the spec applies to GPU `index` with the given PCI IDs.
  bool Applies(int index, uint32_t pci_device_id, uint32_t pci_subsystem_id) const;
};

struct MigConfigFile {
  std::string version;
  // Config names in file order, and their specs.
  std::vector<std::string> names;
  std::map<std::string, std::vector<MigConfigSpec>> configs;
};

// Parses and validates a v1 file. InvalidArgument naming what is wrong
// (malformed YAML, unknown version or key, bad profile name or count,
// mig-devices with mig-enabled: false, ...).
absl::StatusOr<MigConfigFile> ParseMigConfig(const std::string& yaml_text);

// The specs of config `name`; when `name` is empty the file must hold exactly
// one config. NotFound listing the available names.
absl::StatusOr<std::vector<MigConfigSpec>> SelectMigConfig(const MigConfigFile& file,
                                                           const std::string& name);

// Serializes a config file (YAML, or JSON when `json`), in mig-parted's key
// names. Round-trips through ParseMigConfig.
std::string SerializeMigConfig(const MigConfigFile& file, bool json);

}  // namespace prism::migparted
