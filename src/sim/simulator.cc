#include "sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "base/status_macros.h"
#include "base/strings.h"

namespace prism::sim {
namespace {

// Share of the arrival span (from the first arrival) that a churn run skips
// before measuring when the workload does not say (Workload::warmup_end).
constexpr double kWarmup = 0.2;

class Runner {
 public:
  Runner(const Cluster& cluster, Policy& policy, const RunOptions& options, RunResult* result)
      : state_(&cluster, options.mig_mapping),
        policy_(policy),
        result_(result),
        topology_metrics_(options.topology_metrics) {}

  ClusterState& state() { return state_; }

  // Places one pod; returns its placement or nullopt.
  absl::StatusOr<std::optional<Placement>> Attempt(const PodRequest& pod) {
    ++result_->pods;
    result_->arrived_gpu_milli += pod.TotalGpuMilli();
    std::optional<Placement> p = policy_.Place(state_, pod);
    if (p.has_value()) {
      // What the node offered, before the pod takes its GPUs.
      const topo::NodeTopology* topology = nullptr;
      TopologyOffer offer;
      topo::Tier cluster_best = topo::Tier::kAny;
      if (topology_metrics_ && pod.gpu_count >= 2 && p->gpus.size() >= 2 && p->node >= 0 &&
          p->node < state_.cluster().node_count()) {
        topology = state_.cluster().topology(p->node);
        if (topology != nullptr) {
          offer = BestOffer(*topology, FittingGpus(p->node, pod), pod.gpu_count);
          cluster_best = std::max(offers_.BestTier(state_, pod), offer.best);
        }
      }
      absl::Status s = state_.Place(pod, *p);
      if (s.ok()) {
        if (topology != nullptr) {
          RecordPlacement(*topology, offer, cluster_best, p->gpus, &result_->topology);
        } else if (topology_metrics_ && pod.gpu_count >= 2) {
          ++result_->topology.unwired;
        }
        ++result_->placed;
        RETURN_IF_ERROR(policy_.Placed(state_, pod, *p));
        return p;
      }
      if (result_->rejected_placements++ == 0) {
        result_->first_rejection = StrCat(policy_.name(), ": ", ToStd(s.message()));
      }
    }
    ++result_->failed;
    result_->failed_gpu_milli += pod.TotalGpuMilli();
    return std::optional<Placement>();
  }

  absl::Status Release(const PodRequest& pod, const Placement& p) {
    RETURN_IF_ERROR(state_.Release(pod, p, policy_.keeps_idle_instances()));
    return policy_.Released(state_, pod, p);
  }

 private:
  std::vector<int> FittingGpus(int node, const PodRequest& pod) const {
    std::vector<int> fitting;
    std::span<const int> left = state_.gpu_left(node);
    for (int g = 0; g < static_cast<int>(left.size()); ++g) {
      if (left[g] >= pod.gpu_milli) fitting.push_back(g);
    }
    return fitting;
  }

