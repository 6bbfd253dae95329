// tests/e2e/harness/validator.h: an independent check that no GPU is overcommitted.
//
// Reads only the API objects (nodes' prism.io/gpu-inventory, bound pods' requests and
// prism.io/decision) with its own JSON parsing — no placement engine, no decision decoder — and
// reports every violation it finds:
//   - a GPU pod bound without a decision, or with one naming another node;
//   - a decision whose containers or device counts differ from the pod's requests, or that grants
//     less memory than a container asked for;
//   - a device on a GPU the node does not have, or of the wrong mode;
//   - software slices: memory, compute (percent) or task count beyond the GPU's;
//     one container holding the same GPU twice;
//   - MIG: two pods on one instance, overlapping instances, an instance beyond the GPU's slices.
// Per pod and GPU, usage follows Kubernetes' init-container rule: max(largest init container,
// sum of the other containers). Thread-compatible; pure.
#pragma once

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace prism::e2e {

struct ValidatorOptions {
  int split_count = 10;  // Device config deviceSplitCount.
  std::string count_resource = "nvidia.com/gpu";
  std::string memory_resource = "nvidia.com/gpumem";
};

struct ValidationReport {
  std::vector<std::string> violations;
  int pods_checked = 0;
  int gpus_used = 0;
  bool ok() const { return violations.empty(); }
  std::string Summary() const;
};

ValidationReport ValidateAllocations(const std::vector<nlohmann::json>& nodes,
                                     const std::vector<nlohmann::json>& pods,
                                     const ValidatorOptions& options = {});

}  // namespace prism::e2e
