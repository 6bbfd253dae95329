// src/migparted/mig_parted.h: apply, assert and export of mig-parted configs
// over an Nvml backend.
//
// Semantics follow NVIDIA's mig-parted (mig.md §5) with two deliberate
// differences: apply keeps every instance that already fits the desired layout
// and creates new ones at planned placements (mig-parted destroys everything
// and lets NVML place), and everything is validated and planned for every GPU
// before the first change, so bad input leaves the GPUs untouched. A failure
// midway through a GPU's changes is rolled back to its previous layout.
// Instances with running processes are never destroyed.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "core/mig/planner.h"
#include "migparted/config.h"
#include "migparted/hooks.h"
#include "nvml/nvml.h"

namespace prism::migparted {

struct ApplyOptions {
  bool skip_reset = false;  // Leave Ampere mode changes pending (no GPU reset).
  bool mode_only = false;   // Stop after the MIG mode phase.
  // Hooks to run (may be null) and the MIG_PARTED_* variables they receive.
  const HooksFile* hooks = nullptr;
  std::map<std::string, std::string> hook_env;
  bool forward_hook_output = false;
};

struct ApplyResult {
  int mode_changes = 0;  // GPUs whose MIG mode was set.
  int resets = 0;        // GPUs reset.
  int created = 0;       // GPU instances created.
  int destroyed = 0;     // GPU instances destroyed.
  int gpus_reconfigured = 0;
};

// Makes the node's GPUs match `specs`. Errors: InvalidArgument for input that
// cannot apply (unknown device index, profile the model lacks, impossible
// layout, MIG requested on a GPU without MIG); FailedPrecondition when an
// instance in use would have to go or a mode change is blocked; the NVML error
// (with what was rolled back) when a GPU call fails.
absl::StatusOr<ApplyResult> Apply(nvml::Nvml& nvml, const std::vector<MigConfigSpec>& specs,
                                  const ApplyOptions& options);

// What Apply would do to one GPU.
struct GpuApplyPreview {
  nvml::GpuInfo info;
  // A spec applies to this MIG-capable GPU (Apply leaves the others alone).
  bool matched = false;
  bool mig_enabled = false;            // The mode the config asks for (when matched).
  std::map<std::string, int> desired;  // MIG devices asked for, canonical names.
  nvml::MigModeState mode;             // Current mode (MIG-capable GPUs).
  std::map<std::string, int> current;  // MIG devices the GPU has now.
  bool mode_change = false;            // The MIG mode (current or pending) must change.
  bool layout_change = false;          // MIG devices must be created or destroyed.
  mig::MigPlan plan;                   // Planned from the current layout (MIG enabled).
};

struct ApplyPreview {
  std::vector<GpuApplyPreview> gpus;  // Every GPU, by index.
  bool NeedsChanges() const;
  bool NeedsModeChange() const;
};

// Everything Apply checks before its first change, without changing anything:
// the same errors as Apply for bad input and for busy instances or processes in
// the way, else what Apply would change on each GPU. Runs no hooks.
absl::StatusOr<ApplyPreview> PreviewApply(nvml::Nvml& nvml,
                                          const std::vector<MigConfigSpec>& specs);

// OK iff the GPUs are in the state `specs` describe (only the MIG mode when
// `mode_only`), i.e. iff Apply would change nothing. GPUs Apply leaves alone (no
// spec selects them, or `devices: all` with MIG on meets a GPU without MIG) are
// not asserted; mig-parted fails them, so that its apply "succeeds" and its
// assert then fails on every run. FailedPrecondition listing each mismatch;
// InvalidArgument for bad input.
absl::Status Assert(nvml::Nvml& nvml, const std::vector<MigConfigSpec>& specs, bool mode_only);

// A config named `label` that reproduces the current state: one spec per
// distinct GPU state, merged like mig-parted's export.
absl::StatusOr<MigConfigFile> Export(nvml::Nvml& nvml, const std::string& label);

}  // namespace prism::migparted
