#include "sim/ceiling.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "base/status_macros.h"
#include "core/mig/layout.h"
#include "sim/lp_solver.h"
#include "sim/node_patterns.h"
#include "sim/simulator.h"

namespace prism::sim {
namespace {

// LP values are in GPUs (milli / 1000) so that coefficients stay near 1.
constexpr double kPerMilli = 1.0 / kMilliPerGpu;
// A pattern enters the LP when its reduced cost exceeds this (GPUs).
constexpr double kPricingTolerance = 1e-9;

// Nodes of one kind (GroupNodesForPacking's groups) with their rows in the LP.
struct NodeGroup : PackGroup {
  // Slot kinds: shares (milli) on shared GPUs, profile indices on MIG GPUs.
  std::vector<int> kinds;
  std::vector<int> slot_rows;  // Per kind.
  int gpu_row = -1, cpu_row = -1, memory_row = -1;

  int64_t node_count() const { return static_cast<int64_t>(nodes.size()); }
  int64_t gpus() const { return node_count() * gpus_per_node; }
};

// Pods with the same request (ClassifyPodsForPacking's classes).
struct PodClass : PackClass {
  int64_t count() const { return static_cast<int64_t>(pods.size()); }
};

std::vector<NodeGroup> GroupNodes(const Cluster& cluster, std::vector<int>* node_group) {
  std::vector<NodeGroup> groups;
  for (PackGroup& g : GroupNodesForPacking(cluster, node_group)) {
    NodeGroup group;
    static_cast<PackGroup&>(group) = std::move(g);
    groups.push_back(std::move(group));
  }
  return groups;
}

std::vector<PodClass> ClassifyPods(std::span<const PodRequest> pods, std::vector<int>* pod_class) {
  std::vector<PodClass> classes;
  for (PackClass& c : ClassifyPodsForPacking(pods, pod_class)) {
    classes.push_back(PodClass{std::move(c)});
  }
  return classes;
}

// Whether a pod of class `c` can run on a node of group `g` at all.
bool ClassFitsGroup(const PodClass& c, const NodeGroup& g) {
  return g.model >= 0 && ((c.model_mask >> g.model) & 1) != 0 && c.gpu_count <= g.gpus_per_node &&
         c.cpu <= g.cpu_per_node && c.memory <= g.memory_per_node;
}

// Whether a slot of kind `kind` on group `g` serves one GPU of a pod of class `c`.
bool SlotServes(const NodeGroup& g, int kind, const PodClass& c, MigMapping mapping) {
  if (g.mig_model == nullptr) return kind == c.gpu_milli;
  return ProfileServes(*g.mig_model, kind, c.gpu_milli, mapping);
}

// The best multiset of shares (milli) summing to at most one GPU, by the
// total of `values` (one per kind of `kinds`): an unbounded integer knapsack.
// Returns the value and the count of each kind.
double BestSharePattern(const std::vector<int>& kinds, const std::vector<double>& values,
                        std::vector<int>* counts) {
  std::vector<double> best(kMilliPerGpu + 1, 0.0);
  std::vector<int> last(kMilliPerGpu + 1, -1);  // Kind added last to reach best[w].
  for (int w = 1; w <= kMilliPerGpu; ++w) {
    best[w] = best[w - 1];
    last[w] = -2;  // Same as w - 1 (capacity left unused).
    for (size_t k = 0; k < kinds.size(); ++k) {
      if (kinds[k] > w || values[k] <= 0) continue;
      const double v = best[w - kinds[k]] + values[k];
      if (v > best[w]) {
        best[w] = v;
        last[w] = static_cast<int>(k);
      }
    }
  }
  counts->assign(kinds.size(), 0);
  for (int w = kMilliPerGpu; w > 0;) {
    if (last[w] == -2) {
      --w;
    } else {
      ++(*counts)[last[w]];
      w -= kinds[last[w]];
    }
  }
  return best[kMilliPerGpu];
}

// The distinct profile counts of the maximal legal layouts of `model`: every
// legal layout's instances are a subset of one of them.
std::vector<mig::ProfileCounts> MigPatterns(const mig::GpuModel& model) {
  std::vector<mig::ProfileCounts> out;
  for (const mig::Layout& layout : mig::EnumerateMaximalLayouts(model)) {
    mig::ProfileCounts counts = mig::CountProfiles(model, layout);
    if (std::find(out.begin(), out.end(), counts) == out.end()) out.push_back(std::move(counts));
  }
  return out;
}

class CeilingLp {
 public:
  CeilingLp(std::vector<NodeGroup> groups, std::vector<PodClass> classes, MigMapping mapping)
      : groups_(std::move(groups)), classes_(std::move(classes)), mapping_(mapping) {}

