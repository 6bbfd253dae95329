// End to end, the container's side of the CDI contract: the kubelet's PreStartContainer sync
// point (the first container create right after Allocate finds its spec) and the NVIDIA device
// nodes in the spec, read from a fake host /dev and /proc (fake_driver_tree.h).
#include <filesystem>
#include <future>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "config/device_config_yaml.h"
#include "deviceplugin/agent_harness.h"
#include "deviceplugin/fake_driver_tree.h"
#include "deviceplugin/node_agent.h"
#include "deviceplugin/test_util.h"
#include "k8s/objects.h"

namespace prism::deviceplugin {
namespace {

namespace fs = std::filesystem;
using testing::AgentHarness;
using testing::ContainerSpec;
using testing::FakeCapMinor;
using testing::PodSpec;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

constexpr char kResource[] = "nvidia.com/gpu";
// GPU 0 in MIG mode, GPU 1 shares out software slices.
constexpr char kMixedNode[] = R"(gpus:
  - model: A100-SXM4-40GB
    mig: {enabled: true, pending: true}
  - model: A100-SXM4-40GB
)";

sched::DeviceConfig PlacementConfig() {
  sched::DeviceConfig config = config::DefaultDeviceConfig();
  config.mig_strategy = sched::MigStrategy::kPlacement;
  return config;
}

PodSpec MigPod(const std::string& name) {
  return PodSpec{name, {ContainerSpec{"main", 1, 4000}}, {{"nvidia.com/vgpu-mode", "mig"}}};
}

PodSpec SlicePod(const std::string& name) {
  return PodSpec{name, {ContainerSpec{"main", 1, 4000, 30}}, {{"nvidia.com/vgpu-mode", "hami-core"}}};
}

class CdiE2eTest : public ::testing::Test {
 protected:
  void Start(const std::function<void(NodeAgentOptions&)>& tweak = {}) {
    h_ = std::make_unique<AgentHarness>(testing::TestDir(), kMixedNode, PlacementConfig());
    ASSERT_TRUE(h_->StartCluster().ok());
    absl::Status started = h_->StartAgent(tweak);
    ASSERT_TRUE(started.ok()) << started;
    ASSERT_TRUE(h_->InitScheduler().ok());
  }
  // The kubelet admits a pod the agent cannot see in the API yet (a slow watch, an API server
  // under load): its allocation stays unresolved until SubmitPod(name) creates it.
  void AdmitUnseen(const std::string& name) {
    kubelet::FakePod pod{"kubelet-" + name, testing::kNamespace, name, {{"main", false, false, 1}}};
    ASSERT_TRUE(h_->kubelet().AdmitPod(pod, kResource).ok());
  }
  // Submit + admit + one container create, no retries.
  kubelet::CreatedContainer RunOnce(const PodSpec& pod, std::string* uid_out) {
    absl::StatusOr<std::string> uid = h_->SubmitPod(pod);
    EXPECT_TRUE(uid.ok()) << uid.status();
    if (!uid.ok()) return {};
    *uid_out = *uid;
    EXPECT_TRUE(h_->Admit(*uid).ok());
    absl::StatusOr<kubelet::CreatedContainer> c = h_->kubelet().CreateContainer(*uid, "main");
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : kubelet::CreatedContainer{};
  }
  k8s::Json Device(const std::string& uid) {
    std::optional<std::string> text = h_->PodAnnotation(uid, kAllocationStatusAnnotation);
    k8s::Json status = text ? k8s::Json::parse(*text, nullptr, false) : k8s::Json();
    const k8s::Json* d = k8s::Find(status, {"containers", "main", "devices"});
    return d != nullptr && d->is_array() && !d->empty() ? (*d)[0] : k8s::Json();
  }
  std::unique_ptr<AgentHarness> h_;
};

std::map<std::string, kubelet::CdiDeviceNode> ByPath(const kubelet::CreatedContainer& c) {
  std::map<std::string, kubelet::CdiDeviceNode> out;
  for (const kubelet::CdiDeviceNode& n : c.device_nodes) out[n.path] = n;
  return out;
}

// Issue 11 item 5: Allocate names a CDI device whose spec the resolver writes only after the
// PodResources join. The kubelet creates the container right after admission; without the
// PreStartContainer sync point that create finds no spec and fails.
TEST_F(CdiE2eTest, TheFirstContainerCreateRightAfterAllocateFindsItsSpec) {
  Start();
  EXPECT_TRUE(h_->kubelet().PluginOptions(kResource).pre_start_required());
  AdmitUnseen("late");
  auto created = std::async(std::launch::async,
                            [&] { return h_->kubelet().CreateContainer("kubelet-late", "main"); });
  // The create is held in PreStartContainer while the allocation cannot be attributed.
  EXPECT_EQ(created.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  ASSERT_TRUE(h_->SubmitPod(MigPod("late")).ok());
  absl::StatusOr<kubelet::CreatedContainer> c = created.get();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->env["NVIDIA_VISIBLE_DEVICES"], StartsWith("MIG-"));
  EXPECT_EQ(c->env[kAllocationErrorEnv], "");
  EXPECT_EQ(h_->kubelet().prestart_calls(), 1);
  EXPECT_EQ(h_->kubelet().last_prestart_devices(),
            h_->kubelet().AllocatedDevices("kubelet-late", "main"));
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_prestart_requests_total",
                                {{"result", "ok"}}),
            1);
}

