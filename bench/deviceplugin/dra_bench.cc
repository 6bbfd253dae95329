// The node agent as a DRA driver (issue 31's figures), on simulated GPUs (an A100-SXM4-40GB in
// MIG mode whose layout the agent owns; the NVML simulator keeps its state in a YAML file, so
// every NVML call costs a file read and write, far more than a driver's):
//
//   BM_DraPrepareMigPartition  DraDriver::Prepare of a claim allocated one 1g.5gb partition at
//                              a rotating start (Prism's marker in its status): GET of the claim
//                              from the fake API server, the GPUs read, the instance created by
//                              the MIG realizer, the CDI spec and the checkpoint written. Then
//                              (untimed) Unprepare, which destroys it.
//   BM_DraPublishAfterMigChange  after the MIG manager created or destroyed an instance on a GPU
//                              whose layout it owns (static: its instances are the published
//                              devices): the GPUs read again and the node's ResourceSlices brought
//                              up to date (generation + 1, every slice of the pool written).
//
//   build/<dir>/bench/deviceplugin/dra_bench --benchmark_counters_tabular=true
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <filesystem>
#include <memory>
#include <set>

#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"

#include "base/check.h"
#include "base/log.h"
#include "base/strings.h"
#include "config/dra_allocation.h"
#include "deviceplugin/dra_driver.h"
#include "deviceplugin/dra_slices.h"
#include "deviceplugin/fake_driver_tree.h"
#include "deviceplugin/mig_realizer.h"
#include "k8s/client.h"
#include "nvml/open_nvml.h"
#include "testing/fake_apiserver/fake_apiserver.h"

namespace prism::deviceplugin {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr char kNode[] = "node-a";

struct Node {
  Node() {
    SetLogLevel(LogLevel::kError);
    std::string tmpl = (fs::temp_directory_path() / "prism-dra-bench-XXXXXX").string();
    PRISM_CHECK(::mkdtemp(tmpl.data()) != nullptr);
    dir = tmpl;
    testing::WriteFakeDriverTree(dir / "host", 1);
    PRISM_CHECK(api.Start().ok());
    k8s::ClusterConfig cluster;
    cluster.server = api.url();
    k8s::ClientOptions options;
    options.qps = 0;
    client = *k8s::Client::Create(cluster, options);
    const std::string sim = (dir / "gpus.yaml").string();
    std::ofstream(sim) << "gpus:\n  - model: A100-SXM4-40GB\n    mig: {enabled: true}\n";
    nvml = *nvml::OpenNvml("sim:" + sim);
    realizer = std::make_unique<MigRealizer>(nvml.get(), MigRealizerOptions{0});
    realizer->SetDynamicGpus(std::set<int>{0});
    DraDriverOptions o;
    o.node_name = kNode;
    o.cdi_dir = (dir / "cdi").string();
    o.state_dir = (dir / "state").string();
    o.device_nodes.dev_root = (dir / "host").string();
    o.device_nodes.proc_root = (dir / "host" / "proc").string();
    o.gpus = [this] { return Gpus(); };
    o.mig_worker = [this](const std::function<void(nvml::Nvml&, MigRealizer&)>& task) {
      absl::MutexLock lock(&mu);
      task(*nvml, *realizer);
      return absl::OkStatus();
    };
    driver = std::make_unique<DraDriver>(o, client.get());
    PRISM_CHECK(driver->Start().ok());
  }
  ~Node() { fs::remove_all(dir); }

  absl::StatusOr<std::vector<DraGpu>> Gpus() {
    absl::MutexLock lock(&mu);
    return ReadDraGpus(nvml.get(), (dir / "host" / "proc").string(),
                       [this](int i) { return realizer->IsDynamic(i); });
  }

