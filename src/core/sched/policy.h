// src/core/sched/policy.h: scoring policies, their knobs, and the target
// workload that fragmentation-aware scoring measures against.
//
// Pure value types and parsing of policy names. Thread-compatible.
//
// Node policies (which node wins; higher score is better, ties go to the
// lowest node index, i.e. the smallest node name):
//   binpack  utilization after placement, weighted over GPU memory, GPU
//            compute, CPU and host memory (HAMi's default node policy, but
//            with the request included and CPU/memory counted).
//   spread   1 - that utilization.
//   bestfit  least capacity left: -(cpu_share * CPU left + (1 - cpu_share) *
//            GPU left), each as a fraction of the node (FGD paper's Best-fit).
//   fgd      FGD (ATC '23): the change in fragmentation, i.e. in the expected
//            free GPU a random pod of the target workload could not use,
//            scored int(100 * sigmoid(-delta)) as in the paper.
//   prism    fgd, plus MIG internal waste (a grant larger than asked) counted
//            as fragmentation, plus GPU its node's CPU cannot serve and GPU of
//            scarce types taken (cpu_balance, type_balance below), plus an
//            optional packing term, with two refinements (each a knob, on by
//            default):
//            - a pod without GPUs goes to the node with the least free GPU,
//              then the least CPU left after placement (FGD scores most such
//              placements alike and first-fit then strands free GPUs on
//              nodes whose CPU it used up);
//            - a software slice goes, among the node's GPUs whose quantized
//              score is best, to the one with the lowest exact fragmentation
//              after placement (FGD: the lowest-indexed one).
// GPU policies (which GPUs of the chosen node; HAMi's gpu-scheduler-policy):
//   binpack  the most used GPU that fits;  spread  the least used;
//   fgd      the GPU whose fragmentation grows least (then binpack).
// Inside one MIG GPU the start / geometry is always chosen to keep the most
// usable free space (target workload first, then free-space utility).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

#include "core/sched/request.h"

namespace prism::sched {

enum class NodePolicy : uint8_t { kBinpack, kSpread, kBestFit, kFgd, kPrism };
enum class GpuPolicy : uint8_t { kBinpack, kSpread, kFgd };

std::string_view NodePolicyName(NodePolicy policy);
std::string_view GpuPolicyName(GpuPolicy policy);
// "binpack", "spread", "bestfit" (or "best-fit"), "fgd", "prism"; case-insensitive.
absl::StatusOr<NodePolicy> ParseNodePolicy(std::string_view name);
// "binpack", "spread", "fgd", or a HAMi chain such as "binpack,numa": the
// first of binpack/spread/fgd wins; HAMi's topology-aware, numa and mutex are
// accepted but have no effect (Prism has no topology data); a chain of only
// those means spread, as in HAMi. Anything else is InvalidArgument.
absl::StatusOr<GpuPolicy> ParseGpuPolicy(std::string_view name);

struct PolicyOptions {
  NodePolicy node = NodePolicy::kPrism;
  // GPU policy when the pod names none. Unset: follows the node policy
  // (fgd/prism -> fgd, spread -> spread, binpack/bestfit -> binpack).
  bool gpu_from_node = true;
  GpuPolicy gpu = GpuPolicy::kFgd;

