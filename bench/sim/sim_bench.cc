// Time per placed pod for each simulator policy: one full run of the shipped
// default trace (FGD paper's method, seed 42: 10,818 pods on 1,213 nodes /
// 6,212 GPUs), software-shared GPUs and MIG GPUs (A100-SXM4-80GB, memory
// mapping). Counters: `per_pod` (CPU time per arriving pod, including pods that
// fit nowhere), `per_placed_pod`, and the run's allocation at 100 % arrived. CPU
// time, not wall time, so that a busy machine does not inflate the figures.
//
//   build/<dir>/bench/sim/sim_bench [--benchmark_filter=fgd]
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"

#include "base/check.h"
#include "sim/policy.h"
#include "sim/simulator.h"
#include "sim/trace.h"
#include "sim/workload.h"

namespace prism::sim {
namespace {

struct Setup {
  Cluster cluster;
  Workload workload;
};

const Setup& Shared(bool mig) {
  static const Setup* shared = nullptr;
  static const Setup* with_mig = nullptr;
  const Setup*& slot = mig ? with_mig : shared;
  if (slot == nullptr) {
    const Trace& trace = EmbeddedDefaultTrace();
    auto cluster = Cluster::FromTrace(trace.nodes);
    PRISM_CHECK(cluster.ok());
    if (mig) cluster->EnableMig(mig::FindModel("A100-SXM4-80GB"));
    Workload w = BuildInflatedWorkload(*cluster, trace.pods, {42, 1.3});
    slot = new Setup{*std::move(cluster), std::move(w)};
  }
  return *slot;
}

void BM_Policy(benchmark::State& state, const std::string& policy_name, bool mig) {
  const Setup& setup = Shared(mig);
  int64_t pods = 0, placed = 0;
  double at100 = 0;
  for (auto _ : state) {
    auto policy = MakeBuiltinPolicy(policy_name);
    PRISM_CHECK(policy.ok());
    auto r = Simulate(setup.cluster, setup.workload, **policy);
    PRISM_CHECK(r.ok());
    PRISM_CHECK(r->rejected_placements == 0);
    pods += r->pods;
    placed += r->placed;
    at100 = r->curve[100];
  }
  using benchmark::Counter;
  state.counters["per_pod"] =
      Counter(static_cast<double>(pods), Counter::kIsRate | Counter::kInvert);
  state.counters["per_placed_pod"] =
      Counter(static_cast<double>(placed), Counter::kIsRate | Counter::kInvert);
  state.counters["alloc_at_100"] = at100;
}

void Register() {
  for (const char* p : {"random", "best-fit", "fgd", "prism", "prism-fgd", "prism-bestfit"}) {
    benchmark::RegisterBenchmark((std::string("shared/") + p).c_str(), BM_Policy, p, false)
        ->Unit(benchmark::kMillisecond)
        ->MeasureProcessCPUTime();
  }
  for (const char* p : {"hami-legacy", "hami-v2.10", "prism"}) {
    benchmark::RegisterBenchmark((std::string("mig/") + p).c_str(), BM_Policy, p, true)
        ->Unit(benchmark::kMillisecond)
        ->MeasureProcessCPUTime();
  }
}

}  // namespace
}  // namespace prism::sim

int main(int argc, char** argv) {
  prism::sim::Register();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
