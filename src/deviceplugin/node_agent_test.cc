// End to end: pods with decisions (written by the real placement engine and encoder) on a node
// with simulated GPUs, admitted by a fake kubelet over real gRPC, the real node agent in between
// and a fake API server speaking HTTP (node_agent_test_fixture.h). Restarts and failing closed:
// node_agent_restart_test.cc.
#include "deviceplugin/node_agent_test_fixture.h"

namespace prism::deviceplugin::node_agent_test {
namespace {

namespace fs = std::filesystem;

TEST_F(NodeAgentTest, MigPodGetsExactlyItsDecidedInstance) {
  Start();
  std::string uid;
  kubelet::CreatedContainer c = Run(MigPod("train"), &uid);
  const sched::Decision* decision = h_->DecisionOf(uid);
  ASSERT_NE(decision, nullptr);
  const sched::DeviceAssignment& d = decision->containers[0].devices[0];
  ASSERT_TRUE(d.IsMig());
  EXPECT_EQ(d.gpu_index, 0);
  const std::string mig = MigUuidAt(h_->state_file(), 0, d.start);
  ASSERT_THAT(mig, StartsWith("MIG-"));
  EXPECT_EQ(c.env["NVIDIA_VISIBLE_DEVICES"], mig);
  EXPECT_THAT(c.env[kAllocationIdEnv], ::testing::Not(::testing::IsEmpty()));
  EXPECT_EQ(c.env.count("CUDA_DEVICE_MEMORY_LIMIT_0"), 0u);
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), 1u);
  // The profile is the decided one.
  const nvml::sim::SimState state = testing::ReadState(h_->state_file());
  const auto gi = state.gpus[0].gpu_instances[0];
  const mig::GpuModel* model = mig::FindModel("A100-SXM4-40GB");
  EXPECT_EQ(model->profiles[model->FindProfileById(gi.profile_id)].Name(), d.profile_name);

  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(10)));
  k8s::Json status = Status(*h_, uid);
  ASSERT_TRUE(status.is_object()) << status;
  EXPECT_EQ(status["containers"]["main"]["devices"][0]["migUuid"], mig);
  EXPECT_EQ(status["containers"]["main"]["devices"][0]["profile"], d.profile_name);
}

TEST_F(NodeAgentTest, SlicePodGetsLimitsLibraryAndRegionFile) {
  Start();
  std::string uid;
  kubelet::CreatedContainer c = Run(SlicePod("infer", 6000, 25), &uid);
  const sched::Decision* decision = h_->DecisionOf(uid);
  ASSERT_NE(decision, nullptr);
  EXPECT_EQ(decision->containers[0].devices[0].gpu_index, 1);
  EXPECT_EQ(c.env["NVIDIA_VISIBLE_DEVICES"], decision->containers[0].devices[0].uuid);
  EXPECT_EQ(c.env["CUDA_DEVICE_MEMORY_LIMIT_0"], "6000m");
  EXPECT_EQ(c.env["CUDA_DEVICE_SM_LIMIT"], "25");
  EXPECT_EQ(c.env["CUDA_DEVICE_MEMORY_SHARED_CACHE"], kVgpuRegionFile);
  std::set<std::string> targets;
  for (const auto& m : c.mounts) targets.insert(m.container_path);
  EXPECT_TRUE(targets.count(kVgpuContainerLibrary));
  EXPECT_TRUE(targets.count(kLdSoPreload));
  // The region is one pre-sized file in the agent's private directory, mounted alone.
  const fs::path region = fs::path(h_->vgpu_dir()) / "regions" / (uid + "_main");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(region)));
  EXPECT_EQ(fs::file_size(region), RegionFileBytes());
  EXPECT_EQ(fs::status(region.parent_path()).permissions(), fs::perms::owner_all);
  EXPECT_FALSE(fs::exists(fs::path(h_->vgpu_dir()) / "containers"));
  bool mounted = false;
  for (const auto& m : c.mounts) {
    if (m.container_path == kVgpuRegionFile) mounted = m.host_path == region.string();
  }
  EXPECT_TRUE(mounted);
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), 0u);
  // The pod ends: its region goes.
  ASSERT_TRUE(h_->DeletePod(uid).ok());
  EXPECT_TRUE(testing::Eventually([&] { return !fs::exists(fs::symlink_status(region)); }));
}

