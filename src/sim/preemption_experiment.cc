#include "sim/preemption_experiment.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "base/status_macros.h"
#include "base/strings.h"
#include "core/sched/engine.h"
#include "core/sched/preemption.h"
#include "sim/engine_policy.h"
#include "sim/rng.h"

namespace prism::sim {
namespace {

bool Fits(const ScalarResources& allocatable, const ScalarResources& used,
          const ScalarResources& request) {
  return used.cpu_milli + request.cpu_milli <= allocatable.cpu_milli &&
         used.memory_mib + request.memory_mib <= allocatable.memory_mib &&
         used.gpus + request.gpus <= allocatable.gpus &&
         used.gpu_milli + request.gpu_milli <= allocatable.gpu_milli;
}

void Add(ScalarResources& to, const ScalarResources& r, int sign) {
  to.cpu_milli += sign * r.cpu_milli;
  to.memory_mib += sign * r.memory_mib;
  to.gpus += sign * r.gpus;
  to.gpu_milli += sign * r.gpu_milli;
}

// A pod placed in a run.
struct Placed {
  int pod = -1;  // Index into Workload::pods.
  int32_t priority = 0;
  int64_t start = 0;
  std::string key;  // The engine's ledger key.
};

// One attempt's choice: the node (engine id) and its victims.
struct Choice {
  int32_t node = -1;
  std::vector<std::string> victims;
};

class Run {
 public:
  Run(const Cluster& cluster, const Workload& workload, const std::vector<int32_t>& priorities,
      PreemptionMode mode, const PreemptionExperimentOptions& options)
      : cluster_(cluster),
        workload_(workload),
        priorities_(priorities),
        mode_(mode),
        options_(options),
        rng_(workload.seed ^ 0x707265656d707421ull) {}

  absl::StatusOr<PreemptionRunResult> Replay() {
    const auto begin = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(SimEngine built,
                     BuildSimEngine(cluster_, workload_, MigMapping::kMemory, EnginePolicyOptions{}));
    live_ = std::move(built.engine);
    to_sim_ = std::move(built.to_sim);
    scratch_ = std::make_unique<sched::Engine>(sched::MakeScratchEngine(*live_));
    on_node_.assign(to_sim_.size(), {});
    out_.mode = std::string(PreemptionModeName(mode_));
    out_.seed = workload_.seed;
    out_.pods = static_cast<int64_t>(workload_.pods.size());
    out_.capacity_gpu_milli = cluster_.total_gpu_milli();
    for (int i = 0; i < static_cast<int>(workload_.pods.size()); ++i) {
      RETURN_IF_ERROR(Arrive(i));
    }
    out_.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    return out_;
  }

 private:
  bool High(int pod) const { return priorities_[pod] > options_.low_priority; }

  absl::Status Arrive(int pod) {
    const PodRequest& p = workload_.pods[pod];
    const sched::PodRequest request = SimPodToEngine(p, MigMapping::kMemory, /*has_mig=*/false);
    const bool high = High(pod);
    out_.high_pods += high;
    ASSIGN_OR_RETURN(bool placed, TryPlace(pod, request));
    if (placed || !high) return absl::OkStatus();
    ++out_.high_unplaced;
    for (int attempt = 0; attempt < options_.max_attempts && mode_ != PreemptionMode::kNone;
         ++attempt) {
      std::optional<Choice> choice;
      if (mode_ == PreemptionMode::kPrism) {
        ASSIGN_OR_RETURN(choice, PrismChoice(pod, request));
      } else {
        choice = GpuBlindChoice(pod);
      }
      if (!choice) break;  // No candidate node: preemption is not helpful.
      int64_t freed = 0;
      for (const std::string& key : choice->victims) {
        ASSIGN_OR_RETURN(int64_t milli, Evict(choice->node, key));
        freed += milli;
      }
      ++out_.preemptions;
      ++out_.preemptions_by_kind[PreemptorKind(p)];
      out_.victims += static_cast<int64_t>(choice->victims.size());
      out_.victims_per_preemption.push_back(static_cast<int>(choice->victims.size()));
      out_.victim_gpu_milli += freed;
      ASSIGN_OR_RETURN(placed, TryPlace(pod, request));
      if (placed) {
        ++out_.succeeded;
        return absl::OkStatus();
      }
      ++out_.failed_by_kind[PreemptorKind(p)];
      out_.wasted_victims += static_cast<int64_t>(choice->victims.size());
      out_.wasted_gpu_milli += freed;
    }
    ++out_.high_pending;
    return absl::OkStatus();
  }

