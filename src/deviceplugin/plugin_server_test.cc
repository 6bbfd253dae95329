// The device plugin's life with the kubelet: registration, kubelet restarts, a deleted socket.
#include "deviceplugin/plugin_server.h"

#include <atomic>
#include <filesystem>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "config/device_config_yaml.h"
#include "deviceplugin/agent_harness.h"
#include "deviceplugin/test_util.h"
#include "kubelet/kubelet_client.h"

namespace prism::deviceplugin {
namespace {

namespace fs = std::filesystem;
using testing::AgentHarness;

constexpr char kTwoGpus[] = R"(gpus:
  - model: A100-SXM4-40GB
    mig: {enabled: true, pending: true}
  - model: Tesla T4
    memory_mib: 15360
)";

std::vector<std::string> Ids(const std::vector<v1beta1::Device>& devices) {
  std::vector<std::string> ids;
  for (const auto& d : devices) ids.push_back(d.id());
  return ids;
}

class PluginServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    h_ =
        std::make_unique<AgentHarness>(testing::TestDir(), kTwoGpus, config::DefaultDeviceConfig());
    {
      absl::Status cluster = h_->StartCluster();
      ASSERT_TRUE(cluster.ok()) << cluster;
    }
    ASSERT_TRUE(h_->StartAgent().ok());
  }
  std::unique_ptr<AgentHarness> h_;
};

TEST_F(PluginServerTest, RegistersAfterServingAndAdvertisesTokensPerGpu) {
  EXPECT_EQ(h_->plugin().registrations(), 1);
  const v1beta1::RegisterRequest request = h_->kubelet().LastRegisterRequest("nvidia.com/gpu");
  EXPECT_EQ(request.version(), "v1beta1");
  EXPECT_EQ(request.endpoint(), "prism-gpu.sock");
  EXPECT_TRUE(h_->kubelet().PluginOptions("nvidia.com/gpu").get_preferred_allocation_available());
  const auto ids = Ids(h_->kubelet().Devices("nvidia.com/gpu"));
  ASSERT_EQ(ids.size(), 20u);
  EXPECT_THAT(ids[0], ::testing::EndsWith("::0"));
  for (const auto& d : h_->kubelet().Devices("nvidia.com/gpu")) EXPECT_EQ(d.health(), "Healthy");
}

TEST_F(PluginServerTest, AKubeletRestartMakesThePluginRegisterAgainWithTheSameIds) {
  const auto before = Ids(h_->kubelet().Devices("nvidia.com/gpu"));
  ASSERT_TRUE(h_->kubelet().Restart().ok());
  ASSERT_TRUE(h_->kubelet().WaitForPlugin("nvidia.com/gpu", absl::Seconds(10)));
  // The kubelet deleting our socket and creating its own may each trigger a registration.
  EXPECT_GE(h_->kubelet().registrations(), 2);
  EXPECT_EQ(Ids(h_->kubelet().Devices("nvidia.com/gpu")), before);
  // And it still allocates.
  ASSERT_TRUE(h_->InitScheduler().ok());
  testing::PodSpec pod{"after-restart", {testing::ContainerSpec{"main", 1, 2000, 20}}, {}};
  auto uid = h_->SubmitPod(pod);
  ASSERT_TRUE(uid.ok()) << uid.status();
  ASSERT_TRUE(h_->Admit(*uid).ok());
  auto c = h_->CreateContainer(*uid, "main");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->env["NVIDIA_VISIBLE_DEVICES"], ::testing::StartsWith("GPU-"));
}

