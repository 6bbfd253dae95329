// A fresh install, as a user gets it: the shipped deploy/ base read as it is (kube-scheduler's
// extender configuration, the device config ConfigMap, the scheduler Deployment's and the node
// agent DaemonSet's args, env and mounts), the real `prism scheduler` and `prism device-plugin`
// binaries started from them, a kube-scheduler stand-in calling the extender over HTTPS with the
// CA and verbs of that configuration, the admission webhook's patch applied, a fake kubelet
// speaking the device plugin and PodResources gRPC APIs, and simulated GPUs. No Prism label is put
// on the node (it carries what NVIDIA's GPU feature discovery writes, which the DaemonSet selects).
//
// The seed's example (HAMi's pod: 2 GPUs of 8000 MiB in MIG mode on an A100-PCIE-40GB) must run;
// then both binaries are SIGKILLed and restarted with a process on the pod's instances, and the
// next pod must be served without touching them. The same for a placement-mode GPU (a model with
// no knownMigGeometries), for a GPU no catalog knows (only its NVML tables: issue 17) and for a
// node the MIG manager owns (nvidia.com/mig.config). Crash tests kill the binaries at the other
// points that matter: the device plugin between a GPU instance's create and its compute
// instance's (the simulated NVML stops it there) and while the kubelet waits in PreStartContainer,
// the extender with its Binding at the API server.
#include "tests/e2e/deploy_seed_fixture.h"

#include <sstream>
#include <string>
#include <vector>

namespace prism::e2e {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;

std::vector<std::string> Split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream s(list);
  for (std::string item; std::getline(s, item, ',');) out.push_back(item);
  return out;
}

TEST_P(DeploySeedTest, ThePodRunsAndSurvivesRestartsOfBothBinaries) {
  const NodeCase& c = GetParam();
  ASSERT_NO_FATAL_FAILURE(StartInstall(c));
  const bool is_static = !c.preexisting.empty();
  const std::map<int, std::string> before = Instances();

  // 1. The first pod: the seed's own on the template node; one that fits the layout elsewhere.
  json first = c.name == "template" ? SeedPod(root_) : MigPod("first", 1, 4000);
  const std::string uid = Submit(first);
  ASSERT_FALSE(uid.empty());
  absl::StatusOr<kubelet::CreatedContainer> container = Run(first, uid);
  ASSERT_TRUE(container.ok()) << container.status() << Slurp(agent_.log);
  const std::string visible = container->env["NVIDIA_VISIBLE_DEVICES"];
  const std::vector<std::string> devices = Split(visible);
  ASSERT_EQ(devices.size(), c.name == "template" ? 2u : 1u) << visible << "\n" << Slurp(agent_.log);
  for (const std::string& d : devices) EXPECT_EQ(d.rfind("MIG-", 0), 0u) << visible;
  EXPECT_EQ(container->env.count("PRISM_ALLOCATION_ERROR"), 0u)
      << container->env["PRISM_ALLOCATION_ERROR"];
  // The CDI spec gives the container the driver's nodes and, per MIG device, its two caps.
  std::set<std::string> nodes;
  for (const kubelet::CdiDeviceNode& n : container->device_nodes) nodes.insert(n.path);
  EXPECT_TRUE(nodes.count("/dev/nvidiactl") && nodes.count("/dev/nvidia-uvm") &&
              nodes.count("/dev/nvidia0"));
  size_t caps = 0;
  for (const std::string& n : nodes) caps += n.rfind("/dev/nvidia-caps/nvidia-cap", 0) == 0;
  EXPECT_EQ(caps, 2 * devices.size());
  if (c.name == "template") {
    // HAMi's geometry 1 of the A100-PCIE-40GB: {1g.5gb: 1, 2g.10gb: 3}.
    EXPECT_EQ(Instances().size(), 4u);
  }
  if (is_static) {
    EXPECT_EQ(Instances(), before) << "a static layout was changed";
  }

  // 2. The pod's processes run; both binaries die without warning and come back.
  PutProcessesOn(visible);
  const std::map<int, std::string> running = Instances();
  agent_.Kill();
  scheduler_.Kill();
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  ASSERT_NO_FATAL_FAILURE(StartScheduler());
  EXPECT_EQ(Instances(), running) << Slurp(agent_.log);
  absl::StatusOr<kubelet::CreatedContainer> again = kubelet_->CreateContainer(uid, first["spec"]["containers"][0]["name"]);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->env["NVIDIA_VISIBLE_DEVICES"], visible);

  // 3. The next pod is served, beside the running one, which keeps its instances.
  ASSERT_NO_FATAL_FAILURE(ServeNextPodBeside(devices));
  const std::map<int, std::string> after = Instances();
  for (const auto& [start, uuid] : running) {
    if (visible.find(uuid) != std::string::npos) {
      EXPECT_EQ(after.at(start), uuid);
    }
  }
  if (is_static) {
    EXPECT_EQ(after, before) << "a static layout was changed";
  }
}

