// src/core/mig/profile.h: MIG profile names ("3g.20gb", "1c.3g.20gb", "1g.5gb+me").
//
// Pure: no I/O. Thread-compatible value types.
//
// Grammar (go-nvlib's parseMigProfile, which mig-parted configs use):
//   profile := [ C "c." ] G "g." GB "gb" [ "+" attr { "," attr } | "-" attr ]
//   attr    := "me" | "me.all" | "gfx"      (the negative form is only "-me")
// C defaults to G. Names compare structurally (C, G, GB, attributes), so
// "1c.1g.5gb" equals "1g.5gb".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace prism::mig {

// Attribute bits of a profile name.
enum ProfileAttr : uint8_t {
  kAttrNone = 0,
  kAttrMediaExtensions = 1 << 0,     // "+me": the GPU's single set of media/OFA engines.
  kAttrAllMediaExtensions = 1 << 1,  // "+me.all"
  kAttrGraphics = 1 << 2,            // "+gfx"
  kAttrNoMediaExtensions = 1 << 3,   // "-me"
};

struct ProfileName {
  int compute_slices = 0;  // C: compute slices of the compute instance.
  int gpu_slices = 0;      // G: compute slices of the GPU instance.
  int memory_gb = 0;       // GB as the driver names it (see MigMemorySizeGb).
  uint8_t attrs = kAttrNone;

  // True when the compute instance spans the whole GPU instance ("3g.20gb").
  bool IsFullGpuInstance() const { return compute_slices == gpu_slices; }
  // The GPU-instance part of the name, without the "<C>c." prefix.
  ProfileName GpuInstanceName() const {
    ProfileName gi = *this;
    gi.compute_slices = gi.gpu_slices;
    return gi;
  }
  // Canonical spelling: "1g.5gb", "1c.3g.20gb", "1g.10gb+me", "1g.24gb-me".
  std::string ToString() const;

  friend bool operator==(const ProfileName&, const ProfileName&) = default;
  friend auto operator<=>(const ProfileName&, const ProfileName&) = default;
};

// Parses a profile name. Returns InvalidArgument naming what is wrong.
absl::StatusOr<ProfileName> ParseProfileName(std::string_view text);

// The "GB" of a profile name, computed the way the driver and go-nvlib do:
//   round(ceil(8 * profile_bytes / total_bytes) / 8 * ceil(total_bytes / GiB))
// with round-half-away-from-zero. `total_device_mib` is the parent GPU's
// nvmlDeviceGetMemoryInfo().total in MiB.
int MigMemorySizeGb(int64_t profile_memory_mib, int64_t total_device_mib);

}  // namespace prism::mig