TEST_F(NodeAgentTest, IdenticalPodsAdmittedOutOfOrderEachGetTheirOwnDecision) {
  Start();
  std::vector<std::string> uids;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<std::string> uid = h_->SubmitPod(MigPod("same-" + std::to_string(i)));
    ASSERT_TRUE(uid.ok()) << uid.status();
    uids.push_back(*uid);
  }
  // The kubelet admits them in reverse order of binding, and starts them in yet another order.
  for (auto it = uids.rbegin(); it != uids.rend(); ++it) ASSERT_TRUE(h_->Admit(*it).ok());
  std::set<std::string> seen;
  for (int i : {2, 0, 4, 1, 3}) {
    absl::StatusOr<kubelet::CreatedContainer> c = h_->CreateContainer(uids[i], "main");
    ASSERT_TRUE(c.ok()) << c.status();
    const sched::DeviceAssignment& d = h_->DecisionOf(uids[i])->containers[0].devices[0];
    EXPECT_EQ(c->env["NVIDIA_VISIBLE_DEVICES"], MigUuidAt(h_->state_file(), 0, d.start))
        << "pod " << i << " decided " << d.profile_name << "@" << d.start;
    seen.insert(c->env["NVIDIA_VISIBLE_DEVICES"]);
  }
  EXPECT_EQ(seen.size(), 5u);
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), 5u);
}

TEST_F(NodeAgentTest, InstancesArePreparedBeforeTheKubeletAllocates) {
  Start();
  absl::StatusOr<std::string> uid = h_->SubmitPod(MigPod("early"));
  ASSERT_TRUE(uid.ok());
  const int start = h_->DecisionOf(*uid)->containers[0].devices[0].start;
  ASSERT_TRUE(Eventually([&] { return !MigUuidAt(h_->state_file(), 0, start).empty(); }));
  const std::string prepared = MigUuidAt(h_->state_file(), 0, start);
  ASSERT_TRUE(h_->Admit(*uid).ok());
  auto c = h_->CreateContainer(*uid, "main");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->env["NVIDIA_VISIBLE_DEVICES"], prepared);
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  EXPECT_EQ(h_->agent().mig_counters().gpu_instances_created, 1);
}

TEST_F(NodeAgentTest, EndedPodsGiveBackTheirInstances) {
  Start();
  std::string a;
  Run(MigPod("a"), &a);
  std::string b;
  Run(MigPod("b"), &b);
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), 2u);
  ASSERT_TRUE(h_->DeletePod(a).ok());
  ASSERT_TRUE(Eventually([&] { return testing::InstanceCount(h_->state_file(), 0) == 1; }));
  // A pod that completes is released too, its CDI specs and ledger entries with it.
  ASSERT_TRUE(h_->SetPodPhase(b, "Succeeded").ok());
  ASSERT_TRUE(Eventually([&] { return testing::InstanceCount(h_->state_file(), 0) == 0; }));
  ASSERT_TRUE(Eventually([&] { return ListCdiSpecIds(h_->cdi_dir()).empty(); }));
  EXPECT_TRUE(h_->agent().Allocations().empty());
}

TEST_F(NodeAgentTest, AnIdlePoolLetsTheNextPodReuseAnInstance) {
  Start(kMixedNode, PlacementConfig(), [](NodeAgentOptions& o) { o.mig.max_idle_per_gpu = 1; });
  std::string a;
  Run(MigPod("a"), &a);
  ASSERT_TRUE(h_->DeletePod(a).ok());
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), 1u);  // Kept idle.
  // The scheduler learns of the idle instance from the inventory and places the next pod on it.
  ASSERT_TRUE(Eventually([&] {
    auto inv = DecodeInventory(h_->NodeAnnotation(kInventoryAnnotation).value_or("{}"));
    return inv.ok() && inv->gpus[0].instances.size() == 1;
  }));
  ASSERT_TRUE(h_->InitScheduler().ok());
  Run(MigPod("b"));
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  EXPECT_EQ(h_->agent().mig_counters().gpu_instances_created, 1);
  EXPECT_EQ(h_->agent().mig_counters().gpu_instances_destroyed, 0);
}

TEST_F(NodeAgentTest, APodWithoutADecisionFailsWithAClearReason) {
  Start(kMixedNode, PlacementConfig(), [](NodeAgentOptions& o) { o.place_undecided = false; });
  absl::StatusOr<std::string> uid = h_->SubmitPod(MigPod("rogue"), /*decide=*/false);
  ASSERT_TRUE(uid.ok());
  ASSERT_TRUE(h_->Admit(*uid).ok());
  auto c = h_->CreateContainer(*uid, "main");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->env["NVIDIA_VISIBLE_DEVICES"], "void");
  EXPECT_THAT(c->env[kAllocationErrorEnv], HasSubstr("carries no Prism scheduling decision"));
  ASSERT_TRUE(Eventually([&] { return !h_->Events("PrismAllocationFailed").empty(); }));
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  EXPECT_THAT(Status(*h_, *uid)["containers"]["main"]["error"].get<std::string>(),
              HasSubstr("no Prism scheduling decision"));
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_allocation_failures_total",
                                {{"reason", "no_decision"}}),
            1);
}

