// `prism scheduler` benchmarks (issue 5): Filter latency as kube-scheduler sees it (HTTP, JSON,
// nodeCacheCapable) with 500 and 5,000 candidate nodes, next to the same Filter without HTTP and
// the placement engine's own Filter; the restart cost (a fresh cache rebuilt from the API
// objects); and pods/s through the whole harness (kube-scheduler stand-in → extender → fake API
// server → simulated nodes).
//
// Cluster: N nodes × 8 GPUs, per 4 nodes 2 with software-sliced A100-80GB, 1 with H100-80GB in MIG
// placement mode, 1 with A100-40GB in MIG template mode; about 2 pods already bound per node
// (decisions in their annotations, as after a restart). Each measured Filter is for a new pod of
// a 5-shape mix; it is assumed on its best node like a real one. Percentiles are per call.
// BM_FilterOverHttpWithChurn instead draws each pod from the default trace's 151 GPU pod shapes,
// binds or lets expire what it filtered, and changes a node's inventory every 10 calls; with a
// third argument of 1 the pods running at the start are the trace's too, their shapes indexed
// first as after a restart (see there). BM_DraDecide: Prism allocating a pending pod's DRA
// claims (issue 32).
//
//   build/<dir>/bench/extender/extender_bench --benchmark_counters_tabular=true
#include <malloc.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "benchmark/benchmark.h"
#include "httplib.h"

#include "base/check.h"
#include "base/log.h"
#include "base/strings.h"
#include "config/device_config_yaml.h"
#include "config/pod_json.h"
#include "extender/cache.h"
#include "extender/dra_allocator.h"
#include "k8s/resource.h"
#include "extender/test_util.h"
#include "sim/trace.h"
#include "tests/e2e/harness/cluster.h"
#include "tests/e2e/harness/driver.h"
#include "tests/e2e/harness/node_sim.h"