TEST_F(PluginServerTest, ADeletedSocketIsServedAndRegisteredAgain) {
  fs::remove(h_->plugin().socket_path());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (h_->plugin().registrations() < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(h_->plugin().registrations(), 2);
  EXPECT_TRUE(fs::exists(h_->plugin().socket_path()));
  EXPECT_TRUE(h_->kubelet().WaitForPlugin("nvidia.com/gpu", absl::Seconds(10)));
}

TEST_F(PluginServerTest, ThePluginWaitsForAKubeletThatIsNotThereYet) {
  h_->StopAgent();
  h_->kubelet().Stop();
  fs::remove(fs::path(h_->kubelet().options().device_plugin_dir) / "kubelet.sock");
  ASSERT_TRUE(h_->StartAgent({}, /*wait_for_kubelet=*/false).ok());
  EXPECT_FALSE(h_->plugin().registered());
  ASSERT_TRUE(h_->kubelet().Restart().ok());
  EXPECT_TRUE(h_->kubelet().WaitForPlugin("nvidia.com/gpu", absl::Seconds(10)));
  // Register's reply may reach the plugin just after the kubelet opened ListAndWatch.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!h_->plugin().registered() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_TRUE(h_->plugin().registered());
}

// `prism device-plugin` replaces its server on SIGHUP while /readyz reads registered() on
// another thread; the command once swapped a plain pointer under that reader.
TEST_F(PluginServerTest, AReplaceableServerIsReadWhileItIsReplaced) {
  PluginServerOptions options;
  options.device_plugin_dir = h_->kubelet().options().device_plugin_dir;
  options.socket_name = "prism-replaced.sock";
  options.resource_name = "example.com/gpu";
  options.register_retry = absl::Milliseconds(100);
  ReplaceablePluginServer plugin(&h_->agent(), options);
  EXPECT_FALSE(plugin.registered());
  ASSERT_TRUE(plugin.Start().ok());
  EXPECT_TRUE(plugin.registered());
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0};
  std::thread reader([&] {
    while (!stop.load()) {
      (void)plugin.registered();
      ++reads;
    }
  });
  const int before = h_->kubelet().registrations();
  constexpr int kReplacements = 5;
  for (int i = 0; i < kReplacements; ++i) ASSERT_TRUE(plugin.Replace().ok()) << i;
  stop = true;
  reader.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(h_->kubelet().registrations(), before + kReplacements);
  EXPECT_TRUE(plugin.registered());
  EXPECT_TRUE(fs::exists(plugin.socket_path()));
  EXPECT_TRUE(h_->kubelet().WaitForPlugin("example.com/gpu", absl::Seconds(10)));
  plugin.Stop();
  EXPECT_FALSE(plugin.registered());
  EXPECT_FALSE(fs::exists(plugin.socket_path()));
}

// The NUMA node of each device's GPU, by GPU UUID, as the fake kubelet received them in
// ListAndWatch; every ID of a GPU must carry the same.
std::map<std::string, std::vector<int64_t>> NumaByGpu(const std::vector<v1beta1::Device>& devices) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const v1beta1::Device& d : devices) {
    std::vector<int64_t> nodes;
    for (const v1beta1::NUMANode& n : d.topology().nodes()) nodes.push_back(n.id());
    EXPECT_EQ(d.has_topology(), !nodes.empty()) << d.id();
    const auto [it, first] = out.emplace(d.id().substr(0, d.id().find("::")), nodes);
    EXPECT_EQ(it->second, nodes) << d.id() << (first ? "" : " (another ID of its GPU differs)");
  }
  return out;
}

std::string ThreeT4s(const std::string& numa) {
  return R"(gpus:
  - {model: Tesla T4, memory_mib: 15360}
  - {model: Tesla T4, memory_mib: 15360}
  - {model: Tesla T4, memory_mib: 15360}
topology: {numa: )" +
         numa + R"(, matrix: ['X SYS SYS', 'SYS X SYS', 'SYS SYS X']}
)";
}

