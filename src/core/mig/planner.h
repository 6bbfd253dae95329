// src/core/mig/planner.h: the MIG operations that turn one GPU layout into another.
//
// Pure: no NVML, no clock, no logging. Thread-compatible.
#pragma once

#include "absl/status/statusor.h"

#include "core/mig/gpu_model.h"
#include "core/mig/layout.h"

namespace prism::mig {

struct MigPlan {
  Layout keep;     // Existing instances left untouched.
  Layout destroy;  // Existing instances to destroy first (never busy ones).
  Layout create;   // New instances with planned starts, in creation order.

  bool NoOp() const { return destroy.empty() && create.empty(); }
  // keep + create: the layout after the plan runs.
  Layout Result() const;
};

// Plans `current` -> a layout with exactly `desired` instances per profile.
// Keeps as many current instances as possible (every busy one, or an error),
// destroys the rest and places the new ones where they leave the most useful
// free space. Re-planning a satisfied layout yields a no-op.
// Errors: InvalidArgument if `current` is illegal or `desired` cannot form a
// legal layout on `model`; FailedPrecondition, naming the instance, if a busy
// instance would have to be destroyed or moved.
absl::StatusOr<MigPlan> PlanTransition(const GpuModel& model, const Layout& current,
                                       const ProfileCounts& desired,
                                       const ProfileWeights& weights = {});

// Plans `current` -> exactly `desired` (profiles and starts). Instances present
// in both at the same place are kept.
// Errors as PlanTransition.
absl::StatusOr<MigPlan> PlanExactTransition(const GpuModel& model, const Layout& current,
                                            const Layout& desired);

}  // namespace prism::mig