// Issue 13: malformed input is the pod's problem, not the node's. Next to well-formed pods, one
// whose prism.io/decision has a field of the wrong type gets no GPU and an error naming that
// field; pods whose prism.io/allocation-status is garbage (one with a path for an allocation ID)
// are read, counted and skipped when the agent rebuilds its ledger; and the agent keeps serving.
TEST_F(NodeAgentTest, BadPodsBesideGoodOnesFailAloneWithTheFieldNamed) {
  Start();
  std::string good;
  kubelet::CreatedContainer c = Run(SlicePod("good", 4000, 30), &good);
  EXPECT_EQ(c.env[kAllocationErrorEnv], "");
  EXPECT_EQ(c.env["CUDA_DEVICE_MEMORY_LIMIT_0"], "4000m");

  // The good pod's own decision, with the device's mode a number.
  k8s::Json decision = k8s::Json::parse(h_->PodAnnotation(good, "prism.io/decision").value());
  decision["containers"][0]["devices"][0]["mode"] = 1;
  const std::vector<std::pair<std::string, std::string>> bad_decisions = {
      {decision.dump(),
       "prism.io/decision: containers[0].devices[0].mode: expected a string, got number"},
      {R"({"containers":[{"name":"main","devices":[{"mode":1}]}]})",
       "prism.io/decision: node: missing"},  // The issue's own example.
  };
  for (size_t i = 0; i < bad_decisions.size(); ++i) {
    SCOPED_TRACE(bad_decisions[i].first);
    PodSpec bad = SlicePod(StrCat("bad-decision-", i));
    bad.annotations["prism.io/decision"] = bad_decisions[i].first;
    absl::StatusOr<std::string> uid = h_->SubmitPod(bad, /*decide=*/false);
    ASSERT_TRUE(uid.ok()) << uid.status();
    ASSERT_TRUE(h_->Admit(*uid).ok());
    absl::StatusOr<kubelet::CreatedContainer> created = h_->CreateContainer(*uid, "main");
    ASSERT_TRUE(created.ok()) << created.status();
    EXPECT_EQ(created->env["NVIDIA_VISIBLE_DEVICES"], "void");
    EXPECT_THAT(created->env[kAllocationErrorEnv], HasSubstr(bad_decisions[i].second));
    ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
    EXPECT_THAT(Status(*h_, *uid)["containers"]["main"]["error"].get<std::string>(),
                HasSubstr(bad_decisions[i].second));
  }
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_allocation_failures_total",
                                {{"reason", "invalid_decision"}}),
            2);

  // Two pods with a good decision and a garbage status, present when the agent restarts and
  // rebuilds its ledger from the pods' statuses.
  h_->StopAgent();
  std::vector<std::string> garbage;
  for (const std::string& status :
       {std::string("{not json"),
        StrCat(R"({"node":")", testing::kNode,
               R"(","containers":{"main":{"allocations":["../../../escape-1"],)"
               R"("deviceIds":["GPU-x::0"]}}})")}) {
    PodSpec pod = SlicePod(StrCat("garbage-status-", garbage.size()), 2000, 10);
    pod.annotations[kAllocationStatusAnnotation] = status;
    absl::StatusOr<std::string> uid = h_->SubmitPod(pod);
    ASSERT_TRUE(uid.ok()) << uid.status();
    garbage.push_back(*uid);
  }
  ASSERT_TRUE(h_->StartAgent().ok());
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  EXPECT_EQ(h_->agent().FailClosedReason(), "");
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_annotation_decode_failures_total",
                                {{"annotation", kAllocationStatusAnnotation}}),
            2);
  for (const AllocationRecord& r : h_->agent().Allocations()) {
    EXPECT_THAT(r.id, ::testing::Not(HasSubstr("escape")));
  }
  EXPECT_FALSE(fs::exists(h_->dir().parent_path() / "escape-1.json"));
  // The good pod kept its devices; the garbage-status pods get theirs (their decisions are
  // good), and the agent's own status replaces the garbage.
  absl::StatusOr<kubelet::CreatedContainer> again = h_->CreateContainer(good, "main");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->env["NVIDIA_VISIBLE_DEVICES"], c.env["NVIDIA_VISIBLE_DEVICES"]);
  for (const std::string& uid : garbage) {
    ASSERT_TRUE(h_->Admit(uid).ok());
    absl::StatusOr<kubelet::CreatedContainer> created = h_->CreateContainer(uid, "main");
    ASSERT_TRUE(created.ok()) << created.status();
    EXPECT_EQ(created->env[kAllocationErrorEnv], "");
    EXPECT_EQ(created->env["CUDA_DEVICE_MEMORY_LIMIT_0"], "2000m");
  }
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  for (const std::string& uid : garbage) {
    absl::StatusOr<config::AllocationStatus> status = config::ParseAllocationStatus(
        h_->PodAnnotation(uid, kAllocationStatusAnnotation).value_or(""));
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_EQ(status->containers.at("main").devices.size(), 1u);
  }
  Run(SlicePod("after", 1000, 10));
}