  // Utilization weights (binpack, spread, prism's packing term).
  double weight_gpu_memory = 1.0;
  double weight_gpu_cores = 1.0;
  double weight_cpu = 1.0;
  double weight_memory = 1.0;
  // fgd and prism compare a fragmentation change `delta` (GPUs) as
  //   frag_resolution > 0:  -frag_resolution * floor(delta / frag_resolution)
  //   else fgd_quantize:    int(100 * sigmoid(-delta))   (the paper's score)
  //   else:                 -delta                       (exact)
  // Changes scored equal are near-equal: the lowest node index (first fit in
  // name order) decides among them, and inside a node the lowest GPU index.
  // Exact scores without such ties pack badly (90.7 % instead of 95.3 % on
  // the default trace): keep quantization on.
  bool fgd_quantize = true;
  double frag_resolution = 0;
  // prism: score = frag_weight * (that term, with MIG internal waste counted
  // as fragmentation and the two balance terms below added) + pack_weight *
  // binpack utilization.
  double frag_weight = 1.0;
  double pack_weight = 0.0;
  // prism, MIG pods: each MIG GPU of the node left with no instance in use after the pod adds
  // this much (milli-GPU) to the fragmentation change, so that among nodes that fragment alike
  // the pod goes where fewer idle GPUs remain: idle nodes stay whole for multi-GPU pods, and a
  // node's CPU is not spent while its GPUs stay idle (docs/scheduling.md#dynamic-mig). 0: off,
  // the default: at 5 it gains 0.05-0.13 points on the MIG benchmark's gpushare traces but
  // raises the decision's p99 on its trace replay at 4x by a third, past the 200 µs goal.
  int32_t mig_idle_gpu = 0;
  // prism: a pod asking for no GPU scores -(free GPU units of the node, then
  // CPU left after placement), lexicographically: it goes where it strands
  // the least GPU. Depends only on the node's own state (cache stays exact).
  bool cpu_pods_on_busy_gpus = true;
  // prism: equal quantized GPU scores inside a node fall to the lower exact
  // fragmentation change (then the lower GPU index), not the lower index.
  bool exact_gpu_tiebreak = true;
  // prism: two terms added to the fragmentation change before it is quantized (both GPUs;
  // measured in docs/results/prism-vs-fgd.md, chosen on seeds 1-10 of the 17 trace variants):
  // - cpu_balance x the change in the node's free GPU that its CPU left cannot serve, at the
  //   target workload's CPU per GPU (FGD only asks whether one typical pod still finds its CPU:
  //   8 free GPUs and the CPU for 2 pods count as 8 usable GPUs);
  // - type_balance x the GPU the pod takes, times its type's scarcity: how much more the
  //   workload's type-restricted shapes need that type than the least needed one (0 when no
  //   shape is restricted), so that pods that may use any GPU leave the wanted types alone.
  double cpu_balance = 2.0;
  double type_balance = 2.0;
  // prism: complement x the change in the GPU that the workload's shares could not fill even
  // packed perfectly (per GPU: its free units minus the largest sum of the shapes' per-device
  // shares that fits them), added likewise, also to the choice of GPUs inside a node. FGD asks
  // whether one typical pod still fits a GPU's free part, not whether pods fill it: a 230
  // pod in the 350 left by a 650 leaves 120 that nothing fills, where the 320 the hole
  // matches would leave 30 (docs/results/patterns.md). Chosen on seeds 1-10.
  double complement = 8.0;
  // The shares that term packs: those whose shapes weigh at least this much together (of
  // the workload's weight), so that rare shares do not count as filling a hole; at most
  // complement_pods of them (0: any number).
  double complement_min_share = 0.01;
  int complement_pods = 0;
  // A share put on an idle GPU counts complement_idle x the most it adds to any partly used
  // GPU, plus the rest x the plain change (WorkloadFragmentation::ComplementChange): at 0 the
  // term spreads small pods over idle GPUs (gpushare80: 89.4 -> 84.0 %), at 1 it never
  // prefers an idle GPU and gains less on the default trace (95.98 against 96.03).
  double complement_idle = 0.35;
  // bestfit: weight of CPU left (the rest is GPU left).
  double bestfit_cpu_share = 0.5;
  // prism: a pod with a container of two or more GPUs, on a node whose wiring is known, scores
  // topology_weight x the grade of the set it would get there (2 x topo::Tier + 1 when on one
  // NUMA node: 0..7; Engine::Impl::TopologyGrade) on top of the fragmentation term, whose
  // quantized steps are 1: at 1, a set one tier better (grade +2) outweighs one step of
  // fragmentation, so among nodes that pack about alike the better-wired wins. Pods that take
  // every GPU of the node gain nothing unless topology_whole_node (there the term only chooses
  // the machine type, e.g. NVSwitch nodes for 8-GPU pods, which cost allocated GPU). A pod that
  // prefers interconnect (TopologyRequest::preferred) puts its grade first instead. Chosen on
  // seeds 1-10 of the multigpu trace variants, measured in docs/results/topology.md.
  double topology_weight = 1.0;
  bool topology_whole_node = false;
  // With topology_whole_node: a pod taking every GPU of the node scores topology_whole_weight x
  // topology_weight x the grade. Below 1 / 7 (grades 0..7) the term only breaks ties of the
  // quantized fragmentation: where typical pods fit only the better-wired machine (multigpu50's
  // 120-core 8-GPU pods, only on the 128-core G3 nodes), taking another idle node frees their
  // share, one step, and the term leaves that machine to them. Not the default: on seeds 1-10
  // it still costs allocated GPU where the step ties (multigpu30/40; docs/results/topology.md).
  double topology_whole_weight = 1.0;
  // prism: a pod without a multi-GPU container, on a wired node, scores -topology_harm for each
  // GPU it takes from idle while an NVLink peer of that GPU stays idle (a pair a later
  // multi-GPU pod could have had whole; Engine::Impl::BrokenNvLinkPairs), so that of nodes that
  // pack about alike it goes where it breaks none. Within a node topo::ChooseGpuSet's harm
  // already keeps idle quads whole. Chosen on seeds 1-10, docs/results/topology.md.
  double topology_harm = 1.0;

  GpuPolicy GpuPolicyFor(NodePolicy node_policy) const;
};

// A typical pod of the workload to come, for fragmentation scoring.
struct WorkloadShape {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int32_t gpu_count = 0;           // 0: needs no GPU.
  GpuRequest gpu;                  // Per device (gpu.count is ignored).
  std::vector<std::string> types;  // Allowed GPU types (substrings); empty: any.
  double weight = 1.0;
};

struct TargetWorkload {
  std::vector<WorkloadShape> shapes;  // Weights need not sum to 1.
  // The cluster's GPUs per GPU type name when the workload was taken (ClusterState::
  // GpusByType), for prism's type scarcity (PolicyOptions::type_balance; empty: no such term).
  // Part of the workload, not read from the cluster as it changes, so that a node's score
  // depends only on its own state and the workload.
  std::vector<std::pair<std::string, int64_t>> gpus_by_type;

  // The most frequent shapes of `pods` (by effective CPU, GPU count,
  // per-device share and type filter; host memory is left out, as in FGD),
  // enough to cover `coverage` of them, at most `max_shapes`, weighted by
  // frequency. FGD's "typical pods".
  static TargetWorkload FromPods(const std::vector<PodRequest>& pods, double coverage = 0.95,
                                 size_t max_shapes = 64);
};

// The shape of one pod (what FromPods counts).
WorkloadShape ShapeOfPod(const PodRequest& pod);

}  // namespace prism::sched
