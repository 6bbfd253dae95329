// src/sim/packing_check.h: an independent check of a finished placement.
//
// The offline packings (offline_packing.h, pattern_packing.h) build their
// placements with their own bookkeeping; this re-checks the result from
// scratch, sharing no code with them or with ClusterState: every pod placed at
// most once, on an existing node whose GPU model it allows, with exactly its
// GPU count of distinct GPUs; per node the CPU and memory of its pods within
// the node's; per software-shared GPU at most 1000 milli-GPU; on a MIG GPU each
// pod in its own instance of a profile that serves its share, and the
// instances of each GPU a legal layout (mig::ValidateLayout). Only the final
// state is checked: a MIG placement's `use` instance, not how it was made.
#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include "absl/status/statusor.h"

#include "sim/cluster.h"

namespace prism::sim {

// Returns the GPU milli requested by the pods placed, or FailedPrecondition /
// InvalidArgument naming the first violation.
absl::StatusOr<int64_t> CheckPacking(const Cluster& cluster, std::span<const PodRequest> pods,
                                     std::span<const std::pair<size_t, Placement>> placements,
                                     MigMapping mapping = MigMapping::kMemory);

}  // namespace prism::sim
