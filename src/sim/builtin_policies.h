// src/sim/builtin_policies.h: constructors of the built-in policies (internal to
// prism::sim; callers use MakeBuiltinPolicy in policy.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "core/mig/gpu_model.h"
#include "core/mig/layout.h"
#include "sim/policy.h"

namespace prism::sim {

// Software-shared GPUs (the FGD paper's baselines).
std::unique_ptr<Policy> MakeRandomPolicy();
std::unique_ptr<Policy> MakeBestFitPolicy();
std::unique_ptr<Policy> MakeFgdPolicy(const PolicyOptions& options);

// MIG GPUs (HAMi's two dynamic-MIG generations). `gpu_binpack` replaces
// HAMi's default GPU policy (spread) by binpack.
std::unique_ptr<Policy> MakeHamiLegacyPolicy(bool gpu_binpack);
std::unique_ptr<Policy> MakeHamiV210Policy(bool gpu_binpack);
std::vector<std::string> MigPolicyNames();
// The MIG model of every GPU of the run's cluster. InvalidArgument, naming
// `policy`, if a node shares its GPUs in software, the GPUs are of more than
// one MIG model, or there are no GPUs.
absl::StatusOr<const mig::GpuModel*> TheMigModel(const RunContext& context,
                                                 std::string_view policy);

// MIG GPUs: the online greedy scheduler of Zambianco, Fasol, Doriguzzi-Corin
// (arXiv 2511.18906; src/sim/zambianco_mig_policy.cc, docs/simulator.md).
std::unique_ptr<Policy> MakeZambiancoPolicy();
// Its profile set on `model`: per compute size, the plain profile (no media
// attributes) with the least memory, by compute size; on A100/H100-80GB
// 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb. Indices into model.profiles.
std::vector<int> ZambiancoProfiles(const mig::GpuModel& model);
// Its fragmentation of one GPU whose instances in use occupy `busy`, times
// profiles.size(): summed over `profiles`, the free memory slices that no
// instance of that profile can still cover (no free legal start allowed by
// mig::CanAdd covers them). Divided by profiles.size() it is the mean number
// of free slices a workload of a uniformly drawn profile cannot use.
int ZambiancoUnusableSlices(const mig::GpuModel& model, const mig::Occupancy& busy,
                            const std::vector<int>& profiles);

// Dynamic Resource Allocation without Prism (src/sim/dra_first_fit_policy.cc):
// kube-scheduler's default node scoring, then the DRA allocator's first devices of
// the node in name order.
std::unique_ptr<Policy> MakeDraFirstFitPolicy();
// What kube-scheduler's resource scores read of a node (sim units: millicores, MiB).
struct KubeSchedulerNodeLoad {
  int64_t allocatable_milli_cpu = 0;
  int64_t allocatable_memory_mib = 0;
  int64_t requested_milli_cpu = 0;  // Sum of the placed pods' requests.
  int64_t requested_memory_mib = 0;
  int64_t nonzero_milli_cpu = 0;  // The same, a pod without a request counted 100m / 200 MiB.
  int64_t nonzero_memory_mib = 0;
};
// NodeResourcesFit (LeastAllocated, cpu and memory weight 1) + NodeResourcesBalancedAllocation
// for a pod requesting `pod_milli_cpu` and `pod_memory_mib` on `node`: 0..200.
int64_t KubeSchedulerNodeScore(const KubeSchedulerNodeLoad& node, int64_t pod_milli_cpu,
                               int64_t pod_memory_mib);
// numFeasibleNodesToFind with the default (adaptive) percentageOfNodesToScore.
int KubeSchedulerNodesToFind(int nodes);
// The profile a first-fit MIG claim selects: the smallest plain profile (memory slices, then
// compute slices) that serves `gpu_milli`; -1 if none.
int DraFirstFitProfile(const mig::GpuModel& model, int gpu_milli, MigMapping mapping);
// Every profile x legal start of `gpu_count` GPUs (minors 0..gpu_count-1) as the DRA device
// published for it (config::DraMigDeviceName), in byte-wise name order.
struct DraMigDevice {
  std::string name;
  int gpu = -1;
  int profile = -1;
  int start = -1;
};
std::vector<DraMigDevice> DraMigDevicesInNameOrder(const mig::GpuModel& model, int gpu_count);

// Topology-aware GPU choices of peers on software-shared GPUs (src/sim/topology_policies.cc):
// HAMi's `topology-aware` GPU policy under its binpack node policy, and NVIDIA's device plugin
// (go-gpuallocator's best-effort policy) under kube-scheduler's default node scores.
std::unique_ptr<Policy> MakeHamiTopologyPolicy();
std::unique_ptr<Policy> MakeNvidiaBestEffortPolicy();

// InvalidArgument if the run's cluster has MIG GPUs.
absl::Status RequireSharedGpus(const RunContext& context, std::string_view policy);

}  // namespace prism::sim