// The device plugin SIGKILLed between the two NVML calls that make a MIG device (its GPU
// instance made, the compute instance not yet), and the extender killed while the allocation is
// half made: after both restart, the pod's container starts on whole instances, nothing is left
// half made, and the next pod is served.
TEST_P(DeploySeedTest, KilledBetweenGpuAndComputeInstanceCreateTheNextStartFinishesIt) {
  const NodeCase& c = GetParam();
  if (!c.preexisting.empty()) GTEST_SKIP() << "a static layout is never created or changed";
  ASSERT_NO_FATAL_FAILURE(StartInstall(c));
  // Template mode lays out HAMi's whole geometry first: stop inside it, at its second instance.
  deviceplugin::testing::InjectStop(state_file_, "CreateGpuInstance", "kill",
                                    c.name == "template" ? 1 : 0);
  json first = c.name == "template" ? SeedPod(root_) : MigPod("first", 1, 4000);
  const std::string name = first["metadata"]["name"];
  const std::string container = first["spec"]["containers"][0]["name"];
  const std::string uid = Submit(first);
  ASSERT_FALSE(uid.empty());
  ASSERT_TRUE(driver_->WaitBound({"default/" + name}, absl::Seconds(30))) << Slurp(scheduler_.log);
  kubelet::FakePod fake{uid, "default", name, {}};
  const int gpus = c.name == "template" ? 2 : 1;
  fake.containers.push_back({container, false, false, gpus});
  // Allocate answers before the instances are made (they are made once the pod is in
  // PodResources); if the agent died first, the kubelet admits the pod again after the restart.
  const absl::Status admitted = kubelet_->AdmitPod(fake, "nvidia.com/gpu");
  ASSERT_NO_FATAL_FAILURE(WaitAgentKilled());
  ASSERT_TRUE(HalfMadeInstance()) << "the kill did not land between the two creates";
  scheduler_.Kill();
  ASSERT_NO_FATAL_FAILURE(StartScheduler());
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  if (!admitted.ok()) {
    // The agent may realize the decision as soon as it sees the bound pod, so the kill can land
    // before the Allocate: the kubelet fails that admission, and the pod's replacement is
    // admitted once the plugin is back (modelled as admitting the same pod again).
    absl::Status again = kubelet_->AdmitPod(fake, "nvidia.com/gpu");
    for (int i = 0; i < 300 && !again.ok(); ++i) {
      absl::SleepFor(absl::Milliseconds(100));
      again = kubelet_->AdmitPod(fake, "nvidia.com/gpu");
    }
    ASSERT_TRUE(again.ok()) << "first admission: " << admitted << "; again: " << again << "\n"
                            << Slurp(agent_.log);
  }

  absl::StatusOr<kubelet::CreatedContainer> started = StartWithRetries(uid, container);
  ASSERT_TRUE(started.ok()) << started.status() << Slurp(agent_.log);
  const std::string visible = started->env["NVIDIA_VISIBLE_DEVICES"];
  const std::vector<std::string> devices = Split(visible);
  ASSERT_EQ(devices.size(), static_cast<size_t>(gpus)) << visible << Slurp(agent_.log);
  for (const std::string& d : devices) EXPECT_EQ(d.rfind("MIG-", 0), 0u) << visible;
  ExpectNothingHalfMade();
  if (c.name == "template") {
    EXPECT_EQ(Instances().size(), 4u) << "HAMi's geometry 1, whole";
  }

  PutProcessesOn(visible);
  ASSERT_NO_FATAL_FAILURE(ServeNextPodBeside(devices));
  ExpectNothingHalfMade();
}

