// Node agent benchmarks (issue 6), on simulated GPUs (the NVML simulator keeps its state in a
// YAML file, so NVML calls cost a file read/write each, far more than the driver's).
//
//   BM_AllocateRpc/<ledger>     Allocate over the device plugin's Unix socket, as the kubelet
//                               calls it (ledger 0: in memory, 1: on disk, the default).
//   BM_PodToContainer/<mode>/<prestart>
//                               one pod at a time through the whole path: the scheduler's
//                               decision, kubelet admission (GetPreferredAllocation + Allocate),
//                               resolution, MIG creation, CDI spec, the runtime's container
//                               create right after admission; then the pod is deleted (mode 0:
//                               slice, 1: MIG). prestart 1: PreStartRequired, the create waits
//                               in PreStartContainer for the spec; 0: no sync point, a create
//                               that finds no spec is retried every 2 ms (a real kubelet backs
//                               off for seconds instead: failed_creates counts those).
//   BM_MigReplay/<idle>         MIG instances created + destroyed per placed pod over a replay
//                               of the Alibaba openb trace (fractional-GPU pods as MIG requests
//                               on 8 A100-40GB), the scheduler seeing the node's real instances
//                               (idle ones included) at every decision; <idle> = idle instances
//                               kept per GPU. 0 is "create from scratch every time".
//
//   build/<dir>/bench/deviceplugin/deviceplugin_bench --benchmark_counters_tabular=true
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "benchmark/benchmark.h"
#include "grpcpp/grpcpp.h"

#include "config/annotations.h"
#include "config/device_config_yaml.h"
#include "config/pod_request.h"
#include "core/sched/engine.h"
#include "deviceplugin/agent_harness.h"
#include "deviceplugin/inventory.h"
#include "deviceplugin/mig_realizer.h"
#include "kubelet/deviceplugin/v1beta1/api.grpc.pb.h"
#include "kubelet/kubelet_client.h"
#include "nvml/sim_nvml.h"

namespace prism::deviceplugin {
namespace {

namespace fs = std::filesystem;
using testing::AgentHarness;

constexpr char kNode[] = R"(gpus:
  - model: A100-SXM4-40GB
    mig: {enabled: true, pending: true}
  - model: A100-SXM4-40GB
)";

fs::path BenchDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("prism-dpb-" + name);
  fs::remove_all(dir);
  return dir;
}

