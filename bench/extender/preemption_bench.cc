// The cost of Filter's resolvable/unresolvable split (docs/preemption.md §2,
// SchedulerCache::ResolvableNodes) at scale: N nodes, each a T4 full of one 15 GiB slice, and a
// 10 GiB pod of priority 100 that fits nowhere. Per iteration, what Scheduler::Filter does for a
// GPU pod no node fits: the cache's Filter (fails on every node), then the split over the failed
// nodes. With lower-priority pods (arg 1: the slices have priority 0) every node is a candidate
// and the split makes its budget of trials (PreemptionOptions::filter_trials, 100); without (arg
// 0: priority 100, equal) no node has a pod to evict and no trial runs. Counters: filter_us and
// split_us (means), added = split / filter (the split's cost relative to the Filter it follows).
#include <benchmark/benchmark.h>

#include <chrono>
#include <string>
#include <vector>

#include "config/device_config_yaml.h"
#include "config/pod_json.h"
#include "extender/cache.h"
#include "extender/test_util.h"

namespace prism {
namespace {

using extender::testing::GpuPod;
using extender::testing::NodeJson;
using extender::testing::TestGpu;
using json = nlohmann::json;

config::PodManifest Manifest(const json& pod) { return *config::PodManifestFromJson(pod); }

// N saturated nodes; the slices' priority is `priority`.
struct Rig {
  Rig(int nodes, int32_t priority) {
    extender::CacheOptions options;
    options.engine = extender::DefaultEngineOptions();
    cache = std::make_unique<extender::SchedulerCache>(config::DefaultDeviceConfig(), options);
    for (int n = 0; n < nodes; ++n) {
      const std::string node = StrCat("n", n);
      names.push_back(node);
      cache->UpsertNode(NodeJson(node, {TestGpu{"T4", 15360}}));
      json pod = GpuPod(StrCat("full-", n), 1, 15360, 100);
      pod["spec"]["priority"] = priority;
      const config::PodManifest m = Manifest(pod);
      const std::vector<std::string_view> one = {names.back()};
      if (cache->Filter(m, one).assumed_node != node) std::abort();
      auto ticket = cache->BeginBind(m, node);
      if (!ticket.ok()) std::abort();
      cache->FinishBind(*ticket, extender::BindOutcome::kBound);
      pod["spec"]["nodeName"] = node;
      for (const auto& [k, v] : ticket->annotations) pod["metadata"]["annotations"][k] = v;
      cache->UpsertPod(pod);
    }
    views = extender::testing::Views(names);
  }
  std::unique_ptr<extender::SchedulerCache> cache;
  std::vector<std::string> names;
  std::vector<std::string_view> views;
};

void BM_FilterSplit(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const bool lower = state.range(1) != 0;
  Rig rig(nodes, lower ? 0 : 100);
  double filter_us = 0, split_us = 0;
  int64_t resolvable = 0, i = 0;
  for (auto _ : state) {
    json pod = GpuPod(StrCat("hi-", i++), 1, 10240, 10);
    pod["spec"]["priority"] = 100;
    const config::PodManifest m = Manifest(pod);
    const auto t0 = std::chrono::steady_clock::now();
    extender::FilterOutcome out = rig.cache->Filter(m, rig.views);
    const auto t1 = std::chrono::steady_clock::now();
    if (!out.assumed_node.empty()) std::abort();
    extender::SchedulerCache::FailedNodeNotes notes;  // As Scheduler::Filter asks.
    std::vector<std::string_view> split =
        rig.cache->ResolvableNodes(m, 100, false, rig.views, 100, &notes);
    const auto t2 = std::chrono::steady_clock::now();
    resolvable += static_cast<int64_t>(split.size());
    filter_us += std::chrono::duration<double, std::micro>(t1 - t0).count();
    split_us += std::chrono::duration<double, std::micro>(t2 - t1).count();
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["filter_us"] = filter_us / n;
  state.counters["split_us"] = split_us / n;
  state.counters["added"] = split_us / filter_us;
  state.counters["resolvable"] = static_cast<double>(resolvable) / n;
}
BENCHMARK(BM_FilterSplit)
    ->Args({1000, 0})
    ->Args({1000, 1})
    ->Args({5000, 0})
    ->Args({5000, 1})
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(200);

}  // namespace
}  // namespace prism

BENCHMARK_MAIN();