// The kubelet's Topology Manager learns each device's NUMA node from ListAndWatch (its device
// manager's topology hints read Device.Topology.Nodes; docs/topology.md): every ID of a GPU
// carries the GPU's node.
TEST(PluginServerTopologyTest, DevicesCarryTheirGpusNumaNode) {
  AgentHarness h(testing::TestDir(), ThreeT4s("[0, 1, 1]"), config::DefaultDeviceConfig());
  ASSERT_TRUE(h.StartCluster().ok());
  ASSERT_TRUE(h.StartAgent().ok());
  const std::vector<v1beta1::Device> devices = h.kubelet().Devices("nvidia.com/gpu");
  ASSERT_EQ(devices.size(), 30u);
  std::vector<std::vector<int64_t>> seen;
  for (const auto& [gpu, nodes] : NumaByGpu(devices)) seen.push_back(nodes);
  EXPECT_THAT(seen, ::testing::UnorderedElementsAre(std::vector<int64_t>{0},
                                                    std::vector<int64_t>{1},
                                                    std::vector<int64_t>{1}));
}

// One GPU of unknown node: none carries a node (the kubelet would leave that GPU out of every
// aligned allocation otherwise).
TEST(PluginServerTopologyTest, OneUnknownNumaNodeMeansNoneIsAdvertised) {
  AgentHarness h(testing::TestDir(), ThreeT4s("[0, 1, -1]"), config::DefaultDeviceConfig());
  ASSERT_TRUE(h.StartCluster().ok());
  ASSERT_TRUE(h.StartAgent().ok());
  const std::vector<v1beta1::Device> devices = h.kubelet().Devices("nvidia.com/gpu");
  ASSERT_EQ(devices.size(), 30u);
  for (const auto& [gpu, nodes] : NumaByGpu(devices)) EXPECT_TRUE(nodes.empty()) << gpu;
}

// Bad and partial answers from NVML never fail the node: the agent starts, serves every device,
// and publishes the topology with the unknown parts said so, which the scheduler decodes.
TEST(PluginServerTopologyTest, BadTopologyNeverFailsTheNode) {
  AgentHarness h(testing::TestDir(), R"(gpus:
  - {model: Tesla T4, memory_mib: 15360}
  - {model: Tesla T4, memory_mib: 15360}
  - {model: Tesla T4, memory_mib: 15360}
topology: {numa: [0, 0, 1], matrix: ['X NV2 SYS', 'NV1 X SYS', 'SYS SYS X']}
faults:
  - {call: CommonAncestor, error: FUNCTION_NOT_FOUND, count: 100000}
  - {call: CpuAffinity, error: NOT_SUPPORTED, count: 100000}
)",
                 config::DefaultDeviceConfig());
  ASSERT_TRUE(h.StartCluster().ok());
  ASSERT_TRUE(h.StartAgent().ok());
  EXPECT_EQ(h.kubelet().Devices("nvidia.com/gpu").size(), 30u);
  std::optional<std::string> text;
  ASSERT_TRUE(testing::Eventually([&] {
    return (text = h.NodeAnnotation(kInventoryAnnotation)).has_value();
  }));
  auto inv = DecodeInventory(*text);
  ASSERT_TRUE(inv.ok()) << inv.status();
  ASSERT_EQ(inv->gpus.size(), 3u);
  EXPECT_EQ(inv->topology.numa_node, (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(inv->topology.Link(0, 1).tier, topo::LinkTier::kUnknown);  // NV2 one way, NV1 back.
  // An old driver's FUNCTION_NOT_FOUND for the PCIe path (every read: the agent reads more than
  // once) leaves the other pairs unknown too.
  EXPECT_EQ(inv->topology.Link(0, 2).tier, topo::LinkTier::kUnknown);
  EXPECT_EQ(inv->topology.Link(1, 2).tier, topo::LinkTier::kUnknown);
  EXPECT_EQ(inv->topology.cpu_affinity, (std::vector<std::string>{"", "", ""}));
  EXPECT_THAT(*text, ::testing::HasSubstr("NVLink counts disagree"));
  EXPECT_THAT(*text, ::testing::HasSubstr("NVML_ERROR_FUNCTION_NOT_FOUND"));
}

TEST_F(PluginServerTest, WithoutTopologyDevicesCarryNone) {
  for (const auto& d : h_->kubelet().Devices("nvidia.com/gpu")) EXPECT_FALSE(d.has_topology());
}

}  // namespace
}  // namespace prism::deviceplugin
