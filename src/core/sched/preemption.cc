#include "core/sched/preemption.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "absl/status/status.h"

#include "base/status_macros.h"
#include "base/strings.h"
#include "core/sched/cluster.h"

namespace prism::sched {
namespace {

struct Candidate {
  std::string key;
  int32_t priority = 0;
  int64_t memory_mib = 0;  // GPU memory it holds on the node.
  int32_t cores = 0;       // GPU compute it holds (per-mille).
};

// Lower is better: highest victim priority, sum of priorities, GPU memory and compute taken.
using SetCost = std::tuple<int32_t, int64_t, int64_t, int64_t>;

SetCost CostOf(const std::vector<Candidate>& all, const std::vector<int>& set) {
  SetCost cost{INT32_MIN, 0, 0, 0};
  for (int i : set) {
    std::get<0>(cost) = std::max(std::get<0>(cost), all[i].priority);
    std::get<1>(cost) += all[i].priority;
    std::get<2>(cost) += all[i].memory_mib;
    std::get<3>(cost) += all[i].cores;
  }
  return cost;
}

// Next k-combination of 0..n-1 in lexicographic order; false after the last.
bool NextCombination(std::vector<int>& c, int n) {
  const int k = static_cast<int>(c.size());
  for (int i = k - 1; i >= 0; --i) {
    if (c[i] < n - k + i) {
      ++c[i];
      for (int j = i + 1; j < k; ++j) c[j] = c[j - 1] + 1;
      return true;
    }
  }
  return false;
}

// Puts the node back however SelectVictims returns.
class NodeRestorer {
 public:
  NodeRestorer(Engine& engine, ClusterState::NodeSnapshot snapshot)
      : engine_(engine), snapshot_(std::move(snapshot)) {}
  ~NodeRestorer() { (void)engine_.RestoreNode(snapshot_); }
  NodeRestorer(const NodeRestorer&) = delete;
  NodeRestorer& operator=(const NodeRestorer&) = delete;

