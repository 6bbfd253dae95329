// Benchmarks of the MIG layout engine (issue 2): planning every transition
// between maximal layouts of an H100 (all ordered pairs), placement search and
// enumeration. Run: build/release/bench/mig/mig_bench
#include <benchmark/benchmark.h>

#include "core/mig/gpu_model.h"
#include "core/mig/layout.h"
#include "core/mig/planner.h"

namespace prism::mig {
namespace {

const GpuModel& H100() { return *FindModel("H100-SXM5-80GB"); }

// All ordered pairs (current, desired counts) of maximal layouts: one
// iteration plans all of them; the counter reports plans per second.
void BM_PlanAllMaximalTransitionsH100(benchmark::State& state) {
  const GpuModel& m = H100();
  const std::vector<Layout> layouts = EnumerateMaximalLayouts(m);
  std::vector<ProfileCounts> targets;
  for (const Layout& l : layouts) targets.push_back(CountProfiles(m, l));
  int64_t plans = 0;
  int64_t failures = 0;
  for (auto _ : state) {
    for (const Layout& current : layouts) {
      for (const ProfileCounts& desired : targets) {
        auto plan = PlanTransition(m, current, desired);
        failures += !plan.ok();
        benchmark::DoNotOptimize(plan);
        ++plans;
      }
    }
  }
  state.counters["layouts"] = static_cast<double>(layouts.size());
  state.counters["pairs"] = static_cast<double>(layouts.size() * targets.size());
  state.counters["plans/s"] = benchmark::Counter(static_cast<double>(plans), benchmark::Counter::kIsRate);
  state.counters["failed"] = static_cast<double>(failures);
}
BENCHMARK(BM_PlanAllMaximalTransitionsH100)->Unit(benchmark::kMillisecond);

// The same with half of each current layout busy: the planner must keep them.
void BM_PlanAllTransitionsWithBusyInstancesH100(benchmark::State& state) {
  const GpuModel& m = H100();
  std::vector<Layout> layouts = EnumerateMaximalLayouts(m);
  std::vector<ProfileCounts> targets;
  for (const Layout& l : layouts) targets.push_back(CountProfiles(m, l));
  for (Layout& l : layouts) {
    for (size_t i = 0; i < l.size(); i += 2) l[i].busy = true;
  }
  int64_t plans = 0;
  for (auto _ : state) {
    for (const Layout& current : layouts) {
      for (const ProfileCounts& desired : targets) {
        benchmark::DoNotOptimize(PlanTransition(m, current, desired));
        ++plans;
      }
    }
  }
  state.counters["plans/s"] = benchmark::Counter(static_cast<double>(plans), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PlanAllTransitionsWithBusyInstancesH100)->Unit(benchmark::kMillisecond);

void BM_EnumerateMaximalLayouts(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(EnumerateMaximalLayouts(H100()));
}
BENCHMARK(BM_EnumerateMaximalLayouts)->Unit(benchmark::kMicrosecond);

void BM_PlaceBalancedOnEmptyH100(benchmark::State& state) {
  const GpuModel& m = H100();
  const std::vector<int> profiles = {m.FindProfile("1g.10gb"), m.FindProfile("1g.10gb"),
                                     m.FindProfile("2g.20gb"), m.FindProfile("3g.40gb")};
  for (auto _ : state) benchmark::DoNotOptimize(PlaceProfiles(m, {}, profiles));
}
BENCHMARK(BM_PlaceBalancedOnEmptyH100);

}  // namespace
}  // namespace prism::mig

BENCHMARK_MAIN();
