// The node agent across restarts, end to end (node_agent_test_fixture.h): adopting live pods'
// instances, recovering from pod annotations only what the kubelet confirms, and failing closed on
// as little as an inconsistency concerns.
#include "deviceplugin/node_agent_test_fixture.h"

namespace prism::deviceplugin::node_agent_test {
namespace {

namespace fs = std::filesystem;

// --- Restarts ---------------------------------------------------------------------------------

TEST_F(NodeAgentTest, AgentRestartAdoptsLivePodsAndCleansIdleInstances) {
  Start();
  std::string mig_uid;
  kubelet::CreatedContainer mig = Run(MigPod("keep"), &mig_uid);
  std::string slice_uid;
  Run(SlicePod("slice"), &slice_uid);
  // The pod's process runs on its instance.
  const int start = h_->DecisionOf(mig_uid)->containers[0].devices[0].start;
  nvml::SimNvml direct(h_->state_file());
  auto gis = direct.ListGpuInstances(0);
  ASSERT_EQ(gis->size(), 1u);
  testing::AddProcess(h_->state_file(), 0, 4242, (*gis)[0].id, 0);
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  h_->StopAgent();

  // While the agent is away: a stray idle instance appears; the kubelet admits a new pod.
  auto stray = direct.CreateGpuInstance(0, 19 /* 1g.5gb */, start == 0 ? 6 : 0);
  ASSERT_TRUE(stray.ok());
  absl::StatusOr<std::string> late = h_->SubmitPod(MigPod("late"));
  ASSERT_TRUE(late.ok());
  h_->kubelet().Stop();
  ASSERT_TRUE(h_->kubelet().Restart().ok());  // (The kubelet restarts too.)

  ASSERT_TRUE(h_->StartAgent().ok());
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  EXPECT_EQ(h_->agent().FailClosedReason(), "");
  // The live pod's instance is untouched and its container still resolves to it.
  EXPECT_EQ(MigUuidAt(h_->state_file(), 0, start), mig.env["NVIDIA_VISIBLE_DEVICES"]);
  auto again = h_->CreateContainer(mig_uid, "main");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->env["NVIDIA_VISIBLE_DEVICES"], mig.env["NVIDIA_VISIBLE_DEVICES"]);
  // The late pod, prepared on start, and the live one are the only instances: the stray is gone.
  const int late_start = h_->DecisionOf(*late)->containers[0].devices[0].start;
  ASSERT_TRUE(Eventually([&] { return !MigUuidAt(h_->state_file(), 0, late_start).empty(); }));
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), 2u);
  ASSERT_TRUE(h_->Admit(*late).ok());
  auto late_c = h_->CreateContainer(*late, "main");
  ASSERT_TRUE(late_c.ok());
  EXPECT_EQ(late_c->env["NVIDIA_VISIBLE_DEVICES"], MigUuidAt(h_->state_file(), 0, late_start));
  // Adopted instances are released as usual (once their processes end).
  testing::ClearProcesses(h_->state_file());
  ASSERT_TRUE(h_->DeletePod(mig_uid).ok());
  ASSERT_TRUE(Eventually([&] { return MigUuidAt(h_->state_file(), 0, start).empty(); }));
}

// Issue 11, item 2: template mode (HAMi's geometries, what every A100/H100 gets by default) with
// a process on the pod's instance. Adoption used to re-check the instance as if it were being
// allocated, found "processes of no Prism pod" and failed the whole node closed.
TEST_F(NodeAgentTest, AgentRestartAdoptsATemplateModeInstanceWithAProcessOnIt) {
  Start(kMixedNode, config::DefaultDeviceConfig());
  std::string uid;
  kubelet::CreatedContainer c = Run(MigPod("seed", 8000), &uid);
  const sched::DeviceAssignment& d = h_->DecisionOf(uid)->containers[0].devices[0];
  ASSERT_GE(d.template_index, 0);
  nvml::SimNvml direct(h_->state_file());
  auto gis = direct.ListGpuInstances(0);
  ASSERT_TRUE(gis.ok());
  int gi_id = -1;
  for (const auto& gi : *gis) {
    if (gi.start == d.start) gi_id = gi.id;
  }
  ASSERT_GE(gi_id, 0);
  testing::AddProcess(h_->state_file(), 0, 4242, gi_id, 0);
  const size_t instances = testing::InstanceCount(h_->state_file(), 0);
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  h_->StopAgent();

  ASSERT_TRUE(h_->StartAgent().ok());
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  EXPECT_EQ(h_->agent().FailClosedReason(), "");
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), instances);
  EXPECT_EQ(MigUuidAt(h_->state_file(), 0, d.start), c.env["NVIDIA_VISIBLE_DEVICES"]);
  // The next pod is served from the same geometry's free slots.
  std::string next_uid;
  kubelet::CreatedContainer next = Run(MigPod("next", 8000), &next_uid);
  EXPECT_THAT(next.env[kAllocationErrorEnv], ::testing::IsEmpty());
  EXPECT_NE(next.env["NVIDIA_VISIBLE_DEVICES"], c.env["NVIDIA_VISIBLE_DEVICES"]);
  EXPECT_EQ(testing::InstanceCount(h_->state_file(), 0), instances);
}

