// Slices of shared MIG instances through the node agent (issue 36, docs/mig-slices.md): the
// first slice's allocation creates the decided instance, later slices join it, each container
// gets the MIG device plus libprism-vgpu with its own memory limit, the instance goes with its
// last slice, whole instances and slices never mix, a limit above the instance is refused, and
// a restart keeps a shared instance and every slice on it.
#include "deviceplugin/node_agent_test_fixture.h"

namespace prism::deviceplugin::node_agent_test {
namespace {

namespace fs = std::filesystem;

constexpr char kH100Node[] = R"(gpus:
  - model: H100-SXM5-80GB
    mig: {enabled: true, pending: true}
)";

sched::DeviceConfig SharingConfig() {
  sched::DeviceConfig config = PlacementConfig();
  config.mig_sharing.push_back({{"H100-SXM5-80GB"}, {"1g.10gb"}});
  return config;
}

class MigSlicesAgentTest : public NodeAgentTest {
 protected:
  void StartH100() { Start(kH100Node, SharingConfig()); }

  // Runs `name` asking `mib`; its decision must be a slice of a shared instance.
  kubelet::CreatedContainer RunSlice(const std::string& name, int64_t mib, std::string* uid) {
    kubelet::CreatedContainer c = Run(MigPod(name, mib), uid);
    const sched::Decision* decision = h_->DecisionOf(*uid);
    EXPECT_NE(decision, nullptr);
    if (decision != nullptr) {
      EXPECT_TRUE(decision->containers[0].devices[0].shared) << name;
    }
    return c;
  }
  // Runs `name` asking `mib` with `decision` (one the engine would not make); its container's
  // env. `uid_out`: the pod's UID.
  std::map<std::string, std::string> RunForged(const std::string& name, int64_t mib,
                                               const sched::Decision& decision,
                                               std::string* uid_out = nullptr) {
    absl::StatusOr<std::string> uid = h_->SubmitPodWithDecision(MigPod(name, mib), decision);
    EXPECT_TRUE(uid.ok()) << uid.status();
    if (!uid.ok()) return {};
    if (uid_out != nullptr) *uid_out = *uid;
    EXPECT_TRUE(h_->Admit(*uid).ok());
    absl::StatusOr<kubelet::CreatedContainer> c = h_->CreateContainer(*uid, "main");
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? c->env : std::map<std::string, std::string>{};
  }
  int StartOf(const std::string& uid) {
    return h_->DecisionOf(uid)->containers[0].devices[0].start;
  }
  std::set<int> Starts() {
    std::set<int> out;
    // Held in a local: a range-for over a temporary's member would read freed memory.
    const nvml::sim::SimState state = testing::ReadState(h_->state_file());
    for (const auto& gi : state.gpus[0].gpu_instances) {
      out.insert(gi.start);
    }
    return out;
  }
};

// Issue 36, "Done when", on the node: three 2 GiB pods share one 1g.10gb, a fourth that does not
// fit gets a new instance, deleting all four returns the GPU to its prior layout.
TEST_F(MigSlicesAgentTest, ThreeSlicesShareOneInstanceAndTheLastReleaseDestroysIt) {
  StartH100();
  const std::set<int> before = Starts();
  std::vector<std::string> uids(3);
  std::vector<kubelet::CreatedContainer> containers;
  for (int i = 0; i < 3; ++i) {
    containers.push_back(RunSlice(StrCat("small-", i), 2048, &uids[i]));
  }
  const int start = StartOf(uids[0]);
  const std::string mig = MigUuidAt(h_->state_file(), 0, start);
  ASSERT_THAT(mig, StartsWith("MIG-"));
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), 1u);
  for (int i = 0; i < 3; ++i) {
    const kubelet::CreatedContainer& c = containers[i];
    EXPECT_EQ(StartOf(uids[i]), start);
    EXPECT_EQ(c.env.at("NVIDIA_VISIBLE_DEVICES"), mig) << i;
    EXPECT_EQ(c.env.at("CUDA_DEVICE_MEMORY_LIMIT_0"), "2048m") << i;
    // No SM limit inside an instance (docs/mig-slices.md).
    EXPECT_EQ(c.env.at("CUDA_DEVICE_SM_LIMIT_0"), "100") << i;
    EXPECT_EQ(c.env.at("CUDA_DEVICE_MEMORY_SHARED_CACHE"), kVgpuRegionFile);
    std::map<std::string, std::string> mounts;
    for (const auto& m : c.mounts) mounts[m.container_path] = m.host_path;
    EXPECT_TRUE(mounts.count(kVgpuContainerLibrary)) << i;
    // Each container its own region.
    EXPECT_EQ(mounts[kVgpuRegionFile],
              (fs::path(h_->vgpu_dir()) / "regions" / (uids[i] + "_main")).string());
    EXPECT_TRUE(mounts.count(StrCat(kDeviceListMountRoot, "/", mig))) << i;
  }
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(10)));
  const k8s::Json device = Status(*h_, uids[1])["containers"]["main"]["devices"][0];
  EXPECT_EQ(device["migUuid"], mig);
  EXPECT_EQ(device["shared"], true);
  EXPECT_EQ(device["memoryMiB"], 2048);

  // 3 x 2048 + 6000 MiB is more than a 1g.10gb has: a new shared instance.
  std::string fourth_uid;
  kubelet::CreatedContainer fourth = RunSlice("fourth", 6000, &fourth_uid);
  EXPECT_NE(StartOf(fourth_uid), start);
  EXPECT_EQ(fourth.env.at("CUDA_DEVICE_MEMORY_LIMIT_0"), "6000m");
  EXPECT_EQ(fourth.env.at("NVIDIA_VISIBLE_DEVICES"),
            MigUuidAt(h_->state_file(), 0, StartOf(fourth_uid)));
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), 2u);

  ASSERT_TRUE(h_->DeletePod(uids[0]).ok());
  ASSERT_TRUE(h_->DeletePod(uids[1]).ok());
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(10)));
  EXPECT_EQ(MigUuidAt(h_->state_file(), 0, start), mig);  // small-2 still holds it.
  ASSERT_TRUE(h_->DeletePod(uids[2]).ok());
  ASSERT_TRUE(h_->DeletePod(fourth_uid).ok());
  ASSERT_TRUE(Eventually([&] { return Starts() == before; }));
  EXPECT_FALSE(fs::exists(fs::path(h_->vgpu_dir()) / "regions" / (uids[2] + "_main")));
}