  absl::StatusOr<CeilingBound> Solve(int max_rounds) {
    Build();
    CeilingBound out;
    out.pod_classes = static_cast<int>(classes_.size());
    out.node_groups = static_cast<int>(groups_.size());
    double gap = 0;  // Sum over groups of GPUs x the best pattern's reduced cost.
    for (int round = 0;; ++round) {
      RETURN_IF_ERROR(lp_.Solve());
      out.rounds = round + 1;
      gap = 0;
      bool added = false;
      for (NodeGroup& g : groups_) {
        if (g.mig_model != nullptr || g.kinds.empty()) continue;  // All patterns present.
        std::vector<double> values(g.kinds.size());
        for (size_t k = 0; k < g.kinds.size(); ++k) {
          values[k] = std::max(0.0, lp_.dual(g.slot_rows[k]));
        }
        std::vector<int> counts;
        const double value = BestSharePattern(g.kinds, values, &counts);
        const double reduced_cost = value - std::max(0.0, lp_.dual(g.gpu_row));
        if (reduced_cost <= kPricingTolerance) continue;
        gap += reduced_cost * static_cast<double>(g.gpus());
        if (round + 1 < max_rounds) {
          AddPattern(g, counts);
          added = true;
        }
      }
      if (!added) break;
    }
    double arrived = 0;
    for (const PodClass& c : classes_) {
      arrived += static_cast<double>(c.count()) * c.gpu_count * c.gpu_milli;
    }
    out.arrived_gpu_milli = static_cast<int64_t>(arrived);
    out.lp_objective_milli = lp_.objective() * kMilliPerGpu;
    // Allocations are whole milli-GPU: round down, leaving a margin for the solver's tolerances.
    const double bound = (lp_.objective() + gap) * kMilliPerGpu;
    out.bound_gpu_milli =
        std::min(out.arrived_gpu_milli, static_cast<int64_t>(std::floor(bound + 1e-3)));
    out.patterns = patterns_;
    out.class_group_pods.assign(classes_.size(), std::vector<double>(groups_.size(), 0.0));
    for (const Assignment& a : assignments_) {
      out.class_group_pods[a.pod_class][a.group] += lp_.value(a.column);
    }
    return out;
  }

 private:
  void Build() {
    std::vector<int> supply_rows;
    for (const PodClass& c : classes_) {
      supply_rows.push_back(lp_.AddRow(-LinearProgram::kInfinity, static_cast<double>(c.count())));
    }
    for (NodeGroup& g : groups_) {
      const double nodes = static_cast<double>(g.node_count());
      g.gpu_row = lp_.AddRow(-LinearProgram::kInfinity, static_cast<double>(g.gpus()));
      // CPU and memory rows count in nodes' worth, so their coefficients stay near 1.
      g.cpu_row = lp_.AddRow(-LinearProgram::kInfinity, nodes);
      g.memory_row = lp_.AddRow(-LinearProgram::kInfinity, nodes);
      if (g.mig_model != nullptr) {
        for (int p = 0; p < static_cast<int>(g.mig_model->profiles.size()); ++p) {
          g.kinds.push_back(p);
        }
      } else {
        for (const PodClass& c : classes_) {
          if (ClassFitsGroup(c, g) &&
              std::find(g.kinds.begin(), g.kinds.end(), c.gpu_milli) == g.kinds.end()) {
            g.kinds.push_back(c.gpu_milli);
          }
        }
        std::sort(g.kinds.begin(), g.kinds.end());
      }
      for (size_t k = 0; k < g.kinds.size(); ++k) {
        g.slot_rows.push_back(lp_.AddRow(-LinearProgram::kInfinity, 0.0));
      }
    }
    // A column per (class, group, slot kind) the class can use.
    for (size_t ci = 0; ci < classes_.size(); ++ci) {
      const PodClass& c = classes_[ci];
      for (size_t gi = 0; gi < groups_.size(); ++gi) {
        const NodeGroup& g = groups_[gi];
        if (!ClassFitsGroup(c, g)) continue;
        for (size_t k = 0; k < g.kinds.size(); ++k) {
          if (!SlotServes(g, g.kinds[k], c, mapping_)) continue;
          const int rows[] = {supply_rows[ci], g.slot_rows[k], g.cpu_row, g.memory_row};
          const double coefs[] = {
              1.0, static_cast<double>(c.gpu_count),
              g.cpu_per_node > 0 ? static_cast<double>(c.cpu) / g.cpu_per_node : 0.0,
              g.memory_per_node > 0 ? static_cast<double>(c.memory) / g.memory_per_node : 0.0};
          const int column =
              lp_.AddColumn(static_cast<double>(c.gpu_count) * c.gpu_milli * kPerMilli,
                            static_cast<double>(c.count()), rows, coefs);
          assignments_.push_back({static_cast<int>(ci), static_cast<int>(gi),
                                  column});
        }
      }
    }
    // Initial patterns: each kind alone, as many as fit (shared); every maximal layout (MIG).
    for (NodeGroup& g : groups_) {
      if (g.mig_model != nullptr) {
        for (const mig::ProfileCounts& counts : MigPatterns(*g.mig_model)) AddPattern(g, counts);
        continue;
      }
      for (size_t k = 0; k < g.kinds.size(); ++k) {
        std::vector<int> counts(g.kinds.size(), 0);
        counts[k] = kMilliPerGpu / g.kinds[k];
        AddPattern(g, counts);
      }
    }
  }