namespace prism::e2e {
namespace {

using json = nlohmann::json;
using extender::testing::GpuPod;
using extender::testing::NodeJson;
using extender::testing::PodJson;

std::vector<TestGpu> NodeGpus(int i) {
  switch (i % 4) {
    case 0:
    case 1:
      return std::vector<TestGpu>(8, TestGpu{"A100-SXM4-80GB", 81920, false});
    case 2:
      return std::vector<TestGpu>(8, TestGpu{"H100-SXM5-80GB", 81920, true});
    default:
      return std::vector<TestGpu>(8, TestGpu{"A100-SXM4-40GB", 40960, true});
  }
}

std::string NodeName(int i) {
  char name[32];
  std::snprintf(name, sizeof(name), "node-%05d", i);
  return name;
}

json MixPod(const std::string& name, int i) {
  switch (i % 5) {
    case 0:
      return GpuPod(name, 1, 10240, 20, {{"nvidia.com/vgpu-mode", "hami-core"}});
    case 1:
      return GpuPod(name, 1, 20000, 0, {{"nvidia.com/vgpu-mode", "mig"}});
    case 2:
      return GpuPod(name, 2, 16384, 30, {{"nvidia.com/vgpu-mode", "hami-core"}});
    case 3:
      return GpuPod(name, 1, 9000, 0, {{"nvidia.com/vgpu-mode", "mig"}});
    default:
      return GpuPod(name, 1, 4096, 10);
  }
}

config::PodManifest Manifest(const json& pod) { return *config::PodManifestFromJson(pod); }

// A cluster of `n` nodes with ~2 bound pods each, in the fake API server, and an extender on it.
// The bound pods are the 5-shape mix, or drawn from `running_shapes` (e.g. the trace's).
struct Rig {
  explicit Rig(int n, const std::function<void(extender::SchedulerOptions&)>& tweak = nullptr,
               const std::vector<json>* running_shapes = nullptr)
      : cluster(ClusterOptions{.sync_timeout = absl::Minutes(10)}), nodes(n) {
    SetLogLevel(LogLevel::kError);
    PRISM_CHECK(cluster.Start().ok());
    extender::CacheOptions co;
    co.engine = extender::DefaultEngineOptions();
    extender::SchedulerCache planner(config::DefaultDeviceConfig(), co);
    for (int i = 0; i < n; ++i) {
      json node = NodeJson(NodeName(i), NodeGpus(i));
      names.push_back(NodeName(i));
      PRISM_CHECK(cluster.api().Create("nodes", node).ok());
      planner.UpsertNode(node);
    }
    // Bound pods, with decisions made the way the extender makes them.
    uint64_t draw = 7;
    for (int i = 0; i < 2 * n; ++i) {
      json pod = MixPod(StrCat("bound-", i), i);
      if (running_shapes != nullptr) {
        draw = draw * 6364136223846793005ULL + 1442695040888963407ULL;
        pod = (*running_shapes)[static_cast<size_t>(draw >> 33) % running_shapes->size()];
        pod.erase("shape");
        pod["metadata"]["name"] = StrCat("bound-", i);
      }
      absl::StatusOr<extender::BindTicket> t =
          planner.BeginBind(Manifest(pod), NodeName((i * 7919) % n));
      if (!t.ok()) continue;
      pod["spec"]["nodeName"] = t->node;
      for (const auto& [k, v] : t->annotations) pod["metadata"]["annotations"][k] = v;
      pod["status"]["phase"] = "Running";
      PRISM_CHECK(cluster.api().Create("pods", pod).ok());
      ++bound;
    }
    const absl::Time t0 = absl::Now();
    if (absl::Status s = cluster.StartExtender(tweak); !s.ok()) {
      std::fprintf(stderr, "starting the extender: %s\n", std::string(s.message()).c_str());
      PRISM_CHECK(false);
    }
    start_seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  }
  E2eCluster cluster;
  int nodes;
  int bound = 0;
  double start_seconds = 0;
  std::vector<std::string> names;
};

void Percentiles(benchmark::State& state, std::vector<double> us) {
  std::sort(us.begin(), us.end());
  if (us.empty()) return;
  state.counters["p50_us"] = us[us.size() / 2];
  state.counters["p99_us"] = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  state.counters["max_us"] = us.back();
}

void BM_FilterOverHttp(benchmark::State& state) {
  Rig rig(static_cast<int>(state.range(0)));
  httplib::Client cli(rig.cluster.extender_url());
  cli.set_keep_alive(true);
  cli.set_tcp_nodelay(true);
  std::vector<double> us;
  int i = 0;
  for (auto _ : state) {
    const json args{
        {"Pod", MixPod(StrCat("p-", i), i)}, {"Nodes", nullptr}, {"NodeNames", rig.names}};
    const std::string body = args.dump();
    const auto t0 = std::chrono::steady_clock::now();
    auto res = cli.Post("/filter", body, "application/json");
    const auto t1 = std::chrono::steady_clock::now();
    PRISM_CHECK(res && res->status == 200);
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    ++i;
  }
  Percentiles(state, us);
  state.counters["request_kB"] =
      static_cast<double>(
          json{{"Pod", MixPod("p", 0)}, {"Nodes", nullptr}, {"NodeNames", rig.names}}
              .dump()
              .size()) /
      1024;
  state.counters["restart_s"] = rig.start_seconds;
  state.counters["bound_pods"] = rig.bound;
}
BENCHMARK(BM_FilterOverHttp)->Arg(500)->Arg(5000)->Unit(benchmark::kMicrosecond)->Iterations(400);

// The same Filter in process: the extender's logic without HTTP and JSON.
void BM_CacheFilter(benchmark::State& state) {
  Rig rig(static_cast<int>(state.range(0)));
  extender::SchedulerCache& cache = rig.cluster.scheduler()->cache();
  const std::vector<std::string_view> names = extender::testing::Views(rig.names);
  std::vector<double> us;
  int i = 0;
  for (auto _ : state) {
    const config::PodManifest m = Manifest(MixPod(StrCat("p-", i), i));
    const auto t0 = std::chrono::steady_clock::now();
    extender::FilterOutcome out = cache.Filter(m, names);
    const auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(out);
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    ++i;
  }
  Percentiles(state, us);
}
BENCHMARK(BM_CacheFilter)->Arg(500)->Arg(5000)->Unit(benchmark::kMicrosecond)->Iterations(400);

// The placement engine's own Filter over the same nodes (per-node verdicts, no assumption).
void BM_EngineFilter(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::vector<sched::NodeSpec> specs;
  for (int i = 0; i < n; ++i) {
    specs.push_back(**extender::NodeSpecFromJson(NodeJson(NodeName(i), NodeGpus(i))));
  }
  const sched::DeviceConfig config = config::DefaultDeviceConfig();
  sched::Engine engine(*sched::ClusterState::Build(specs, config), config,
                       extender::DefaultEngineOptions());
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = i;
  for (int i = 0; i < 2 * n; ++i) {
    sched::PodRequest r = *config::BuildPodRequest(Manifest(MixPod(StrCat("b", i), i)), config);
    absl::StatusOr<sched::Decision> d = engine.Decide(r, (i * 7919) % n);
    if (d.ok()) PRISM_CHECK(engine.Apply(r.Key(), *d).ok());
  }
  std::vector<double> us;
  int i = 0;
  for (auto _ : state) {
    sched::PodRequest r = *config::BuildPodRequest(Manifest(MixPod(StrCat("p", i), i)), config);
    const auto t0 = std::chrono::steady_clock::now();
    auto v = engine.Filter(r, ids);
    const auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(v);
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    ++i;
  }
  Percentiles(state, us);
}
BENCHMARK(BM_EngineFilter)->Arg(500)->Arg(5000)->Unit(benchmark::kMicrosecond)->Iterations(400);

// --- Node churn (issue 12) --------------------------------------------------------------
// The cache alone, fed the way the informers feed it: N nodes, ~2 bound pods per node (bound
// through BeginBind/FinishBind, so decisions are real), then inventory changes. A change is a
// GPU's health flipping on a node (the same path as a MIG instance created or destroyed: the
// node's inventory annotation changes). Times are CPU time of the calling thread.

double ThreadCpuMicros() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

// Heap bytes in use (glibc's arena plus its mmap'd blocks).
double HeapBytesInUse() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks + m.hblkhd);
}