// Issue 39: a container name from an annotation is joined into no path unless it is the API
// server's kind of name, and the agent's removal never follows a link a container planted.
TEST_F(NodeAgentTest, AHostileContainerNameNeverReachesTheFileSystem) {
  Start();
  const fs::path vgpu = h_->vgpu_dir();
  // Stands for a host directory (/var/run/cdi); it must survive everything below.
  const fs::path victim = h_->dir() / "victim";
  fs::create_directories(victim / "var" / "run" / "cdi");
  testing::WriteFile(victim / "var" / "run" / "cdi" / "keep", "host");
  auto intact = [&] { return fs::exists(victim / "var" / "run" / "cdi" / "keep"); };

  // 1. A pod whose status annotation names the container "x/l/var/run/cdi", with the link an
  //    earlier, writable run directory could have held, present when the agent rebuilds its
  //    ledger from the pods' annotations.
  h_->StopAgent();
  PodSpec pod = SlicePod("hostile", 2000, 10);
  pod.annotations[kAllocationStatusAnnotation] =
      StrCat(R"({"node":")", testing::kNode,
             R"(","containers":{"x/l/var/run/cdi":{"allocations":["zz-1"],)"
             R"("deviceIds":["GPU-x::0"]}}})");
  absl::StatusOr<std::string> uid = h_->SubmitPod(pod);
  ASSERT_TRUE(uid.ok()) << uid.status();
  for (const char* dir : {"containers", "regions"}) {
    fs::create_directories(vgpu / dir / (*uid + "_x"));
    fs::create_directory_symlink(victim, vgpu / dir / (*uid + "_x") / "l");
  }
  ASSERT_TRUE(h_->StartAgent().ok());
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_annotation_decode_failures_total",
                                {{"annotation", kAllocationStatusAnnotation}}),
            1);
  for (const AllocationRecord& r : h_->agent().Allocations()) {
    EXPECT_NE(r.container, "x/l/var/run/cdi");
  }
  ASSERT_TRUE(h_->DeletePod(*uid).ok());
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  EXPECT_TRUE(intact());

  // 2. A pod of an earlier version whose writable run directory holds links to the host: the
  //    agent removes the directory and the links, never what they point to.
  std::string legacy;
  Run(SlicePod("legacy", 2000, 10), &legacy);
  const fs::path run_dir = vgpu / "containers" / (legacy + "_main");
  fs::create_directories(run_dir / "deep");
  fs::create_directory_symlink(victim, run_dir / "l");
  fs::create_directory_symlink(victim / "var", run_dir / "deep" / "l2");
  fs::create_symlink(victim / "var" / "run" / "cdi" / "keep", run_dir / "f");
  ASSERT_TRUE(h_->DeletePod(legacy).ok());
  EXPECT_TRUE(testing::Eventually([&] { return !fs::exists(fs::symlink_status(run_dir)); }));
  EXPECT_FALSE(fs::exists(fs::symlink_status(vgpu / "regions" / (legacy + "_main"))));
  EXPECT_TRUE(intact());
}

TEST_F(NodeAgentTest, PodsOfAnotherSchedulerArePlacedByTheAgent) {
  Start();
  // Two pods bound by the default scheduler: no Prism decision.
  std::vector<std::string> uids;
  for (const char* name : {"default-a", "default-b"}) {
    absl::StatusOr<std::string> uid = h_->SubmitPod(MigPod(name, 9000), /*decide=*/false);
    ASSERT_TRUE(uid.ok());
    ASSERT_TRUE(h_->Admit(*uid).ok());
    uids.push_back(*uid);
  }
  std::set<std::string> devices;
  for (const std::string& uid : uids) {
    auto c = h_->CreateContainer(uid, "main");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->env[kAllocationErrorEnv], "");
    EXPECT_THAT(c->env["NVIDIA_VISIBLE_DEVICES"], StartsWith("MIG-"));
    devices.insert(c->env["NVIDIA_VISIBLE_DEVICES"]);
    // The decision is written on the pod, for the scheduler to count.
    ASSERT_TRUE(
        Eventually([&] { return h_->PodAnnotation(uid, "prism.io/decision").has_value(); }));
  }
  EXPECT_EQ(devices.size(), 2u);  // The second placement saw the first.
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), 2u);
}

