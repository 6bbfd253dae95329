// src/nvml/sim/sim_models.h: the GPU models the simulated NVML knows, as NVML describes them.
//
// Each model is what the driver reports: nvmlDeviceGetName, PCI device ID, total memory, and per
// GPU-instance profile the nvmlGpuInstanceProfileInfo fields (NVML index, profile ID, slice
// count, memory, SMs, engines, instance count) plus nvmlDeviceGetGpuInstancePossiblePlacements.
// The built-in tables are written from NVIDIA's MIG User Guide and `nvidia-smi mig -lgip/-lgipp`
// transcripts (sources per table in sim_models.cc and docs/nvml-simulator.md), deliberately NOT
// from mig::Catalog(), so tests comparing the simulator with the catalog check each other.
// A state file may add models of its own from NVML tables alone (docs/nvml-simulator.md,
// "Models the catalog does not know").
//
// mig::GpuModel is only the container: profile names are derived here with the driver's formula
// from the NVML index and memory, as the driver names them. Immutable; safe to share.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "core/mig/gpu_model.h"

namespace prism::nvml::sim {

using SimModelPtr = std::shared_ptr<const mig::GpuModel>;

// Every built-in model.
const std::vector<SimModelPtr>& BuiltinSimModels();
// A built-in model by its canonical name, or by any spelling the catalog resolves to that name
// (aliases such as "H100-80GB" keep working in state files). Null if none.
SimModelPtr FindBuiltinSimModel(std::string_view name);

// Attribute bits of a GPU-instance profile by its NVML index (NVML_GPU_INSTANCE_PROFILE_*:
// REV1 "+me", ALL_ME "+me.all", GFX "+gfx", NO_ME "-me").
uint8_t SimProfileAttrs(int nvml_index);

// Parses NVIDIA's placement notation as `nvidia-smi mig -lgipp` prints it: "{0,2,4}:2" (starts
// and size in memory-slice units). InvalidArgument naming what is wrong.
absl::Status ParsePlacements(std::string_view text, std::vector<int>* starts, int* size);
std::string FormatPlacements(const std::vector<int>& starts, int size);

// Fills the model-level facts NVML implies (memory and compute slice counts) and each profile's
// name from its NVML index and memory; checks the table is one a driver could report. Used for
// the built-in tables and for models given in a state file. InvalidArgument naming the profile.
absl::StatusOr<mig::GpuModel> CompleteSimModel(mig::GpuModel model);

}  // namespace prism::nvml::sim