struct CacheRig {
  explicit CacheRig(int n) : nodes(n) {
    SetLogLevel(LogLevel::kError);
    const double heap_before = HeapBytesInUse();
    extender::CacheOptions co;
    co.engine = extender::DefaultEngineOptions();
    cache = std::make_unique<extender::SchedulerCache>(config::DefaultDeviceConfig(), co);
    for (int i = 0; i < n; ++i) {
      names.push_back(NodeName(i));
      cache->UpsertNode(NodeJson(NodeName(i), NodeGpus(i)));
    }
    cache->RebuildIfDirty();
    for (int i = 0; i < 2 * n; ++i) {
      absl::StatusOr<extender::BindTicket> t =
          cache->BeginBind(Manifest(MixPod(StrCat("bound-", i), i)), NodeName((i * 7919) % n));
      if (!t.ok()) continue;
      cache->FinishBind(*t, extender::BindOutcome::kBound);
      ++bound;
    }
    heap_bytes = HeapBytesInUse() - heap_before;
  }
  // The next node change: node k's last GPU turns unhealthy, or healthy again.
  json NextChange() {
    const int node = (changes * 7) % nodes;
    std::vector<TestGpu> gpus = NodeGpus(node);
    gpus.back().healthy = (changes / nodes) % 2 == 1;
    ++changes;
    return NodeJson(NodeName(node), gpus);
  }
  std::unique_ptr<extender::SchedulerCache> cache;
  int nodes;
  int bound = 0;
  int changes = 0;
  double heap_bytes = 0;  // What building the cache (nodes, bound pods) left in use.
  std::vector<std::string> names;
};

// Absorbing one node change. range(1) = 0: in place (what the cache does); 1: the whole
// rebuild every change cost before (forced here through a configuration reload).
void BM_CacheNodeChange(benchmark::State& state) {
  CacheRig rig(static_cast<int>(state.range(0)));
  const bool whole = state.range(1) == 1;
  const sched::DeviceConfig config = config::DefaultDeviceConfig();
  std::vector<double> us;
  for (auto _ : state) {
    const json node = rig.NextChange();
    const double t0 = ThreadCpuMicros();
    rig.cache->UpsertNode(node);
    if (whole) rig.cache->SetDeviceConfig(config);
    rig.cache->RebuildIfDirty();
    us.push_back(ThreadCpuMicros() - t0);
  }
  Percentiles(state, us);
  state.counters["bound_pods"] = rig.bound;
  // Memory per node: the cache's heap (nodes and ~2 bound pods each; no shape index yet).
  state.counters["heap_kB_per_node"] = rig.heap_bytes / 1024 / rig.nodes;
}
BENCHMARK(BM_CacheNodeChange)
    ->ArgsProduct({{500, 5000, 20000}, {0}})
    ->Args({500, 1})
    ->Args({5000, 1})
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(200);