// A decision that puts a slice on an instance a whole-instance pod holds (or a whole instance on
// a shared one) is refused clearly, and the holder keeps its instance.
TEST_F(MigSlicesAgentTest, WholeInstancesAndSlicesNeverMixOnTheNode) {
  // A conflict is retried while the holder may be terminating: not for long here.
  Start(kH100Node, SharingConfig(),
        [](NodeAgentOptions& o) { o.realize_retry_timeout = absl::Milliseconds(300); });
  std::string slice_uid;
  RunSlice("slice", 2048, &slice_uid);
  const int shared_start = StartOf(slice_uid);
  std::string whole_uid;
  Run(PodSpec{"whole", {ContainerSpec{"main", 1, 9984}},
              {{"nvidia.com/vgpu-mode", "mig"}, {"prism.io/mig-sharing", "off"}}},
      &whole_uid);
  const sched::DeviceAssignment whole = h_->DecisionOf(whole_uid)->containers[0].devices[0];
  ASSERT_FALSE(whole.shared);

  auto forge = [&](const sched::DeviceAssignment& like, bool shared, int64_t mib) {
    sched::Decision forged = *h_->DecisionOf(slice_uid);
    forged.mig.clear();
    sched::DeviceAssignment& d = forged.containers[0].devices[0];
    d = like;
    d.shared = shared;
    d.memory_mib = mib;
    if (shared) d.cores_permille = 0;  // As the pod asks (no gpucores).
    return forged;
  };
  // A slice on the whole pod's instance.
  auto refused = RunForged("intruder", 2048, forge(whole, true, 2048));
  EXPECT_THAT(refused[kAllocationErrorEnv], HasSubstr("held whole by pod"));
  EXPECT_EQ(refused["NVIDIA_VISIBLE_DEVICES"], "void");

  // A whole instance on the shared one.
  sched::DeviceAssignment on_shared = whole;
  on_shared.start = shared_start;
  auto refused_whole = RunForged("grabber", 9984, forge(on_shared, false, 9984));
  EXPECT_THAT(refused_whole[kAllocationErrorEnv],
              HasSubstr("a whole-instance container never takes a shared instance"));
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), 2u);
}