  void AddPattern(const NodeGroup& g, const std::vector<int>& counts) {
    std::vector<int> rows = {g.gpu_row};
    std::vector<double> coefs = {1.0};
    for (size_t k = 0; k < counts.size() && k < g.slot_rows.size(); ++k) {
      if (counts[k] == 0) continue;
      rows.push_back(g.slot_rows[k]);
      coefs.push_back(-static_cast<double>(counts[k]));
    }
    lp_.AddColumn(0.0, LinearProgram::kInfinity, rows, coefs);
    ++patterns_;
  }

  struct Assignment {
    int pod_class, group, column;
  };

  std::vector<NodeGroup> groups_;
  std::vector<PodClass> classes_;
  std::vector<Assignment> assignments_;
  MigMapping mapping_;
  LinearProgram lp_;
  int patterns_ = 0;
};

}  // namespace

absl::StatusOr<CeilingBound> ComputeCeiling(const Cluster& cluster,
                                            std::span<const PodRequest> pods,
                                            const CeilingOptions& options) {
  std::vector<int> node_group, pod_class;
  std::vector<NodeGroup> groups = GroupNodes(cluster, &node_group);
  std::vector<PodClass> classes = ClassifyPods(pods, &pod_class);
  CeilingLp lp(std::move(groups), std::move(classes), options.mig_mapping);
  ASSIGN_OR_RETURN(CeilingBound bound, lp.Solve(std::max(1, options.max_rounds)));
  bound.node_group = std::move(node_group);
  bound.pod_class = std::move(pod_class);
  return bound;
}

absl::StatusOr<double> CurveCeilingPct(const Cluster& cluster, std::span<const PodRequest> pods,
                                       int arrived_pct, int segments,
                                       const CeilingOptions& options) {
  const int64_t capacity = cluster.total_gpu_milli();
  if (capacity <= 0) return std::nan("");
  // The prefix lengths the curve averages at the point, as RunInflated samples them.
  auto sampled = [&](int lo, int hi) {
    std::vector<size_t> lengths;
    int64_t arrived = 0;
    for (size_t i = 0; i < pods.size(); ++i) {
      arrived += pods[i].TotalGpuMilli();
      const int64_t x = RoundHalfEven(arrived * 100, capacity);
      if (x > hi) break;
      if (x >= lo) lengths.push_back(i + 1);
    }
    return lengths;
  };
  std::vector<size_t> lengths = sampled(arrived_pct, arrived_pct);
  if (lengths.empty()) lengths = sampled(arrived_pct - 1, arrived_pct + 1);
  if (lengths.empty()) return std::nan("");
  segments = std::clamp(segments, 1, static_cast<int>(lengths.size()));
  double weighted = 0;
  size_t begin = 0;
  for (int k = 0; k < segments; ++k) {
    const size_t end = lengths.size() * static_cast<size_t>(k + 1) / static_cast<size_t>(segments);
    if (end <= begin) continue;
    ASSIGN_OR_RETURN(CeilingBound b,
                     ComputeCeiling(cluster, pods.first(lengths[end - 1]), options));
    weighted += static_cast<double>(b.bound_gpu_milli) * static_cast<double>(end - begin);
    begin = end;
  }
  return weighted * 100 / static_cast<double>(lengths.size()) / static_cast<double>(capacity);
}

size_t PodsArrivedAt(const Cluster& cluster, std::span<const PodRequest> pods, int arrived_pct) {
  const int64_t capacity = cluster.total_gpu_milli();
  if (capacity <= 0) return pods.size();
  int64_t arrived = 0;
  for (size_t i = 0; i < pods.size(); ++i) {
    arrived += pods[i].TotalGpuMilli();
    if (arrived * 100 > capacity * int64_t{arrived_pct}) return i;
  }
  return pods.size();
}

}  // namespace prism::sim