// The ticker's cost when nothing happens: what the extender's 200 ms ticker asks of the cache
// (Tick: expiries, rebuild, workload refresh, index maintenance; then the binds of unknown
// outcome and the pods with a problem) on N nodes with ~2 bound pods each, every index the
// cache prepared for them built first. Its work should follow what changed, not the cluster's
// size: `idle_cpu_ms_per_s` is the p50 at five ticks a second.
void BM_CacheIdleTick(benchmark::State& state) {
  CacheRig rig(static_cast<int>(state.range(0)));
  const std::vector<std::string_view> names = extender::testing::Views(rig.names);
  for (int shape = 0; shape < 5; ++shape) {
    benchmark::DoNotOptimize(
        rig.cache->Filter(Manifest(MixPod(StrCat("warm-", shape), shape)), names, false));
  }
  for (int i = 0; i < 10000 && rig.cache->stats().pending_index_builds > 0; ++i) rig.cache->Tick();
  rig.cache->Tick();
  std::vector<double> us;
  for (auto _ : state) {
    const double t0 = ThreadCpuMicros();
    rig.cache->Tick();
    benchmark::DoNotOptimize(rig.cache->ExpiredUncertain());
    benchmark::DoNotOptimize(rig.cache->Problems());
    us.push_back(ThreadCpuMicros() - t0);
  }
  Percentiles(state, us);
  state.counters["idle_cpu_ms_per_s"] = state.counters["p50_us"] * 5 / 1000;
}
BENCHMARK(BM_CacheIdleTick)
    ->Arg(500)
    ->Arg(5000)
    ->Arg(20000)
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(200);

// Filter as the extender runs it, with a node change every range(1) calls (0: none): CPU time
// per Filter (the change itself is not timed; its cost lands on the Filters that follow, as
// the shape indexes catch up). range(2) = 1 forces the old whole rebuild on each change. The
// first Filter of each of the mix's shapes scores every node (its index is built): it is timed
// apart, as first_of_shape_us (the most expensive of the five), so that the percentiles say what
// a shape seen before costs. Every 100 calls the cache's Tick() runs, as the extender's 200 ms
// ticker would between about that many calls.
void BM_CacheFilterWithChurn(benchmark::State& state) {
  CacheRig rig(static_cast<int>(state.range(0)));
  const int every = static_cast<int>(state.range(1));
  const bool whole = state.range(2) == 1;
  const sched::DeviceConfig config = config::DefaultDeviceConfig();
  const std::vector<std::string_view> names = extender::testing::Views(rig.names);
  double first_of_shape = 0;
  const double heap_before_indexes = HeapBytesInUse();
  for (int shape = 0; shape < 5; ++shape) {
    const config::PodManifest m = Manifest(MixPod(StrCat("warm-", shape), shape));
    const double t0 = ThreadCpuMicros();
    benchmark::DoNotOptimize(rig.cache->Filter(m, names, /*assume=*/false));
    first_of_shape = std::max(first_of_shape, ThreadCpuMicros() - t0);
  }
  // What one shape's index costs per node.
  state.counters["index_bytes_per_node_per_shape"] =
      (HeapBytesInUse() - heap_before_indexes) / 5 / rig.nodes;
  std::vector<double> us;
  int i = 0;
  for (auto _ : state) {
    if (every > 0 && i % every == every - 1) {
      rig.cache->UpsertNode(rig.NextChange());
      if (whole) rig.cache->SetDeviceConfig(config);
    }
    if (i % 100 == 99) rig.cache->Tick();
    const config::PodManifest m = Manifest(MixPod(StrCat("p-", i), i));
    const double t0 = ThreadCpuMicros();
    extender::FilterOutcome out = rig.cache->Filter(m, names);
    us.push_back(ThreadCpuMicros() - t0);
    benchmark::DoNotOptimize(out);
    ++i;
  }
  std::sort(us.begin(), us.end());
  Percentiles(state, us);
  state.counters["p999_us"] = us[std::min(us.size() - 1, us.size() * 999 / 1000)];
  state.counters["first_of_shape_us"] = first_of_shape;
}
BENCHMARK(BM_CacheFilterWithChurn)
    ->Args({500, 10, 0})
    ->Args({500, 10, 1})
    ->Args({5000, 10, 0})
    ->Args({5000, 10, 1})
    ->Args({5000, 0, 0})
    ->Args({20000, 10, 0})
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(1000);

// --- Filter over HTTP with the trace's shapes and churn (issue 12) ---------------------------
// What kube-scheduler sees at range(0) nodes: each call is for a new pod whose shape (CPU,
// memory, GPU count, GPU share) is drawn from the default trace's GPU pods (the FGD paper's
// Alibaba trace, 151 shapes: first-of-shape decisions score every node and are part of the
// tail, as in production). The pod is created in the API server first (the extender assumes only
// pods its informer knows), filtered over HTTP, then bound through /bind, except one in ten,
// whose assumption is left to expire (assume_ttl 2 s here instead of 30, so that expiries happen
// during the run). Pods leave again in arrival order once more than range(0)/2 are live, so
// the cluster stays partly free, and every range(1) calls one node's inventory changes through
// the API server (a GPU's health flips: the same watch path as a MIG instance created or
// destroyed). The extender runs as in production (informers, 200 ms ticker); `cpu_*` is the
// CPU time of the whole process during the call (client, server and any background thread that
// ran meanwhile; the watch events of the pod and of the last bind and delete are let land first),
// `server_cpu_*` the same less the benchmark's client thread (kube-scheduler's side of the call:
// writing the request, reading the reply), i.e. what the extender spends;
// `wall_*` the client's round trip; `seen_cpu_*` over the calls whose shape was filtered before,
// `first_of_shape_*` over the others (each scores every node). When more than one node fits, the
// pod's /prioritize follows, as kube-scheduler sends it (the feasible nodes in Filter's order),
// timed apart (`prioritize_*`).

