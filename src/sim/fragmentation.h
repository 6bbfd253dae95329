// src/sim/fragmentation.h: the FGD paper's GPU fragmentation measure.
//
// Weng et al., "Beware of Fragmentation" (USENIX ATC '23), as its simulator
// computes it (hkust-adsl/kubernetes-scheduler-simulator, pkg/utils/frag.go):
// the workload is summarised by its "typical pods", the most frequent
// (CPU, GPU share, GPU count, GPU models) shapes covering 95 % of the trace's
// pods, each with its frequency. A node's fragmentation is the expected amount
// of its free GPU (milli) that a random typical pod cannot use:
//   - a pod that fits (CPU, enough GPUs with its share free, allowed model)
//     cannot use the free share of GPUs that have less left than it needs;
//   - a pod that does not fit, or asks for no GPU, cannot use any of it.
// Pure and deterministic; the arithmetic follows the reference's order of
// floating-point operations so that score ties fall the same way.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sim/cluster.h"

namespace prism::sim {

struct TypicalPod {
  int64_t milli_cpu = 0;
  int gpu_milli = 0;  // 0 for CPU-only pods.
  int gpu_count = 0;
  std::string gpu_spec;
  uint64_t model_mask = ~0ull;
  double frequency = 0;  // Sums to 1 over the list.
};

// The typical pods of `pods`: shapes by decreasing count (ties: larger shape
// first), taken until they cover `coverage` of the pods, frequencies
// renormalised over the taken ones.
std::vector<TypicalPod> TypicalPods(const std::vector<PodRequest>& pods, double coverage = 0.95);

class FragmentationModel {
 public:
  explicit FragmentationModel(std::vector<TypicalPod> typical);

  const std::vector<TypicalPod>& typical() const { return typical_; }

  // Expected unusable free GPU (milli) of a node of GPU model `model` with
  // `cpu_left` milli-CPU and `gpu_left` milli-GPU free per GPU.
  double NodeFragmentation(int model, int64_t cpu_left, std::span<const int> gpu_left) const;

  // FGD's score for moving a node from fragmentation `before` to `after`:
  // int(100 * sigmoid((before - after) / 1000)).
  static int64_t Score(double before, double after);

 private:
  std::vector<TypicalPod> typical_;
};

}  // namespace prism::sim
