// Placement-engine benchmarks: one decision against N nodes x 8 GPUs under
// mixed MIG and slice load (issue 3: p99 < 200 us at 5,000 nodes on one core).
//
// Cluster: per 4 nodes, 2 with 8 software-sliced A100-80GB (hami-core), 1
// with 8 H100-80GB in MIG placement mode, 1 with 8 A100-40GB in MIG template
// mode (HAMi's default geometries). Load: pods drawn from a mix of 12 shapes
// (slices of 10-100 %, MIG-sized memory requests, multi-GPU, CPU-only) are
// placed until about 60 % of the GPUs are in use, with departures on the way,
// so nodes differ. Each measured decision is Schedule() for a pod of the mix;
// between decisions the pod is applied and an older one released, so the
// indexes always have changed nodes to catch up on (the steady state of a
// scheduler). Percentiles come from per-decision wall times.
//
//   build/<dir>/bench/sched/sched_bench --benchmark_counters_tabular=true
#include <time.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"

#include "base/check.h"
#include "core/sched/engine.h"
#include "core/sched/preemption.h"
#include "core/sched/test_util.h"

namespace prism::sched {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

DeviceConfig BenchConfig() {
  DeviceConfig c;
  c.known_mig_geometries.push_back({{"A100-SXM4-40GB"},
                                    {{{"1g.5gb", 5120, 14, 7}},
                                     {{"1g.5gb", 5120, 14, 1}, {"2g.10gb", 10240, 28, 3}},
                                     {{"3g.20gb", 20480, 42, 2}},
                                     {{"7g.40gb", 40960, 100, 1}}}});
  return c;
}

std::vector<NodeSpec> BenchNodes(int count) {
  std::vector<NodeSpec> nodes;
  for (int i = 0; i < count; ++i) {
    NodeSpec n;
    char name[32];
    std::snprintf(name, sizeof(name), "node-%05d", i);
    n.name = name;
    n.cpu_milli = 96000;
    n.memory_bytes = 768 * kGiB;
    for (int g = 0; g < 8; ++g) {
      GpuSpec gpu;
      switch (i % 4) {
        case 0:
        case 1:
          gpu.model = "A100-SXM4-80GB";
          gpu.mode = GpuMode::kHamiCore;
          break;
        case 2:
          gpu.model = "H100-SXM5-80GB";
          gpu.mode = GpuMode::kMig;
          break;
        default:
          gpu.model = "A100-SXM4-40GB";
          gpu.mode = GpuMode::kMig;
          break;
      }
      n.gpus.push_back(gpu);
    }
    nodes.push_back(std::move(n));
  }
  return nodes;
}

std::vector<PodRequest> ShapeMix() {
  std::vector<PodRequest> mix;
  auto pod = [&mix](int64_t cpu, int64_t mem_gib, int32_t count, int64_t mib, int32_t permille,
                    int32_t cores) {
    PodRequest p;
    p.namespace_name = "bench";
    ContainerRequest c;
    c.name = "main";
    c.cpu_milli = cpu;
    c.memory_bytes = mem_gib * kGiB;
    c.gpu.count = count;
    c.gpu.memory_mib = mib;
    c.gpu.memory_permille = permille;
    c.gpu.cores_permille = cores;
    p.containers.push_back(c);
    mix.push_back(p);
  };
  pod(4000, 16, 1, 0, 250, 250);     // Quarter GPU.
  pod(8000, 32, 1, 0, 500, 500);     // Half GPU.
  pod(2000, 8, 1, 0, 100, 100);      // Tenth.
  pod(12000, 48, 1, 0, 1000, 1000);  // Whole GPU.
  pod(3000, 6, 1, 0, 810, 810);      // The trace's favourite share.
  pod(6000, 24, 1, 0, 470, 470);
  pod(2000, 8, 1, 9000, 0, 0);        // MIG-sized: 1g.10gb on H100, 2g.10gb on A100-40.
  pod(4000, 16, 1, 19000, 0, 0);      // 2g.20gb / 3g.20gb.
  pod(8000, 32, 1, 39000, 0, 0);      // 3g.40gb.
  pod(2000, 8, 2, 4500, 0, 0);        // Two small instances.
  pod(48000, 256, 8, 0, 1000, 1000);  // A whole node.
  pod(16000, 32, 0, 0, 0, 0);         // CPU only.
  return mix;
}

// Wirings of 8-GPU machines (docs/topology.md): NVSwitch with two NUMA nodes (HGX), two NVLink
// quads joined across sockets (DGX-1-like), PCIe switch pairs on two sockets.
topo::NodeTopology BenchTopology(int kind) {
  topo::NodeTopology t;
  t.links.assign(8, std::vector<topo::GpuLink>(8));
  for (int a = 0; a < 8; ++a) {
    t.numa_node.push_back(a / 4);
    for (int b = 0; b < 8; ++b) {
      if (a == b) continue;
      topo::GpuLink& l = t.links[a][b];
      const bool same_half = a / 4 == b / 4;
      switch (kind % 3) {
        case 0:
          l = {topo::LinkTier::kNvSwitch, 18};
          break;
        case 1:
          l = same_half ? topo::GpuLink{topo::LinkTier::kNvLink, 1 + (a + b) % 2}
                        : topo::GpuLink{topo::LinkTier::kSystem, 0};
          break;
        default:
          l = !same_half       ? topo::GpuLink{topo::LinkTier::kSystem, 0}
              : a / 2 == b / 2 ? topo::GpuLink{topo::LinkTier::kSwitch, 0}
                               : topo::GpuLink{topo::LinkTier::kNode, 0};
          break;
      }
    }
  }
  return t;
}

struct Fixture {
  std::unique_ptr<Engine> engine;
  std::vector<PodRequest> mix;
  std::deque<std::string> live;
  std::mt19937 rng{42};
  int next_id = 0;