TEST_F(NodeAgentTest, InitAndAppContainersEachGetTheirOwnDevices) {
  Start();
  PodSpec pod{"staged",
              {ContainerSpec{"warmup", 1, 4000, 0, /*init=*/true}, ContainerSpec{"main", 1, 10000}},
              {{"nvidia.com/vgpu-mode", "mig"}}};
  std::string uid;
  kubelet::CreatedContainer main = Run(pod, &uid);
  auto warmup = h_->CreateContainer(uid, "warmup");
  ASSERT_TRUE(warmup.ok()) << warmup.status();
  EXPECT_EQ(warmup->env[kAllocationErrorEnv], "");
  const sched::Decision* decision = h_->DecisionOf(uid);
  ASSERT_EQ(decision->containers.size(), 2u);
  EXPECT_TRUE(decision->containers[0].init);
  EXPECT_EQ(warmup->env["NVIDIA_VISIBLE_DEVICES"],
            MigUuidAt(h_->state_file(), 0, decision->containers[0].devices[0].start));
  EXPECT_EQ(main.env["NVIDIA_VISIBLE_DEVICES"],
            MigUuidAt(h_->state_file(), 0, decision->containers[1].devices[0].start));
  EXPECT_NE(warmup->env[kAllocationIdEnv], main.env[kAllocationIdEnv]);
}

TEST_F(NodeAgentTest, MixedModeNodeServesMigAndSlicesSideBySide) {
  Start();
  kubelet::CreatedContainer mig = Run(MigPod("m"));
  kubelet::CreatedContainer slice = Run(SlicePod("s"));
  EXPECT_THAT(mig.env["NVIDIA_VISIBLE_DEVICES"], StartsWith("MIG-"));
  EXPECT_THAT(slice.env["NVIDIA_VISIBLE_DEVICES"], StartsWith("GPU-"));
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  ASSERT_TRUE(Eventually([&] {
    auto inv = DecodeInventory(h_->NodeAnnotation(kInventoryAnnotation).value_or("{}"));
    return inv.ok() && inv->gpus.size() == 2 && inv->gpus[0].mode == sched::GpuMode::kMig &&
           inv->gpus[1].mode == sched::GpuMode::kHamiCore && inv->gpus[0].instances.size() == 1 &&
           !inv->gpus[0].instances[0].in_use;
  }));
  // 2 GPUs x 10 tokens, all healthy.
  EXPECT_EQ(h_->kubelet().Devices("nvidia.com/gpu").size(), 20u);
}

TEST_F(NodeAgentTest, TemplateModeAppliesTheWholeGeometry) {
  Start(kMixedNode, config::DefaultDeviceConfig());  // HAMi's geometries for the A100.
  std::string uid;
  kubelet::CreatedContainer c = Run(MigPod("t"), &uid);
  const sched::DeviceAssignment& d = h_->DecisionOf(uid)->containers[0].devices[0];
  ASSERT_GE(d.template_index, 0);
  EXPECT_EQ(c.env["NVIDIA_VISIBLE_DEVICES"], MigUuidAt(h_->state_file(), 0, d.start));
  const auto& slots = h_->engine().cluster().template_sets()[0].geometries[d.template_index].slots;
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), slots.size());
}

