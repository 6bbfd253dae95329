// src/config/owned_annotations.h: the pod annotations Prism writes and later trusts.
//
// The extender writes a pod's decision with its Binding; the node agent writes the allocation
// status (and the decision of a pod another scheduler placed). Both read them back to charge
// GPU capacity and to recover allocations, so nobody else may set, change or remove them: the
// admission webhook enforces that (docs/security.md), and the readers still treat every value
// as hostile (typed, bounded decoding; a decision is charged only for what the pod requests).
// The HAMi keys are here because Prism decodes them as a fallback when prism.io/decision is
// absent: a forged HAMi key is as good as a forged Prism one.
#pragma once

#include <array>
#include <string_view>

#include "config/allocation_status.h"
#include "config/annotations.h"

namespace prism::config {

inline constexpr std::array<std::string_view, 6> kPrismOwnedPodAnnotations = {
    kPrismDecisionAnnotation,         kAllocationStatusAnnotation,
    kHamiNodeAnnotation,              kHamiDevicesAllocatedAnnotation,
    kHamiDevicesToAllocateAnnotation, kHamiMigAllocationsAnnotation,
};

}  // namespace prism::config
