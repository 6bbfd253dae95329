// src/config/dra_names.h: the names of Prism's DRA objects (docs/dra.md, "Names used
// throughout" and §1.4), shared by the node agent, which publishes devices under them
// (src/deviceplugin/dra_slices.*, dra_mig.*), and the scheduler side, which writes them into
// claims' status.allocation (dra_allocation.h). One function per name, so that what is allocated
// is exactly what is published. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/mig/gpu_model.h"

namespace prism::config {

// The DRA driver, and the one pool per node it publishes (named after the node).
inline constexpr char kDraDriverName[] = "gpu.prism.io";
// Prism's DeviceClasses: whole GPUs, MIG partitions, software slices (docs/dra-design.md §1.5).
inline constexpr char kDraWholeGpuClass[] = "gpu.prism.io";
inline constexpr char kDraMigClass[] = "mig.gpu.prism.io";
inline constexpr char kDraSliceClass[] = "slice.gpu.prism.io";
// The finalizer Prism puts on claims it allocated (docs/dra-design.md §2.4).
inline constexpr char kDraAllocationFinalizer[] = "prism.io/dra-allocation";

// "gpu-<minor>": a GPU not in MIG mode (NVIDIA's DRA driver's deviceinfo.go CanonicalName).
std::string DraGpuDeviceName(uint32_t minor);
// "1g.10gb+me" -> "1g10gb-me": lower case, '.' removed, anything outside [a-z0-9-] -> '-'.
std::string DraCanonicalProfileName(std::string_view profile);
// "gpu-<minor>-mig-<profile>-<profileID>-<start>" (NVIDIA's mig.go ToCanonicalName).
std::string DraMigDeviceName(uint32_t minor, const mig::GpuInstanceProfile& profile, int start);
// The attribute `computePercent` of a partition device: its profile's share of the GPU's
// compute slices in whole percent, rounded down, so that a claim's selector
// `computePercent >= c` admits exactly the profiles the engine gives c % of the compute
// (sched::MigProfileCorePermille >= 10 c: floor(floor(1000 s / n) / 10) = floor(100 s / n)).
int32_t DraComputePercent(const mig::GpuModel& model, int profile);

}  // namespace prism::config