  // `wired`: every node's GPU wiring is known (BenchTopology). `multi_gpu_mix`: the mix adds
  // multi-GPU pods that use it (2 and 4 whole GPUs, one preferring interconnect, one numa-bound).
  explicit Fixture(int nodes, bool wired = false, bool multi_gpu_mix = false) {
    const DeviceConfig config = BenchConfig();
    std::vector<NodeSpec> specs = BenchNodes(nodes);
    if (wired) {
      for (size_t i = 0; i < specs.size(); ++i) specs[i].topology = BenchTopology(i / 4);
    }
    auto state = ClusterState::Build(specs, config);
    PRISM_CHECK(state.ok());
    engine = std::make_unique<Engine>(std::move(*state), config);
    mix = ShapeMix();
    if (multi_gpu_mix) {
      PodRequest two = mix[3];  // Whole GPUs.
      two.containers[0].gpu.count = 2;
      PodRequest four = two;
      four.containers[0].gpu.count = 4;
      PodRequest preferred = four;
      preferred.topology.preferred = true;
      PodRequest bound = two;
      bound.topology.numa_bind = true;
      mix.insert(mix.end(), {two, four, preferred, bound});
    }
    engine->SetTargetWorkload(TargetWorkload::FromPods(mix, 1.0));
    // Load to ~60 % of the GPUs with some churn.
    const double target = 0.6 * nodes * 8;
    double used = 0;
    int guard = 0;
    while (used < target && guard++ < nodes * 40) {
      PodRequest p = Next();
      ScheduleResult r = engine->Place(p, /*explain=*/false);
      if (!r.scheduled) continue;
      live.push_back(p.Key());
      for (const auto& c : p.containers) {
        used += c.gpu.count * (c.gpu.memory_permille > 0 ? c.gpu.memory_permille / 1000.0 : 0.25);
      }
      if (rng() % 5 == 0) ReleaseOne();
    }
  }

  PodRequest Next() {
    PodRequest p = mix[rng() % mix.size()];
    p.name = "pod-" + std::to_string(next_id++);
    return p;
  }

