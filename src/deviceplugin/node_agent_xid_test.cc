// The node agent's XID health: critical NVML XID events (injected into the simulated GPUs'
// state file) turn that GPU's device IDs Unhealthy in ListAndWatch; application XIDs do not.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "config/device_config_yaml.h"
#include "deviceplugin/agent_harness.h"
#include "deviceplugin/inventory.h"
#include "deviceplugin/node_agent.h"
#include "deviceplugin/test_util.h"
#include "nvml/sim/sim_state_file.h"

namespace prism::deviceplugin {
namespace {

using testing::AgentHarness;
using testing::Eventually;

// GPU 0 in MIG mode, GPU 1 without.
constexpr char kNode[] = R"(gpus:
  - model: A100-SXM4-40GB
    mig: {enabled: true, pending: true}
  - model: A100-SXM4-40GB
)";

class NodeAgentXidTest : public ::testing::Test {
 protected:
  void Start(const std::string& gpus, const std::function<void(NodeAgentOptions&)>& tweak) {
    sched::DeviceConfig config = config::DefaultDeviceConfig();
    config.mig_strategy = sched::MigStrategy::kPlacement;
    h_ = std::make_unique<AgentHarness>(testing::TestDir(), gpus, config);
    ASSERT_TRUE(h_->StartCluster().ok());
    absl::Status started = h_->StartAgent(tweak);
    ASSERT_TRUE(started.ok()) << started;
    ASSERT_TRUE(h_->kubelet().WaitForHealthyDevices("nvidia.com/gpu", 20, absl::Seconds(10)));
  }

  void InjectXid(int gpu, uint64_t xid, int gpu_instance = -1, int compute_instance = -1) {
    ASSERT_TRUE(nvml::sim::SimStateFile(h_->state_file())
                    .Transact([&](nvml::sim::SimState& s, bool* changed) {
                      s.xid_events.push_back(
                          nvml::sim::SimXidEvent{gpu, xid, gpu_instance, compute_instance});
                      *changed = true;
                      return absl::OkStatus();
                    })
                    .ok());
  }

  // Health of the devices ListAndWatch last sent, by GPU UUID prefix of the device ID.
  std::map<std::string, std::set<std::string>> HealthByGpu() {
    std::map<std::string, std::set<std::string>> out;
    for (const v1beta1::Device& d : h_->kubelet().Devices("nvidia.com/gpu")) {
      out[d.id().substr(0, d.id().find("::"))].insert(d.health());
    }
    return out;
  }

  std::string GpuUuid(int gpu) { return testing::ReadState(h_->state_file()).gpus[gpu].uuid; }

  std::unique_ptr<AgentHarness> h_;
};

TEST_F(NodeAgentXidTest, ACriticalXidMakesOnlyThatGpuUnhealthyAndApplicationXidsAreIgnored) {
  // A long probe interval: only the XID path can change health within the test.
  Start(kNode, [](NodeAgentOptions& o) { o.health_interval = absl::Hours(1); });
  // Events are handled in order: once XID 79 on GPU 1 shows, XID 13 (with its MIG instance) on
  // GPU 0 has been seen and ignored.
  InjectXid(0, 13, 1, 0);
  InjectXid(1, 79);
  ASSERT_TRUE(h_->kubelet().WaitForHealthyDevices("nvidia.com/gpu", 10, absl::Seconds(10)));
  auto health = HealthByGpu();
  EXPECT_EQ(health[GpuUuid(0)], std::set<std::string>{"Healthy"});
  EXPECT_EQ(health[GpuUuid(1)], std::set<std::string>{"Unhealthy"});
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_xid_events_total", {{"xid", "13"}}), 1);
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_xid_events_total", {{"xid", "79"}}), 1);
  EXPECT_TRUE(Eventually([&] {
    auto inv = DecodeInventory(h_->NodeAnnotation(kInventoryAnnotation).value_or("{}"));
    return inv.ok() && inv->gpus.size() == 2 && inv->gpus[0].healthy && !inv->gpus[1].healthy;
  }));
}

TEST_F(NodeAgentXidTest, AnXidGpuStaysUnhealthyWhenTheProbeSucceeds) {
  Start(kNode, [](NodeAgentOptions& o) { o.health_interval = absl::Milliseconds(10); });
  InjectXid(0, 94, 1, 0);  // On a MIG instance: the whole GPU's devices go.
  ASSERT_TRUE(h_->kubelet().WaitForHealthyDevices("nvidia.com/gpu", 10, absl::Seconds(10)));
  EXPECT_EQ(HealthByGpu()[GpuUuid(0)], std::set<std::string>{"Unhealthy"});
  // Many probe rounds later it is still unhealthy.
  const absl::Time until = absl::Now() + absl::Milliseconds(200);
  while (absl::Now() < until) {
    ASSERT_EQ(HealthByGpu()[GpuUuid(0)], std::set<std::string>{"Unhealthy"});
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_gpus", {{"health", "unhealthy"}}), 1);
}

TEST_F(NodeAgentXidTest, AdminListedXidsAreIgnoredAndXidHealthCanBeTurnedOff) {
  Start(kNode, [](NodeAgentOptions& o) {
    o.health_interval = absl::Hours(1);
    o.ignored_xids.insert(48);
  });
  InjectXid(0, 48);
  InjectXid(1, 79);
  ASSERT_TRUE(h_->kubelet().WaitForHealthyDevices("nvidia.com/gpu", 10, absl::Seconds(10)));
  EXPECT_EQ(HealthByGpu()[GpuUuid(0)], std::set<std::string>{"Healthy"});

  h_ = nullptr;
  Start(kNode, [](NodeAgentOptions& o) {
    o.health_interval = absl::Hours(1);
    o.xid_health = false;
  });
  InjectXid(1, 79);
  // Without a watcher nobody takes the event: it stays queued and the GPU healthy.
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(testing::ReadState(h_->state_file()).xid_events.size(), 1u);
  EXPECT_EQ(HealthByGpu()[GpuUuid(1)], std::set<std::string>{"Healthy"});
}

}  // namespace
}  // namespace prism::deviceplugin