  // Schedules `pod` on the live engine; on success charges it on both engines.
  absl::StatusOr<bool> TryPlace(int pod, const sched::PodRequest& request) {
    sched::ScheduleResult r = live_->Schedule(request, /*explain=*/false);
    RETURN_IF_ERROR(r.status);
    if (!r.scheduled) return false;
    Placed placed{pod, priorities_[pod], next_start_++, StrCat("p", pod)};
    RETURN_IF_ERROR(live_->Apply(placed.key, r.decision));
    RETURN_IF_ERROR(scratch_->Apply(placed.key, r.decision));
    out_.final_used_gpu_milli += workload_.pods[pod].TotalGpuMilli();
    on_node_[r.decision.node].push_back(std::move(placed));
    return true;
  }

  // Evicts `key` from engine node `node`; returns the GPU share it held.
  absl::StatusOr<int64_t> Evict(int32_t node, const std::string& key) {
    std::vector<Placed>& pods = on_node_[node];
    auto it = std::find_if(pods.begin(), pods.end(), [&](const Placed& p) { return p.key == key; });
    if (it == pods.end()) return absl::InternalError(StrCat("victim ", key, " is not on its node"));
    RETURN_IF_ERROR(live_->Release(key));
    RETURN_IF_ERROR(scratch_->Release(key));
    const int64_t milli = workload_.pods[it->pod].TotalGpuMilli();
    out_.final_used_gpu_milli -= milli;
    pods.erase(it);
    return milli;
  }

  // Engine nodes of a model the pod may use (the others fail it for good: node affinity).
  std::vector<int32_t> AllowedNodes(int pod) const {
    const PodRequest& p = workload_.pods[pod];
    std::vector<int32_t> out;
    for (int32_t e = 0; e < static_cast<int32_t>(to_sim_.size()); ++e) {
      const int model = cluster_.node(to_sim_[e]).model;
      if (model >= 0 && ((p.model_mask >> model) & 1)) out.push_back(e);
    }
    return out;
  }

  VictimSummary Summarize(int32_t node, const std::vector<std::string>& victims) const {
    VictimSummary s;
    for (const std::string& key : victims) {
      for (const Placed& p : on_node_[node]) {
        if (p.key != key) continue;
        s.priorities.push_back(p.priority);
        s.starts.push_back(p.start);
      }
    }
    return s;
  }

  // Prism's path B (docs/preemption.md §2): the resolvable split, SelectVictims, the pick.
  absl::StatusOr<std::optional<Choice>> PrismChoice(int pod, const sched::PodRequest& request) {
    const int32_t priority = priorities_[pod];
    const std::vector<int32_t> allowed = AllowedNodes(pod);
    if (allowed.empty()) return std::optional<Choice>();
    // SchedulerCache::ResolvableNodes: a node with lower-priority pods is a trial, at most
    // filter_trials of them from an offset (kube-scheduler's is random; so is this one).
    const size_t n = allowed.size();
    const size_t offset = rng_.Uniform(n);
    std::vector<int32_t> resolvable;
    int trials = 0;
    for (size_t i = 0; i < n && trials < options_.filter_trials; ++i) {
      const int32_t node = allowed[(offset + i) % n];
      std::vector<std::string> lower;
      for (const Placed& p : on_node_[node]) {
        if (p.priority < priority) lower.push_back(p.key);
      }
      if (lower.empty()) continue;
      ++trials;
      const sched::ClusterState::NodeSnapshot saved = scratch_->SaveNode(node);
      for (const std::string& key : lower) RETURN_IF_ERROR(scratch_->Release(key));
      const bool fits = scratch_->Decide(request, node).ok();
      RETURN_IF_ERROR(scratch_->RestoreNode(saved));
      if (fits) resolvable.push_back(node);
    }
    out_.search_trials += trials;
    // SchedulerCache::PlanPreemption over the resolvable nodes.
    sched::Preemptor preemptor;
    preemptor.pod = request;
    preemptor.priority = priority;
    const size_t count =
        static_cast<size_t>(NumCandidates(static_cast<int64_t>(resolvable.size()), options_));
    int64_t trials_left = options_.request_trials;
    std::vector<Choice> choices;
    std::vector<VictimSummary> summaries;
    for (size_t i = 0; i < count && trials_left > 0; ++i) {
      const int32_t node = resolvable[i];
      std::vector<sched::PreemptionCandidate> candidates;
      for (const Placed& p : on_node_[node]) candidates.push_back({p.key, p.priority});
      sched::PreemptionLimits limits;
      limits.max_evaluations =
          static_cast<int>(std::clamp<int64_t>(trials_left, 2, limits.max_evaluations));
      ASSIGN_OR_RETURN(sched::VictimChoice choice,
                       sched::SelectVictims(*scratch_, preemptor, node, candidates, {}, limits));
      trials_left -= choice.evaluations;
      out_.search_trials += choice.evaluations;
      if (!choice.fits || choice.victims.empty()) continue;  // Upstream: "at least one victim".
      summaries.push_back(Summarize(node, choice.victims));
      choices.push_back(Choice{node, std::move(choice.victims)});
    }
    if (choices.empty()) return std::optional<Choice>();
    return std::optional<Choice>(std::move(choices[PickOneNodeForPreemption(summaries)]));
  }