  void ReleaseOne() {
    if (live.empty()) return;
    const size_t i = rng() % std::min<size_t>(live.size(), 64);
    PRISM_CHECK(engine->Release(live[i]).ok());
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
  }
};

// This thread's CPU time in microseconds: unlike wall time it excludes the
// time the (shared, 2-core) machine gives other processes.
double ThreadCpuMicros() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

void ReportPercentiles(benchmark::State& state, std::vector<double>& micros,
                       std::vector<double>& cpu_micros) {
  auto report = [&state](std::vector<double>& v, const std::string& prefix) {
    if (v.empty()) return;
    std::sort(v.begin(), v.end());
    auto at = [&v](double q) {
      return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
    };
    state.counters[prefix + "p50_us"] = at(0.50);
    state.counters[prefix + "p99_us"] = at(0.99);
    state.counters[prefix + "max_us"] = v.back();
  };
  report(micros, "wall_");
  report(cpu_micros, "cpu_");
}

// Steady state: the shapes are known (every shape's index is warm), nodes change between
// decisions: each decision is applied and an older pod released.
void RunSteadyState(benchmark::State& state, Fixture& f) {
  for (const PodRequest& p : f.mix) f.engine->Schedule(p, false);
  std::vector<double> micros;
  std::vector<double> cpu_micros;
  int scheduled = 0;
  for (auto _ : state) {
    PodRequest p = f.Next();
    const double c0 = ThreadCpuMicros();
    const auto t0 = std::chrono::steady_clock::now();
    ScheduleResult r = f.engine->Schedule(p, /*explain=*/false);
    const auto t1 = std::chrono::steady_clock::now();
    cpu_micros.push_back(ThreadCpuMicros() - c0);
    const double us = std::chrono::duration<double, std::micro>(t1 - t0).count();
    micros.push_back(us);
    state.SetIterationTime(us / 1e6);
    if (r.scheduled) {
      ++scheduled;
      PRISM_CHECK(f.engine->Apply(p.Key(), r.decision).ok());
      f.live.push_back(p.Key());
    }
    f.ReleaseOne();
  }
  ReportPercentiles(state, micros, cpu_micros);
  state.counters["scheduled_pct"] = 100.0 * scheduled / std::max<size_t>(1, micros.size());
}

void BM_Decision(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  Fixture f(nodes);
  RunSteadyState(state, f);
  const ClusterState& cluster = f.engine->cluster();
  state.counters["state_B_per_node"] = static_cast<double>(cluster.MemoryBytes()) / nodes;
  state.counters["cache_B_per_node"] = static_cast<double>(f.engine->CacheMemoryBytes()) / nodes;
}
BENCHMARK(BM_Decision)
    ->Arg(1000)
    ->Arg(5000)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(20000);

// BM_Decision on nodes whose wiring is known (arg 1 = 1) against the same cluster and mix
// topology-blind (arg 1 = 0): what topology-aware GPU choice costs a decision.
void BM_DecisionWired(benchmark::State& state) {
  Fixture f(static_cast<int>(state.range(0)), /*wired=*/state.range(1) != 0,
            /*multi_gpu_mix=*/true);
  RunSteadyState(state, f);
}
BENCHMARK(BM_DecisionWired)
    ->Args({1000, 0})
    ->Args({1000, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(20000);

// The first decision for a shape the engine has not seen: a full scan.
void BM_ColdDecision(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  Fixture f(nodes);
  std::vector<double> micros;
  std::vector<double> cpu_micros;
  int32_t cpu = 100;
  for (auto _ : state) {
    PodRequest p = f.mix[0];
    p.name = "cold";
    p.containers[0].cpu_milli = cpu++;  // A new shape every time.
    const double c0 = ThreadCpuMicros();
    const auto t0 = std::chrono::steady_clock::now();
    ScheduleResult r = f.engine->Schedule(p, /*explain=*/false);
    const auto t1 = std::chrono::steady_clock::now();
    cpu_micros.push_back(ThreadCpuMicros() - c0);
    benchmark::DoNotOptimize(r);
    const double us = std::chrono::duration<double, std::micro>(t1 - t0).count();
    micros.push_back(us);
    state.SetIterationTime(us / 1e6);
  }
  ReportPercentiles(state, micros, cpu_micros);
}
BENCHMARK(BM_ColdDecision)
    ->Arg(1000)
    ->Arg(5000)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(20);

// The reference path: every node scored on every decision (no indexes).
void BM_DecisionWithoutIndexes(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  Fixture f(nodes);
  EngineOptions plain;
  plain.use_indexes = false;
  Engine engine(f.engine->cluster(), f.engine->config(), plain);
  engine.SetTargetWorkload(f.engine->target_workload());
  std::vector<double> micros;
  std::vector<double> cpu_micros;
  for (auto _ : state) {
    PodRequest p = f.Next();
    const double c0 = ThreadCpuMicros();
    const auto t0 = std::chrono::steady_clock::now();
    ScheduleResult r = engine.Schedule(p, /*explain=*/false);
    const auto t1 = std::chrono::steady_clock::now();
    cpu_micros.push_back(ThreadCpuMicros() - c0);
    benchmark::DoNotOptimize(r);
    const double us = std::chrono::duration<double, std::micro>(t1 - t0).count();
    micros.push_back(us);
    state.SetIterationTime(us / 1e6);
  }
  ReportPercentiles(state, micros, cpu_micros);
}
BENCHMARK(BM_DecisionWithoutIndexes)
    ->Arg(1000)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(20);

// Apply + Release of a decided pod (what the simulator does per pod).
void BM_ApplyRelease(benchmark::State& state) {
  Fixture f(1000);
  std::vector<std::pair<PodRequest, Decision>> decided;
  for (int i = 0; i < 64; ++i) {
    PodRequest p = f.Next();
    ScheduleResult r = f.engine->Schedule(p, false);
    if (r.scheduled) decided.emplace_back(p, r.decision);
  }
  PRISM_CHECK(!decided.empty());
  size_t i = 0;
  for (auto _ : state) {
    const auto& [p, d] = decided[i++ % decided.size()];
    PRISM_CHECK(f.engine->Apply(p.Key(), d).ok());
    PRISM_CHECK(f.engine->Release(p.Key()).ok());
  }
}
BENCHMARK(BM_ApplyRelease)->Unit(benchmark::kMicrosecond);

// The copy a preemption request works on (MakeScratchEngine), at N nodes x 8 GPUs.
void BM_ScratchEngine(benchmark::State& state) {
  Fixture f(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    Engine scratch = MakeScratchEngine(*f.engine);
    benchmark::DoNotOptimize(scratch.cluster().node_count());
  }
}
BENCHMARK(BM_ScratchEngine)->Arg(5000)->Unit(benchmark::kMillisecond);

// One node's victim search at its worst: 8 H100-80GB (MIG placement mode), each full of seven
// 1g.10gb pods of equal priority; a 3g.40gb preemptor needs three pods on one GPU, so every
// single and pair of the 32 candidates fails before triples are tried up to the trial budget.
void BM_SelectVictims(benchmark::State& state) {
  NodeSpec node;
  node.name = "h100";
  node.cpu_milli = 256000;
  node.memory_bytes = 1024 * kGiB;
  GpuSpec gpu;
  gpu.model = "H100-SXM5-80GB";
  gpu.mode = GpuMode::kMig;
  node.gpus.assign(8, gpu);
  auto cluster = ClusterState::Build({node}, DeviceConfig{});
  PRISM_CHECK(cluster.ok());
  Engine live(std::move(*cluster), DeviceConfig{});
  std::vector<PreemptionCandidate> candidates;
  for (int i = 0; i < 56; ++i) {
    PodRequest p = testing::GpuPod("p" + std::to_string(i), 1, 9000, 0, kModeMig);
    PRISM_CHECK(live.Place(p, false).scheduled);
    candidates.push_back({p.Key(), 0});
  }
  Preemptor preemptor;
  preemptor.pod = testing::GpuPod("big", 1, 40000, 40, kModeMig);  // 3g.40gb.
  preemptor.priority = 100;
  Engine scratch = MakeScratchEngine(live);
  int evaluations = 0;
  size_t victims = 0;
  for (auto _ : state) {
    auto choice = SelectVictims(scratch, preemptor, 0, candidates);
    PRISM_CHECK(choice.ok() && choice->fits);
    evaluations = choice->evaluations;
    victims = choice->victims.size();
  }
  state.counters["trials"] = evaluations;
  state.counters["victims"] = static_cast<double>(victims);
}
BENCHMARK(BM_SelectVictims)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace prism::sched

BENCHMARK_MAIN();
