// `prism device-plugin` as a process: against a fake API server and a fake kubelet, on simulated
// GPUs, allocating for a pod, serving metrics, stopping on SIGTERM; and refusing bad flags.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <atomic>
#include <functional>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

#include "base/status_macros.h"
#include "config/annotations.h"
#include "config/device_config_yaml.h"
#include "config/dra_allocation.h"
#include "config/dra_share.h"
#include "config/pod_request.h"
#include "core/sched/engine.h"
#include "deviceplugin/fake_driver_tree.h"
#include "deviceplugin/inventory.h"
#include "deviceplugin/node_agent.h"
#include "deviceplugin/test_util.h"
#include "k8s/client.h"
#include "k8s/objects.h"
#include "kubelet/fake_dra_kubelet.h"
#include "kubelet/fake_kubelet.h"
#include "nvml/sim/sim_state_file.h"
#include "testing/fake_apiserver/fake_apiserver.h"

extern char** environ;

namespace prism::deviceplugin {
namespace {

namespace fs = std::filesystem;
using k8s::Json;
using ::testing::HasSubstr;

// Runs the prism binary with `args`, stderr to `log`; returns the pid.
pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(PRISM_BINARY));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("NODE_NAME=", 0) != 0) env_storage.push_back(*e);
  }
  std::vector<char*> env;
  for (std::string& e : env_storage) env.push_back(e.data());
  env.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, PRISM_BINARY, &actions, nullptr, argv.data(), env.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int WaitExit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Kills the agent if the test fails before stopping it: a leftover child would hold CTest's
