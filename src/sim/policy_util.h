// src/sim/policy_util.h: filters and GPU choices the built-in policies share.
#pragma once

#include <vector>

#include "sim/cluster.h"

namespace prism::sim {

// Whether `pod` fits `node` with software-shared GPUs: CPU and memory
// (Kubernetes' NodeResourcesFit), and for GPU pods an allowed GPU model and
// `gpu_count` distinct GPUs with `gpu_milli` free each (the FGD simulator's
// Open-Gpu-Share filter). CPU-only pods fit any node with room, MIG or not.
bool SharedFits(const ClusterState& state, int node, const PodRequest& pod);

// The GPUs a pod takes on a software-shared node: `gpu_count` distinct GPUs
// with enough free, tightest first, lower index on ties (for whole-GPU pods:
// the lowest-indexed idle GPUs). REQUIRES: SharedFits.
std::vector<int> TightestGpus(const ClusterState& state, int node, const PodRequest& pod);

// Of `candidates`, the index (into candidates) of the best: highest score,
// then lowest node rank. REQUIRES: scores.size() == candidates.size() > 0.
template <typename Score>
int BestByScoreThenRank(const std::vector<int>& candidates, const std::vector<Score>& scores,
                        const std::vector<int>& node_rank) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(candidates.size()); ++i) {
    if (scores[i] > scores[best] ||
        (scores[i] == scores[best] && node_rank[candidates[i]] < node_rank[candidates[best]])) {
      best = i;
    }
  }
  return best;
}

}  // namespace prism::sim