// The default trace's GPU pods as pod manifests: cpu and memory requests, nvidia.com/gpu, and
// for a share (gpu_milli < 1000) nvidia.com/gpucores and gpumem-percentage of that share.
// Each pod's shape (its resources) is its "shape" member, for counting first decisions.
std::vector<json> TraceGpuPods() {
  std::vector<json> pods;
  for (const sim::TracePod& p : sim::EmbeddedDefaultTrace().pods) {
    if (p.num_gpu == 0) continue;
    TestContainer c("main", p.num_gpu);
    c.cpu = StrCat(p.milli_cpu, "m");
    json pod = PodJson("default", "shape", {c});
    json& resources = pod["spec"]["containers"][0]["resources"];
    resources["requests"]["memory"] = StrCat(p.memory_mib, "Mi");
    if (p.gpu_milli < 1000) {
      const std::string percent = std::to_string(std::max(1, p.gpu_milli / 10));
      resources["limits"]["nvidia.com/gpucores"] = percent;
      resources["limits"]["nvidia.com/gpumem-percentage"] = percent;
    }
    pod["shape"] = resources.dump();
    pods.push_back(std::move(pod));
  }
  return pods;
}

double ProcessCpuMicros() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

double Quantile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

// One POST to the extender, timed (benchmark timing resumed only around it): the reply body,
// wall time, CPU time of the whole process and of the calling (client) thread.
struct TimedCall {
  std::string body;
  double wall_us = 0;
  double cpu_us = 0;
  double client_cpu_us = 0;
};

TimedCall Timed(benchmark::State& state, httplib::Client& cli, const char* path,
                const std::string& body) {
  state.ResumeTiming();
  const double cpu0 = ProcessCpuMicros();
  const double client_cpu0 = ThreadCpuMicros();
  const auto t0 = std::chrono::steady_clock::now();
  auto res = cli.Post(path, body, "application/json");
  const auto t1 = std::chrono::steady_clock::now();
  TimedCall out;
  out.client_cpu_us = ThreadCpuMicros() - client_cpu0;
  out.cpu_us = ProcessCpuMicros() - cpu0;
  state.PauseTiming();
  PRISM_CHECK(res && res->status == 200);
  out.wall_us = std::chrono::duration<double, std::micro>(t1 - t0).count();
  out.body = std::move(res->body);
  return out;
}

