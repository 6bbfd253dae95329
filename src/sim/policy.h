// src/sim/policy.h: how a placement policy plugs into the simulator.
//
// The simulator owns the cluster state; a policy only decides. For each pod the
// simulator asks Place(), checks the answer with ClusterState (a policy cannot
// over-commit or move an instance in use), applies it, and tells the policy
// (Placed / Released) so policies that cache per-node data can update. The
// baselines (random, best-fit, FGD, HAMi) and Prism's placement engine all
// implement this interface. Implementations are not thread-safe; a run uses
// one instance at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "sim/cluster.h"
#include "sim/workload.h"

namespace prism::sim {

struct RunContext {
  const Cluster* cluster = nullptr;
  const Workload* workload = nullptr;
  MigMapping mig_mapping = MigMapping::kMemory;
  uint64_t seed = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;

  virtual std::string_view name() const = 0;

  // Called before the first pod of every run (a policy object may run many
  // times). Errors abort the run (e.g. the cluster has a GPU kind the policy
  // cannot handle).
  virtual absl::Status Begin(const RunContext& context) {
    (void)context;
    return absl::OkStatus();
  }

  // Where `pod` should go, or nullopt when it fits nowhere.
  virtual std::optional<Placement> Place(const ClusterState& state, const PodRequest& pod) = 0;

  // After the simulator applied `placement` / released the pod placed there.
  // `pod` is the same object Place() saw (an element of Workload::pods), so its
  // address identifies the pod for the whole run. An error aborts the run (the
  // policy's own bookkeeping broke).
  virtual absl::Status Placed(const ClusterState& state, const PodRequest& pod,
                              const Placement& placement) {
    (void)state, (void)pod, (void)placement;
    return absl::OkStatus();
  }
  virtual absl::Status Released(const ClusterState& state, const PodRequest& pod,
                                const Placement& placement) {
    (void)state, (void)pod, (void)placement;
    return absl::OkStatus();
  }

  // MIG: when a pod leaves, its instance stays (idle, reusable) if true, or is
  // destroyed (the default: instances are created for and with their pod).
  virtual bool keeps_idle_instances() const { return false; }
};

// Options shared by the built-in policies.
struct PolicyOptions {
  // FGD's typical pods: the most frequent shapes covering this share of pods.
  double typical_pod_coverage = 0.95;
  // FGD refinements (docs/results/prism-vs-fgd.md), off in the paper's FGD:
  // a CPU-only pod goes to the node with the least free GPU, then least CPU left;
  bool fgd_cpu_pods_on_busy_gpus = false;
  // a share's GPU: among equal scores, the lowest fragmentation after placement.
  bool fgd_exact_gpu_choice = false;
  std::string fgd_name;  // Reported name (default "fgd").
};

// Names of the built-in policies, in the order reports list them.
std::vector<std::string> BuiltinPolicyNames();
// One-line descriptions, for --help.
std::string_view BuiltinPolicyDescription(std::string_view name);
// Creates a built-in policy; InvalidArgument naming the known ones otherwise.
absl::StatusOr<std::unique_ptr<Policy>> MakeBuiltinPolicy(std::string_view name,
                                                          const PolicyOptions& options = {});

}  // namespace prism::sim
