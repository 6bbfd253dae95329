// Prism on DRA, installed as a user installs it: the overlay examples/dra/ (deploy/ + deploy/dra/
// + its patches) read as shipped, the real `prism scheduler --dra` and `prism device-plugin
// --dra=true` started from its Deployment and DaemonSet, kube-scheduler's stand-in with the
// DynamicResources plugin's steps (harness/driver_dra.h) calling the extender as the DRA variant of
// its configuration says, the fake kubelet's DRA half (registration, NodePrepareResources, CDI),
// and simulated GPUs (docs/dra.md §3.2, issue 32 "Done when"):
//   - the seed's example: a claim for two 2g.10gb partitions → webhook gate → Prism's allocation →
//     the stand-in binds → NodePrepareResources creates exactly those two instances, at the starts
//     the allocation names; the next pod's 1g.5gb comes beside them without moving anything;
//   - a competing first fit (a pod of another scheduler, which Prism's gate does not hold: the
//     stand-in's DynamicResources plugin allocates the claim itself) never reaches a container:
//     the node agent refuses to prepare an allocation Prism did not make;
//   - a share of a GPU (class slice.gpu.prism.io, consumable capacity as examples/dra turns it on)
//     placed by Prism's engine on the GPU a device-plugin HAMi slice pod already uses, prepared
//     with its limits in the CDI spec the container gets.
#include "tests/e2e/deploy_seed_fixture.h"

#include "config/dra_names.h"
#include "config/dra_pod.h"
#include "kubelet/fake_dra_kubelet.h"

namespace prism::e2e {
namespace {

constexpr char kA100Gpus[] = "gpus:\n  - model: A100-PCIE-40GB\n    mig: {enabled: true}\n";

json MigClaim(const std::string& name, int count, const std::string& profile) {
  return json{
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata", {{"name", name}, {"namespace", "default"}}},
      {"spec",
       {{"devices",
         {{"requests",
           json::array({{{"name", "parts"},
                         {"exactly",
                          {{"deviceClassName", config::kDraMigClass},
                           {"count", count},
                           {"selectors",
                            json::array({{{"cel",
                                           {{"expression",
                                             StrCat("device.attributes[\"gpu.prism.io\"].profile == "
                                                    "\"",
                                                    profile, "\"")}}}}})}}}}})}}}}}};
}

json ClaimPod(const std::string& name, const std::string& claim,
              const std::string& scheduler = "") {
  json pod{{"apiVersion", "v1"},
           {"kind", "Pod"},
           {"metadata", {{"name", name}, {"namespace", "default"}}},
           {"spec",
            {{"resourceClaims", json::array({{{"name", "gpu"}, {"resourceClaimName", claim}}})},
             {"containers",
              json::array({{{"name", "main"},
                            {"image", "cuda"},
                            {"resources", {{"claims", json::array({{{"name", "gpu"}}})}}}}})}}}};
  if (!scheduler.empty()) pod["spec"]["schedulerName"] = scheduler;
  return pod;
}

class DraDeployTest : public DeploySeedTest {
 protected:
  DraDeployTest() { bundle_dir_ = "examples/dra"; }

  void StartDraKubelet() {
    ASSERT_NO_FATAL_FAILURE(NewClient(&kubelet_client_));
    kubelet::FakeDraKubeletOptions o;
    o.registry_dir = (dir_ / "plugins_registry").string();
    o.cdi_dir = (dir_ / "cdi").string();
    o.client = kubelet_client_.get();
    auto dra = kubelet::FakeDraKubelet::Start(o);
    ASSERT_TRUE(dra.ok()) << dra.status();
    dra_kubelet_ = std::move(*dra);
  }

  // The pod as the kubelet runs it: its claims prepared, its container created.
  absl::StatusOr<kubelet::DraCreatedContainer> RunClaimPod(const std::string& name,
                                                           const std::string& claim) {
    const json pod = Pod(name);
    kubelet::FakeDraPod fake{k8s::Uid(pod), "default", name, {{"gpu", claim}}, {{"main", {{"gpu", ""}}}}};
    absl::Status prepared = dra_kubelet_->PrepareResources(fake);
    if (!prepared.ok()) return prepared;
    return dra_kubelet_->CreateContainer(fake, "main");
  }

  // The starts of the partitions a claim's allocation names ("gpu-0-mig-2g10gb-14-<start>").
  std::set<int> AllocatedStarts(const std::string& claim) {
    std::set<int> out;
    const json c = *api_->Get("resourceclaims", "default", claim);
    for (const json& r : c["status"]["allocation"]["devices"]["results"]) {
      const std::string device = r["device"];
      out.insert(std::stoi(device.substr(device.rfind('-') + 1)));
    }
    return out;
  }