  // DefaultPreemption with GPU as node-level scalars: DryRunPreemption over the nodes the pod
  // may use, from a random offset, until NumCandidates candidates; then the pick.
  std::optional<Choice> GpuBlindChoice(int pod) {
    const ScalarPod preemptor{priorities_[pod], 0, ScalarRequest(workload_.pods[pod])};
    const std::vector<int32_t> potential = AllowedNodes(pod);
    if (potential.empty()) return std::nullopt;
    const size_t n = potential.size();
    const size_t offset = rng_.Uniform(n);
    const size_t want = static_cast<size_t>(NumCandidates(static_cast<int64_t>(n), options_));
    std::vector<Choice> choices;
    std::vector<VictimSummary> summaries;
    for (size_t i = 0; i < n && choices.size() < want; ++i) {
      const int32_t node = potential[(offset + i) % n];
      const std::vector<Placed>& placed = on_node_[node];
      std::vector<ScalarPod> pods;
      pods.reserve(placed.size());
      for (const Placed& p : placed) {
        pods.push_back({p.priority, p.start, ScalarRequest(workload_.pods[p.pod])});
      }
      const ScalarResources allocatable =
          ScalarAllocatable(cluster_.node(to_sim_[node]), options_.split_count);
      std::optional<std::vector<int>> victims = GpuBlindVictims(allocatable, pods, preemptor);
      if (!victims || victims->empty()) continue;
      Choice c{node, {}};
      VictimSummary s;
      for (int v : *victims) {
        c.victims.push_back(placed[v].key);
        s.priorities.push_back(placed[v].priority);
        s.starts.push_back(placed[v].start);
      }
      choices.push_back(std::move(c));
      summaries.push_back(std::move(s));
    }
    if (choices.empty()) return std::nullopt;
    return std::move(choices[PickOneNodeForPreemption(summaries)]);
  }