TEST_F(NodeAgentTest, AnUnresolvedAllocationSurvivesAnAgentRestart) {
  Start(kMixedNode, PlacementConfig(), [](NodeAgentOptions& o) { o.prepare_early = false; });
  h_->StopAgent();
  // An agent that cannot reach PodResources answers Allocate but resolves nothing...
  const std::string nowhere = (h_->dir() / "nowhere.sock").string();
  ASSERT_TRUE(h_->StartAgent([&](NodeAgentOptions& o) {
                  o.prepare_early = false;
                  o.pod_resources_socket = nowhere;
                  o.pod_resources_timeout = absl::Milliseconds(50);
                  o.prestart_timeout = absl::Milliseconds(300);
                }).ok());
  absl::StatusOr<std::string> uid = h_->SubmitPod(MigPod("interrupted"));
  ASSERT_TRUE(uid.ok());
  ASSERT_TRUE(h_->Admit(*uid).ok());
  EXPECT_EQ(h_->CreateContainer(*uid, "main", absl::Milliseconds(300)).status().code(),
            absl::StatusCode::kDeadlineExceeded);  // Held in PreStartContainer, then refused.
  h_->StopAgent();  // ...and stops.
  // The next agent finds the allocation in its ledger and finishes the job.
  ASSERT_TRUE(h_->StartAgent([](NodeAgentOptions& o) { o.prepare_early = false; }).ok());
  auto c = h_->CreateContainer(*uid, "main");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->env["NVIDIA_VISIBLE_DEVICES"], StartsWith("MIG-"));
}

TEST_F(NodeAgentTest, AgentRestartWithoutItsStateRecoversFromPodAnnotations) {
  Start();
  std::string uid;
  kubelet::CreatedContainer c = Run(MigPod("survivor"), &uid);
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  h_->StopAgent();
  fs::remove_all(h_->state_dir());  // The node lost the agent's state directory.
  fs::remove_all(h_->cdi_dir());    // And /var/run (a reboot of the runtime's tmpfs).
  ASSERT_TRUE(h_->StartAgent().ok());
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  EXPECT_EQ(h_->agent().FailClosedReason(), "");
  auto again = h_->CreateContainer(uid, "main");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->env["NVIDIA_VISIBLE_DEVICES"], c.env["NVIDIA_VISIBLE_DEVICES"]);
}

TEST_F(NodeAgentTest, AfterANodeRebootLivePodsGetTheirInstancesBack) {
  Start();
  std::string uid;
  kubelet::CreatedContainer c = Run(MigPod("rebooted"), &uid);
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  h_->StopAgent();
  nvml::sim::SimStateFile file(h_->state_file());
  ASSERT_TRUE(file.Transact([](nvml::sim::SimState& s, bool* changed) {
                    nvml::sim::Reboot(s);  // Ampere keeps MIG mode; instances are gone.
                    *changed = true;
                    return absl::OkStatus();
                  })
                  .ok());
  fs::remove_all(h_->cdi_dir());
  ASSERT_TRUE(h_->StartAgent().ok());
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  const int start = h_->DecisionOf(uid)->containers[0].devices[0].start;
  const std::string recreated = MigUuidAt(h_->state_file(), 0, start);
  ASSERT_THAT(recreated, StartsWith("MIG-"));
  EXPECT_NE(recreated, c.env["NVIDIA_VISIBLE_DEVICES"]);  // A new instance, a new UUID.
  auto again = h_->CreateContainer(uid, "main");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->env["NVIDIA_VISIBLE_DEVICES"], recreated);
}