TEST_F(NodeAgentTest, AllocationsNoPodClaimsFailAfterTheTimeout) {
  Start(kMixedNode, PlacementConfig(),
        [](NodeAgentOptions& o) { o.resolve_timeout = absl::Milliseconds(200); });
  v1beta1::AllocateRequest request;
  request.add_container_requests()->add_devices_ids(
      h_->kubelet().Devices("nvidia.com/gpu")[0].id());
  auto response = h_->agent().Allocate(request);
  ASSERT_TRUE(response.ok());
  const std::string id = response->container_responses(0).envs().at(kAllocationIdEnv);
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  auto edits = kubelet::ResolveCdiDevices(h_->cdi_dir(), {CdiDeviceName(id)});
  ASSERT_TRUE(edits.ok()) << edits.status();
  std::map<std::string, std::string> env;
  kubelet::ApplyEnv(edits->env, &env);
  EXPECT_EQ(env["NVIDIA_VISIBLE_DEVICES"], "void");
  EXPECT_THAT(env[kAllocationErrorEnv], HasSubstr("in the kubelet's PodResources"));
  // Unknown device IDs are refused at once.
  v1beta1::AllocateRequest bad;
  bad.add_container_requests()->add_devices_ids("GPU-nope::1");
  EXPECT_EQ(h_->agent().Allocate(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(NodeAgentTest, AnUnhealthyGpuIsReportedToTheKubeletAndTheScheduler) {
  Start(kMixedNode, PlacementConfig(),
        [](NodeAgentOptions& o) { o.health_interval = absl::Milliseconds(20); });
  testing::InjectFault(h_->state_file(), "ListProcesses", testing::kNvmlGpuIsLost, 0, 1000000);
  ASSERT_TRUE(h_->kubelet().WaitForHealthyDevices("nvidia.com/gpu", 0, absl::Seconds(10)));
  ASSERT_TRUE(Eventually([&] {
    auto inv = DecodeInventory(h_->NodeAnnotation(kInventoryAnnotation).value_or("{}"));
    return inv.ok() && !inv->gpus[0].healthy && !inv->gpus[1].healthy;
  }));
  // The GPUs recover.
  nvml::sim::SimStateFile file(h_->state_file());
  ASSERT_TRUE(file.Transact([](nvml::sim::SimState& s, bool* changed) {
                    s.faults.clear();
                    *changed = true;
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_TRUE(h_->kubelet().WaitForHealthyDevices("nvidia.com/gpu", 20, absl::Seconds(10)));
  EXPECT_TRUE(Eventually([&] {
    return h_->metrics().Value("prism_device_plugin_gpus", {{"health", "healthy"}}) == 2;
  }));
}

TEST_F(NodeAgentTest, TheInventoryIsPatchedOnlyWhenItChanges) {
  Start(kMixedNode, PlacementConfig(),
        [](NodeAgentOptions& o) { o.inventory_interval = absl::Milliseconds(20); });
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  absl::SleepFor(absl::Milliseconds(100));  // Several refreshes, nothing changed.
  h_->api().ClearRequests();
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(h_->api().CountRequests("PATCH", "/api/v1/nodes"), 0);
  Run(MigPod("p"));
  ASSERT_TRUE(Eventually([&] { return h_->api().CountRequests("PATCH", "/api/v1/nodes") >= 1; }));
}

TEST_F(NodeAgentTest, MetricsCountAllocationsAndInstances) {
  Start();
  Run(MigPod("a"));
  Run(SlicePod("b"));
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_allocate_requests_total", {{"result", "ok"}}),
            2);
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_allocate_duration_seconds"), 2);
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_resolve_duration_seconds"), 2);
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_mig_instances_created_total"), 1);
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_allocations", {{"state", "ready"}}), 2);
  EXPECT_THAT(h_->metrics().Render(),
              HasSubstr("# TYPE prism_device_plugin_allocate_duration_seconds histogram"));
}

// --- NVML failures ----------------------------------------------------------------------------

struct FaultCase {
  std::string call;
  int code;
  bool needs_victim;  // The step only runs when an idle instance is in the way.
  std::string reason;
};

class NvmlFaultTest : public NodeAgentTest, public ::testing::WithParamInterface<FaultCase> {};

TEST_P(NvmlFaultTest, FailureAtThisStepLeaksNothingAndNamesTheReason) {
  const FaultCase& f = GetParam();
  Start(kMixedNode, PlacementConfig(), [](NodeAgentOptions& o) {
    o.prepare_early = false;
    o.mig.max_idle_per_gpu = 8;  // Idle instances stay, so a victim can be arranged.
    o.realize_retry_timeout = absl::Milliseconds(300);
  });
  if (f.needs_victim) {
    // An idle 1g.5gb everywhere the next decision could go: it must destroy one first.
    nvml::SimNvml direct(h_->state_file());
    for (int start = 0; start < 7; ++start) {
      ASSERT_TRUE(direct.CreateGpuInstance(0, 19, start).ok());
    }
    auto gis = direct.ListGpuInstances(0);
    for (const auto& gi : *gis) ASSERT_TRUE(direct.CreateComputeInstance(0, gi.id, 1).ok());
  }
  // The scheduler sees the node as it is now.
  (void)h_->agent().WaitIdle(absl::Seconds(5));
  ASSERT_TRUE(h_->InitScheduler().ok());
  const auto before = testing::ReadState(h_->state_file()).gpus[0].gpu_instances.size();
  testing::InjectFault(h_->state_file(), f.call, f.code);
  PodSpec pod = MigPod(AsciiLower("victim-of-" + f.call), f.needs_victim ? 10000 : 4000);
  absl::StatusOr<std::string> uid = h_->SubmitPod(pod);
  ASSERT_TRUE(uid.ok()) << uid.status();
  ASSERT_TRUE(h_->Admit(*uid).ok());
  auto c = h_->CreateContainer(*uid, "main");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->env["NVIDIA_VISIBLE_DEVICES"], "void");
  EXPECT_THAT(c->env[kAllocationErrorEnv], HasSubstr(f.reason));
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  // Nothing half-built is left: no new instance; at most the idle ones destroyed.
  const auto state = testing::ReadState(h_->state_file());
  EXPECT_LE(state.gpus[0].gpu_instances.size(), before);
  const sched::DeviceAssignment& d = h_->DecisionOf(*uid)->containers[0].devices[0];
  if (!f.needs_victim) {
    // Whatever was created for the pod was destroyed again.
    EXPECT_EQ(state.gpus[0].gpu_instances.size(), 0u);
    EXPECT_EQ(h_->agent().mig_counters().gpu_instances_created,
              h_->agent().mig_counters().gpu_instances_destroyed);
  }
  for (const auto& gi : state.gpus[0].gpu_instances) {
    EXPECT_FALSE(gi.start == d.start && gi.size == d.size) << "the decided instance survived";
  }
  EXPECT_THAT(Status(*h_, *uid)["containers"]["main"]["error"].get<std::string>(),
              HasSubstr(f.reason));
  ASSERT_TRUE(Eventually([&] { return !h_->Events("PrismAllocationFailed").empty(); }));
  EXPECT_TRUE(testing::ReadState(h_->state_file()).faults.empty()) << "the fault never fired";
}

INSTANTIATE_TEST_SUITE_P(
    EachStep, NvmlFaultTest,
    ::testing::Values(
        FaultCase{"GetMigMode", testing::kNvmlUnknown, false, "NVML_ERROR_UNKNOWN"},
        FaultCase{"ListGpuInstances", testing::kNvmlUnknown, false, "NVML_ERROR_UNKNOWN"},
        FaultCase{"ListProcesses", testing::kNvmlUnknown, false, "NVML_ERROR_UNKNOWN"},
        FaultCase{"CreateGpuInstance", testing::kNvmlInsufficientResources, false,
                  "NVML_ERROR_INSUFFICIENT_RESOURCES"},
        FaultCase{"CreateComputeInstance", testing::kNvmlUnknown, false,
                  "creating the compute instance"},
        FaultCase{"DestroyComputeInstance", testing::kNvmlUnknown, true, "destroying idle"},
        FaultCase{"DestroyGpuInstance", testing::kNvmlUnknown, true, "destroying idle"}),
    [](const ::testing::TestParamInfo<FaultCase>& param) { return param.param.call; });

TEST_F(NodeAgentTest, AnInstanceInUseIsNeverTouched) {
  Start(kMixedNode, PlacementConfig(), [](NodeAgentOptions& o) {
    o.prepare_early = false;
    o.realize_retry_timeout = absl::Milliseconds(300);
  });
  // Someone else's 7g.40gb with a process on it, created behind the scheduler's back.
  ASSERT_TRUE(h_->InitScheduler().ok());
  nvml::SimNvml direct(h_->state_file());
  auto gi = direct.CreateGpuInstance(0, 0 /* 7g.40gb */, 0);
  ASSERT_TRUE(gi.ok());
  ASSERT_TRUE(direct.CreateComputeInstance(0, gi->id, 7).ok());
  testing::AddProcess(h_->state_file(), 0, 999, gi->id, 0);
  const std::string theirs = MigUuidAt(h_->state_file(), 0, 0);
  std::string uid;
  absl::StatusOr<std::string> submitted = h_->SubmitPod(MigPod("late"));
  ASSERT_TRUE(submitted.ok());
  ASSERT_TRUE(h_->Admit(*submitted).ok());
  auto c = h_->CreateContainer(*submitted, "main");
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(c->env[kAllocationErrorEnv], HasSubstr("in use by processes of no Prism pod"));
  EXPECT_EQ(MigUuidAt(h_->state_file(), 0, 0), theirs);
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), 1u);
}

TEST_F(NodeAgentTest, OnAStaticNodeOnlyExistingInstancesAreHandedOut) {
  h_ = std::make_unique<AgentHarness>(testing::TestDir(), kMixedNode, PlacementConfig());
  ASSERT_TRUE(h_->StartCluster({{"prism.io/mig.mode", "static"}}).ok());
  // prism mig-manager laid out GPU 0: a 3g.20gb at 4 and a 1g.5gb at 0.
  nvml::SimNvml direct(h_->state_file());
  for (auto [profile, start, slices] : {std::tuple{9, 4, 3}, std::tuple{19, 0, 1}}) {
    auto gi = direct.CreateGpuInstance(0, profile, start);
    ASSERT_TRUE(gi.ok());
    ASSERT_TRUE(direct.CreateComputeInstance(0, gi->id, slices).ok());
  }
  ASSERT_TRUE(h_->StartAgent([](NodeAgentOptions& o) {
                  o.mig.max_idle_per_gpu = 0;
                  o.realize_retry_timeout = absl::Milliseconds(100);
                }).ok());
  ASSERT_TRUE(h_->InitScheduler().ok());
  auto inv = DecodeInventory(h_->NodeAnnotation(kInventoryAnnotation).value_or("{}"));
  ASSERT_TRUE(inv.ok());
  EXPECT_FALSE(inv->gpus[0].mig_dynamic);
  // A decision naming an existing instance is served; it stays when the pod ends.
  std::string uid;
  kubelet::CreatedContainer c = Run(MigPod("fits", 15000), &uid);
  EXPECT_EQ(c.env["NVIDIA_VISIBLE_DEVICES"], MigUuidAt(h_->state_file(), 0, 4));
  ASSERT_TRUE(h_->DeletePod(uid).ok());
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), 2u);
  EXPECT_EQ(h_->agent().mig_counters().gpu_instances_destroyed, 0);
  // The scheduler reads the ownership from the inventory: a pod that would need a new
  // instance (no idle one is large enough) is not placed here at all...
  absl::StatusOr<std::string> too_big = h_->SubmitPod(MigPod("too-big", 25000));
  EXPECT_FALSE(too_big.ok());
  // ...and a smaller pod takes the idle 3g.20gb as it is instead of a new 2g.10gb.
  std::string small_uid;
  kubelet::CreatedContainer small = Run(MigPod("small", 9000), &small_uid);
  EXPECT_EQ(small.env["NVIDIA_VISIBLE_DEVICES"], MigUuidAt(h_->state_file(), 0, 4));
  const sched::Decision* decision = h_->DecisionOf(small_uid);
  ASSERT_NE(decision, nullptr);
  EXPECT_TRUE(decision->mig.empty());  // Nothing to create or destroy.
  // A decision from elsewhere that needs a new instance is refused by the agent, clearly.
  sched::Decision forged;
  forged.node = 0;
  forged.node_name = h_->engine().cluster().node(0).name;
  sched::ContainerAssignment ca;
  ca.name = "main";
  sched::DeviceAssignment dev;
  dev.gpu = 0;
  dev.gpu_index = 0;
  dev.size = 2;
  dev.uuid = h_->engine().cluster().gpu(0).uuid;
  dev.mode = sched::GpuMode::kMig;
  dev.profile = h_->engine().cluster().gpu(0).mig_model->FindProfile("2g.10gb");
  dev.profile_name = "2g.10gb";
  dev.start = 2;
  dev.memory_mib = 9856;
  ca.devices.push_back(dev);
  forged.containers.push_back(ca);
  absl::StatusOr<std::string> needs_new = h_->SubmitPodWithDecision(MigPod("needs-new"), forged);
  ASSERT_TRUE(needs_new.ok()) << needs_new.status();
  ASSERT_TRUE(h_->Admit(*needs_new).ok());
  auto refused = h_->CreateContainer(*needs_new, "main");
  ASSERT_TRUE(refused.ok());
  EXPECT_THAT(refused->env[kAllocationErrorEnv], HasSubstr("static MIG layout"));
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), 2u);
}

