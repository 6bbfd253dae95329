// src/deviceplugin/annotations.h: the annotations the node agent writes (docs/annotations.md).
// Header only, so readers (the scheduler extender) need not link the agent.
#pragma once

#include "config/allocation_status.h"

namespace prism::deviceplugin {

// On the Node: the GPU inventory (inventory.h has the codec).
inline constexpr char kInventoryAnnotation[] = "prism.io/gpu-inventory";
// On each Pod with GPU containers: per container, the allocation IDs, device IDs and the devices
// realized, or the reason it got none (config/allocation_status.h has the codec).
using config::kAllocationStatusAnnotation;

}  // namespace prism::deviceplugin