// A genuine inconsistency fails closed only the GPUs it concerns (issue 38). Two pods the
// kubelet really admitted both hold GPU 0's instance by their decisions (a buggy scheduler, a
// copied decision), and the agent lost its ledger: both allocations come back from the pods'
// annotations (the kubelet confirms each), and adopting them finds the instance held twice.
TEST_F(NodeAgentTest, AnInconsistencyFailsClosedOnlyItsGpuUntilItIsResolved) {
  auto fast = [](NodeAgentOptions& o) { o.reconcile_interval = absl::Milliseconds(50); };
  Start(kMixedNode, PlacementConfig(), fast);
  std::string a;
  kubelet::CreatedContainer c = Run(MigPod("first"), &a);
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  const std::string gpu0 = h_->DecisionOf(a)->containers[0].devices[0].uuid;
  h_->StopAgent();
  // The twin carries the first pod's decision; an agent that cannot reach PodResources answers
  // its Allocate without attributing it.
  PodSpec twin = MigPod("twin");
  for (const auto& [k, v] : k8s::Annotations(h_->Pod(a))) {
    if (k != kAllocationStatusAnnotation) twin.annotations[k] = v;
  }
  absl::StatusOr<std::string> b = h_->SubmitPod(twin, /*decide=*/false);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(h_->StartAgent([&](NodeAgentOptions& o) {
                  o.prepare_early = false;
                  o.pod_resources_socket = (h_->dir() / "nowhere.sock").string();
                  o.pod_resources_timeout = absl::Milliseconds(50);
                }).ok());
  ASSERT_TRUE(h_->Admit(*b).ok());
  h_->StopAgent();
  // Its status names the allocation with the devices the kubelet gave it; the ledger is lost.
  k8s::Json status = k8s::Json::parse(h_->PodAnnotation(a, kAllocationStatusAnnotation).value());
  status["containers"]["main"]["allocations"] = {"twin-1"};
  status["containers"]["main"]["deviceIds"] = h_->kubelet().AllocatedDevices(*b, "main");
  status["containers"]["main"].erase("devices");
  ASSERT_TRUE(h_->client()
                  .Patch(k8s::kPods, testing::kNamespace, "twin", k8s::PatchType::kMerge,
                         k8s::Json{{"metadata",
                                    {{"annotations",
                                      {{kAllocationStatusAnnotation, status.dump()}}}}}})
                  .ok());
  fs::remove_all(h_->state_dir());

  ASSERT_TRUE(h_->StartAgent(fast).ok());
  // GPU 0 fails closed, alone: the node stays ready and GPU 1 keeps serving.
  EXPECT_EQ(h_->agent().FailClosedReason(), "");
  const std::map<std::string, std::string> faults = h_->agent().GpuFaults();
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_THAT(faults.begin()->first, gpu0);
  EXPECT_THAT(faults.begin()->second, HasSubstr("held by pod"));
  EXPECT_TRUE(h_->kubelet().WaitForHealthyDevices("nvidia.com/gpu", 10, absl::Seconds(5)));
  for (const v1beta1::Device& d : h_->kubelet().Devices("nvidia.com/gpu")) {
    EXPECT_EQ(d.health() == kubelet::kHealthy, d.id().rfind(gpu0, 0) != 0) << d.id();
  }
  ASSERT_TRUE(Eventually([&] {
    auto inv = DecodeInventory(h_->NodeAnnotation(kInventoryAnnotation).value_or("{}"));
    return inv.ok() && inv->fault.empty() && !inv->gpus[0].fault.empty() &&
           !inv->gpus[0].healthy && inv->gpus[1].healthy && inv->gpus[1].fault.empty();
  }));
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_fail_closed_gpus"), 1);
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_fail_closed"), 0);
  EXPECT_FALSE(h_->Events("PrismFailClosed").empty());
  // A pod decided onto GPU 0 (by a scheduler that has not seen the fault yet) is refused; a
  // slice pod on GPU 1 is served.
  absl::StatusOr<std::string> next = h_->SubmitPod(MigPod("next"));
  ASSERT_TRUE(next.ok());
  ASSERT_EQ(h_->DecisionOf(*next)->containers[0].devices[0].uuid, gpu0);
  ASSERT_TRUE(h_->Admit(*next).ok());
  auto refused = h_->CreateContainer(*next, "main");
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_THAT(refused->env[kAllocationErrorEnv], HasSubstr("refuses allocations"));
  kubelet::CreatedContainer slice = Run(SlicePod("slice"));
  EXPECT_THAT(slice.env[kAllocationErrorEnv], ::testing::IsEmpty());
  // The first pod's instance was not touched.
  const int start = h_->DecisionOf(a)->containers[0].devices[0].start;
  EXPECT_EQ(MigUuidAt(h_->state_file(), 0, start), c.env["NVIDIA_VISIBLE_DEVICES"]);
  // Removing the twin resolves it.
  ASSERT_TRUE(h_->DeletePod(*b).ok());
  ASSERT_TRUE(Eventually([&] { return h_->agent().GpuFaults().empty(); }));
  EXPECT_TRUE(h_->kubelet().WaitForHealthyDevices("nvidia.com/gpu", 20, absl::Seconds(5)));
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_fail_closed_gpus"), 0);
  ASSERT_TRUE(h_->DeletePod(*next).ok());
  Run(MigPod("after"));
}

