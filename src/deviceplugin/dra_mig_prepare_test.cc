// MIG partitions through the DRA kubelet plugin (docs/dra.md, second slice): publication with
// counters, Prepare of the exact partition through the node agent's MIG realizer, both paths
// refusing each other's instances, and a restart between Prepare and Unprepare.
#include "deviceplugin/dra_test_fixture.h"
#include "nvml/open_nvml.h"

namespace prism::deviceplugin {
namespace {

// MIG partitions end to end: simulated A100s (GPU 0 dynamic, GPU 1 static with one instance the
// MIG manager made), the realizer the node agent would own, the fake DRA kubelet.
class DraMigPrepareTest : public DraTest {
 protected:
  void SetUp() override {
    DraTest::SetUp();
    sim_file_ = testing::WriteFile(dir_ / "gpus.yaml", R"(gpus:
  - model: A100-SXM4-40GB
    mig: {enabled: true}
  - model: A100-SXM4-40GB
    mig: {enabled: true}
)");
    auto nvml = nvml::OpenNvml("sim:" + sim_file_);
    ASSERT_TRUE(nvml.ok()) << nvml.status();
    nvml_ = *std::move(nvml);
    // The MIG manager's instance on the static GPU.
    auto gi = nvml_->CreateGpuInstance(1, 9, 0);
    ASSERT_TRUE(gi.ok()) << gi.status();
    ASSERT_TRUE(nvml_->CreateComputeInstance(1, gi->id, 3).ok());
    NewRealizer();
    gpu_source_ = [this]() -> absl::StatusOr<std::vector<DraGpu>> {
      absl::MutexLock lock(&nvml_mu_);
      return ReadDraGpusWithRealizer(nvml_.get(), (dir_ / "host" / "proc").string(), *realizer_);
    };
    mig_worker_ = [this](const std::function<void(nvml::Nvml&, MigRealizer&)>& task) {
      absl::MutexLock lock(&nvml_mu_);
      task(*nvml_, *realizer_);
      return absl::OkStatus();
    };
  }

  // A fresh realizer, as after an agent restart (holds in memory are lost).
  void NewRealizer() {
    absl::MutexLock lock(&nvml_mu_);
    realizer_ = std::make_unique<MigRealizer>(nvml_.get(), MigRealizerOptions{0});
    realizer_->SetDynamicGpus(std::set<int>{0});
  }

  void StartMigAgent() {
    auto gpus = gpu_source_();
    ASSERT_TRUE(gpus.ok()) << gpus.status();
    gpus_ = *gpus;
    StartAgentWith([this](DraDriverOptions& o) {
      o.gpus = gpu_source_;
      o.mig_worker = mig_worker_;
    });
    // What NodeAgent::Start does through before_adopt.
    absl::MutexLock lock(&nvml_mu_);
    driver_->AdoptMig(*nvml_, *realizer_);
  }

  // (profile ID, start) of every GPU instance on `gpu`.
  std::set<std::pair<int, int>> Instances(int gpu) {
    absl::MutexLock lock(&nvml_mu_);
    auto list = nvml_->ListGpuInstances(gpu);
    EXPECT_TRUE(list.ok()) << list.status();
    std::set<std::pair<int, int>> out;
    if (list.ok()) {
      for (const auto& gi : *list) out.insert({gi.profile_id, gi.start});
    }
    return out;
  }

