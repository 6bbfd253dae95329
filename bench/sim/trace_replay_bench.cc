// The placement engine's decision cost on the trace (issue 12): the FGD paper's replay
// (pods of the default trace arriving until 130 % of the GPU capacity was asked for, seed 42)
// on 1x, 4x and 16x the trace's node list (1,213 / 4,852 / 19,408 nodes), through the
// simulator's `prism` policy, i.e. Engine::Schedule/Apply exactly as `prism sim` calls them.
// Every decision's CPU time is recorded; counters give p50/p99/p99.9 over all decisions, the
// same over decisions of shapes seen before, and the cost of a shape's first decision (which
// builds that shape's index over every node). `shared/`: the trace's GPUs software-shared;
// `mig/`: every GPU an A100-80GB in MIG mode (the simulator's MIG benchmark).
//
//   build/release/bench/sim/sim_bench --benchmark_filter=replay --benchmark_counters_tabular=true
#include <time.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "benchmark/benchmark.h"

#include "base/check.h"
#include "base/strings.h"
#include "sim/policy.h"
#include "sim/simulator.h"
#include "sim/trace.h"
#include "sim/workload.h"

namespace prism::sim {
namespace {

double ThreadCpuMicros() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

// Forwards to the engine policy and times each Place (one decision).
class TimedPolicy : public Policy {
 public:
  explicit TimedPolicy(std::unique_ptr<Policy> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return inner_->name(); }
  absl::Status Begin(const RunContext& context) override { return inner_->Begin(context); }
  std::optional<Placement> Place(const ClusterState& state, const PodRequest& pod) override {
    const bool first = shapes_
                           .insert(std::make_tuple(pod.milli_cpu, pod.memory_mib, pod.gpu_count,
                                                   pod.gpu_milli, pod.gpu_spec))
                           .second;
    const double t0 = ThreadCpuMicros();
    std::optional<Placement> placement = inner_->Place(state, pod);
    const double us = ThreadCpuMicros() - t0;
    all_.push_back(us);
    (first ? first_of_shape_ : seen_shape_).push_back(us);
    return placement;
  }
  absl::Status Placed(const ClusterState& state, const PodRequest& pod,
                      const Placement& placement) override {
    const double t0 = ThreadCpuMicros();
    absl::Status s = inner_->Placed(state, pod, placement);
    after_placed_us_ += ThreadCpuMicros() - t0;
    return s;
  }
  absl::Status Released(const ClusterState& state, const PodRequest& pod,
                        const Placement& placement) override {
    return inner_->Released(state, pod, placement);
  }
  bool keeps_idle_instances() const override { return inner_->keeps_idle_instances(); }

  std::vector<double> all_, seen_shape_, first_of_shape_;
  double after_placed_us_ = 0;  // Apply, and index maintenance when the policy does it.

 private:
  std::unique_ptr<Policy> inner_;
  std::set<std::tuple<int64_t, int64_t, int, int, std::string>> shapes_;
};

double At(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

void BM_TraceReplay(benchmark::State& state, bool mig, const std::string& policy_name) {
  const int copies = static_cast<int>(state.range(0));
  const Trace& trace = EmbeddedDefaultTrace();
  std::vector<TraceNode> nodes;
  nodes.reserve(trace.nodes.size() * copies);
  for (int c = 0; c < copies; ++c) {
    for (const TraceNode& n : trace.nodes) {
      nodes.push_back(n);
      if (c > 0) nodes.back().name = StrCat(n.name, "-copy", c);
    }
  }
  absl::StatusOr<Cluster> cluster = Cluster::FromTrace(nodes);
  PRISM_CHECK(cluster.ok());
  if (mig) cluster->EnableMig(mig::FindModel("A100-SXM4-80GB"));
  const Workload workload = BuildInflatedWorkload(*cluster, trace.pods, {42, 1.3});
  double at100 = 0;
  for (auto _ : state) {
    absl::StatusOr<std::unique_ptr<Policy>> inner = MakeBuiltinPolicy(policy_name);
    PRISM_CHECK(inner.ok());
    TimedPolicy policy(*std::move(inner));
    absl::StatusOr<RunResult> r = Simulate(*cluster, workload, policy);
    PRISM_CHECK(r.ok());
    at100 = r->curve[100];
    state.counters["nodes"] = static_cast<double>(nodes.size());
    state.counters["decisions"] = static_cast<double>(policy.all_.size());
    state.counters["shapes"] = static_cast<double>(policy.first_of_shape_.size());
    state.counters["p50_us"] = At(policy.all_, 0.50);
    state.counters["p99_us"] = At(policy.all_, 0.99);
    state.counters["p999_us"] = At(policy.all_, 0.999);
    state.counters["seen_p99_us"] = At(policy.seen_shape_, 0.99);
    state.counters["seen_p999_us"] = At(policy.seen_shape_, 0.999);
    state.counters["first_p50_us"] = At(policy.first_of_shape_, 0.50);
    state.counters["first_max_us"] = At(policy.first_of_shape_, 1.0);
    state.counters["placed_us_per_decision"] =
        policy.after_placed_us_ / static_cast<double>(std::max<size_t>(1, policy.all_.size()));
  }
  state.counters["alloc_at_100"] = at100;
}

// `prism`: indexes catch up when a decision reads them (the simulator's setting).
// `prism:maintain=N`: after each bind, indexes lagging by more than 8 changes are caught up
// (at most N scorings), as the extender does between requests; `placed_us_per_decision` then
// includes that maintenance.
// `prism:complement=0;mig_idle=0`: without issue 35's two terms (the complement of a share's
// hole, the idle MIG GPUs a node keeps), for their cost as a ratio in one run.
void RegisterReplay() {
  for (bool mig : {false, true}) {
    for (const char* policy :
         {"prism", "prism:maintain=100000", "prism:complement=0;mig_idle=0"}) {
      const std::string name = StrCat("replay/", mig ? "mig/" : "shared/", policy);
      benchmark::RegisterBenchmark(name.c_str(), BM_TraceReplay, mig, std::string(policy))
          ->Arg(1)
          ->Arg(4)
          ->Arg(16)
          ->Unit(benchmark::kMillisecond)
          ->Iterations(1);
    }
  }
}

const bool kRegistered = (RegisterReplay(), true);

}  // namespace
}  // namespace prism::sim