TEST_F(CdiE2eTest, WithoutPreStartTheSameCreateFindsNoSpec) {
  Start([](NodeAgentOptions& o) { o.prestart_timeout = absl::ZeroDuration(); });
  EXPECT_FALSE(h_->kubelet().PluginOptions(kResource).pre_start_required());
  AdmitUnseen("late");
  absl::StatusOr<kubelet::CreatedContainer> c = h_->kubelet().CreateContainer("kubelet-late", "main");
  // No spec yet (no CDI directory even): the runtime refuses the create.
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("CDI"));
  EXPECT_EQ(h_->kubelet().prestart_calls(), 0);
}

TEST_F(CdiE2eTest, ASpecThatNeverComesFailsTheStartWithTheReason) {
  Start([](NodeAgentOptions& o) { o.prestart_timeout = absl::Milliseconds(300); });
  AdmitUnseen("ghost");
  absl::StatusOr<kubelet::CreatedContainer> c =
      h_->kubelet().CreateContainer("kubelet-ghost", "main");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(c.status().message(), HasSubstr("device plugin PreStartContainer rpc failed"));
  EXPECT_THAT(c.status().message(), HasSubstr("is not written after 300ms"));
  EXPECT_THAT(c.status().message(), HasSubstr("not yet matched to a pod"));
}

// Issue 11 item 6: the spec gives the container its device nodes, as NVIDIA's CDI specs do.
TEST_F(CdiE2eTest, MigAndSliceContainersGetTheirDeviceNodes) {
  Start();
  std::string mig_uid;
  kubelet::CreatedContainer mig = RunOnce(MigPod("m"), &mig_uid);
  std::string slice_uid;
  kubelet::CreatedContainer slice = RunOnce(SlicePod("s"), &slice_uid);
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));

  const k8s::Json device = Device(mig_uid);
  ASSERT_TRUE(device.is_object()) << device;
  const int gi = device["gi"].get<int>();
  const int ci = device["ci"].get<int>();
  auto nodes = ByPath(mig);
  const std::string gi_cap = "/dev/nvidia-caps/nvidia-cap" + std::to_string(FakeCapMinor(0, gi));
  const std::string ci_cap =
      "/dev/nvidia-caps/nvidia-cap" + std::to_string(FakeCapMinor(0, gi, ci));
  EXPECT_EQ(nodes.size(), 6u);
  for (const char* path : {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                           "/dev/nvidia0"}) {
    ASSERT_EQ(nodes.count(path), 1u) << path;
    EXPECT_EQ(nodes[path].type, "c");
    EXPECT_EQ(nodes[path].permissions, "rwm");
  }
  EXPECT_EQ(nodes["/dev/nvidia0"].major, testing::kFakeNvidiaMajor);
  EXPECT_EQ(nodes["/dev/nvidia0"].minor, 0);
  EXPECT_EQ(nodes["/dev/nvidiactl"].minor, 255);
  EXPECT_EQ(nodes["/dev/nvidia-uvm"].major, testing::kFakeUvmMajor);
  ASSERT_EQ(nodes.count(gi_cap), 1u);
  ASSERT_EQ(nodes.count(ci_cap), 1u);
  EXPECT_EQ(nodes[gi_cap].major, testing::kFakeCapsMajor);
  EXPECT_EQ(nodes[ci_cap].minor, FakeCapMinor(0, gi, ci));
  EXPECT_EQ(nodes[ci_cap].file_mode, 0444u);
  // NVIDIA_VISIBLE_DEVICES stays, for the legacy hook.
  EXPECT_THAT(mig.env["NVIDIA_VISIBLE_DEVICES"], StartsWith("MIG-"));

  nodes = ByPath(slice);
  EXPECT_EQ(nodes.size(), 4u);
  EXPECT_EQ(nodes.count("/dev/nvidia1"), 1u);
  EXPECT_EQ(nodes["/dev/nvidia1"].minor, 1);
  EXPECT_EQ(nodes.count("/dev/nvidia0"), 0u);
}

TEST_F(CdiE2eTest, DeviceNodesCanBeLeftToTheNvidiaHook) {
  Start([](NodeAgentOptions& o) { o.device_nodes.enabled = false; });
  std::string uid;
  kubelet::CreatedContainer c = RunOnce(MigPod("m"), &uid);
  EXPECT_THAT(c.device_nodes, IsEmpty());
  EXPECT_THAT(c.env["NVIDIA_VISIBLE_DEVICES"], StartsWith("MIG-"));
}

TEST_F(CdiE2eTest, AHostWithoutTheDriverNodesFailsTheContainerVisibly) {
  Start([](NodeAgentOptions& o) {
    o.device_nodes.dev_root = "/nonexistent-prism-dev-root";
    o.device_nodes.proc_root = "/nonexistent-prism-proc-root";
  });
  std::string uid;
  kubelet::CreatedContainer c = RunOnce(SlicePod("s"), &uid);
  EXPECT_EQ(c.env["NVIDIA_VISIBLE_DEVICES"], "void");
  EXPECT_THAT(c.env[kAllocationErrorEnv], HasSubstr("/dev/nvidiactl"));
  EXPECT_THAT(c.env[kAllocationErrorEnv], HasSubstr("--device-nodes=false"));
  EXPECT_THAT(c.device_nodes, IsEmpty());
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  for (const AllocationRecord& r : h_->agent().Allocations()) {
    EXPECT_EQ(r.state, AllocationState::kFailed);
  }
}

}  // namespace
}  // namespace prism::deviceplugin
