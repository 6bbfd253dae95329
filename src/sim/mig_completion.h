// src/sim/mig_completion.h: the pattern packing's last step on MIG GPUs.
//
// The pods an offline packing of MIG nodes leaves out, inserted one by one,
// largest request first: each GPU of the pod gets a new instance of the
// smallest profile that serves its share (ProfileServes), at a legal start
// where mig::CanAdd says the GPU's current instances leave room (the catalog's
// placement rules, not re-implemented here), on the node and GPUs it leaves
// tightest (fewest free memory slices). Every placement is applied through
// ClusterState, which validates the resulting layouts again; a pod that fits
// nowhere is skipped, as an offline packer may. Deterministic.
#pragma once

#include <span>

#include "sim/cluster.h"
#include "sim/offline_packing.h"

namespace prism::sim {

// `start`: a feasible packing of `pods` whose MIG placements create one
// instance per GPU and destroy none (PackWithPatterns' integer program), or
// empty (then the result is a greedy packing, the integer program's start);
// returned with the inserted pods appended. Placements on software-shared
// GPUs in `start` are kept, and no pod is inserted there.
OfflinePacking CompleteMigPacking(const Cluster& cluster, std::span<const PodRequest> pods,
                                  const OfflinePacking& start, MigMapping mapping);

}  // namespace prism::sim