// A slice whose limit is above its instance's memory is refused, naming the container; nothing
// is created for it.
TEST_F(MigSlicesAgentTest, ALimitAboveTheInstanceIsRefusedAndLeaksNothing) {
  StartH100();
  std::string slice_uid;
  RunSlice("slice", 2048, &slice_uid);
  sched::Decision forged = *h_->DecisionOf(slice_uid);
  sched::DeviceAssignment& d = forged.containers[0].devices[0];
  // A new shared 1g.10gb elsewhere, with a limit larger than it.
  d.start = d.start == 0 ? 1 : 0;
  d.memory_mib = 20000;
  std::string big;
  auto refused = RunForged("big", 20000, forged, &big);
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(10)));
  const std::string error = refused[kAllocationErrorEnv];
  EXPECT_THAT(error, HasSubstr("20000")) << error;
  EXPECT_EQ(refused["NVIDIA_VISIBLE_DEVICES"], "void");
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), 1u);
  const k8s::Json status = Status(*h_, big);
  EXPECT_THAT(status["containers"]["main"].value("error", ""), HasSubstr("main"));
}

// Decisions pods carry are each within their pod's request, but together they may not fit the
// instance: the slice that would overcommit it is refused.
TEST_F(MigSlicesAgentTest, NoDecisionOvercommitsASharedInstance) {
  Start(kH100Node, SharingConfig(),
        [](NodeAgentOptions& o) { o.realize_retry_timeout = absl::Milliseconds(300); });
  std::vector<std::string> uids(3);
  for (int i = 0; i < 3; ++i) RunSlice(StrCat("small-", i), 2048, &uids[i]);
  // 3 x 2048 + 6000 MiB on the 1g.10gb's 9984.
  sched::Decision forged = *h_->DecisionOf(uids[0]);
  forged.mig.clear();
  forged.containers[0].devices[0].memory_mib = 6000;
  auto refused = RunForged("big", 6000, forged);
  EXPECT_THAT(refused[kAllocationErrorEnv], HasSubstr("would overcommit it"));
  EXPECT_EQ(refused["NVIDIA_VISIBLE_DEVICES"], "void");
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), 1u);
}

// The agent restarts: the shared instance and each slice on it are adopted, and it still goes
// only with the last slice.
TEST_F(MigSlicesAgentTest, ARestartKeepsTheSharedInstanceAndEverySlice) {
  StartH100();
  std::vector<std::string> uids(2);
  kubelet::CreatedContainer first = RunSlice("a", 2048, &uids[0]);
  RunSlice("b", 3000, &uids[1]);
  const int start = StartOf(uids[0]);
  nvml::SimNvml direct(h_->state_file());
  auto gis = direct.ListGpuInstances(0);
  ASSERT_EQ(gis->size(), 1u);
  testing::AddProcess(h_->state_file(), 0, 4242, (*gis)[0].id, 0);
  testing::AddProcess(h_->state_file(), 0, 4243, (*gis)[0].id, 0);
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  h_->StopAgent();
  ASSERT_TRUE(h_->StartAgent().ok());
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  EXPECT_EQ(h_->agent().FailClosedReason(), "");
  EXPECT_TRUE(h_->agent().GpuFaults().empty());
  for (const std::string& uid : uids) {
    auto again = h_->CreateContainer(uid, "main");
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->env["NVIDIA_VISIBLE_DEVICES"], first.env["NVIDIA_VISIBLE_DEVICES"]);
  }
  // A third slice joins it after the restart.
  std::string third;
  RunSlice("c", 2048, &third);
  EXPECT_EQ(StartOf(third), start);
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), 1u);
  testing::ClearProcesses(h_->state_file());
  ASSERT_TRUE(h_->DeletePod(uids[0]).ok());
  ASSERT_TRUE(h_->DeletePod(uids[1]).ok());
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  EXPECT_FALSE(MigUuidAt(h_->state_file(), 0, start).empty());
  ASSERT_TRUE(h_->DeletePod(third).ok());
  ASSERT_TRUE(Eventually([&] { return MigUuidAt(h_->state_file(), 0, start).empty(); }));
}

}  // namespace
}  // namespace prism::deviceplugin::node_agent_test
