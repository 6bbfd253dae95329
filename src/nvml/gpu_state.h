// src/nvml/gpu_state.h: a GPU's MIG state read through Nvml, in the layout
// engine's terms.
#pragma once

#include <vector>

#include "absl/status/statusor.h"

#include "core/mig/gpu_model.h"
#include "core/mig/layout.h"
#include "nvml/nvml.h"

namespace prism::nvml {

// The MIG model of `gpu`: the catalog entry (matched by PCI device ID, then
// name) with every value NVML reports live taking precedence (profile IDs,
// memory, SMs, engines, counts, placements); profile names are derived with the
// driver's formula. A MIG-capable GPU missing from the catalog is modelled from
// NVML alone. Unimplemented if the GPU is not MIG capable.
absl::StatusOr<mig::GpuModel> ModelForGpu(Nvml& nvml, const GpuInfo& gpu);

struct GpuMigState {
  GpuInfo info;
  MigModeState mode;
  mig::GpuModel model;
  std::vector<GpuInstanceInfo> instances;  // As NVML lists them (empty when MIG is off).
  // The same instances in layout-engine terms, parallel to `instances`; an
  // instance is busy when a process runs on it.
  mig::Layout layout;
};

// Reads the mode, instances and processes of a MIG-capable GPU.
absl::StatusOr<GpuMigState> ReadGpuMigState(Nvml& nvml, const GpuInfo& gpu);

}  // namespace prism::nvml
