// src/deviceplugin/node_agent_test_fixture.h: the node agent's end-to-end fixture (tests only):
// pods with decisions written by the real placement engine on a node with simulated GPUs,
// admitted by a fake kubelet over real gRPC, the real node agent in between and a fake API server
// speaking HTTP. Shared by node_agent_test.cc and node_agent_restart_test.cc.
#pragma once

#include "deviceplugin/node_agent.h"

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "base/strings.h"
#include "config/allocation_status.h"
#include "config/annotations.h"
#include "config/device_config_yaml.h"
#include "deviceplugin/agent_harness.h"
#include "deviceplugin/cdi_spec.h"
#include "deviceplugin/inventory.h"
#include "deviceplugin/test_util.h"
#include "k8s/objects.h"
#include "kubelet/kubelet_client.h"
#include "nvml/sim/sim_state_file.h"

namespace prism::deviceplugin::node_agent_test {

using testing::AgentHarness;
using testing::ContainerSpec;
using testing::Eventually;
using ::testing::HasSubstr;
using testing::PodSpec;
using ::testing::StartsWith;

// GPU 0 in MIG mode, GPU 1 (MIG off) shares out software slices.
inline constexpr char kMixedNode[] = R"(gpus:
  - model: A100-SXM4-40GB
    mig: {enabled: true, pending: true}
  - model: A100-SXM4-40GB
)";

inline sched::DeviceConfig PlacementConfig() {
  sched::DeviceConfig config = config::DefaultDeviceConfig();
  config.mig_strategy = sched::MigStrategy::kPlacement;
  return config;
}

inline PodSpec MigPod(const std::string& name, int64_t memory_mib = 4000) {
  return PodSpec{name, {ContainerSpec{"main", 1, memory_mib}}, {{"nvidia.com/vgpu-mode", "mig"}}};
}

inline PodSpec SlicePod(const std::string& name, int64_t memory_mib = 4000, int cores = 30) {
  return PodSpec{
      name, {ContainerSpec{"main", 1, memory_mib, cores}}, {{"nvidia.com/vgpu-mode", "hami-core"}}};
}

// The MIG device UUID of the instance at `start` on simulated GPU `gpu` ("" if none).
inline std::string MigUuidAt(const std::string& state_file, int gpu, int start) {
  const nvml::sim::SimState state = testing::ReadState(state_file);
  for (const auto& gi : state.gpus[gpu].gpu_instances) {
    if (gi.start == start && !gi.compute_instances.empty()) return gi.compute_instances[0].uuid;
  }
  return "";
}

inline k8s::Json Status(AgentHarness& h, const std::string& uid) {
  std::optional<std::string> text = h.PodAnnotation(uid, kAllocationStatusAnnotation);
  return text ? k8s::Json::parse(*text, nullptr, false) : k8s::Json();
}

class NodeAgentTest : public ::testing::Test {
 protected:
  void Start(const std::string& gpus = kMixedNode, sched::DeviceConfig config = PlacementConfig(),
             const std::function<void(NodeAgentOptions&)>& tweak = {}) {
    h_ = std::make_unique<AgentHarness>(testing::TestDir(), gpus, config);
    {
      absl::Status cluster = h_->StartCluster();
      ASSERT_TRUE(cluster.ok()) << cluster;
    }
    absl::Status started = h_->StartAgent(tweak);
    ASSERT_TRUE(started.ok()) << started;
    ASSERT_TRUE(h_->InitScheduler().ok());
  }
  // Submit + admit + create: the container as the runtime would start it.
  kubelet::CreatedContainer Run(const PodSpec& pod, std::string* uid_out = nullptr) {
    absl::StatusOr<std::string> uid = h_->SubmitPod(pod);
    EXPECT_TRUE(uid.ok()) << uid.status();
    if (!uid.ok()) return {};
    if (uid_out) *uid_out = *uid;
    absl::Status admitted = h_->Admit(*uid);
    EXPECT_TRUE(admitted.ok()) << admitted;
    absl::StatusOr<kubelet::CreatedContainer> c =
        h_->CreateContainer(*uid, pod.containers.back().name);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : kubelet::CreatedContainer{};
  }
  std::unique_ptr<AgentHarness> h_;
};

}  // namespace prism::deviceplugin::node_agent_test