// output pipe open and turn a failure into a hang.
struct KillOnExit {
  pid_t pid;
  bool waited = false;
  ~KillOnExit() {
    if (!waited && pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

// One node with a simulated Tesla T4: the API server (started, with the Node), the kubelet
// (started) and the `prism device-plugin` arguments of an agent on it.
void StartT4Node(const fs::path& dir, fakeapi::FakeApiServer& api,
                 std::unique_ptr<kubelet::FakeKubelet>* kubelet, std::vector<std::string>* args) {
  const std::string gpus = testing::WriteFile(dir / "gpus.yaml",
                                              "gpus:\n  - model: Tesla T4\n"
                                              "    memory_mib: 15360\n");
  testing::WriteFakeDriverTree(dir / "host", 1);
  ASSERT_TRUE(api.Start().ok());
  ASSERT_TRUE(api.Create("nodes", Json{{"metadata", {{"name", "n1"}}}}).ok());
  const std::string kubeconfig = testing::WriteFile(dir / "kubeconfig", api.KubeconfigYaml());
  kubelet::FakeKubeletOptions options{(dir / "dp").string(), (dir / "pr" / "k.sock").string(),
                                      (dir / "cdi").string()};
  auto started = kubelet::FakeKubelet::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  *kubelet = std::move(*started);
  *args = {"device-plugin",
           "--node-name=n1",
           "--kubeconfig=" + kubeconfig,
           "--nvml=sim:" + gpus,
           "--device-plugin-path=" + (dir / "dp").string(),
           "--pod-resources-socket=" + options.pod_resources_socket,
           "--cdi-dir=" + (dir / "cdi").string(),
           "--state-dir=" + (dir / "state").string(),
           "--vgpu-dir=" + (dir / "vgpu").string(),
           "--vgpu-library=none",
           "--metrics-address=127.0.0.1:0",
           "--dev-root=" + (dir / "host").string(),
           "--proc-root=" + (dir / "host" / "proc").string()};
}

std::vector<std::string> With(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// The scheduler's part for a slice pod "ns/<name>" asking `gpumem` MiB of one GPU of node n1:
// decide from the inventory the agent published (the real engine and encoder) and create the
// pod bound there with its decision. Returns its UID.
absl::StatusOr<std::string> CreateDecidedSlicePod(fakeapi::FakeApiServer& api,
                                                  const std::string& name, int64_t gpumem) {
  std::optional<std::string> inventory;
  for (int i = 0; i < 2000 && !inventory; ++i) {
    if (absl::StatusOr<Json> node = api.Get("nodes", "", "n1"); node.ok()) {
      inventory = k8s::Annotation(*node, kInventoryAnnotation);
    }
    if (!inventory) absl::SleepFor(absl::Milliseconds(5));
  }
  if (!inventory) return absl::DeadlineExceededError("the agent published no inventory");
  absl::StatusOr<NodeInventory> decoded = DecodeInventory(*inventory);
  if (!decoded.ok()) return decoded.status();
  sched::NodeSpec node;
  node.name = "n1";
  node.cpu_milli = 8000;
  node.memory_bytes = int64_t{64} << 30;
  node.gpus = ToGpuSpecs(*decoded);
  const sched::DeviceConfig device_config = config::DefaultDeviceConfig();
  auto state = sched::ClusterState::Build({node}, device_config);
  if (!state.ok()) return state.status();
  sched::Engine engine(std::move(*state), device_config);
  const std::string memory = std::to_string(gpumem);
  config::PodManifest manifest;
  manifest.namespace_name = "ns";
  manifest.name = name;
  config::ContainerManifest main_container;
  main_container.name = "main";
  main_container.limits = {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", memory}};
  manifest.containers.push_back(std::move(main_container));
  auto request = config::BuildPodRequest(manifest, device_config);
  if (!request.ok()) return request.status();
  sched::ScheduleResult placed = engine.Place(*request);
  if (!placed.scheduled) return absl::FailedPreconditionError(placed.Summary());
  Json pod{
      {"metadata",
       {{"name", name},
        {"namespace", "ns"},
        {"annotations", config::EncodeDecisionAnnotations(placed.decision, engine.cluster())}}},
      {"spec",
       {{"nodeName", "n1"},
        {"containers",
         {{{"name", "main"},
           {"resources",
            {{"limits", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", memory}}}}}}}}}}};
  absl::StatusOr<Json> created = api.Create("pods", pod);
  if (!created.ok()) return created.status();
  return k8s::Uid(*created);
}

// The kubelet admits the pod (Allocate) and the runtime creates its container "main" once the
// agent has written its CDI spec.
absl::StatusOr<kubelet::CreatedContainer> AdmitAndCreate(kubelet::FakeKubelet& kubelet,
                                                         const std::string& uid,
                                                         const std::string& name) {
  if (absl::Status admitted =
          kubelet.AdmitPod({uid, "ns", name, {{"main", false, false, 1}}}, "nvidia.com/gpu");
      !admitted.ok()) {
    return admitted;
  }
  absl::StatusOr<kubelet::CreatedContainer> container;
  for (int i = 0; i < 5000; ++i) {
    container = kubelet.CreateContainer(uid, "main");
    if (container.ok() || container.status().code() != absl::StatusCode::kNotFound) break;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return container;
}

// The kubelet's DRA half beside the agent started with --dra-registry-dir=<dir>/reg.
struct DraKubelet {
  std::unique_ptr<k8s::Client> client;
  std::unique_ptr<kubelet::FakeDraKubelet> kubelet;
};
absl::StatusOr<DraKubelet> StartDraKubelet(const fs::path& dir, fakeapi::FakeApiServer& api) {
  DraKubelet out;
  k8s::ClusterConfig cluster;
  cluster.server = api.url();
  ASSIGN_OR_RETURN(out.client, k8s::Client::Create(cluster));
  kubelet::FakeDraKubeletOptions options;
  options.registry_dir = (dir / "reg").string();
  options.cdi_dir = (dir / "cdi").string();
  options.client = out.client.get();
  ASSIGN_OR_RETURN(out.kubelet, kubelet::FakeDraKubelet::Start(options));
  return out;
}

// The devices of the node's ResourceSlices, by name.
std::set<std::string> PublishedDevices(fakeapi::FakeApiServer& api) {
  std::set<std::string> names;
  for (const Json& slice : api.List("resourceslices")) {
    for (const Json& d : slice["spec"].value("devices", Json::array())) {
      names.insert(d["name"].get<std::string>());
    }
  }
  return names;
}

// The flags that turn DRA on with the sockets under `dir` (StartDraKubelet's), and `more`.
std::vector<std::string> DraFlags(const fs::path& dir, const std::vector<std::string>& more = {}) {
  std::vector<std::string> flags = {"--dra=true", "--dra-registry-dir=" + (dir / "reg").string(),
                                    "--dra-plugin-dir=" + (dir / "plugins").string()};
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

// Polls the node's published devices until `done` holds (at most `timeout`); the last seen.
std::set<std::string> WaitForDevices(fakeapi::FakeApiServer& api,
                                     const std::function<bool(const std::set<std::string>&)>& done,
                                     absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time deadline = absl::Now() + timeout;
  std::set<std::string> devices = PublishedDevices(api);
  while (!done(devices) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
    devices = PublishedDevices(api);
  }
  return devices;
}

// A claim "ns/<name>" allocated `result` by Prism's scheduler for node n1, reserved for the pod.
Json AllocatedClaim(const std::string& name, const std::string& pod_uid, const std::string& pod,
                    Json result) {
  return Json{
      {"metadata", {{"name", name}, {"namespace", "ns"}}},
      {"status",
       {{"allocation",
         {{"devices",
           {{"results", Json::array({std::move(result)})},
            {"config", Json::array({config::DraAllocationMarker(pod_uid, "n1")})}}}}},
        {"reservedFor", Json::array({{{"resource", "pods"}, {"name", pod}, {"uid", pod_uid}}})}}}};
}

// gpu-0 of node n1, whole.
Json WholeGpu0() {
  return Json{{"request", "gpu"}, {"driver", "gpu.prism.io"}, {"pool", "n1"}, {"device", "gpu-0"}};
}

// The port of the agent's metrics server, from its log; 0 before it is logged.
int MetricsPort(const std::string& log_text) {
  constexpr std::string_view kMarker = "metrics on 127.0.0.1:";
  const size_t at = log_text.find(kMarker);
  return at == std::string::npos ? 0 : std::stoi(log_text.substr(at + kMarker.size()));
}

TEST(DevicePluginCommandTest, ServesAllocatesReportsAndStopsOnSigterm) {
  const fs::path dir = testing::TestDir();
  fakeapi::FakeApiServer api;
  std::unique_ptr<kubelet::FakeKubelet> kubelet;
  std::vector<std::string> args;
  ASSERT_NO_FATAL_FAILURE(StartT4Node(dir, api, &kubelet, &args));

  const std::string log = (dir / "agent.log").string();
  const pid_t pid = Spawn(With(args, {"--device-split-count=4", "--prestart-timeout=20"}), log);
  KillOnExit guard{pid};
  ASSERT_TRUE(kubelet->WaitForPlugin("nvidia.com/gpu", absl::Seconds(30))) << Slurp(log);
  EXPECT_EQ(kubelet->Devices("nvidia.com/gpu").size(), 4u);

  absl::StatusOr<std::string> uid = CreateDecidedSlicePod(api, "p", 3000);
  ASSERT_TRUE(uid.ok()) << uid.status() << Slurp(log);
  absl::StatusOr<kubelet::CreatedContainer> container = AdmitAndCreate(*kubelet, *uid, "p");
  ASSERT_TRUE(container.ok()) << container.status() << Slurp(log);
  EXPECT_EQ(container->env["CUDA_DEVICE_MEMORY_LIMIT_0"], "3000m");
  // The PreStartContainer sync point and the device nodes from --dev-root / --proc-root.
  EXPECT_TRUE(kubelet->PluginOptions("nvidia.com/gpu").pre_start_required());
  EXPECT_EQ(kubelet->prestart_calls(), 1);
  std::vector<std::string> nodes;
  for (const kubelet::CdiDeviceNode& n : container->device_nodes) nodes.push_back(n.path);
  EXPECT_THAT(nodes, ::testing::ElementsAre("/dev/nvidiactl", "/dev/nvidia-uvm",
                                            "/dev/nvidia-uvm-tools", "/dev/nvidia0"));

  // Metrics, on the port the agent logged.
  const int port = MetricsPort(Slurp(log));
  ASSERT_NE(port, 0) << Slurp(log);
  httplib::Client http("127.0.0.1", port);
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_THAT(metrics->body,
              HasSubstr("prism_device_plugin_allocate_requests_total{result=\"ok\"} 1"));
  EXPECT_EQ(http.Get("/readyz")->status, 200);

  kill(pid, SIGTERM);
  guard.waited = true;
  EXPECT_EQ(WaitExit(pid), 0) << Slurp(log);
  EXPECT_FALSE(fs::exists(dir / "dp" / "prism-gpu.sock"));
  kubelet->Stop();
}

// The binary with --dra on a T4 node: the fake kubelet's device-plugin and DRA halves, the fake
// API server.
class DraAgentTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(StartT4Node(dir_, api_, &kubelet_, &args_)); }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);  // A failed test: the leftover child would hold CTest's pipe open.
      waitpid(pid_, nullptr, 0);
    }
    if (dra_) dra_->Stop();
    if (kubelet_) kubelet_->Stop();
  }

  // Starts the agent with DRA and `more` flags, and waits for the registrations it should make.
  void StartAgent(const std::vector<std::string>& more, bool device_plugin = true,
                  bool dra = true) {
    pid_ = Spawn(With(args_, DraFlags(dir_, more)), log_);
    if (device_plugin) {
      ASSERT_TRUE(kubelet_->WaitForPlugin("nvidia.com/gpu", absl::Seconds(30))) << Slurp(log_);
    }
    if (!dra_) {
      absl::StatusOr<DraKubelet> started = StartDraKubelet(dir_, api_);
      ASSERT_TRUE(started.ok()) << started.status();
      dra_client_ = std::move(started->client);
      dra_ = std::move(started->kubelet);
    }
    if (dra) {
      ASSERT_TRUE(dra_->WaitForPlugin("gpu.prism.io", absl::Seconds(30))) << Slurp(log_);
    }
  }
  // SIGTERM; the agent's exit status.
  int StopAgent() {
    kill(pid_, SIGTERM);
    const int rc = WaitExit(pid_);
    pid_ = -1;
    return rc;
  }

  const fs::path dir_ = testing::TestDir();
  fakeapi::FakeApiServer api_;
  std::unique_ptr<kubelet::FakeKubelet> kubelet_;
  std::vector<std::string> args_;
  const std::string log_ = (dir_ / "agent.log").string();
  pid_t pid_ = -1;
  std::unique_ptr<k8s::Client> dra_client_;
  std::unique_ptr<kubelet::FakeDraKubelet> dra_;
};

// --dra: the agent also registers as DRA driver gpu.prism.io, publishes its whole GPU as a
// ResourceSlice, and prepares a claim allocated that GPU (docs/dra.md, Status); /readyz waits for
// the DRA registration; SIGTERM removes the DRA sockets.
TEST_F(DraAgentTest, ServesRegistersPublishesAndPrepares) {
  ASSERT_NO_FATAL_FAILURE(StartAgent({"--dra-republish-interval=0.2"}));
  EXPECT_EQ(dra_->Plugin("gpu.prism.io")->endpoint, (dir_ / "plugins" / "dra.sock").string());

  std::vector<Json> slices;
  for (int i = 0; i < 1000 && slices.empty(); ++i) {
    slices = api_.List("resourceslices");
    if (slices.empty()) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(slices.size(), 1u) << Slurp(log_);
  const Json& device = slices[0]["spec"]["devices"][0];
  EXPECT_EQ(device["name"], "gpu-0");
  EXPECT_EQ(slices[0]["spec"]["pool"]["name"], "n1");
  const std::string uuid = device["attributes"]["uuid"]["string"];
  // Slices stay true between registrations: one deleted by someone else comes back.
  ASSERT_TRUE(
      api_.Delete("resourceslices", "", slices[0]["metadata"]["name"].get<std::string>()).ok());
  std::vector<Json> again;
  for (int i = 0; i < 1000 && again.empty(); ++i) {
    again = api_.List("resourceslices");
    if (again.empty()) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(again.size(), 1u) << Slurp(log_);
  EXPECT_EQ(again[0]["spec"]["devices"][0]["name"], "gpu-0");

  ASSERT_TRUE(api_.Create("resourceclaims", AllocatedClaim("c", "pod-1", "p", WholeGpu0())).ok());
  kubelet::FakeDraPod pod{"pod-1", "ns", "p", {{"gpus", "c"}}, {{"main", {{"gpus", ""}}}}};
  ASSERT_TRUE(dra_->PrepareResources(pod).ok()) << Slurp(log_);
  auto container = dra_->CreateContainer(pod, "main");
  ASSERT_TRUE(container.ok()) << container.status();
  // The GPU by the toolkit's device-list mount (composes across devices); the env says "void".
  EXPECT_THAT(container->edits.env, ::testing::Contains("NVIDIA_VISIBLE_DEVICES=void"));
  bool listed = false;
  for (const auto& m : container->edits.mounts) {
    listed = listed || m.container_path == "/var/run/nvidia-container-devices/" + uuid;
  }
  EXPECT_TRUE(listed);
  EXPECT_TRUE(fs::exists(dir_ / "state" / "claims"));

  const int port = MetricsPort(Slurp(log_));
  ASSERT_NE(port, 0) << Slurp(log_);
  httplib::Client http("127.0.0.1", port);
  EXPECT_EQ(http.Get("/readyz")->status, 200);

  EXPECT_EQ(StopAgent(), 0) << Slurp(log_);
  EXPECT_FALSE(fs::exists(dir_ / "reg" / "gpu.prism.io-reg.sock"));
  EXPECT_FALSE(fs::exists(dir_ / "plugins" / "dra.sock"));
}

// With --dra the node serves a GPU through both paths; the agent's own check (gpu_holds.h) keeps
// them from handing it out twice even when the scheduler's view is wrong (here: the claims are
// allocated by hand, and the second slice pod is decided without knowing them). A whole GPU is
// refused next to a device-plugin slice, a share only when both paths' shares would not fit,
// and a device-plugin slice that would not fit next to a claim's share fails with the claim
// named; once the pod ends the whole GPU can be prepared.
TEST_F(DraAgentTest, BothPathsNeverHandOutOneGpuTwice) {
  ASSERT_NO_FATAL_FAILURE(StartAgent({"--dra-consumable-capacity=true"}));

  // A claim allocated gpu-0 whole, or a share of it, as Prism's scheduler writes it.
  int pods = 0;
  auto prepare = [&](const std::string& name, Json result) {
    const std::string pod_uid = "dra-pod-" + std::to_string(++pods);
    EXPECT_TRUE(
        api_.Create("resourceclaims", AllocatedClaim(name, pod_uid, name, std::move(result))).ok());
    return dra_->PrepareResources(
        kubelet::FakeDraPod{pod_uid, "ns", name, {{"gpus", name}}, {{"main", {{"gpus", ""}}}}});
  };
  const Json whole = WholeGpu0();
  auto share = [&](int i, int64_t memory_mib) {
    Json r = whole;
    r["shareID"] = config::DraShareId("0e9d8c7b-6a59-4483-9271-605f4e3d2c1b", "gpu", i);
    r["consumedCapacity"] = config::DraConsumedCapacityJson({memory_mib, 10, 1});
    return r;
  };

  // A device-plugin slice of 3000 MiB runs on the T4 (15360 MiB).
  absl::StatusOr<std::string> p = CreateDecidedSlicePod(api_, "p", 3000);
  ASSERT_TRUE(p.ok()) << p.status() << Slurp(log_);
  absl::StatusOr<kubelet::CreatedContainer> running = AdmitAndCreate(*kubelet_, *p, "p");
  ASSERT_TRUE(running.ok()) << running.status() << Slurp(log_);
  ASSERT_EQ(running->env["CUDA_DEVICE_MEMORY_LIMIT_0"], "3000m");

  absl::Status refused = prepare("whole", whole);
  EXPECT_THAT(refused.message(), HasSubstr("cannot be given whole")) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("pod ns/p container main")) << refused;
  absl::Status too_big = prepare("big", share(0, 13000));
  EXPECT_THAT(too_big.message(), HasSubstr("memory 16000/15360 MiB")) << too_big;
  absl::Status fits = prepare("fits", share(1, 8000));
  EXPECT_TRUE(fits.ok()) << fits << Slurp(log_);

  // The next slice pod was decided without the claim: 3000 + 8000 + 6000 is more than the GPU.
  absl::StatusOr<std::string> q = CreateDecidedSlicePod(api_, "q", 6000);
  ASSERT_TRUE(q.ok()) << q.status();
  absl::StatusOr<kubelet::CreatedContainer> failed = AdmitAndCreate(*kubelet_, *q, "q");
  ASSERT_TRUE(failed.ok()) << failed.status() << Slurp(log_);
  EXPECT_EQ(failed->env["NVIDIA_VISIBLE_DEVICES"], "void");
  EXPECT_THAT(failed->env[kAllocationErrorEnv], HasSubstr("ResourceClaim ns/fits"));

  // The claim and both pods end: the GPU can be prepared whole.
  ASSERT_TRUE(dra_->UnprepareResources(kubelet::FakeDraPod{
                                             "dra-pod-3", "ns", "fits", {{"gpus", "fits"}}, {}})
                  .ok());
  for (const auto& [uid, name] : {std::pair{*p, "p"}, std::pair{*q, "q"}}) {
    kubelet_->RemovePod(uid);
    ASSERT_TRUE(api_.Delete("pods", "ns", name).ok());
  }
  absl::Status later;
  for (int i = 0; i < 500; ++i) {
    later = prepare("whole-" + std::to_string(i), whole);
    if (later.ok()) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(later.ok()) << later << Slurp(log_);

  EXPECT_EQ(StopAgent(), 0) << Slurp(log_);
}

// Health reaches the slices at once: a critical XID withdraws the GPU from the pool without
// waiting for --dra-republish-interval (an hour here: the agent's inventory change wakes the
// republisher), and Prepare refuses it.
TEST_F(DraAgentTest, WithdrawsAGpuAsSoonAsItTurnsUnhealthy) {
  ASSERT_NO_FATAL_FAILURE(StartAgent({"--dra-republish-interval=3600"}));
  ASSERT_EQ(WaitForDevices(api_, [](const auto& d) { return !d.empty(); }),
            std::set<std::string>{"gpu-0"})
      << Slurp(log_);

  // XID 79: the GPU fell off the bus.
  ASSERT_TRUE(nvml::sim::SimStateFile((dir_ / "gpus.yaml").string())
                  .Transact([](nvml::sim::SimState& s, bool* changed) {
                    s.xid_events.push_back(nvml::sim::SimXidEvent{0, 79, -1, -1});
                    *changed = true;
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_TRUE(WaitForDevices(api_, [](const auto& d) { return d.empty(); }).empty()) << Slurp(log_);

  ASSERT_TRUE(api_.Create("resourceclaims", AllocatedClaim("c", "pod-1", "p", WholeGpu0())).ok());
  absl::Status refused = dra_->PrepareResources(
      kubelet::FakeDraPod{"pod-1", "ns", "p", {{"gpus", "c"}}, {{"main", {{"gpus", ""}}}}});
  EXPECT_THAT(refused.message(), HasSubstr("which is unhealthy")) << refused;

  EXPECT_EQ(StopAgent(), 0) << Slurp(log_);
}

// One DaemonSet, a node value per node: prism.io/gpu-api=dra serves the node through DRA alone
// (no nvidia.com/gpu for the kubelet, ready without it); relabelled device-plugin, the restarted
// agent withdraws the slices it published and registers only the device plugin.
TEST_F(DraAgentTest, TheNodeLabelChoosesTheKubeletApis) {
  auto label = [&](const std::string& value) {
    ASSERT_TRUE(api_.MergePatch("nodes", "", "n1",
                               Json{{"metadata", {{"labels", {{"prism.io/gpu-api", value}}}}}})
                    .ok());
  };
  label("dra");
  ASSERT_NO_FATAL_FAILURE(StartAgent({}, /*device_plugin=*/false));
  EXPECT_EQ(WaitForDevices(api_, [](const auto& d) { return !d.empty(); }),
            std::set<std::string>{"gpu-0"});
  const std::string text = Slurp(log_);
  ASSERT_NE(MetricsPort(text), 0) << text;
  httplib::Client http("127.0.0.1", MetricsPort(text));
  auto ready = http.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200) << ready->body;
  EXPECT_FALSE(kubelet_->WaitForPlugin("nvidia.com/gpu", absl::Milliseconds(500)));
  EXPECT_THAT(text, HasSubstr("serving GPUs through DRA only"));
  EXPECT_EQ(StopAgent(), 0) << Slurp(log_);

  label("device-plugin");
  ASSERT_NO_FATAL_FAILURE(StartAgent({}, /*device_plugin=*/true, /*dra=*/false));
  EXPECT_TRUE(WaitForDevices(api_, [](const auto& d) { return d.empty(); }).empty()) << Slurp(log_);
  EXPECT_THAT(Slurp(log_), HasSubstr("the device-plugin API only"));
  EXPECT_EQ(StopAgent(), 0) << Slurp(log_);
}

// Review: the /readyz handler (on the metrics server's thread) read the plugin server that the
// SIGHUP handler stops and replaces, a data race (and a use of the freed server). /readyz is
// polled from two threads across several reloads: every reply is 200 or 503, the agent
// registers again each time, ends ready, and exits cleanly.
TEST(DevicePluginCommandTest, ReadyzAnswersWhileSighupReplacesThePluginServer) {
  const fs::path dir = testing::TestDir();
  fakeapi::FakeApiServer api;
  std::unique_ptr<kubelet::FakeKubelet> kubelet;
  std::vector<std::string> args;
  ASSERT_NO_FATAL_FAILURE(StartT4Node(dir, api, &kubelet, &args));
  const std::string log = (dir / "agent.log").string();
  const pid_t pid = Spawn(args, log);
  KillOnExit guard{pid};
  ASSERT_TRUE(kubelet->WaitForPlugin("nvidia.com/gpu", absl::Seconds(30))) << Slurp(log);
  int port = 0;
  for (int i = 0; i < 1000 && port == 0; ++i) {
    port = MetricsPort(Slurp(log));
    if (port == 0) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_GT(port, 0) << Slurp(log);

  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  std::atomic<int> unexpected{0};
  std::vector<std::thread> pollers;
  for (int t = 0; t < 2; ++t) {
    pollers.emplace_back([&] {
      httplib::Client http("127.0.0.1", port);
      http.set_connection_timeout(5);
      http.set_read_timeout(5);
      while (!stop.load()) {
        auto reply = http.Get("/readyz");
        if (!reply || (reply->status != 200 && reply->status != 503)) {
          ++unexpected;
        } else {
          ++answered;
        }
      }
    });
  }
  const int before = kubelet->registrations();
  constexpr int kReloads = 5;
  for (int i = 1; i <= kReloads; ++i) {
    kill(pid, SIGHUP);
    bool registered = false;
    for (int j = 0; j < 3000 && !registered; ++j) {
      registered = kubelet->registrations() >= before + i;
      if (!registered) absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(registered) << "reload " << i << "\n" << Slurp(log);
  }
  stop = true;
  for (std::thread& t : pollers) t.join();
  EXPECT_EQ(unexpected.load(), 0) << Slurp(log);
  EXPECT_GT(answered.load(), kReloads);
  httplib::Client http("127.0.0.1", port);
  bool ready = false;
  for (int i = 0; i < 1000 && !ready; ++i) {
    auto reply = http.Get("/readyz");
    ready = reply && reply->status == 200;
    if (!ready) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(ready) << Slurp(log);

  kill(pid, SIGTERM);
  guard.waited = true;
  EXPECT_EQ(WaitExit(pid), 0) << Slurp(log);
  kubelet->Stop();
}

TEST(DevicePluginCommandTest, BadFlagsAreClearErrors) {
  const fs::path dir = testing::TestDir();
  const std::string log = (dir / "agent.log").string();
  EXPECT_EQ(WaitExit(Spawn({"device-plugin"}, log)), 1);
  EXPECT_THAT(Slurp(log), HasSubstr("--node-name (or $NODE_NAME) is required"));
  EXPECT_EQ(WaitExit(Spawn({"device-plugin", "--node-name=n", "--nvml=gpu"}, log)), 1);
  EXPECT_THAT(Slurp(log), HasSubstr("Error:"));
  EXPECT_EQ(WaitExit(Spawn({"device-plugin", "--node-name=n", "--metrics-address=nowhere"}, log)),
            1);
  EXPECT_THAT(Slurp(log), HasSubstr("--metrics-address 'nowhere' is not host:port"));
  EXPECT_EQ(WaitExit(Spawn({"device-plugin", "--node-name=n", "--vgpu-preload=magic"}, log)), 1);
  EXPECT_THAT(Slurp(log), HasSubstr("--vgpu-preload must be ld-so-preload or env"));
  EXPECT_EQ(WaitExit(Spawn({"device-plugin", "--node-name=n", "--prestart-timeout=-1"}, log)), 1);
  EXPECT_THAT(Slurp(log), HasSubstr("--prestart-timeout must be >= 0 seconds"));
}

}  // namespace
}  // namespace prism::deviceplugin
