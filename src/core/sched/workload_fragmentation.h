// src/core/sched/workload_fragmentation.h: how much free GPU the target workload could not use
// (FGD's fragmentation, Weng et al., ATC '23), per GPU and per node, and the caches that keep a
// node's score cheap when many shapes score the same node state. Part of the placement engine
// (included by the engine's files only); not part of its interface.
#pragma once

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/sched/cluster.h"
#include "core/sched/device_config.h"
#include "core/sched/engine_internal.h"
#include "core/sched/policy.h"

namespace prism::sched::engine_internal {

// Free units (per-mille of the GPU) of a GPU in state `u`: what a new share could take.
int32_t FreeUnits(const GpuInfo& gi, const GpuUsage& u);

// Which sums of shares fill a hole, and what opening an idle GPU counts, for prism's
// complement term (PolicyOptions::complement_*).
struct CompletionOptions {
  double min_share = 0;  // Shares whose shapes weigh less together do not fill holes.
  int max_pods = 0;      // At most this many pods fill a hole (0: any number).
  double idle = 1;       // ComplementChange from an idle GPU: this blend of the worst and plain.
  bool operator==(const CompletionOptions&) const = default;
};

inline CompletionOptions CompletionFor(const PolicyOptions& p) {
  return {p.complement_min_share, p.complement_pods, p.complement_idle};
}

class WorkloadFragmentation {
 public:
  // Both outlive this object (they are the engine's own members).
  WorkloadFragmentation(const ClusterState* cluster, const DeviceConfig* config)
      : cluster_(cluster), config_(config) {}

  // Resolves `workload`'s shapes against the cluster's GPU types and template sets, groups
  // them, and drops every cache.
  // `completion`: how CompletionWaste and ComplementChange count (PolicyOptions::complement_*).
  void SetWorkload(const TargetWorkload& workload, const CompletionOptions& completion = {});
  // Drops every cache (the policy or a GPU's facts changed).
  void Invalidate();

  bool empty() const { return shapes_.empty(); }
  const std::vector<ShapeData>& shapes() const { return shapes_; }
  // Sum of the weights of the shapes kept (1, or 0 without shapes).
  double weight_total() const { return weight_total_; }
  // Milli-CPU the workload's GPU shapes ask per unit (per-mille) of GPU, weighted by frequency;
  // 0 without GPU shapes.
  double cpu_per_gpu_unit() const { return cpu_per_gpu_unit_; }
  // How much more the workload's type-restricted shapes need GPU type `type_id` than the least
  // needed type (0 for that type, and for types unknown when the workload was set).
  double type_scarcity(int type_id) const {
    return type_id >= 0 && type_id < static_cast<int>(type_scarcity_.size())
               ? type_scarcity_[type_id]
               : 0;
  }

  // prism's two terms beside FGD's fragmentation change, in GPUs (PolicyOptions::cpu_balance,
  // type_balance, their weights): the change in the node's free GPU that its CPU left cannot
  // serve at cpu_per_gpu_unit() (FGD asks whether one typical pod still finds its CPU, not
  // whether all the free GPUs do), and the GPU the pod takes times its type's scarcity. Node
  // `node` goes from its GPUs as they are and `cpu_before` to `after` and `cpu_after`. Both
  // depend on the node's own state and the workload only, as shape indexes require.
  double BalanceTerms(int node, int64_t cpu_before, int64_t cpu_after,
                      const std::vector<const GpuUsage*>& after, double cpu_weight,
                      double type_weight);

  // Units of a software-shared GPU's `free` units (0..1000) that the workload's GPU shapes
  // cannot fill even packed perfectly: `free` minus the largest sum of their per-device shares
  // (any number of each) at most `free`. Without GPU shapes, `free`.
  int32_t CompletionWaste(int32_t free) const {
    return free <= 0 ? 0 : free - fillable_[std::min<int32_t>(free, kPermille)];
  }
  // What a GPU going from `before` to `after` free units adds to CompletionWaste, as prism's
  // complement term counts it. From an idle GPU: CompletionOptions::idle x the most the same
  // share adds on any partly used one (plus the rest x the plain change), so that the term
  // mostly ranks the holes a share could go to rather than sending it to an idle GPU
  // (whether to open one is mostly FGD's call: the plain change alone, at the weights that
  // pay on the default trace, spreads small pods over idle GPUs that whole-GPU pods then miss,
  // 89.4 -> 84.0 % on gpushare80).
  int32_t ComplementChange(int32_t before, int32_t after) const {
    if (!any_share_) return 0;  // Nothing known fills a hole: no term.
    if (before >= kPermille) {
      return worst_change_[std::clamp<int32_t>(before - after, 0, kPermille)];
    }
    return CompletionWaste(after) - CompletionWaste(before);
  }
  // prism's complement term (PolicyOptions::complement), in GPUs: weight x the sum of
  // ComplementChange over the node's software-shared GPUs as they are -> `after`; only the
  // GPUs `changed` (local indexes) are read (the others add 0).
  double ComplementTerm(int node, const std::vector<const GpuUsage*>& after,
                        const std::vector<int>& changed, double weight);

  // Units of free GPU shape `s` could use on GPU `g` in state `u` (`free` of them), and how
  // many devices of it fit.
  std::pair<int32_t, int32_t> UsableFor(const ShapeData& s, int g, const GpuUsage& u, int32_t free);
  const OccEntry& Occ(int type_id, const mig::GpuModel& model, const mig::Occupancy& occ);

  // Sum over shapes of weight * (free - usable) for one GPU (node fit ignored).
  double GpuFrag(int g, const GpuUsage& u);
  // Workload-usable units of a template-mode or fixed-layout GPU state.
  double TemplateUsable(int g, const GpuUsage& u);