// The device plugin SIGKILLed while the kubelet waits in PreStartContainer for the pod's spec
// (the agent stopped after a GPU instance create): the kubelet's start fails, and its retry
// after the restart starts the container on whole instances.
TEST_P(DeploySeedTest, KilledDuringThePreStartWaitTheRetriedStartSucceeds) {
  const NodeCase& c = GetParam();
  if (!c.preexisting.empty()) GTEST_SKIP() << "a static layout is never created or changed";
  ASSERT_NO_FATAL_FAILURE(StartInstall(c));
  ASSERT_TRUE(kubelet_->PluginOptions("nvidia.com/gpu").pre_start_required())
      << "the shipped DaemonSet turns PreStartContainer off";
  deviceplugin::testing::InjectStop(state_file_, "CreateGpuInstance", "hang");
  json pod = MigPod("waiting", 1, 4000);
  const std::string uid = Submit(pod);
  ASSERT_FALSE(uid.empty());
  ASSERT_TRUE(driver_->WaitBound({"default/waiting"}, absl::Seconds(30))) << Slurp(scheduler_.log);
  kubelet::FakePod fake{uid, "default", "waiting", {{"main", false, false, 1}}};
  ASSERT_TRUE(kubelet_->AdmitPod(fake, "nvidia.com/gpu").ok());
  const int prestarts = kubelet_->prestart_calls();
  std::thread start([&] {
    absl::StatusOr<kubelet::CreatedContainer> r = kubelet_->CreateContainer(uid, "main");
    EXPECT_FALSE(r.ok()) << "the container started while its plugin hung";
  });
  bool waiting = false;
  for (int i = 0; i < 3000 && !waiting; ++i) {
    waiting = kubelet_->prestart_calls() > prestarts && HalfMadeInstance();
    if (!waiting) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(waiting) << "PreStartContainer and the hung create never met\n" << Slurp(agent_.log);
  agent_.Kill();
  start.join();
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  absl::StatusOr<kubelet::CreatedContainer> started = StartWithRetries(uid, "main");
  ASSERT_TRUE(started.ok()) << started.status() << Slurp(agent_.log);
  const std::string visible = started->env["NVIDIA_VISIBLE_DEVICES"];
  EXPECT_EQ(visible.rfind("MIG-", 0), 0u) << visible << Slurp(agent_.log);
  EXPECT_EQ(Split(visible).size(), 1u) << visible;
  ExpectNothingHalfMade();
}

// The extender SIGKILLed while its Binding is at the API server. The decision travels in the
// Binding (its annotations), so there is no moment with a decision on an unbound pod; the API
// server either commits the Binding after the client is gone or refuses it. In both cases the
// restarted extender and kube-scheduler's retry leave the pod bound once, with one decision, and
// its container starts on its own instance.
TEST_P(DeploySeedTest, KilledWithABindingInFlightThePodIsBoundOnceAndRuns) {
  const NodeCase& c = GetParam();
  ASSERT_NO_FATAL_FAILURE(StartInstall(c));
  const std::map<int, std::string> before = Instances();
  std::set<std::string> held;
  for (const int refused_status : {0, 503}) {  // Committed after the kill; refused.
    const std::string name = refused_status == 0 ? "committed" : "refused";
    fakeapi::Fault slow;
    slow.method = "POST";
    slow.path_prefix = "/api/v1/namespaces/default/pods/" + name + "/binding";
    slow.delay = absl::Seconds(2);
    slow.status = refused_status;
    const int fired = api_->faults_fired();
    api_->InjectFault(slow);
    json pod = MigPod(name, 1, 4000);
    const std::string uid = Submit(pod);
    ASSERT_FALSE(uid.empty());
    bool in_flight = false;
    for (int i = 0; i < 3000 && !in_flight; ++i) {
      in_flight = api_->faults_fired() > fired;
      if (!in_flight) absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(in_flight) << "no Binding reached the API server\n" << Slurp(scheduler_.log);
    scheduler_.Kill();
    ASSERT_NO_FATAL_FAILURE(StartScheduler());
    absl::StatusOr<kubelet::CreatedContainer> started = Run(pod, uid);
    ASSERT_TRUE(started.ok()) << started.status() << Slurp(agent_.log) << Slurp(scheduler_.log);
    const std::string visible = started->env["NVIDIA_VISIBLE_DEVICES"];
    EXPECT_EQ(visible.rfind("MIG-", 0), 0u) << visible << Slurp(agent_.log);
    EXPECT_EQ(started->env.count("PRISM_ALLOCATION_ERROR"), 0u)
        << started->env["PRISM_ALLOCATION_ERROR"];
    EXPECT_TRUE(held.insert(visible).second) << name << " got an instance another pod holds";
    PutProcessesOn(visible);
    // Bound once: a second Binding would have been refused (409); the pod has one decision.
    const json bound = Pod(name);
    EXPECT_EQ(bound["spec"].value("nodeName", ""), kNode);
    EXPECT_TRUE(bound["metadata"]["annotations"].contains(config::kPrismDecisionAnnotation))
        << bound.dump();
  }
  if (!c.preexisting.empty()) {
    EXPECT_EQ(Instances(), before) << "a static layout was changed";
  }
  ExpectNothingHalfMade();
}

INSTANTIATE_TEST_SUITE_P(
    FreshInstall, DeploySeedTest,
    ::testing::Values(
        // HAMi's default geometries name the A100: template mode.
        NodeCase{
            "template", "gpus:\n  - model: A100-PCIE-40GB\n    mig: {enabled: true}\n", {}, {}},
        // No knownMigGeometries entry names the H100 96GB: placement mode.
        NodeCase{
            "placement", "gpus:\n  - model: H100-SXM5-96GB\n    mig: {enabled: true}\n", {}, {}},
        // Issue 17: a GPU Prism's catalog has never seen, known to the simulated NVML by its
        // tables alone; the extender builds its model from the node's inventory facts.
        NodeCase{"neverseen",
                 "models:\n"
                 "  - name: X300-200GB\n"
                 "    product: NVIDIA X300\n"
                 "    pci_device_id: 0x40AA10DE\n"
                 "    memory_mib: 204800\n"
                 "    architecture: blackwell\n"
                 "    profiles:\n"
                 "      - {index: 0, id: 19, slices: 1, placements: \"{0,1,2,3,4,5,6}:1\", "
                 "memory_mib: 25088, multiprocessors: 20, max: 7}\n"
                 "      - {index: 1, id: 14, slices: 2, placements: \"{0,2,4}:2\", "
                 "memory_mib: 50176, multiprocessors: 40, max: 3}\n"
                 "      - {index: 4, id: 0, slices: 7, placements: \"{0}:8\", "
                 "memory_mib: 202752, multiprocessors: 140, max: 1}\n"
                 "gpus:\n  - model: X300-200GB\n    mig: {enabled: true}\n",
                 {},
                 {}},
        // The MIG manager's node: its layout (7 x 1g.5gb) is handed out as it is.
        NodeCase{"static",
                 "gpus:\n  - model: A100-PCIE-40GB\n    mig: {enabled: true}\n",
                 {{"nvidia.com/mig.config", "all-1g.5gb"}},
                 {{19, 0}, {19, 1}, {19, 2}, {19, 3}, {19, 4}, {19, 5}, {19, 6}}}), CaseName);

}  // namespace
}  // namespace prism::e2e