  std::string sim_file_;
  absl::Mutex nvml_mu_;
  std::unique_ptr<nvml::Nvml> nvml_;
  std::unique_ptr<MigRealizer> realizer_;
  std::function<absl::StatusOr<std::vector<DraGpu>>()> gpu_source_;
  std::function<absl::Status(const std::function<void(nvml::Nvml&, MigRealizer&)>&)> mig_worker_;
};

TEST_F(DraMigPrepareTest, PublishesPartitionsWithCountersAndStaticInstancesAsTheyAre) {
  StartMigAgent();
  StartKubelet();
  ASSERT_TRUE(WaitFor([&] { return api_.List("resourceslices").size() == 3; }, absl::Seconds(10)));
  std::vector<json> slices = api_.List("resourceslices");
  EXPECT_TRUE(ValidatePoolSlices(slices).ok()) << ValidatePoolSlices(slices);
  std::map<std::string, json> by_name;
  for (const json& s : slices) by_name[s["metadata"]["name"]] = s["spec"];
  const json& counters = by_name[std::string(kNode) + "-gpu.prism.io-counters-0"];
  ASSERT_EQ(counters["sharedCounters"].size(), 1u);  // The static GPU has none.
  EXPECT_EQ(counters["sharedCounters"][0]["name"], "gpu-0-counter-set");
  EXPECT_FALSE(counters.contains("devices"));
  const json& dynamic = by_name[std::string(kNode) + "-gpu.prism.io-0"];
  ASSERT_EQ(dynamic["devices"].size(), 25u);
  bool found = false;
  for (const json& d : dynamic["devices"]) {
    if (d["name"] != "gpu-0-mig-3g20gb-9-4") continue;
    found = true;
    EXPECT_EQ(d["attributes"]["type"]["string"], "mig");
    EXPECT_EQ(d["attributes"]["placementStart"]["int"], 4);
    EXPECT_EQ(d["attributes"]["computePercent"]["int"], 42);  // 3 of 7 compute slices.
    const json& c = d["consumesCounters"][0];
    EXPECT_EQ(c["counterSet"], "gpu-0-counter-set");
    EXPECT_EQ(c["counters"]["memory-slice-4"]["value"], "1");
    EXPECT_EQ(c["counters"]["memory-slice-7"]["value"], "1");
    EXPECT_FALSE(c["counters"].contains("memory-slice-3"));
    EXPECT_EQ(c["counters"]["compute-slices"]["value"], "3");
  }
  EXPECT_TRUE(found);
  const json& fixed = by_name[std::string(kNode) + "-gpu.prism.io-1"];
  ASSERT_EQ(fixed["devices"].size(), 1u);
  EXPECT_EQ(fixed["devices"][0]["name"], "gpu-1-mig-3g20gb-9-0");
  EXPECT_FALSE(fixed["devices"][0].contains("consumesCounters"));
  EXPECT_EQ(fixed["devices"][0]["attributes"]["migMode"]["string"], "static");
  // The validator refuses what the API server refuses.
  std::vector<json> both = slices;
  for (json& s : both) {
    if (s["spec"].contains("sharedCounters")) s["spec"]["devices"] = json::array();
  }
  EXPECT_NE(std::string(ValidatePoolSlices(both).message()).find("only one of"),
            std::string::npos);
  std::vector<json> dangling;
  for (const json& s : slices) {
    if (!s["spec"].contains("sharedCounters")) dangling.push_back(s);
  }
  for (json& s : dangling) s["spec"]["pool"]["resourceSliceCount"] = dangling.size();
  EXPECT_NE(std::string(ValidatePoolSlices(dangling).message()).find("no counter set"),
            std::string::npos);
}

TEST_F(DraMigPrepareTest, PreparesTheExactPartitionAndUnprepareDestroysIt) {
  StartMigAgent();
  StartKubelet();
  const std::string uid = CreateClaim("c", json::array({Result("gpu", "gpu-0-mig-3g20gb-9-4")}));
  ASSERT_TRUE(kubelet_->PrepareResources(Pod("c")).ok());
  EXPECT_EQ(Instances(0), (std::set<std::pair<int, int>>{{9, 4}}));
  ASSERT_EQ(driver_->Prepared().size(), 1u);
  const PreparedDevice d = driver_->Prepared()[0].devices[0];
  EXPECT_EQ(d.mig_profile, "3g.20gb");
  EXPECT_EQ(d.mig_start, 4);
  ASSERT_EQ(d.mig_uuid.rfind("MIG-", 0), 0u) << d.mig_uuid;
  auto container = kubelet_->CreateContainer(Pod("c"), "main");
  ASSERT_TRUE(container.ok()) << container.status();
  EXPECT_TRUE(HasMount(container->edits, "/dev/null",
                       "/var/run/nvidia-container-devices/" + d.mig_uuid));
  EXPECT_TRUE(HasEnv(container->edits, "NVIDIA_VISIBLE_DEVICES=void"));
  EXPECT_TRUE(HasNode(container->edits, "/dev/nvidia0"));
  bool caps = false;
  for (const auto& n : container->edits.device_nodes) {
    caps = caps || n.path.rfind("/dev/nvidia-caps/nvidia-cap", 0) == 0;
  }
  EXPECT_TRUE(caps) << "no MIG capability nodes";
  // An overlapping partition (memory slices 4-5) is refused, naming both devices.
  const std::string rival =
      CreateClaim("rival", json::array({Result("gpu", "gpu-0-mig-2g10gb-14-4")}), "pod-2");
  const std::string error = PrepareOne("rival", rival).error();
  EXPECT_NE(error.find("overlaps device 'gpu-0-mig-3g20gb-9-4'"), std::string::npos) << error;
  EXPECT_EQ(Instances(0), (std::set<std::pair<int, int>>{{9, 4}}));
  // One that fits beside it is created.
  const std::string beside =
      CreateClaim("beside", json::array({Result("gpu", "gpu-0-mig-3g20gb-9-0")}), "pod-3");
  EXPECT_EQ(PrepareOne("beside", beside).error(), "");
  EXPECT_EQ(Instances(0), (std::set<std::pair<int, int>>{{9, 0}, {9, 4}}));
  // Unprepare destroys it (no idle instances kept here) and removes the spec.
  ASSERT_TRUE(kubelet_->UnprepareResources(Pod("c")).ok());
  EXPECT_EQ(Instances(0), (std::set<std::pair<int, int>>{{9, 0}}));
  EXPECT_FALSE(fs::exists(DraCdiSpecPath(cdi_dir(), uid)));
}

TEST_F(DraMigPrepareTest, DevicePluginPathAndDraPathNeverShareAnInstance) {
  StartMigAgent();
  StartKubelet();
  // A device-plugin pod holds 4g.20gb@0 (slices 0-3).
  {
    absl::MutexLock lock(&nvml_mu_);
    ASSERT_TRUE(realizer_->Ensure(0, "4g.20gb", 0, InstanceOwner{"pod-dp", "main"}).ok());
  }
  // The published counter set leaves out what it holds: memory slices 0-3, 4 compute slices.
  auto gpus = gpu_source_();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  std::map<std::string, int64_t> left = AvailableMigCounters((*gpus)[0]);
  EXPECT_EQ(left["memory-slice-0"], 0);
  EXPECT_EQ(left["memory-slice-3"], 0);
  EXPECT_EQ(left["memory-slice-4"], 1);
  EXPECT_EQ(left["compute-slices"], 3);
  const std::string uid = CreateClaim("c", json::array({Result("gpu", "gpu-0-mig-3g20gb-9-0")}));
  const std::string error = PrepareOne("c", uid).error();
  EXPECT_NE(error.find("held by pod pod-dp"), std::string::npos) << error;
  EXPECT_TRUE(driver_->Prepared().empty());
  EXPECT_FALSE(fs::exists(DraCdiSpecPath(cdi_dir(), uid)));
  // The other way: a claim's instance is never taken or destroyed by the device-plugin path.
  const std::string mine = CreateClaim("mine", json::array({Result("gpu", "gpu-0-mig-3g20gb-9-4")}));
  ASSERT_EQ(PrepareOne("mine", mine).error(), "");
  // A claim's instance stays in the counters: the allocator counts allocated claims itself.
  gpus = gpu_source_();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_EQ(AvailableMigCounters((*gpus)[0])["memory-slice-4"], 1);
  absl::MutexLock lock(&nvml_mu_);
  auto taken = realizer_->Ensure(0, "2g.10gb", 4, InstanceOwner{"pod-dp2", "main"});
  ASSERT_FALSE(taken.ok());
  EXPECT_NE(std::string(taken.status().message()).find("held by ResourceClaim " + mine),
            std::string::npos)
      << taken.status();
}

TEST_F(DraMigPrepareTest, RestartBetweenPrepareAndUnprepareAndAStaticInstance) {
  StartMigAgent();
  StartKubelet();
  const std::string uid = CreateClaim(
      "c", json::array({Result("gpu", "gpu-0-mig-3g20gb-9-4"), Result("st", "gpu-1-mig-3g20gb-9-0")}));
  const auto before = PrepareOne("c", uid);
  ASSERT_EQ(before.error(), "");
  ASSERT_EQ(before.devices_size(), 2);
  StopAgent();
  NewRealizer();  // The agent's memory is gone; the checkpoint and NVML remain.
  StartMigAgent();
  ASSERT_TRUE(WaitFor([&] { return server_->registered(); }, absl::Seconds(10)));
  EXPECT_EQ(PrepareOne("c", uid).SerializeAsString(), before.SerializeAsString());
  {
    // Adopted: the device-plugin path cannot take it.
    absl::MutexLock lock(&nvml_mu_);
    EXPECT_FALSE(realizer_->Ensure(0, "3g.20gb", 4, InstanceOwner{"pod-dp", "main"}).ok());
  }
  ASSERT_TRUE(api_.Delete("resourceclaims", "default", "c").ok());
  ASSERT_TRUE(driver_->Unprepare({"default", "c", uid}).ok());
  EXPECT_TRUE(Instances(0).empty());
  // The static GPU's instance is the MIG manager's: taken as it is and left there.
  EXPECT_EQ(Instances(1), (std::set<std::pair<int, int>>{{9, 0}}));
}

}  // namespace
}  // namespace prism::deviceplugin