  const Cluster& cluster_;
  const Workload& workload_;
  const std::vector<int32_t>& priorities_;
  const PreemptionMode mode_;
  const PreemptionExperimentOptions options_;
  Rng rng_;
  std::unique_ptr<sched::Engine> live_;
  // The same charges, indexes off: the what-ifs of the victim search run here.
  std::unique_ptr<sched::Engine> scratch_;
  std::vector<int> to_sim_;
  std::vector<std::vector<Placed>> on_node_;  // Per engine node.
  int64_t next_start_ = 0;
  PreemptionRunResult out_;
};

double Mean(const std::vector<double>& v) {
  if (v.empty()) return std::nan("");
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

double StdDev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = Mean(v);
  double sq = 0;
  for (double x : v) sq += (x - m) * (x - m);
  return std::sqrt(sq / static_cast<double>(v.size() - 1));
}

// Nearest-rank percentile; NaN for none.
double Percentile(std::vector<int> v, double pct) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(pct / 100 * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

double Ratio(int64_t num, int64_t den) {
  return den == 0 ? std::nan("") : static_cast<double>(num) / static_cast<double>(den);
}

std::string Cell(const std::vector<double>& values, int decimals) {
  std::vector<double> present;
  for (double v : values) {
    if (!std::isnan(v)) present.push_back(v);
  }
  if (present.empty()) return "n/a";
  char buf[64];
  if (present.size() == 1) {
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, present[0]);
  } else {
    std::snprintf(buf, sizeof(buf), "%.*f ± %.*f", decimals, Mean(present), decimals,
                  StdDev(present));
  }
  return buf;
}

}  // namespace

std::string_view PreemptionModeName(PreemptionMode mode) {
  switch (mode) {
    case PreemptionMode::kNone:
      return "none";
    case PreemptionMode::kGpuBlind:
      return "gpu-blind";
    case PreemptionMode::kPrism:
      return "prism";
  }
  return "?";
}

int PreemptorKind(const PodRequest& pod) {
  if (pod.gpu_count > 1) return 2;
  return pod.gpu_milli < kMilliPerGpu ? 0 : 1;
}

std::vector<int32_t> DrawPriorities(const Workload& workload, double high_fraction, uint64_t seed,
                                    const PreemptionExperimentOptions& options) {
  // A stream of its own ("priority" in ASCII mixed into the seed).
  Rng rng(seed ^ 0x7072696f72697479ull);
  constexpr uint64_t kScale = 1'000'000;
  const uint64_t threshold =
      static_cast<uint64_t>(std::llround(std::clamp(high_fraction, 0.0, 1.0) * kScale));
  std::vector<int32_t> out;
  out.reserve(workload.pods.size());
  for (const PodRequest& p : workload.pods) {
    const bool high = p.gpu_count > 0 && rng.Uniform(kScale) < threshold;
    out.push_back(high ? options.high_priority : options.low_priority);
  }
  return out;
}

ScalarResources ScalarRequest(const PodRequest& pod) {
  return {pod.milli_cpu, pod.memory_mib, pod.gpu_count, pod.TotalGpuMilli()};
}

ScalarResources ScalarAllocatable(const NodeSpec& node, int64_t split_count) {
  return {node.milli_cpu, node.memory_mib, int64_t{node.gpu_count} * split_count,
          int64_t{node.gpu_count} * kMilliPerGpu};
}

std::optional<std::vector<int>> GpuBlindVictims(const ScalarResources& allocatable,
                                                const std::vector<ScalarPod>& pods,
                                                const ScalarPod& preemptor) {
  ScalarResources used;
  std::vector<int> potential;
  for (int i = 0; i < static_cast<int>(pods.size()); ++i) {
    if (pods[i].priority < preemptor.priority) {
      potential.push_back(i);  // Removed: isPreemptionAllowed.
    } else {
      Add(used, pods[i].request, +1);
    }
  }
  // "No preemption victims found for incoming pod" (UnschedulableAndUnresolvable).
  if (potential.empty()) return std::nullopt;
  if (!Fits(allocatable, used, preemptor.request)) return std::nullopt;
  // util.MoreImportantPod: higher priority first, then the one that started earlier.
  std::stable_sort(potential.begin(), potential.end(), [&](int a, int b) {
    return std::tie(pods[b].priority, pods[a].start) < std::tie(pods[a].priority, pods[b].start);
  });
  std::vector<int> victims;
  for (int i : potential) {
    Add(used, pods[i].request, +1);  // Reprieve it...
    if (!Fits(allocatable, used, preemptor.request)) {
      Add(used, pods[i].request, -1);  // ...unless the pod no longer fits.
      victims.push_back(i);
    }
  }
  return victims;
}

size_t PickOneNodeForPreemption(const std::vector<VictimSummary>& candidates) {
  // Each key is a score, higher is better, applied in turn to the nodes still tied.
  auto highest = [](const VictimSummary& s) {
    return -static_cast<int64_t>(*std::max_element(s.priorities.begin(), s.priorities.end()));
  };
  auto sum = [](const VictimSummary& s) {
    int64_t total = 0;
    for (int32_t p : s.priorities) total += int64_t{p} + (int64_t{1} << 31);
    return -total;
  };
  auto count = [](const VictimSummary& s) { return -static_cast<int64_t>(s.priorities.size()); };
  // util.GetEarliestPodStartTime: the earliest start among the highest-priority victims.
  auto latest_start = [](const VictimSummary& s) {
    const int32_t top = *std::max_element(s.priorities.begin(), s.priorities.end());
    int64_t earliest = std::numeric_limits<int64_t>::max();
    for (size_t i = 0; i < s.priorities.size(); ++i) {
      if (s.priorities[i] == top) earliest = std::min(earliest, s.starts[i]);
    }
    return earliest;
  };
  std::vector<size_t> tied(candidates.size());
  for (size_t i = 0; i < tied.size(); ++i) tied[i] = i;
  auto keep_best = [&](auto score) {
    int64_t best = std::numeric_limits<int64_t>::min();
    for (size_t i : tied) best = std::max(best, score(candidates[i]));
    std::erase_if(tied, [&](size_t i) { return score(candidates[i]) != best; });
  };
  keep_best(highest);
  keep_best(sum);
  keep_best(count);
  keep_best(latest_start);
  return tied.front();
}

int64_t NumCandidates(int64_t nodes, const PreemptionExperimentOptions& options) {
  int64_t n = nodes * options.min_candidate_nodes_percentage / 100;
  n = std::max<int64_t>(n, options.min_candidate_nodes_absolute);
  return std::min(n, nodes);
}

absl::StatusOr<PreemptionRunResult> RunPreemptionExperiment(
    const Cluster& cluster, const Workload& workload, const std::vector<int32_t>& priorities,
    PreemptionMode mode, const PreemptionExperimentOptions& options) {
  if (cluster.has_mig()) {
    return absl::InvalidArgumentError(
        "the preemption experiment runs on software-shared GPUs: the GPU-blind view of MIG "
        "resources is not modelled");
  }
  if (workload.has_departures()) {
    return absl::InvalidArgumentError("the preemption experiment replays arrivals only");
  }
  if (priorities.size() != workload.pods.size()) {
    return absl::InvalidArgumentError(StrCat(priorities.size(), " priorities for ",
                                             workload.pods.size(), " pods"));
  }
  if (options.max_attempts < 0 || options.filter_trials < 0 || options.request_trials < 0) {
    return absl::InvalidArgumentError("negative preemption budget");
  }
  return Run(cluster, workload, priorities, mode, options).Replay();
}

std::string FormatPreemptionTable(const std::vector<PreemptionRunResult>& runs) {
  std::vector<std::string> modes;
  for (const PreemptionRunResult& r : runs) {
    if (std::find(modes.begin(), modes.end(), r.mode) == modes.end()) modes.push_back(r.mode);
  }
  struct Row {
    std::string label;
    int decimals;
    double (*value)(const PreemptionRunResult&);
  };
  const std::vector<Row> rows = {
      {"High-priority pods arrived", 1, [](const PreemptionRunResult& r) {
         return static_cast<double>(r.high_pods);
       }},
      {"... that fit nowhere on arrival", 1, [](const PreemptionRunResult& r) {
         return static_cast<double>(r.high_unplaced);
       }},
      {"Preemptions (victims evicted)", 1, [](const PreemptionRunResult& r) {
         return static_cast<double>(r.preemptions);
       }},
      {"... after which the preemptor was placed", 1, [](const PreemptionRunResult& r) {
         return static_cast<double>(r.succeeded);
       }},
      {"... for a share of one GPU", 1, [](const PreemptionRunResult& r) {
         return static_cast<double>(r.preemptions_by_kind[0]);
       }},
      {"... for one whole GPU", 1, [](const PreemptionRunResult& r) {
         return static_cast<double>(r.preemptions_by_kind[1]);
       }},
      {"... for several GPUs", 1, [](const PreemptionRunResult& r) {
         return static_cast<double>(r.preemptions_by_kind[2]);
       }},
      {"Preemptions after which the preemptor still did not fit", 1,
       [](const PreemptionRunResult& r) { return static_cast<double>(r.preemptions - r.succeeded); }},
      {"... for a share of one GPU", 1, [](const PreemptionRunResult& r) {
         return static_cast<double>(r.failed_by_kind[0]);
       }},
      {"... for one whole GPU", 1, [](const PreemptionRunResult& r) {
         return static_cast<double>(r.failed_by_kind[1]);
       }},
      {"... for several GPUs", 1, [](const PreemptionRunResult& r) {
         return static_cast<double>(r.failed_by_kind[2]);
       }},
      {"Victims per preemption, mean", 2, [](const PreemptionRunResult& r) {
         return Ratio(r.victims, r.preemptions);
       }},
      {"Victims per preemption, p50", 1, [](const PreemptionRunResult& r) {
         return Percentile(r.victims_per_preemption, 50);
       }},
      {"Victims per preemption, p99", 1, [](const PreemptionRunResult& r) {
         return Percentile(r.victims_per_preemption, 99);
       }},
      {"GPU freed per victim (milli-GPU)", 0, [](const PreemptionRunResult& r) {
         return Ratio(r.victim_gpu_milli, r.victims);
       }},
      {"Victims evicted", 1, [](const PreemptionRunResult& r) {
         return static_cast<double>(r.victims);
       }},
      {"Wasted evictions (the preemptor still did not fit)", 1, [](const PreemptionRunResult& r) {
         return static_cast<double>(r.wasted_victims);
       }},
      {"GPU evicted per placed preemptor (milli-GPU)", 0, [](const PreemptionRunResult& r) {
         return Ratio(r.victim_gpu_milli, r.succeeded);
       }},
      {"High-priority pods left pending", 1, [](const PreemptionRunResult& r) {
         return static_cast<double>(r.high_pending);
       }},
      {"GPU allocated at the end (% of capacity)", 2, [](const PreemptionRunResult& r) {
         return 100 * Ratio(r.final_used_gpu_milli, r.capacity_gpu_milli);
       }},
      {"Engine trials per preemption", 0, [](const PreemptionRunResult& r) {
         return Ratio(r.search_trials, r.preemptions);
       }},
      {"Run time per seed (s)", 1, [](const PreemptionRunResult& r) { return r.seconds; }},
  };
  std::string out = "| Metric |";
  std::string rule = "|---|";
  for (const std::string& m : modes) {
    StrAppend(&out, " ", m, " |");
    rule += "---|";
  }
  StrAppend(&out, "\n", rule, "\n");
  for (const Row& row : rows) {
    StrAppend(&out, "| ", row.label, " |");
    for (const std::string& m : modes) {
      std::vector<double> values;
      for (const PreemptionRunResult& r : runs) {
        if (r.mode == m) values.push_back(row.value(r));
      }
      StrAppend(&out, " ", Cell(values, row.decimals), " |");
    }
    out += "\n";
  }
  return out;
}

std::string FormatPreemptionCsv(const std::vector<PreemptionRunResult>& runs) {
  std::string out =
      "mode,seed,pods,high_pods,high_unplaced,preemptions,succeeded,high_pending,victims,"
      "victim_gpu_milli,wasted_victims,wasted_gpu_milli,victims_p50,victims_p99,search_trials,"
      "final_used_gpu_milli,capacity_gpu_milli,preemptions_share,preemptions_one_gpu,"
      "preemptions_multi_gpu,failed_share,failed_one_gpu,failed_multi_gpu,seconds\n";
  for (const PreemptionRunResult& r : runs) {
    char tail[64];
    std::snprintf(tail, sizeof(tail), "%.3f", r.seconds);
    StrAppend(&out, r.mode, ",", r.seed, ",", r.pods, ",", r.high_pods, ",", r.high_unplaced, ",",
              r.preemptions, ",", r.succeeded, ",", r.high_pending, ",", r.victims, ",",
              r.victim_gpu_milli, ",", r.wasted_victims, ",", r.wasted_gpu_milli, ",",
              r.victims_per_preemption.empty() ? 0 : Percentile(r.victims_per_preemption, 50),
              ",", r.victims_per_preemption.empty() ? 0 : Percentile(r.victims_per_preemption, 99),
              ",", r.search_trials, ",", r.final_used_gpu_milli, ",", r.capacity_gpu_milli, ",",
              StrJoin(r.preemptions_by_kind, ","), ",", StrJoin(r.failed_by_kind, ","), ",", tail,
              "\n");
  }
  return out;
}

}  // namespace prism::sim
