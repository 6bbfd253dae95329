// src/sim/engine_policy.h: Prism's placement engine (src/core/sched) as a
// simulator policy.
//
// Each run builds the engine's own cluster state from the simulated cluster
// (nodes in tie-break rank order, so the engine's "lowest node index wins a
// tie" matches the random node order every policy sees), sets its target
// workload to the trace's pods (FGD's typical pods), and then asks it to
// Schedule() every pod; the decision is translated into a Placement that the
// simulator checks independently, and applied to the engine (Apply) once the
// simulator accepted it. Departures Release() the pod in the engine.
//
// A trace pod becomes one container asking for `gpu_count` devices of
// `gpu_milli`/1000 of a GPU: memory and compute shares on software-shared GPUs;
// on MIG GPUs memory only (MigMapping::kMemory) or compute only (kCompute).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "core/sched/engine.h"
#include "core/sched/policy.h"
#include "core/sched/request.h"
#include "sim/cluster.h"
#include "sim/policy.h"
#include "sim/workload.h"

namespace prism::sim {

struct EnginePolicyOptions {
  std::string name = "prism";
  sched::PolicyOptions policy;  // Engine defaults: node policy prism, GPU policy fgd.
  double typical_pod_coverage = 0.95;
  size_t max_typical_shapes = 64;
  // HAMi's deviceSplitCount for software-shared GPUs. The trace's model has no
  // such limit, so the default is generous.
  int32_t device_split_count = 100;
  // > 0: after each placed pod, Engine::MaintainIndexes with this budget (node scorings), as
  // the extender does off the decision path; 0: indexes catch up when used (same decisions).
  int64_t maintain_evaluations = 0;
  // Prism under DRA ("prism-dra"): each GPU pod becomes the ResourceClaim its user would write
  // (class mig.gpu.prism.io with the profile selector of the smallest plain profile serving the
  // share, count = GPUs; class gpu.prism.io for whole GPUs), and goes through the scheduler's
  // DRA mapping (config/dra_allocation.h): ParseDraClaim -> BuildDraPodRequest -> the engine ->
  // BuildDraAllocations; the placement is read back from the allocated device names
  // (config/dra_names.h) and must equal the engine's decision. Software shares (class
  // slice.gpu.prism.io) are not allocated by the mapping yet: a run with a share on a GPU that
  // is not in MIG mode fails (Unimplemented) instead of placing it some other way. One MIG
  // model per cluster.
  bool dra = false;
  // MIG pods ask the engine for what that claim maps to (memory of the claimed profile, its
  // compute share) through the device-plugin path, instead of their share (knob
  // profile_requests=1): the device-plugin twin of `dra`, which decides exactly as it does.
  // The trace's share asks for memory and compute of gpu_milli/1000, which no DRA claim form
  // expresses, and the engine's MIG score counts the compute an instance grants beyond the
  // request (its waste), so `prism` and `prism-dra` can differ where that tips a choice.
  bool profile_requests = false;
  // The engine gets each node's wiring (sched::NodeSpec::topology) when the cluster has one
  // (`prism sim --topology`); false: topology-blind, the same engine without it (knob
  // topology=0).
  bool use_topology = true;
  // Shared MIG instances (docs/mig-slices.md, knob mig_sharing): 0 none (today's engine); 1 the
  // device config shares the 1g profiles of the cluster's MIG model (1g.10gb and 1g.20gb on an
  // A100-80GB); 2 every plain profile smaller than the whole GPU. A share that a shareable
  // profile holds with room to spare then asks, as a user would write it, memory in MiB (its
  // share of the GPU's memory, SliceMemoryMib) and compute of its share, and may share an
  // instance; every other pod asks what it asks today. Memory mapping only.
  int mig_sharing = 0;
  // With mig_sharing: a slice reserves its compute share (knob slice_cores=1, the default), or
  // none (0: memory only, as HAMi's memory mapping matches whole instances).
  bool slice_cores = true;
};

// How a run with EnginePolicyOptions::mig_sharing turns shares into slice requests.
struct SimMigSharing {
  const mig::GpuModel* model = nullptr;  // The cluster's MIG model; nullptr: no sharing.
  uint32_t profiles = 0;                 // Bit p: instances of profile p may hold slices.
  bool slice_cores = true;
};
// The shareable profiles of `model` at sharing level `level` (EnginePolicyOptions::mig_sharing).
uint32_t SimShareableProfiles(const mig::GpuModel& model, int level);
// The sharing a run of `options` on `cluster` uses (model nullptr when mig_sharing is 0);
// InvalidArgument for the compute mapping, DRA or profile_requests, no or several MIG models.
absl::StatusOr<SimMigSharing> MigSharingOf(const Cluster& cluster, MigMapping mapping,
                                           const EnginePolicyOptions& options);

std::unique_ptr<Policy> MakeEnginePolicy(const EnginePolicyOptions& options);

// The engine a run of `options` works on (what EnginePolicy::Begin builds): the engine's
// cluster from `cluster`, node names prefixed with the workload's tie-break rank, target
// workload the trace's pods. For experiments that drive the engine themselves
// (sim/preemption_experiment.h).
struct SimEngine {
  std::unique_ptr<sched::Engine> engine;
  std::vector<int> to_sim;  // Engine node id -> index in the simulated cluster.
};
// InvalidArgument: the workload has no tie-break rank per node; the engine's cluster errors.
absl::StatusOr<SimEngine> BuildSimEngine(const Cluster& cluster, const Workload& workload,
                                         MigMapping mapping, const EnginePolicyOptions& options);

// A trace pod as the engine's request (one container; see the file comment); with `sharing`, a
// share that may be a slice asks memory in MiB (EnginePolicyOptions::mig_sharing).
sched::PodRequest SimPodToEngine(const PodRequest& pod, MigMapping mapping, bool has_mig,
                                 const SimMigSharing* sharing = nullptr);

// The engine's policies under simulator names: "prism" (the engine's default), "prism-dra"
// (the default under DRA, EnginePolicyOptions::dra), "prism-fgd", "prism-bestfit",
// "prism-binpack", "prism-spread". A suffix ":key=value,..." sets engine knobs, e.g.
// "prism:pack_weight=0.05,frag_weight=1" (keys: frag_weight, pack_weight,
// gpu=binpack|spread|fgd, quantize=0|1, resolution=GPUs, cpu_pack=0|1, exact_gpu=0|1, split=N,
// coverage=F, maintain=N, profile_requests=0|1, topology=0|1, topology_weight=F,
// topology_whole=0|1, topology_whole_weight=F, topology_harm=F, mig_sharing=0|1|2,
// slice_cores=0|1; see
// core/sched/policy.h and EnginePolicyOptions); ';' also separates knobs
// ("prism:cpu_pack=0;exact_gpu=0"), for `prism sim --policy`, whose list is comma-separated.
absl::StatusOr<std::unique_ptr<Policy>> MakeEnginePolicyByName(std::string_view name);
std::vector<std::string> EnginePolicyNames();

}  // namespace prism::sim