void BM_FilterOverHttpWithChurn(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const int change_every = static_cast<int>(state.range(1));
  // 1: the pods running at the start are the trace's too, and the extender has built their
  // shapes' indexes (as its ticker does within a minute of a restart), so a call's shape is new
  // only when no running pod has it.
  const bool warm = state.range(2) == 1;
  const std::vector<json> shapes = TraceGpuPods();  // One per trace pod: drawn by frequency.
  Rig rig(
      n, [](extender::SchedulerOptions& o) { o.cache.assume_ttl = absl::Seconds(2); },
      warm ? &shapes : nullptr);
  if (warm) {
    // The ticker's work after a restart, done at once: Tick() until every prepared index is built.
    extender::SchedulerCache& cache = rig.cluster.scheduler()->cache();
    const double cpu0 = ProcessCpuMicros();
    const absl::Time deadline = absl::Now() + absl::Minutes(10);
    // stats() walks every node and pod: asked once per Tick, not twice, so that warmup_cpu_s is
    // mostly the ticker's own work. warmup_ticks at the extender's 200 ms a tick is how long a
    // restarted extender takes to have them all.
    int ticks = 0;
    for (extender::CacheStats s = cache.stats();
         s.indexes_prepared == 0 || s.pending_index_builds > 0; s = cache.stats()) {
      PRISM_CHECK(absl::Now() < deadline);
      cache.Tick();
      ++ticks;
    }
    state.counters["warmup_ticks"] = ticks;
    state.counters["warmup_cpu_s"] = (ProcessCpuMicros() - cpu0) / 1e6;
    state.counters["prepared_shapes"] = static_cast<double>(cache.stats().indexes_prepared);
    state.counters["running_pods"] = rig.bound;
  }
  httplib::Client cli(rig.cluster.extender_url());
  cli.set_keep_alive(true);
  cli.set_tcp_nodelay(true);
  std::vector<double> wall_us, cpu_us, server_cpu_us, client_cpu_us, first_cpu_us, seen_cpu_us;
  std::vector<double> prioritize_wall_us, prioritize_server_cpu_us;
  std::set<std::string> seen;    // Shapes filtered so far.
  std::deque<std::string> live;  // Pod names, oldest first.
  uint64_t draw = 42;
  int i = 0, bound = 0, bind_errors = 0, left_to_expire = 0, unplaceable = 0, changes = 0;
  for (auto _ : state) {
    state.PauseTiming();
    if (change_every > 0 && i % change_every == change_every - 1) {
      const int node = (changes * 7) % n;
      std::vector<TestGpu> gpus = NodeGpus(node);
      gpus.back().healthy = (changes / n) % 2 == 1;
      ++changes;
      const json patch{
          {"metadata",
           {{"annotations", NodeJson(NodeName(node), gpus)["metadata"]["annotations"]}}}};
      PRISM_CHECK(rig.cluster.api().MergePatch("nodes", "", NodeName(node), patch).ok());
    }
    draw = draw * 6364136223846793005ULL + 1442695040888963407ULL;
    const size_t shape = static_cast<size_t>(draw >> 33) % shapes.size();
    json pod = shapes[shape];
    const std::string shape_key = pod["shape"].get<std::string>();
    pod.erase("shape");
    const std::string name = StrCat("churn-", i);
    pod["metadata"]["name"] = name;
    absl::StatusOr<json> created = rig.cluster.api().Create("pods", pod);
    PRISM_CHECK(created.ok());
    pod = *std::move(created);  // As kube-scheduler has it: with the API server's uid.
    // kube-scheduler filters a pod its informer has seen; so has the extender's by then. The
    // pause lets the watch events of this pod (and of the last call's bind and delete) land
    // outside the timed call, so that cpu_* is the call's own work.
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    const std::string body =
        json{{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", rig.names}}.dump();
    const TimedCall filter = Timed(state, cli, "/filter", body);
    wall_us.push_back(filter.wall_us);
    cpu_us.push_back(filter.cpu_us);
    client_cpu_us.push_back(filter.client_cpu_us);
    server_cpu_us.push_back(filter.cpu_us - filter.client_cpu_us);
    (seen.insert(shape_key).second ? first_cpu_us : seen_cpu_us).push_back(filter.cpu_us);
    const json reply = json::parse(filter.body);
    const json& fits = reply["NodeNames"];
    if (fits.is_array() && fits.size() > 1) {
      // kube-scheduler's next call for the pod when more than one node is feasible: the
      // extender's scores for the feasible nodes, in the order Filter returned them.
      const TimedCall prioritize =
          Timed(state, cli, "/prioritize",
                json{{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", fits}}.dump());
      PRISM_CHECK(json::parse(prioritize.body).size() == fits.size());
      prioritize_wall_us.push_back(prioritize.wall_us);
      prioritize_server_cpu_us.push_back(prioritize.cpu_us - prioritize.client_cpu_us);
    }
    if (!fits.is_array() || fits.empty()) {
      ++unplaceable;
    } else if (i % 10 == 9) {
      ++left_to_expire;
    } else {
      const json bind{{"PodName", name},
                      {"PodNamespace", "default"},
                      {"PodUID", pod["metadata"]["uid"]},
                      {"Node", fits[0]}};
      auto b = cli.Post("/bind", bind.dump(), "application/json");
      PRISM_CHECK(b && b->status == 200);
      const std::string error = json::parse(b->body).value("Error", "");
      if (error.empty()) {
        ++bound;
      } else if (bind_errors++ == 0) {
        std::fprintf(stderr, "first bind error: %s\n", error.c_str());
      }
    }
    live.push_back(name);
    if (static_cast<int>(live.size()) > n / 2) {
      PRISM_CHECK(rig.cluster.api().Delete("pods", "default", live.front()).ok());
      live.pop_front();
    }
    ++i;
    state.ResumeTiming();
  }
  state.counters["wall_p50_us"] = Quantile(wall_us, 0.50);
  state.counters["wall_p99_us"] = Quantile(wall_us, 0.99);
  state.counters["wall_p999_us"] = Quantile(wall_us, 0.999);
  state.counters["server_cpu_p50_us"] = Quantile(server_cpu_us, 0.50);
  state.counters["server_cpu_p99_us"] = Quantile(server_cpu_us, 0.99);
  state.counters["server_cpu_p999_us"] = Quantile(server_cpu_us, 0.999);
  state.counters["client_cpu_p50_us"] = Quantile(client_cpu_us, 0.50);
  state.counters["prioritize_server_cpu_p50_us"] = Quantile(prioritize_server_cpu_us, 0.50);
  state.counters["prioritize_server_cpu_p99_us"] = Quantile(prioritize_server_cpu_us, 0.99);
  state.counters["prioritize_wall_p50_us"] = Quantile(prioritize_wall_us, 0.50);
  state.counters["prioritize_wall_p99_us"] = Quantile(prioritize_wall_us, 0.99);
  state.counters["cpu_p50_us"] = Quantile(cpu_us, 0.50);
  state.counters["cpu_p99_us"] = Quantile(cpu_us, 0.99);
  state.counters["cpu_p999_us"] = Quantile(cpu_us, 0.999);
  state.counters["seen_cpu_p50_us"] = Quantile(seen_cpu_us, 0.50);
  state.counters["seen_cpu_p99_us"] = Quantile(seen_cpu_us, 0.99);
  state.counters["seen_cpu_p999_us"] = Quantile(seen_cpu_us, 0.999);
  state.counters["first_of_shape_cpu_p50_us"] = Quantile(first_cpu_us, 0.50);
  state.counters["first_of_shape_cpu_max_us"] = Quantile(first_cpu_us, 1.0);
  state.counters["shapes"] = static_cast<double>(seen.size());
  state.counters["bound"] = bound;
  state.counters["bind_errors"] = bind_errors;
  state.counters["expired"] = left_to_expire;
  state.counters["unplaceable"] = unplaceable;
  state.counters["node_changes"] = changes;
  // What the cache did meanwhile: a new target workload or a rebuild drops every index.
  const extender::CacheStats stats = rig.cluster.scheduler()->cache().stats();
  state.counters["workload_refreshes"] = static_cast<double>(stats.workload_refreshes);
  state.counters["rebuilds"] = static_cast<double>(stats.rebuilds);
}
BENCHMARK(BM_FilterOverHttpWithChurn)
    ->Args({500, 10, 0})
    ->Args({5000, 10, 0})
    ->Args({20000, 10, 0})
    ->Args({500, 10, 1})
    ->Args({5000, 10, 1})
    ->Args({20000, 10, 1})
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(2000);

// Issue 32: Prism allocating a pending pod's DRA claims (DraAllocator::Decide: candidate nodes,
// the engine's search jointly with the pod's CPU and memory, status.allocation built, the claims
// charged; the API writes that follow are not timed). range(0) nodes of the mix above, each
// publishing its GPUs in a ResourceSlice as the node agent names them (GPUs not in MIG mode
// shared, as with consumable capacity); every measured pod is a new one with its own claim, in a
// 5-shape mix (a whole GPU; MIG 1g.10gb on the H100s, 1g.5gb on the A100-40GBs; two 2g.20gb; a
// share of 8 GiB and 30 % of a GPU), and its charges stay, so the cluster fills as it goes.
void BM_DraDecide(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  Rig rig(n, [](extender::SchedulerOptions& o) { o.dra = true; });
  k8s::Client& client = rig.cluster.client();
  for (int i = 0; i < n; ++i) {
    json devices = json::array();
    const std::vector<TestGpu> gpus = NodeGpus(i);
    for (size_t g = 0; g < gpus.size(); ++g) {
      const std::string uuid = StrCat("GPU-", NodeName(i), "-", g);
      devices.push_back(gpus[g].mig ? json{{"name", StrCat("gpu-", g, "-mig-1g5gb-19-0")},
                                           {"attributes", {{"parentUUID", {{"string", uuid}}}}}}
                                    : json{{"name", StrCat("gpu-", g)},
                                           {"allowMultipleAllocations", true},
                                           {"attributes", {{"uuid", {{"string", uuid}}}}}});
    }
    json slice{{"apiVersion", "resource.k8s.io/v1"},
               {"kind", "ResourceSlice"},
               {"metadata", {{"name", StrCat(NodeName(i), "-gpu.prism.io-0")}}},
               {"spec",
                {{"driver", "gpu.prism.io"},
                 {"nodeName", NodeName(i)},
                 {"pool", {{"name", NodeName(i)}, {"generation", 1}, {"resourceSliceCount", 1}}},
                 {"devices", devices}}}};
    PRISM_CHECK(client.Create(k8s::kResourceSlices, "", slice).ok());
  }
  const int pods = static_cast<int>(state.max_iterations);
  auto claim_spec = [](int i) {
    const char* klass[] = {"gpu.prism.io", "mig.gpu.prism.io", "mig.gpu.prism.io",
                           "mig.gpu.prism.io", "slice.gpu.prism.io"};
    const int count[] = {1, 1, 1, 2, 1};
    const char* profile[] = {"", "1g.10gb", "1g.5gb", "2g.20gb", ""};
    json exactly{{"deviceClassName", klass[i % 5]}, {"count", count[i % 5]}};
    if (*profile[i % 5] != '\0') {
      exactly["selectors"] = json::array(
          {{{"cel",
             {{"expression", StrCat("device.attributes[\"gpu.prism.io\"].profile == \"",
                                    profile[i % 5], "\"")}}}}});
    }
    if (i % 5 == 4) exactly["capacity"] = {{"requests", {{"memory", "8Gi"}, {"cores", "30"}}}};
    return json{{"devices", {{"requests", json::array({{{"name", "gpus"}, {"exactly", exactly}}})}}}};
  };
  for (int i = 0; i <= pods; ++i) {  // The last one for the warm-up below.
    json claim{{"apiVersion", "resource.k8s.io/v1"},
               {"kind", "ResourceClaim"},
               {"metadata", {{"name", StrCat("c-", i)}, {"namespace", "default"}}},
               {"spec", claim_spec(i)}};
    PRISM_CHECK(client.Create(k8s::kResourceClaims, "default", claim).ok());
  }
  extender::DraAllocator* dra = rig.cluster.scheduler()->dra();
  auto pod = [](int i) {
    json p = PodJson("default", StrCat("d-", i), {extender::testing::TestContainer("main", 0)});
    p["spec"]["resourceClaims"] =
        json::array({{{"name", "gpu"}, {"resourceClaimName", StrCat("c-", i)}}});
    return p;
  };
  // The informers have every claim and slice once the last claim can be decided.
  for (int tries = 0; !dra->Decide(pod(pods)).ok(); ++tries) {
    PRISM_CHECK(tries < 6000);
    absl::SleepFor(absl::Milliseconds(10));
  }
  std::vector<double> us;
  int i = 0;
  int failed = 0;
  for (auto _ : state) {
    const json p = pod(i++);
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<extender::DraAllocator::DraDecision> d = dra->Decide(p);
    const auto t1 = std::chrono::steady_clock::now();
    if (!d.ok() || d->claims.empty()) {
      if (failed++ == 0) {
        std::fprintf(stderr, "BM_DraDecide/%d: pod d-%d not allocated: %s\n", n, i - 1,
                     d.ok() ? "no claim" : std::string(d.status().message()).c_str());
      }
    }
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  Percentiles(state, us);
  state.counters["failed"] = failed;
}
BENCHMARK(BM_DraDecide)->Arg(500)->Arg(5000)->Unit(benchmark::kMicrosecond)->Iterations(400);

// Pods per second through the whole harness: range(0) nodes, range(1) pods.
void BM_PodsPerSecond(benchmark::State& state) {
  for (auto _ : state) {
    state.PauseTiming();
    SetLogLevel(LogLevel::kError);
    E2eCluster cluster;
    PRISM_CHECK(cluster.Start().ok());
    const int n = static_cast<int>(state.range(0));
    for (int i = 0; i < n; ++i) PRISM_CHECK(cluster.AddNode(NodeName(i), NodeGpus(i)).ok());
    PRISM_CHECK(cluster.StartExtender().ok());
    NodeSimulator nodes(&cluster.client(), NodeSimOptions{});
    nodes.Start();
    std::vector<std::string> keys;
    for (int i = 0; i < state.range(1); ++i) {
      keys.push_back(*cluster.SubmitPod(MixPod(StrCat("p-", i), i)));
    }
    DriverOptions d;
    d.extender_url = [&cluster] { return cluster.extender_url(); };
    SchedulerDriver driver(&cluster.client(), d);
    state.ResumeTiming();
    const absl::Time t0 = absl::Now();
    driver.Start();
    PRISM_CHECK(driver.WaitBound(keys, absl::Minutes(10)));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - t0);
    state.PauseTiming();
    state.counters["pods_per_s"] = static_cast<double>(keys.size()) / seconds;
    state.counters["bind_failures"] = static_cast<double>(driver.stats().bind_failures);
    PRISM_CHECK(cluster.Validate().ok());
    driver.Stop();
    nodes.Stop();
    state.ResumeTiming();
  }
}
BENCHMARK(BM_PodsPerSecond)
    ->Args({100, 1000})
    ->Args({500, 1000})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace
}  // namespace prism::e2e

BENCHMARK_MAIN();