  fs::path dir;
  fakeapi::FakeApiServer api;
  std::unique_ptr<k8s::Client> client;
  absl::Mutex mu;
  std::unique_ptr<nvml::Nvml> nvml;
  std::unique_ptr<MigRealizer> realizer;
  std::unique_ptr<DraDriver> driver;
};

void Percentiles(benchmark::State& state, std::vector<double> us) {
  std::sort(us.begin(), us.end());
  if (us.empty()) return;
  state.counters["p50_us"] = us[us.size() / 2];
  state.counters["p99_us"] = us[std::min(us.size() - 1, us.size() * 99 / 100)];
}

void BM_DraPrepareMigPartition(benchmark::State& state) {
  Node node;
  std::vector<double> us;
  int i = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const int start = i % 7;
    const std::string name = StrCat("c-", i++);
    json claim{{"apiVersion", "resource.k8s.io/v1"},
               {"kind", "ResourceClaim"},
               {"metadata", {{"name", name}, {"namespace", "default"}}},
               {"spec", {{"devices", {{"requests", json::array()}}}}},
               {"status",
                {{"allocation",
                  {{"devices",
                    {{"results", json::array({{{"request", "gpu"},
                                               {"driver", "gpu.prism.io"},
                                               {"pool", kNode},
                                               {"device", StrCat("gpu-0-mig-1g5gb-19-", start)}}})},
                     {"config", json::array({config::DraAllocationMarker("pod-1", kNode)})}}}}},
                 {"reservedFor",
                  json::array({{{"resource", "pods"}, {"name", "p"}, {"uid", "pod-1"}}})}}}};
    absl::StatusOr<json> created = node.api.Create("resourceclaims", claim);
    PRISM_CHECK(created.ok());
    const DraClaimRef ref{"default", name, (*created)["metadata"]["uid"]};
    state.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    const DraPrepareResult result = node.driver->Prepare(ref);
    const auto t1 = std::chrono::steady_clock::now();
    state.PauseTiming();
    if (!result.error.empty()) {
      state.SkipWithError(result.error.c_str());
      break;
    }
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    PRISM_CHECK(node.driver->Unprepare(ref).ok());
    state.ResumeTiming();
  }
  Percentiles(state, us);
}
BENCHMARK(BM_DraPrepareMigPartition)->Unit(benchmark::kMillisecond)->Iterations(50);

void BM_DraPublishAfterMigChange(benchmark::State& state) {
  Node node;
  int kept_id = -1;
  {
    // A layout the MIG manager owns (static): its instances are what the node publishes, so
    // each change is a new publication. (A GPU whose layout the agent owns publishes every
    // profile and start whatever exists; its instances change nothing there.)
    absl::MutexLock lock(&node.mu);
    node.realizer->SetDynamicGpus(std::set<int>{});
    // A 3g.20gb that stays, so that the pool is never empty.
    absl::StatusOr<nvml::GpuInstanceInfo> kept = node.nvml->CreateGpuInstance(0, 9, 0);
    PRISM_CHECK(kept.ok());
    PRISM_CHECK(node.nvml->CreateComputeInstance(0, kept->id, 3).ok());
    kept_id = kept->id;
  }
  DraSlicePublisher publisher("gpu.prism.io", kNode, node.client.get());
  PRISM_CHECK(publisher.Publish(*node.Gpus()).ok());
  std::vector<double> us;
  int i = 0;
  int64_t generation = 0;
  for (auto _ : state) {
    state.PauseTiming();
    {
      // An instance made or destroyed outside the DRA driver (1g.5gb at start 6).
      absl::MutexLock lock(&node.mu);
      if (i++ % 2 == 0) {
        absl::StatusOr<nvml::GpuInstanceInfo> gi = node.nvml->CreateGpuInstance(0, 19, 6);
        PRISM_CHECK(gi.ok());
        PRISM_CHECK(node.nvml->CreateComputeInstance(0, gi->id, 1).ok());
      } else {
        // Held in a local: a range-for over a temporary's value would read freed memory.
        const absl::StatusOr<std::vector<nvml::GpuInstanceInfo>> listed =
            node.nvml->ListGpuInstances(0);
        PRISM_CHECK(listed.ok());
        for (const nvml::GpuInstanceInfo& gi : *listed) {
          if (gi.id == kept_id) continue;
          for (const nvml::ComputeInstanceInfo& ci : gi.compute_instances) {
            PRISM_CHECK(node.nvml->DestroyComputeInstance(0, gi.id, ci.id).ok());
          }
          const absl::Status destroyed = node.nvml->DestroyGpuInstance(0, gi.id);
          if (!destroyed.ok()) {
            std::fprintf(stderr, "destroying GPU instance %d: %s\n", gi.id,
                         std::string(destroyed.message()).c_str());
            PRISM_CHECK(false);
          }
        }
      }
    }
    state.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<DraGpu>> gpus = node.Gpus();
    PRISM_CHECK(gpus.ok());
    absl::StatusOr<int64_t> published = publisher.Publish(*gpus);
    const auto t1 = std::chrono::steady_clock::now();
    PRISM_CHECK(published.ok());
    generation = *published;
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  Percentiles(state, us);
  state.counters["generation"] = static_cast<double>(generation);
}
BENCHMARK(BM_DraPublishAfterMigChange)->Unit(benchmark::kMillisecond)->Iterations(50);

}  // namespace
}  // namespace prism::deviceplugin

BENCHMARK_MAIN();