  // FGD fragmentation of a node (per-mille units) with its GPUs in the states `gpus`.
  double NodeFrag(int node, int64_t cpu_used, int64_t mem_used,
                  const std::vector<const GpuUsage*>& gpus);
  // NodeFrag of the node as it is (cached per node version).
  double CurrentNodeFrag(int node);
  // NodeFrag of the node as it is but with its GPUs `changed` (local indexes, distinct) in the
  // states `gpus[l]`: O(shapes + groups x changed) from the node's cached parts, equal to
  // NodeFrag bit for bit (the parts are integers summed exactly; the shapes in one order).
  double NodeFragWithChanges(int node, int64_t cpu_used, int64_t mem_used,
                             const std::vector<const GpuUsage*>& gpus,
                             const std::vector<int>& changed);

  // Sets the base view FragWithGpu changes one GPU of: the node's GPUs in states `gpus`, or
  // (FragBaseCurrent) as they are, from the per-node cache.
  void FragBase(int node, const std::vector<const GpuUsage*>& gpus);
  void FragBaseCurrent(int node);
  // NodeFrag of the base view with GPU `l` in state `changed`.
  double FragWithGpu(int node, int64_t cpu_after, int64_t mem_after, int l,
                     const GpuUsage& changed);

  size_t MemoryBytes() const;

 private:
  // What each GPU of one node view offers each shape group: the parts NodeFrag sums.
  struct NodeParts {
    uint64_t version = 0;  // For a node's cached parts: its usage version + 1; 0 never computed.
    int32_t gpus = 0;
    int64_t total_free = 0;
    // [GPU] free, then [group][GPU] usable, then [group][GPU] capacity.
    std::vector<int32_t> per_gpu;
    // [group] sum over GPUs of free - usable, then [group] sum of capacities.
    std::vector<int64_t> per_group;

    int32_t free(int l) const { return per_gpu[l]; }
    int32_t usable(int k, int l) const { return per_gpu[gpus * (1 + k) + l]; }
    int32_t capacity(int k, int l, int groups) const {
      return per_gpu[gpus * (1 + groups + k) + l];
    }
    int64_t unusable(int k) const { return per_group[k]; }
    int32_t capacity_sum(int k, int groups) const {
      return static_cast<int32_t>(per_group[groups + k]);
    }
  };

  void AssignShapeGroups();
  // cpu_per_gpu_unit_ and type_scarcity_ from shapes_ and the workload's GPUs per type.
  void ComputeBalanceMeasures(const TargetWorkload& workload);
  // fillable_ and worst_change_ from the GPU shapes' shares (CompletionOptions).
  void ComputeFillable(const CompletionOptions& completion);
  int groups() const { return static_cast<int>(group_first_.size()); }
  void ComputeParts(int node, const std::vector<const GpuUsage*>& gpus, NodeParts* parts);
  const NodeParts& CurrentParts(int node);
  const NodeParts& base() const;
  // UsableFor(s, g, u, free).first, once per shape group between resets of group_done_ (the
  // caller's: one GPU state per reset).
  int32_t GroupUsable(const ShapeData& s, int g, const GpuUsage& u, int32_t free);
  // The per-shape sum of NodeFrag once group_unusable_/group_capacity_ are known for every
  // group `compute_group` is called for (lazily, as NodeFrag does).
  template <typename ComputeGroup>
  double SumOverShapes(int64_t total_free, int64_t cpu_free, int64_t mem_free,
                       ComputeGroup compute_group);

  const ClusterState* cluster_;
  const DeviceConfig* config_;
  std::vector<ShapeData> shapes_;
  std::vector<int32_t> group_first_;  // Per shape group: its first shape (a GPU shape).
  // What SumOverShapes reads of each shape, side by side (ShapeData is large).
  struct ShapeTerm {
    double weight = 0;
    int64_t cpu_milli = 0;
    int64_t memory_bytes = 0;
    int32_t gpu_count = 0;
    int32_t group = -1;
  };
  std::vector<ShapeTerm> terms_;
  double weight_total_ = 0;
  double cpu_per_gpu_unit_ = 0;
  std::vector<double> type_scarcity_;
  // [u], u = 0..1000: the largest sum of GPU shapes' per-device shares at most u.
  std::vector<int32_t> fillable_ = std::vector<int32_t>(kPermille + 1, 0);
  // [s]: ComplementChange(1000, 1000 - s): CompletionOptions::idle x the largest
  // CompletionWaste(f - s) - CompletionWaste(f) over partly used f (< 1000), plus the rest x
  // CompletionWaste(1000 - s) - CompletionWaste(1000).
  std::vector<int32_t> worst_change_ = std::vector<int32_t>(kPermille + 1, 0);
  bool any_share_ = false;  // Some share counts in fillable_.
  std::unordered_map<OccKey, OccEntry, OccKeyHash> occ_cache_;   // Nodes: entries stay put.
  const std::pair<const OccKey, OccEntry>* last_occ_ = nullptr;  // The last one asked for.
  std::vector<std::pair<uint64_t, double>> frag_cache_;  // Per node: (version + 1, frag).
  std::vector<NodeParts> parts_cache_;                   // Per node.
  NodeParts view_parts_;                                 // FragBase's view.
  int base_node_ = -1;  // FragWithGpu's base: that node's cached parts, or -1: view_parts_.
  std::vector<const GpuUsage*> current_view_;
  // Per group, within one NodeFrag / FragWithGpu / GpuFrag / TemplateUsable call.
  std::vector<uint8_t> group_done_;
  std::vector<int64_t> group_unusable_;
  std::vector<int32_t> group_capacity_;
  std::vector<int32_t> group_usable_;
  std::vector<int32_t> changed_free_;
};

}  // namespace prism::sched::engine_internal