 private:
  Engine& engine_;
  ClusterState::NodeSnapshot snapshot_;
};

}  // namespace

Engine MakeScratchEngine(const Engine& live) {
  EngineOptions options = live.options();
  options.use_indexes = false;  // A scratch engine decides on one node at a time.
  Engine scratch(live.cluster(), live.config(), options);
  scratch.SetTargetWorkload(live.target_workload());  // Same device choice as the live engine.
  return scratch;
}

absl::StatusOr<VictimChoice> SelectVictims(Engine& scratch, const Preemptor& preemptor,
                                           int32_t node,
                                           const std::vector<PreemptionCandidate>& candidates,
                                           const std::vector<PreemptionCandidate>& required,
                                           const PreemptionLimits& limits) {
  RETURN_IF_ERROR(scratch.Validate(preemptor.pod));
  const ClusterState& cluster = scratch.cluster();
  if (node < 0 || node >= cluster.node_count() || cluster.node(node).removed) {
    return absl::InvalidArgumentError(StrCat("unknown node id ", node));
  }
  const std::string& node_name = cluster.node(node).name;
  std::set<std::string, std::less<>> seen;
  auto resolve = [&](const PreemptionCandidate& c,
                     std::string_view role) -> absl::StatusOr<Candidate> {
    if (!seen.insert(c.key).second) {
      return absl::InvalidArgumentError(StrCat(role, " ", c.key, " is listed twice"));
    }
    const PodCharge* charge = cluster.FindPod(c.key);
    if (charge == nullptr) {
      return absl::InvalidArgumentError(StrCat(role, " ", c.key, " holds nothing Prism knows"));
    }
    if (charge->node != node) {
      return absl::InvalidArgumentError(StrCat(role, " ", c.key, " is on node ",
                                               cluster.node(charge->node).name, ", not ",
                                               node_name));
    }
    Candidate out{c.key, c.priority, 0, 0};
    for (const PodCharge::Gpu& g : charge->gpus) {
      out.memory_mib += g.memory_mib;
      out.cores += g.cores;
    }
    return out;
  };
  std::vector<Candidate> must;
  for (const PreemptionCandidate& r : required) {
    ASSIGN_OR_RETURN(Candidate c, resolve(r, "required victim"));
    if (c.priority >= preemptor.priority) {
      return absl::InvalidArgumentError(StrCat("required victim ", c.key, " has priority ",
                                               c.priority, ", not below the preemptor's ",
                                               preemptor.priority));
    }
    must.push_back(std::move(c));
  }
  std::vector<Candidate> eligible;
  int kept = 0;  // Candidates of equal or higher priority: never victims.
  for (const PreemptionCandidate& p : candidates) {
    ASSIGN_OR_RETURN(Candidate c, resolve(p, "candidate"));
    if (c.priority >= preemptor.priority) {
      ++kept;
      continue;
    }
    eligible.push_back(std::move(c));
  }

  VictimChoice out;
  out.node = node;
  if (preemptor.preempt_never) {
    out.reason = "preemptionPolicy is Never";
    return out;
  }
  std::sort(eligible.begin(), eligible.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.priority, a.memory_mib, a.cores, a.key) <
           std::tie(b.priority, b.memory_mib, b.cores, b.key);
  });
  const size_t lower = eligible.size();
  if (static_cast<int>(lower) > std::max(limits.max_candidates, 0)) {
    eligible.resize(static_cast<size_t>(std::max(limits.max_candidates, 0)));
  }
  const int n = static_cast<int>(eligible.size());

  NodeRestorer restore_at_exit(scratch, scratch.SaveNode(node));
  for (const Candidate& c : must) RETURN_IF_ERROR(scratch.Release(c.key));
  const ClusterState::NodeSnapshot base = scratch.SaveNode(node);

  std::string last_failure;
  // Releases `set`, decides, puts the node back. nullopt when the pod does not fit.
  auto trial = [&](const std::vector<int>& set) -> absl::StatusOr<std::optional<Decision>> {
    ++out.evaluations;
    for (int i : set) RETURN_IF_ERROR(scratch.Release(eligible[i].key));
    absl::StatusOr<Decision> d = scratch.Decide(preemptor.pod, node);
    RETURN_IF_ERROR(scratch.RestoreNode(base));
    if (d.ok()) return std::optional<Decision>(*std::move(d));
    if (d.status().code() != absl::StatusCode::kResourceExhausted) return d.status();
    last_failure = std::string(d.status().message());
    return std::optional<Decision>();
  };
  auto finish = [&](const std::vector<int>& set, Decision decision) {
    std::vector<Candidate> victims = must;
    for (int i : set) victims.push_back(eligible[i]);
    std::sort(victims.begin(), victims.end(), [](const Candidate& a, const Candidate& b) {
      return std::tie(b.priority, b.memory_mib, a.key) < std::tie(a.priority, a.memory_mib, b.key);
    });
    out.fits = true;
    out.decision = std::move(decision);
    for (Candidate& v : victims) {
      out.gpu_memory_freed_mib += v.memory_mib;
      out.gpu_cores_freed += v.cores;
      out.victims.push_back(std::move(v.key));
    }
    return out;
  };

  // Nothing more than the required victims.
  ASSIGN_OR_RETURN(std::optional<Decision> none, trial({}));
  if (none) return finish({}, *std::move(none));
  // Every candidate: if that does not fit, no subset does (releasing more never hurts).
  std::vector<int> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  std::optional<Decision> everything;
  if (n > 0) {
    ASSIGN_OR_RETURN(everything, trial(all));
  }
  if (!everything) {
    out.reason = n == 0 ? StrCat("no pod of lower priority on node ", node_name)
                        : StrCat("the pod does not fit on node ", node_name, " even with its ",
                                 n, " lower-priority pods evicted",
                                 lower > eligible.size() ? StrCat(" (the first ", n, " of ", lower,
                                                                  " searched)")
                                                         : std::string(),
                                 " (", last_failure, ")");
    if (kept > 0) {
      StrAppend(&out.reason, "; ", kept, " pods of equal or higher priority are never evicted");
    }
    return out;
  }

  // Sets of growing size; the first size with a fitting set wins, the cheapest set of it.
  const int budget = std::max(limits.max_evaluations, 2);
  bool cut = false;
  for (int k = 1; k <= n && !cut; ++k) {
    std::optional<std::pair<SetCost, std::vector<int>>> best;
    Decision best_decision;
    std::vector<int> set(static_cast<size_t>(k));
    std::iota(set.begin(), set.end(), 0);
    do {
      if (out.evaluations >= budget) {
        cut = true;
        break;
      }
      ASSIGN_OR_RETURN(std::optional<Decision> d, trial(set));
      if (!d) continue;
      SetCost cost = CostOf(eligible, set);
      if (!best || cost < best->first) {
        best.emplace(cost, set);
        best_decision = *std::move(d);
      }
    } while (NextCombination(set, n));
    if (best) {
      out.exhaustive = !cut;
      return finish(best->second, std::move(best_decision));
    }
  }

  // Budget spent before any size fitted: upstream's reprieve (SelectVictimsOnNode) from every
  // candidate gone, keeping back the highest priority and largest holdings first.
  out.exhaustive = false;
  std::vector<int> gone = all;
  Decision decision = *std::move(everything);
  for (int i = n - 1; i >= 0; --i) {
    std::vector<int> without;
    for (int j : gone) {
      if (j != i) without.push_back(j);
    }
    ASSIGN_OR_RETURN(std::optional<Decision> d, trial(without));
    if (d) {
      gone = std::move(without);
      decision = *std::move(d);
    }
  }
  return finish(gone, std::move(decision));
}

}  // namespace prism::sched