  void TearDown() override {
    if (other_driver_) other_driver_->Stop();
    if (dra_kubelet_) dra_kubelet_->Stop();
    DeploySeedTest::TearDown();
  }

  std::unique_ptr<k8s::Client> kubelet_client_;
  std::unique_ptr<kubelet::FakeDraKubelet> dra_kubelet_;
  std::unique_ptr<SchedulerDriver> other_driver_;
};

TEST_P(DraDeployTest, SeedExampleThroughDraAndACompetingFirstFitIsRefused) {
  // The kubelet first: the agent reports ready once the kubelet has registered its DRA driver.
  ASSERT_NO_FATAL_FAILURE(StartDraKubelet());
  ASSERT_NO_FATAL_FAILURE(StartInstall(GetParam()));
  ASSERT_TRUE(dra_kubelet_->WaitForPlugin(config::kDraDriverName, absl::Seconds(30)))
      << Slurp(agent_.log);

  // 1. The seed's pod: two 2g.10gb partitions, allocated by Prism.
  ASSERT_TRUE(api_->Create("resourceclaims", MigClaim("seed", 2, "2g.10gb")).ok());
  absl::SleepFor(absl::Milliseconds(300));  // The scheduler's claim informer sees it.
  json seed = ClaimPod("seed-pod", "seed");
  const std::string uid = Submit(seed);
  ASSERT_FALSE(uid.empty());
  ASSERT_TRUE(driver_->WaitBound({"default/seed-pod"}, absl::Seconds(30)))
      << Slurp(scheduler_.log) << driver_->TimelineTable({"default/seed-pod"});
  EXPECT_EQ(Pod("seed-pod")["spec"]["nodeName"], kNode);
  const std::set<int> seed_starts = AllocatedStarts("seed");
  ASSERT_EQ(seed_starts.size(), 2u);
  absl::StatusOr<kubelet::DraCreatedContainer> container = RunClaimPod("seed-pod", "seed");
  ASSERT_TRUE(container.ok()) << container.status() << Slurp(agent_.log);
  EXPECT_EQ(container->cdi_devices.size(), 2u);
  // Exactly those two instances, at the allocated starts; each with its two capability nodes.
  std::map<int, std::string> instances = Instances();
  std::set<int> made;
  for (const auto& [start, uuid] : instances) made.insert(start);
  EXPECT_EQ(made, seed_starts) << Slurp(agent_.log);
  size_t caps = 0;
  for (const kubelet::CdiDeviceNode& n : container->edits.device_nodes) {
    caps += n.path.rfind("/dev/nvidia-caps/nvidia-cap", 0) == 0;
  }
  EXPECT_EQ(caps, 4u);

  // 2. The next pod's 1g.5gb comes beside them; nothing moves.
  ASSERT_TRUE(api_->Create("resourceclaims", MigClaim("next", 1, "1g.5gb")).ok());
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_FALSE(Submit(ClaimPod("next-pod", "next")).empty());
  ASSERT_TRUE(driver_->WaitBound({"default/next-pod"}, absl::Seconds(30))) << Slurp(scheduler_.log);
  absl::StatusOr<kubelet::DraCreatedContainer> next = RunClaimPod("next-pod", "next");
  ASSERT_TRUE(next.ok()) << next.status() << Slurp(agent_.log);
  std::map<int, std::string> after = Instances();
  EXPECT_EQ(after.size(), 3u);
  for (const auto& [start, uuid] : instances) EXPECT_EQ(after[start], uuid) << "moved: " << start;

  // 3. A pod of another scheduler (no Prism gate): kube-scheduler's own first fit allocates its
  //    claim, binds it, and the node agent refuses to prepare it.
  DriverOptions o;
  o.scheduler_name = "other-scheduler";
  other_driver_ = std::make_unique<SchedulerDriver>(client_.get(), o);
  other_driver_->Start();
  ASSERT_TRUE(api_->Create("resourceclaims", MigClaim("rogue", 1, "1g.5gb")).ok());
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_FALSE(Submit(ClaimPod("rogue-pod", "rogue", "other-scheduler"), "other-scheduler").empty());
  ASSERT_TRUE(other_driver_->WaitBound({"default/rogue-pod"}, absl::Seconds(30)));
  absl::StatusOr<kubelet::DraCreatedContainer> rogue = RunClaimPod("rogue-pod", "rogue");
  ASSERT_FALSE(rogue.ok());
  EXPECT_THAT(std::string(rogue.status().message()), HasSubstr("not allocated by Prism"));
  EXPECT_EQ(Instances(), after) << "a foreign allocation changed the GPU";
}

INSTANTIATE_TEST_SUITE_P(Dra, DraDeployTest,
                         ::testing::Values(NodeCase{"a100", kA100Gpus, {}, {}}), CaseName);

json SliceClaim(const std::string& name, const std::string& memory, int cores) {
  json claim = MigClaim(name, 1, "unused");
  json& exactly = claim["spec"]["devices"]["requests"][0]["exactly"];
  exactly = {{"deviceClassName", config::kDraSliceClass},
             {"capacity", {{"requests", {{"memory", memory}, {"cores", std::to_string(cores)}}}}}};
  return claim;
}

bool HasEnv(const kubelet::DraCreatedContainer& c, const std::string& entry) {
  return std::find(c.edits.env.begin(), c.edits.env.end(), entry) != c.edits.env.end();
}

class DraShareDeployTest : public DraDeployTest {};

TEST_P(DraShareDeployTest, AShareClaimIsPackedBesideADevicePluginSlicePod) {
  ASSERT_NO_FATAL_FAILURE(StartDraKubelet());
  ASSERT_NO_FATAL_FAILURE(StartInstall(GetParam()));
  ASSERT_TRUE(dra_kubelet_->WaitForPlugin(config::kDraDriverName, absl::Seconds(30)))
      << Slurp(agent_.log);

  // 1. A HAMi pod through the device-plugin path: 10000 MiB and 30 % of one GPU.
  json hami = MigPod("hami", 1, 10000);
  hami["metadata"].erase("annotations");  // Not MIG: a software slice.
  hami["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = "30";
  const std::string hami_uid = Submit(hami);
  ASSERT_FALSE(hami_uid.empty());
  absl::StatusOr<kubelet::CreatedContainer> slice = Run(Pod("hami"), hami_uid);
  ASSERT_TRUE(slice.ok()) << slice.status() << Slurp(agent_.log);
  EXPECT_EQ(slice->env["CUDA_DEVICE_MEMORY_LIMIT_0"], "10000m");
  const std::string gpu = slice->env["NVIDIA_VISIBLE_DEVICES"];
  ASSERT_EQ(gpu.rfind("GPU-", 0), 0u) << gpu;

  // 2. A claim for 8 GiB and 40 % of a GPU: Prism's engine packs it onto the same GPU.
  ASSERT_TRUE(api_->Create("resourceclaims", SliceClaim("share", "8Gi", 40)).ok());
  absl::SleepFor(absl::Milliseconds(300));  // The scheduler's claim informer sees it.
  ASSERT_FALSE(Submit(ClaimPod("share-pod", "share")).empty());
  ASSERT_TRUE(driver_->WaitBound({"default/share-pod"}, absl::Seconds(30)))
      << Slurp(scheduler_.log) << driver_->TimelineTable({"default/share-pod"});
  const json claim = *api_->Get("resourceclaims", "default", "share");
  const json& result = claim["status"]["allocation"]["devices"]["results"][0];
  EXPECT_EQ(result["device"], "gpu-0");
  EXPECT_EQ(result["consumedCapacity"]["cores"], "40");
  const std::string share_id = result.value("shareID", "");
  EXPECT_EQ(share_id.size(), 36u) << claim.dump();
  absl::StatusOr<kubelet::DraCreatedContainer> shared = RunClaimPod("share-pod", "share");
  ASSERT_TRUE(shared.ok()) << shared.status() << Slurp(agent_.log);
  EXPECT_EQ(shared->cdi_devices, std::vector<std::string>{StrCat("prism.io/claim=", k8s::Uid(claim),
                                                                 "-gpu-0-", share_id)});
  // The limits libprism-vgpu reads, on the HAMi pod's GPU.
  EXPECT_TRUE(HasEnv(*shared, "CUDA_DEVICE_MEMORY_LIMIT_0=8192m"));
  EXPECT_TRUE(HasEnv(*shared, "CUDA_DEVICE_SM_LIMIT=40"));
  bool on_gpu = false;
  for (const auto& m : shared->edits.mounts) {
    on_gpu = on_gpu || m.container_path == "/var/run/nvidia-container-devices/" + gpu;
  }
  EXPECT_TRUE(on_gpu) << "the share is not on " << gpu;
}

INSTANTIATE_TEST_SUITE_P(Dra, DraShareDeployTest,
                         ::testing::Values(NodeCase{
                             "a100_shared", "gpus:\n  - model: A100-PCIE-40GB\n", {}, {}}),
                         CaseName);

// HAMi pods on a DRA-only pool, as examples/dra-hami/ installs it (docs/dra.md, "HAMi pods under
// DRA"): the user's pod is the device-plugin path's HAMi pod, unchanged; the webhook makes it a
// claim from a template it creates; the resourceclaim controller's step (syncPod) is the test's;
// Prism allocates the share the HAMi request asked and the container gets its limits.
class DraHamiDeployTest : public DraDeployTest {
 protected:
  DraHamiDeployTest() { bundle_dir_ = "examples/dra-hami"; }
};

TEST_P(DraHamiDeployTest, AHamiPodIsServedThroughAClaimWithItsLimits) {
  ASSERT_NO_FATAL_FAILURE(StartDraKubelet());
  ASSERT_NO_FATAL_FAILURE(StartInstall(GetParam()));
  ASSERT_TRUE(dra_kubelet_->WaitForPlugin(config::kDraDriverName, absl::Seconds(30)))
      << Slurp(agent_.log);
  // 4000 MiB, no gpucores: HAMi's best effort share.
  json hami = MigPod("hami", 1, 4000);
  hami["metadata"].erase("annotations");
  const std::string uid = Submit(hami);
  ASSERT_FALSE(uid.empty());
  const json stored = Pod("hami");
  ASSERT_TRUE(config::HasDraSchedulingGate(stored)) << stored.dump();
  ASSERT_EQ(stored["spec"]["resourceClaims"].size(), 1u) << stored.dump();
  EXPECT_FALSE(stored["spec"]["containers"][0]["resources"].contains("limits")) << stored.dump();
  const std::string template_name = stored["spec"]["resourceClaims"][0]["resourceClaimTemplateName"];
  absl::StatusOr<json> tmpl = api_->Get("resourceclaimtemplates", "default", template_name);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status() << Slurp(scheduler_.log);
  // The resourceclaim controller's syncPod: the claim from the template, owned by the pod.
  json claim{{"apiVersion", "resource.k8s.io/v1"},
             {"kind", "ResourceClaim"},
             {"metadata",
              {{"name", "hami-prism-gpu-0-ab12c"},
               {"namespace", "default"},
               {"ownerReferences",
                json::array({{{"apiVersion", "v1"},
                              {"kind", "Pod"},
                              {"name", "hami"},
                              {"uid", uid},
                              {"controller", true}}})}}},
             {"spec", (*tmpl)["spec"]["spec"]}};
  ASSERT_TRUE(api_->Create("resourceclaims", claim).ok());
  json with_status = stored;
  with_status["status"]["resourceClaimStatuses"] =
      json::array({{{"name", "prism-gpu-0"}, {"resourceClaimName", "hami-prism-gpu-0-ab12c"}}});
  ASSERT_TRUE(client_->Update(k8s::kPods, "default", with_status, "status").ok());
  ASSERT_TRUE(driver_->WaitBound({"default/hami"}, absl::Seconds(30)))
      << Slurp(scheduler_.log) << driver_->TimelineTable({"default/hami"});
  const json allocated = *api_->Get("resourceclaims", "default", "hami-prism-gpu-0-ab12c");
  const json& result = allocated["status"]["allocation"]["devices"]["results"][0];
  EXPECT_EQ(result["request"], "gpu/slice");
  EXPECT_EQ(result["consumedCapacity"], json::parse(R"({"memory":"4000Mi","cores":"0","slots":"1"})"));
  // The kubelet runs it: the limits a device-plugin slice of 4000 MiB gets, no SM throttle.
  kubelet::FakeDraPod fake{uid, "default", "hami", {{"prism-gpu-0", "hami-prism-gpu-0-ab12c"}},
                           {{"main", {{"prism-gpu-0", ""}}}}};
  ASSERT_TRUE(dra_kubelet_->PrepareResources(fake).ok()) << Slurp(agent_.log);
  absl::StatusOr<kubelet::DraCreatedContainer> container = dra_kubelet_->CreateContainer(fake, "main");
  ASSERT_TRUE(container.ok()) << container.status() << Slurp(agent_.log);
  EXPECT_TRUE(HasEnv(*container, "CUDA_DEVICE_MEMORY_LIMIT_0=4000m"));
  EXPECT_TRUE(HasEnv(*container, "CUDA_DEVICE_SM_LIMIT=100"));
}

INSTANTIATE_TEST_SUITE_P(Dra, DraHamiDeployTest,
                         ::testing::Values(NodeCase{
                             "t4_dra_only", "gpus:\n  - model: Tesla T4\n    memory_mib: 15360\n", {}, {}}),
                         CaseName);

}  // namespace
}  // namespace prism::e2e