// Issue 11, item 1: with no label at all (a fresh install), the node agent owns the MIG layouts
// and says so in the inventory; a MIG manager config label hands the node to the MIG manager.
TEST_F(NodeAgentTest, AnUnlabelledNodeIsDynamicAndAMigConfigLabelMakesItStatic) {
  // The agent publishes its inventory from its worker after Start() returns: wait for it (read
  // at once, a loaded machine found no annotation yet).
  auto published_inventory = [this]() -> absl::StatusOr<NodeInventory> {
    std::optional<std::string> text;
    if (!Eventually(
            [&] { return (text = h_->NodeAnnotation(kInventoryAnnotation)).has_value(); })) {
      return absl::DeadlineExceededError("the agent never published its inventory");
    }
    return DecodeInventory(*text);
  };
  Start();
  auto inv = published_inventory();
  ASSERT_TRUE(inv.ok()) << inv.status();
  ASSERT_FALSE(inv->gpus.empty());
  EXPECT_TRUE(inv->gpus[0].mig_dynamic);
  EXPECT_FALSE(ToGpuSpecs(*inv)[0].mig_layout_fixed);
  std::string uid;
  kubelet::CreatedContainer c = Run(MigPod("seed"), &uid);
  EXPECT_FALSE(c.env["NVIDIA_VISIBLE_DEVICES"].empty());
  EXPECT_NE(c.env["NVIDIA_VISIBLE_DEVICES"], "void");

  h_.reset();
  h_ = std::make_unique<AgentHarness>(testing::TestDir("-static"), kMixedNode, PlacementConfig());
  ASSERT_TRUE(h_->StartCluster({{"nvidia.com/mig.config", "all-1g.5gb"}}).ok());
  ASSERT_TRUE(h_->StartAgent().ok());
  auto static_inv = published_inventory();
  ASSERT_TRUE(static_inv.ok()) << static_inv.status();
  ASSERT_FALSE(static_inv->gpus.empty());
  EXPECT_FALSE(static_inv->gpus[0].mig_dynamic);
  EXPECT_TRUE(ToGpuSpecs(*static_inv)[0].mig_layout_fixed);
}

}  // namespace
}  // namespace prism::deviceplugin::node_agent_test