// A problem no GPU can be blamed for still fails the whole node closed (the safe direction):
// the agent's own ledger says a live pod holds an allocation, and the pod's decision no longer
// reads (a decision that is gone is not one: the agent places such a pod itself).
TEST_F(NodeAgentTest, AnInconsistencyOfNoGpuInParticularFailsTheNodeClosed) {
  auto fast = [](NodeAgentOptions& o) { o.reconcile_interval = absl::Milliseconds(50); };
  Start(kMixedNode, PlacementConfig(), fast);
  std::string a;
  Run(MigPod("first"), &a);
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  h_->StopAgent();
  ASSERT_TRUE(h_->client()
                  .Patch(k8s::kPods, testing::kNamespace, "first", k8s::PatchType::kMerge,
                         k8s::Json{{"metadata",
                                    {{"annotations",
                                      {{config::kPrismDecisionAnnotation, "{not json"}}}}}})
                  .ok());
  ASSERT_TRUE(h_->StartAgent(fast).ok());
  EXPECT_THAT(h_->agent().FailClosedReason(), HasSubstr("pod team/first"));
  EXPECT_TRUE(h_->agent().GpuFaults().empty());
  absl::StatusOr<std::string> next = h_->SubmitPod(SlicePod("next"), /*decide=*/false);
  ASSERT_TRUE(next.ok());
  EXPECT_THAT(std::string(h_->Admit(*next).message()), HasSubstr("refuses allocations"));
  ASSERT_TRUE(Eventually([&] {
    auto inv = DecodeInventory(h_->NodeAnnotation(kInventoryAnnotation).value_or("{}"));
    return inv.ok() && !inv->fault.empty();
  }));
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_fail_closed"), 1);
  ASSERT_TRUE(h_->DeletePod(a).ok());
  ASSERT_TRUE(Eventually([&] { return h_->agent().FailClosedReason().empty(); }));
  ASSERT_TRUE(h_->DeletePod(*next).ok());
  Run(MigPod("after"));
}

// Allocations named only in an annotation are recovered only where the kubelet confirms them:
// pods bound here with a forged status (never admitted, or naming other devices) are ignored,
// logged once and counted, and fail nothing closed (issue 38).
TEST_F(NodeAgentTest, AllocationsTheKubeletDoesNotConfirmAreNotRecovered) {
  auto fast = [](NodeAgentOptions& o) { o.reconcile_interval = absl::Milliseconds(50); };
  Start(kMixedNode, PlacementConfig(), fast);
  std::string a;
  kubelet::CreatedContainer c = Run(MigPod("first"), &a);
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  h_->StopAgent();
  const std::string text = h_->PodAnnotation(a, kAllocationStatusAnnotation).value();
  // A twin with the first pod's decision and devices, never admitted.
  PodSpec twin = MigPod("twin");
  twin.annotations = k8s::Annotations(h_->Pod(a));
  k8s::Json status = k8s::Json::parse(text);
  status["containers"]["main"]["allocations"] = {"forged-1"};
  twin.annotations[kAllocationStatusAnnotation] = status.dump();
  ASSERT_TRUE(h_->SubmitPod(twin, /*decide=*/false).ok());
  // The first pod's own status, naming another allocation for other devices.
  status["containers"]["main"]["allocations"] = {"forged-2"};
  status["containers"]["main"]["deviceIds"] = {"GPU-x::0"};
  PodSpec other = MigPod("other");
  other.annotations[kAllocationStatusAnnotation] = status.dump();
  ASSERT_TRUE(h_->SubmitPod(other, /*decide=*/false).ok());
  fs::remove_all(h_->state_dir());

  ASSERT_TRUE(h_->StartAgent(fast).ok());
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(5)));
  EXPECT_EQ(h_->agent().FailClosedReason(), "");
  EXPECT_TRUE(h_->agent().GpuFaults().empty());
  std::set<std::string> ids;
  for (const AllocationRecord& r : h_->agent().Allocations()) ids.insert(r.id);
  EXPECT_EQ(ids.count("forged-1"), 0u);
  EXPECT_EQ(ids.count("forged-2"), 0u);
  EXPECT_EQ(ids.size(), 1u);  // The first pod's, which the kubelet confirms.
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_recoveries_ignored_total",
                                {{"reason", "no_pod"}}),
            2);
  // Re-checks do not count them again.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(h_->metrics().Value("prism_device_plugin_recoveries_ignored_total",
                                {{"reason", "no_pod"}}),
            2);
  auto again = h_->CreateContainer(a, "main");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->env["NVIDIA_VISIBLE_DEVICES"], c.env["NVIDIA_VISIBLE_DEVICES"]);
  Run(MigPod("next"));
}

}  // namespace
}  // namespace prism::deviceplugin::node_agent_test