sched::DeviceConfig PlacementConfig() {
  sched::DeviceConfig config = config::DefaultDeviceConfig();
  config.mig_strategy = sched::MigStrategy::kPlacement;
  return config;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

void BM_AllocateRpc(benchmark::State& state) {
  const bool on_disk = state.range(0) != 0;
  AgentHarness h(BenchDir("rpc"), kNode, PlacementConfig());
  if (!h.StartCluster().ok() ||
      !h.StartAgent([&](NodeAgentOptions& o) {
          if (!on_disk) o.state_dir.clear();
          o.resolve_timeout = absl::Milliseconds(100);  // Nobody claims these: fail them fast.
        }).ok()) {
    state.SkipWithError("harness did not start");
    return;
  }
  auto channel = grpc::CreateChannel(kubelet::UnixTarget(h.plugin().socket_path()),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1beta1::DevicePlugin::NewStub(channel);
  const std::vector<v1beta1::Device> devices = h.kubelet().Devices("nvidia.com/gpu");
  std::vector<double> micros;
  size_t i = 0;
  for (auto _ : state) {
    v1beta1::AllocateRequest request;
    request.add_container_requests()->add_devices_ids(devices[i++ % devices.size()].id());
    v1beta1::AllocateResponse response;
    grpc::ClientContext context;
    const auto t0 = std::chrono::steady_clock::now();
    grpc::Status status = stub->Allocate(&context, request, &response);
    micros.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (!status.ok()) state.SkipWithError(status.error_message().c_str());
  }
  state.counters["p50_us"] = Percentile(micros, 0.5);
  state.counters["p99_us"] = Percentile(micros, 0.99);
}
BENCHMARK(BM_AllocateRpc)
    ->Arg(0)
    ->Arg(1)
    ->Iterations(2000)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

void BM_PodToContainer(benchmark::State& state) {
  const bool mig = state.range(0) != 0;
  const bool prestart = state.range(1) != 0;
  AgentHarness h(BenchDir(mig ? "pod-mig" : "pod-slice"), kNode, PlacementConfig());
  if (!h.StartCluster().ok() ||
      !h.StartAgent([&](NodeAgentOptions& o) {
          if (!prestart) o.prestart_timeout = absl::ZeroDuration();
        }).ok() ||
      !h.InitScheduler().ok()) {
    state.SkipWithError("harness did not start");
    return;
  }
  std::vector<double> admit_ms;
  std::vector<double> ready_ms;
  int failed_creates = 0;
  int n = 0;
  for (auto _ : state) {
    testing::PodSpec pod{"pod-" + std::to_string(n++),
                         {testing::ContainerSpec{"main", 1, mig ? 4000 : 6000, mig ? 0 : 25}},
                         {{"nvidia.com/vgpu-mode", mig ? "mig" : "hami-core"}}};
    absl::StatusOr<std::string> uid = h.SubmitPod(pod);
    if (!uid.ok()) {
      state.SkipWithError(std::string(uid.status().message()).c_str());
      break;
    }
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status admitted = h.Admit(*uid);
    const auto t1 = std::chrono::steady_clock::now();
    absl::StatusOr<kubelet::CreatedContainer> created;
    for (int attempt = 0; attempt < 5000; ++attempt) {
      created = h.kubelet().CreateContainer(*uid, "main");
      if (created.ok() || created.status().code() != absl::StatusCode::kNotFound) break;
      ++failed_creates;  // The runtime found no spec: the kubelet would back off here.
      absl::SleepFor(absl::Milliseconds(2));
    }
    const auto t2 = std::chrono::steady_clock::now();
    if (!admitted.ok() || !created.ok() || created->env.count("PRISM_ALLOCATION_ERROR") != 0) {
      state.SkipWithError("pod did not get its devices");
      break;
    }
    admit_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    ready_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
    state.PauseTiming();
    (void)h.DeletePod(*uid);
    (void)h.agent().WaitIdle(absl::Seconds(10));
    state.ResumeTiming();
  }
  state.counters["admit_p50_ms"] = Percentile(admit_ms, 0.5);
  state.counters["ready_p50_ms"] = Percentile(ready_ms, 0.5);
  state.counters["ready_p99_ms"] = Percentile(ready_ms, 0.99);
  state.counters["failed_creates"] = failed_creates;
}
BENCHMARK(BM_PodToContainer)
    ->Args({0, 0})
    ->Args({0, 1})
    ->Args({1, 0})
    ->Args({1, 1})
    ->Iterations(60)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// --- MIG replay ------------------------------------------------------------------------------

struct ReplayPod {
  int64_t arrive = 0;
  int64_t depart = 0;
  int64_t memory_mib = 0;
};

// Fractional single-GPU pods of the openb trace, as MIG requests of their share of 40 GB.
std::vector<ReplayPod> LoadReplay(size_t limit) {
  std::ifstream in(PRISM_DEFAULT_POD_TRACE);
  std::string line;
  std::getline(in, line);
  std::map<std::string, size_t> col;
  {
    std::stringstream header(line);
    std::string name;
    for (size_t i = 0; std::getline(header, name, ','); ++i) col[name] = i;
  }
  std::vector<ReplayPod> pods;
  while (std::getline(in, line) && pods.size() < limit) {
    std::vector<std::string> f;
    std::stringstream row(line);
    std::string cell;
    while (std::getline(row, cell, ',')) f.push_back(cell);
    auto get = [&](const char* name) -> int64_t {
      const size_t i = col.at(name);
      return i < f.size() && !f[i].empty() ? std::stoll(f[i]) : -1;
    };
    if (get("num_gpu") != 1 || get("gpu_milli") >= 1000 || get("creation_time") < 0 ||
        get("deletion_time") < 0) {
      continue;
    }
    pods.push_back({get("creation_time"), get("deletion_time"), get("gpu_milli") * 40960 / 1000});
  }
  return pods;
}

void BM_MigReplay(benchmark::State& state) {
  const int max_idle = static_cast<int>(state.range(0));
  const std::vector<ReplayPod> pods = LoadReplay(400);
  const sched::DeviceConfig config = PlacementConfig();
  std::string gpus = "gpus:\n";
  for (int g = 0; g < 8; ++g) gpus += "  - model: A100-SXM4-40GB\n    mig: {enabled: true}\n";
  for (auto _ : state) {
    const fs::path dir = BenchDir("replay");
    fs::create_directories(dir);
    const std::string file = (dir / "gpus.yaml").string();
    std::ofstream(file) << gpus;
    nvml::SimNvml nvml(file);
    MigRealizer realizer(&nvml, MigRealizerOptions{max_idle});
    // Events by time: departures (0) before arrivals (1) at equal times.
    std::vector<std::tuple<int64_t, int, size_t>> events;
    for (size_t i = 0; i < pods.size(); ++i) {
      events.emplace_back(pods[i].arrive, 1, i);
      events.emplace_back(pods[i].depart, 0, i);
    }
    std::sort(events.begin(), events.end());
    struct Live {
      std::map<std::string, std::string> annotations;
      sched::PodRequest request;
    };
    std::map<size_t, Live> live;
    int placed = 0;
    int rejected = 0;
    for (const auto& [time, kind, i] : events) {
      const std::string uid = "pod-" + std::to_string(i);
      if (kind == 0) {
        if (live.erase(i) != 0) (void)realizer.ReleasePod(uid);
        continue;
      }
      // The scheduler's view: the node's instances (idle ones included) plus live decisions.
      auto inventory = ReadInventory(nvml, 10);
      if (!inventory.ok()) {
        state.SkipWithError("inventory");
        return;
      }
      const auto held = realizer.Held();
      for (InventoryGpu& g : inventory->gpus) {
        for (InventoryInstance& inst : g.instances) inst.in_use = false;
      }
      sched::NodeSpec node;
      node.name = "n";
      node.cpu_milli = 1 << 20;
      node.memory_bytes = int64_t{1} << 40;
      node.gpus = ToGpuSpecs(*inventory);
      auto cluster = sched::ClusterState::Build({node}, config);
      if (!cluster.ok()) {
        state.SkipWithError(std::string(cluster.status().message()).c_str());
        return;
      }
      for (const auto& [j, l] : live) {
        auto d = config::DecodeDecisionAnnotations(l.annotations, l.request, *cluster);
        if (d.ok()) (void)cluster->Apply(l.request.Key(), *d);
      }
      sched::Engine engine(std::move(*cluster), config);
      config::PodManifest manifest;
      manifest.name = uid;
      manifest.annotations = {{"nvidia.com/vgpu-mode", "mig"}};
      config::ContainerManifest main_container;
      main_container.name = "main";
      main_container.limits = {{"nvidia.com/gpu", "1"},
                               {"nvidia.com/gpumem", std::to_string(pods[i].memory_mib)}};
      manifest.containers.push_back(std::move(main_container));
      auto request = config::BuildPodRequest(manifest, config);
      sched::ScheduleResult result = engine.Place(*request, false);
      if (!result.scheduled) {
        ++rejected;
        continue;
      }
      bool ok = true;
      for (const sched::DeviceAssignment& d : result.decision.containers[0].devices) {
        ok = ok && realizer.Ensure(d.gpu_index, d.profile_name, d.start, {uid, "main"}).ok();
      }
      if (!ok) {
        state.SkipWithError("realization failed");
        return;
      }
      live[i] =
          Live{config::EncodeDecisionAnnotations(result.decision, engine.cluster()), *request};
      ++placed;
    }
    const MigCounters& c = realizer.counters();
    state.counters["placed"] = placed;
    state.counters["rejected"] = rejected;
    state.counters["gi_created"] = static_cast<double>(c.gpu_instances_created);
    state.counters["gi_destroyed"] = static_cast<double>(c.gpu_instances_destroyed);
    state.counters["ops_per_pod"] =
        static_cast<double>(c.gpu_instances_created + c.gpu_instances_destroyed) / placed;
  }
}
BENCHMARK(BM_MigReplay)->Arg(0)->Arg(1)->Arg(2)->Arg(7)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
}  // namespace prism::deviceplugin

BENCHMARK_MAIN();