  ClusterState state_;
  Policy& policy_;
  RunResult* result_;
  bool topology_metrics_ = false;
  ClusterOffers offers_;  // The best tier any node offered (TopologyStats::best_any).
};

absl::Status RunInflated(const Cluster& cluster, const Workload& workload,
                         const RunOptions& options, Runner& runner, RunResult* result) {
  const int64_t capacity = cluster.total_gpu_milli();
  const int max_pct = std::max(0, options.max_arrived_pct);
  std::vector<double> sum(max_pct + 1, 0.0);
  std::vector<int64_t> count(max_pct + 1, 0);
  int64_t arrived = 0;
  const int64_t total = static_cast<int64_t>(workload.pods.size());
  const int64_t step = std::max<int64_t>(1, total / 100);
  std::vector<int> waste_pcts = options.waste_pcts;
  std::sort(waste_pcts.begin(), waste_pcts.end());
  size_t next_waste = 0;
  std::vector<const PodRequest*> failed;
  std::vector<std::pair<size_t, Placement>> placed_pods;  // RunOptions::record_placements.
  auto snapshot_waste = [&](int64_t arrived_next) {
    while (next_waste < waste_pcts.size() &&
           arrived_next * 100 > capacity * int64_t{waste_pcts[next_waste]}) {
      if (options.record_placements) result->placements.push_back(placed_pods);
      result->waste.push_back(
          ComputeWaste(runner.state(), workload.trace_pods, failed, waste_pcts[next_waste++]));
    }
  };
  for (int64_t i = 0; i < total; ++i) {
    const PodRequest& pod = workload.pods[i];
    snapshot_waste(arrived + pod.TotalGpuMilli());
    arrived += pod.TotalGpuMilli();
    ASSIGN_OR_RETURN(std::optional<Placement> placed, runner.Attempt(pod));
    if (!placed && !waste_pcts.empty()) failed.push_back(&pod);
    if (placed && options.record_placements) placed_pods.emplace_back(i, *placed);
    if (capacity > 0) {
      const int64_t x = RoundHalfEven(arrived * 100, capacity);
      if (x <= max_pct) {
        sum[x] += static_cast<double>(runner.state().used_gpu_milli()) * 100.0 /
                  static_cast<double>(capacity);
        ++count[x];
      }
    }
    if (options.progress && ((i + 1) % step == 0 || i + 1 == total)) options.progress(i + 1, total);
  }
  snapshot_waste(std::numeric_limits<int64_t>::max() / 100);
  result->curve.assign(max_pct + 1, std::numeric_limits<double>::quiet_NaN());
  for (int x = 0; x <= max_pct; ++x) {
    if (count[x] > 0) {
      result->curve[x] = sum[x] / static_cast<double>(count[x]);
      continue;
    }
    double s = 0;
    int64_t c = 0;
    for (int y = std::max(0, x - 1); y <= std::min(max_pct, x + 1); ++y) {
      s += sum[y];
      c += count[y];
    }
    if (c > 0) result->curve[x] = s / static_cast<double>(c);
  }
  return absl::OkStatus();
}

absl::Status RunChurn(const Cluster& cluster, const Workload& workload, const RunOptions& options,
                      Runner& runner, RunResult* result) {
  const double capacity = static_cast<double>(cluster.total_gpu_milli());
  double first = std::numeric_limits<double>::infinity();
  double last = -first;
  for (const Event& e : workload.events) {
    if (!e.arrival) continue;
    first = std::min(first, e.time);
    last = std::max(last, e.time);
  }
  const double window_start =
      workload.warmup_end > 0 ? workload.warmup_end : first + kWarmup * (last - first);
  const double window_end = last;
  const double window = window_end - window_start;
  constexpr int kSamples = 100;
  ChurnSummary& churn = result->churn;
  int next_sample = 0;
  auto sample_time = [&](int k) { return window_start + (k + 0.5) * window / kSamples; };
  std::vector<std::optional<Placement>> where(workload.pods.size());
  double previous = first;
  double integral = 0;
  int64_t window_arrived = 0;
  int64_t window_failed = 0;
  const int64_t total = static_cast<int64_t>(workload.events.size());
  const int64_t step = std::max<int64_t>(1, total / 100);
  for (int64_t i = 0; i < total; ++i) {
    const Event& e = workload.events[i];
    if (e.time > window_end) break;
    const double used = static_cast<double>(runner.state().used_gpu_milli());
    const double a = std::max(previous, window_start);
    const double b = std::min(e.time, window_end);
    if (b > a) integral += used * (b - a);
    while (next_sample < kSamples && window > 0 && sample_time(next_sample) < e.time) {
      churn.alloc_over_time.push_back(capacity > 0 ? used * 100 / capacity : 0);
      ++next_sample;
    }
    previous = e.time;
    const PodRequest& pod = workload.pods[e.pod];
    if (e.arrival) {
      ASSIGN_OR_RETURN(where[e.pod], runner.Attempt(pod));
      if (e.time >= window_start) {
        ++churn.window_arrivals;
        window_arrived += pod.TotalGpuMilli();
        if (!where[e.pod]) {
          ++churn.blocked_pods;
          window_failed += pod.TotalGpuMilli();
        }
      }
    } else if (where[e.pod]) {
      RETURN_IF_ERROR(runner.Release(pod, *where[e.pod]));
      where[e.pod].reset();
    }
    if (e.time >= window_start && capacity > 0) {
      churn.peak_alloc_pct =
          std::max(churn.peak_alloc_pct,
                   static_cast<double>(runner.state().used_gpu_milli()) * 100 / capacity);
    }
    if (options.progress && ((i + 1) % step == 0 || i + 1 == total)) options.progress(i + 1, total);
  }
  const double used = static_cast<double>(runner.state().used_gpu_milli());
  while (next_sample < kSamples && window > 0) {
    churn.alloc_over_time.push_back(capacity > 0 ? used * 100 / capacity : 0);
    ++next_sample;
  }
  churn.mean_alloc_pct = (window > 0 && capacity > 0) ? integral * 100 / (window * capacity) : 0;
  churn.blocked_demand_pct = window_arrived > 0 ? static_cast<double>(window_failed) * 100 /
                                                      static_cast<double>(window_arrived)
                                                : 0;
  return absl::OkStatus();
}

}  // namespace

int64_t RoundHalfEven(int64_t num, int64_t den) {
  int64_t q = num / den;
  int64_t r = num % den;
  if (r < 0) {
    r += den;
    --q;
  }
  if (2 * r > den || (2 * r == den && (q & 1))) ++q;
  return q;
}

absl::StatusOr<RunResult> Simulate(const Cluster& cluster, const Workload& workload, Policy& policy,
                                   const RunOptions& options) {
  RunContext context;
  context.cluster = &cluster;
  context.workload = &workload;
  context.mig_mapping = options.mig_mapping;
  context.seed = workload.seed;
  RETURN_IF_ERROR(Annotate(policy.Begin(context), StrCat("policy ", policy.name())));
  RunResult result;
  result.policy = std::string(policy.name());
  result.seed = workload.seed;
  Runner runner(cluster, policy, options, &result);
  const auto start = std::chrono::steady_clock::now();
  if (workload.has_departures()) {
    RETURN_IF_ERROR(RunChurn(cluster, workload, options, runner, &result));
  } else {
    RETURN_IF_ERROR(RunInflated(cluster, workload, options, runner, &result));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.mig = runner.state().counters();
  result.final_used_gpu_milli = runner.state().used_gpu_milli();
  return result;
}

}  // namespace prism::sim
