// `prism device-plugin` as a process: against a fake API server and a fake kubelet, on simulated
// GPUs, allocating for a pod, serving metrics, stopping on SIGTERM; and refusing bad flags.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

#include "config/annotations.h"
#include "config/device_config_yaml.h"
#include "config/dra_allocation.h"
#include "config/pod_request.h"
#include "core/sched/engine.h"
#include "deviceplugin/fake_driver_tree.h"
#include "deviceplugin/inventory.h"
#include "deviceplugin/test_util.h"
#include "k8s/client.h"
#include "k8s/objects.h"
#include "kubelet/fake_dra_kubelet.h"
#include "kubelet/fake_kubelet.h"
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

  // The scheduler's part: decide from the published inventory.
  std::optional<std::string> inventory;
  for (int i = 0; i < 2000 && !inventory; ++i) {
    inventory = k8s::Annotation(*api.Get("nodes", "", "n1"), kInventoryAnnotation);
    if (!inventory) absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(inventory.has_value()) << Slurp(log);
  auto decoded = DecodeInventory(*inventory);
  ASSERT_TRUE(decoded.ok());
  sched::NodeSpec node;
  node.name = "n1";
  node.cpu_milli = 8000;
  node.memory_bytes = int64_t{64} << 30;
  node.gpus = ToGpuSpecs(*decoded);
  const sched::DeviceConfig device_config = config::DefaultDeviceConfig();
  auto state = sched::ClusterState::Build({node}, device_config);
  ASSERT_TRUE(state.ok());
  sched::Engine engine(std::move(*state), device_config);
  config::PodManifest manifest;
  manifest.namespace_name = "ns";
  manifest.name = "p";
  config::ContainerManifest main_container;
  main_container.name = "main";
  main_container.limits = {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "3000"}};
  manifest.containers.push_back(std::move(main_container));
  auto request = config::BuildPodRequest(manifest, device_config);
  ASSERT_TRUE(request.ok());
  sched::ScheduleResult placed = engine.Place(*request);
  ASSERT_TRUE(placed.scheduled) << placed.Summary();
  Json pod{
      {"metadata",
       {{"name", "p"},
        {"namespace", "ns"},
        {"annotations", config::EncodeDecisionAnnotations(placed.decision, engine.cluster())}}},
      {"spec",
       {{"nodeName", "n1"},
        {"containers",
         {{{"name", "main"},
           {"resources",
            {{"limits", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "3000"}}}}}}}}}}};
  auto created = api.Create("pods", pod);
  ASSERT_TRUE(created.ok());
  const std::string uid = k8s::Uid(*created);
  ASSERT_TRUE(
      kubelet->AdmitPod({uid, "ns", "p", {{"main", false, false, 1}}}, "nvidia.com/gpu").ok());
  absl::StatusOr<kubelet::CreatedContainer> container;
  for (int i = 0; i < 5000; ++i) {
    container = kubelet->CreateContainer(uid, "main");
    if (container.ok() || container.status().code() != absl::StatusCode::kNotFound) break;
    absl::SleepFor(absl::Milliseconds(2));
  }
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
  const std::string text = Slurp(log);
  const size_t at = text.find("metrics on 127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << text;
  const int port = std::stoi(text.substr(at + std::string("metrics on 127.0.0.1:").size()));
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

// --dra: the agent also registers as DRA driver gpu.prism.io, publishes its whole GPU as a
// ResourceSlice, and prepares a claim allocated that GPU (docs/dra.md, Status); /readyz waits for
// the DRA registration; SIGTERM removes the DRA sockets.
TEST(DevicePluginCommandTest, DraServesRegistersPublishesAndPrepares) {
  const fs::path dir = testing::TestDir();
  fakeapi::FakeApiServer api;
  std::unique_ptr<kubelet::FakeKubelet> kubelet;
  std::vector<std::string> args;
  ASSERT_NO_FATAL_FAILURE(StartT4Node(dir, api, &kubelet, &args));
  const std::string log = (dir / "agent.log").string();
  const pid_t pid = Spawn(With(args, {"--dra=true", "--dra-registry-dir=" + (dir / "reg").string(),
                                      "--dra-plugin-dir=" + (dir / "plugins").string(),
                                      "--dra-republish-interval=0.2"}),
                          log);
  KillOnExit guard{pid};
  ASSERT_TRUE(kubelet->WaitForPlugin("nvidia.com/gpu", absl::Seconds(30))) << Slurp(log);

  k8s::ClusterConfig cluster;
  cluster.server = api.url();
  auto client = k8s::Client::Create(cluster);
  ASSERT_TRUE(client.ok());
  kubelet::FakeDraKubeletOptions options;
  options.registry_dir = (dir / "reg").string();
  options.cdi_dir = (dir / "cdi").string();
  options.client = client->get();
  auto dra = kubelet::FakeDraKubelet::Start(options);
  ASSERT_TRUE(dra.ok()) << dra.status();
  ASSERT_TRUE((*dra)->WaitForPlugin("gpu.prism.io", absl::Seconds(30))) << Slurp(log);
  EXPECT_EQ((*dra)->Plugin("gpu.prism.io")->endpoint, (dir / "plugins" / "dra.sock").string());

  std::vector<Json> slices;
  for (int i = 0; i < 1000 && slices.empty(); ++i) {
    slices = api.List("resourceslices");
    if (slices.empty()) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(slices.size(), 1u) << Slurp(log);
  const Json& device = slices[0]["spec"]["devices"][0];
  EXPECT_EQ(device["name"], "gpu-0");
  EXPECT_EQ(slices[0]["spec"]["pool"]["name"], "n1");
  const std::string uuid = device["attributes"]["uuid"]["string"];
  // Slices stay true between registrations: one deleted by someone else comes back.
  ASSERT_TRUE(
      api.Delete("resourceslices", "", slices[0]["metadata"]["name"].get<std::string>()).ok());
  std::vector<Json> again;
  for (int i = 0; i < 1000 && again.empty(); ++i) {
    again = api.List("resourceslices");
    if (again.empty()) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(again.size(), 1u) << Slurp(log);
  EXPECT_EQ(again[0]["spec"]["devices"][0]["name"], "gpu-0");

  Json claim{
      {"metadata", {{"name", "c"}, {"namespace", "ns"}}},
      {"status",
       {{"allocation",
         {{"devices",
           {{"results", Json::array({{{"request", "gpu"},
                                      {"driver", "gpu.prism.io"},
                                      {"pool", "n1"},
                                      {"device", "gpu-0"}}})},
            {"config", Json::array({config::DraAllocationMarker("pod-1", "n1")})}}}}},
        {"reservedFor", Json::array({{{"resource", "pods"}, {"name", "p"}, {"uid", "pod-1"}}})}}}};
  ASSERT_TRUE(api.Create("resourceclaims", claim).ok());
  kubelet::FakeDraPod pod{"pod-1", "ns", "p", {{"gpus", "c"}}, {{"main", {{"gpus", ""}}}}};
  ASSERT_TRUE((*dra)->PrepareResources(pod).ok()) << Slurp(log);
  auto container = (*dra)->CreateContainer(pod, "main");
  ASSERT_TRUE(container.ok()) << container.status();
  // The GPU by the toolkit's device-list mount (composes across devices); the env says "void".
  EXPECT_THAT(container->edits.env, ::testing::Contains("NVIDIA_VISIBLE_DEVICES=void"));
  bool listed = false;
  for (const auto& m : container->edits.mounts) {
    listed = listed || m.container_path == "/var/run/nvidia-container-devices/" + uuid;
  }
  EXPECT_TRUE(listed);
  EXPECT_TRUE(fs::exists(dir / "state" / "claims"));

  const std::string text = Slurp(log);
  const size_t at = text.find("metrics on 127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << text;
  httplib::Client http("127.0.0.1",
                       std::stoi(text.substr(at + std::string("metrics on 127.0.0.1:").size())));
  EXPECT_EQ(http.Get("/readyz")->status, 200);

  kill(pid, SIGTERM);
  guard.waited = true;
  EXPECT_EQ(WaitExit(pid), 0) << Slurp(log);
  EXPECT_FALSE(fs::exists(dir / "reg" / "gpu.prism.io-reg.sock"));
  EXPECT_FALSE(fs::exists(dir / "plugins" / "dra.sock"));
  (*dra)->Stop();
  kubelet->Stop();
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
  int port = -1;
  for (int i = 0; i < 1000 && port < 0; ++i) {
    const std::string text = Slurp(log);
    const size_t at = text.find("metrics on 127.0.0.1:");
    if (at != std::string::npos) {
      port = std::stoi(text.substr(at + std::string("metrics on 127.0.0.1:").size()));
    } else {
      absl::SleepFor(absl::Milliseconds(10));
    }
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
