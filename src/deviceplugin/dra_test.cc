// The DRA kubelet plugin (dra_driver.h, dra_server.h) between the fake DRA kubelet
// (src/kubelet/fake_dra_kubelet.h) and the fake API server, over the real gRPC and REST paths.
#include "deviceplugin/dra_test_fixture.h"
#include "nvml/topology.h"
#include "testing/fake_apiserver/feature_gates.h"

namespace prism::deviceplugin {
namespace {

TEST_F(DraTest, RegistersWithTheKubeletAsUpstreamExpects) {
  StartAgent();
  StartKubelet();
  std::optional<kubelet::FakeDraPlugin> plugin = kubelet_->Plugin(kDriver);
  ASSERT_TRUE(plugin.has_value());
  EXPECT_EQ(plugin->registration_socket,
            (dir_ / "plugins_registry" / "gpu.prism.io-reg.sock").string());
  EXPECT_EQ(plugin->endpoint, server_->endpoint());
  EXPECT_EQ(plugin->endpoint, (dir_ / "plugins" / kDriver / "dra.sock").string());
  EXPECT_EQ(plugin->supported_versions,
            (std::vector<std::string>{kubelet::kDraV1Service, kubelet::kDraV1beta1Service}));
  EXPECT_EQ(plugin->chosen_service, kubelet::kDraV1Service);
  EXPECT_TRUE(WaitFor([&] { return server_->registered(); }, absl::Seconds(5)));
  EXPECT_EQ(server_->notifications(), 1);
  EXPECT_EQ(kubelet_->registration_failures(), 0);
}

std::vector<json> Slices(const fakeapi::FakeApiServer& api) { return api.List("resourceslices"); }

TEST_F(DraTest, PublishesWholeGpusAfterRegistration) {
  StartAgent();
  StartKubelet();
  ASSERT_TRUE(WaitFor([&] { return Slices(api_).size() == 2; }, absl::Seconds(5)));
  std::vector<json> slices = Slices(api_);
  EXPECT_TRUE(ValidatePoolSlices(slices).ok()) << ValidatePoolSlices(slices);
  std::map<std::string, json> devices;
  for (const json& s : slices) {
    EXPECT_EQ(s["spec"]["driver"], kDriver);
    EXPECT_EQ(s["spec"]["nodeName"], kNode);
    EXPECT_EQ(s["spec"]["pool"]["name"], kNode);
    EXPECT_EQ(s["spec"]["pool"]["generation"], 1);
    EXPECT_EQ(s["spec"]["pool"]["resourceSliceCount"], 2);
    ASSERT_EQ(s["spec"]["devices"].size(), 1u);
    devices[s["spec"]["devices"][0]["name"]] = s["spec"]["devices"][0];
  }
  // GPU 2 is in MIG mode: not published as a whole GPU.
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices["gpu-0"]["attributes"]["uuid"]["string"], "GPU-aaaa");
  EXPECT_EQ(devices["gpu-0"]["attributes"]["type"]["string"], "gpu");
  EXPECT_EQ(devices["gpu-1"]["attributes"]["uuid"]["string"], "GPU-bbbb");
  EXPECT_EQ(devices["gpu-1"]["capacity"]["memory"]["value"], "40960Mi");
  // The kubelet wipes the node's slices (its start, a deregistration): a new registration
  // publishes them again.
  for (const json& s : slices) {
    ASSERT_TRUE(api_.Delete("resourceslices", "", s["metadata"]["name"].get<std::string>()).ok());
  }
  fs::remove(server_->registration_socket());
  StopAgent();
  StartAgent();
  EXPECT_TRUE(WaitFor([&] { return Slices(api_).size() == 2; }, absl::Seconds(10)));
}

TEST_F(DraTest, RepublishingBumpsTheGenerationOnlyWhenSomethingChanged) {
  DraSlicePublisher publisher(kDriver, kNode, client_.get());
  ASSERT_EQ(publisher.Publish(gpus_).value_or(-1), 1);
  const std::string version = Slices(api_)[0]["metadata"]["resourceVersion"];
  ASSERT_EQ(publisher.Publish(gpus_).value_or(-1), 1);
  EXPECT_EQ(Slices(api_)[0]["metadata"]["resourceVersion"], version);  // Nothing written.
  // GPU 1 lost, GPU 2 out of MIG mode: every slice of the pool at generation 2.
  std::vector<DraGpu> changed = {gpus_[0], gpus_[2]};
  changed[1].mig_enabled = false;
  ASSERT_EQ(publisher.Publish(changed).value_or(-1), 2);
  std::vector<json> slices = Slices(api_);
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_TRUE(ValidatePoolSlices(slices).ok()) << ValidatePoolSlices(slices);
  std::set<std::string> names;
  for (const json& s : slices) names.insert(s["spec"]["devices"][0]["name"]);
  EXPECT_EQ(names, (std::set<std::string>{"gpu-0", "gpu-2"}));
  // A slice of another driver or node is not ours to touch.
  json other = slices[0];
  other["metadata"] = {{"name", "other"}};
  other["spec"]["driver"] = "gpu.nvidia.com";
  ASSERT_TRUE(api_.Create("resourceslices", other).ok());
  ASSERT_EQ(publisher.Publish({}).value_or(-1), 3);
  ASSERT_EQ(Slices(api_).size(), 1u);
  EXPECT_EQ(Slices(api_)[0]["metadata"]["name"], "other");
}

TEST(DraSlicesTest, ValidationNamesWhatMakesAPoolUnusable) {
  std::vector<DraGpu> gpus = {Gpu(0, 0, "GPU-a", 100, false, "A"),
                              Gpu(1, 1, "GPU-b", 100, false, "B")};
  std::vector<json> slices = BuildWholeGpuSlices(kDriver, kNode, gpus, 3);
  ASSERT_TRUE(ValidatePoolSlices(slices).ok());
  auto broken = [&](const std::function<void(std::vector<json>&)>& edit) {
    std::vector<json> copy = slices;
    edit(copy);
    return std::string(ValidatePoolSlices(copy).message());
  };
  EXPECT_NE(broken([](auto& s) {
              s[1]["spec"]["devices"][0]["name"] = "gpu-0";
            }).find("device 'gpu-0' is already in the pool"),
            std::string::npos);
  EXPECT_NE(broken([](auto& s) {
              s[1]["spec"]["pool"]["generation"] = 4;
            }).find("spec.pool.generation: 4, another slice of the pool has 3"),
            std::string::npos);
  EXPECT_NE(broken([](auto& s) {
              s.pop_back();
            }).find("spec.pool.resourceSliceCount: 2, but the pool has 1 slices"),
            std::string::npos);
  EXPECT_NE(broken([](auto& s) {
              json many = json::array();
              for (int i = 0; i < 129; ++i) many.push_back({{"name", "d" + std::to_string(i)}});
              s[0]["spec"]["devices"] = many;
            }).find("129 devices, more than 128"),
            std::string::npos);
  EXPECT_NE(broken([](auto& s) {
              for (int i = 0; i < 33; ++i) {
                s[0]["spec"]["devices"][0]["attributes"]["a" + std::to_string(i)] = {{"int", i}};
              }
            }).find("attributes and capacities, more than 32"),
            std::string::npos);
  EXPECT_NE(broken([](auto& s) {
              s[0]["spec"]["devices"][0]["name"] = "GPU_0";
            }).find("spec.devices[0].name: not a DNS label"),
            std::string::npos);
  // Attributes as validateQualifiedName and validateDeviceAttribute take them.
  const std::vector<std::pair<json, std::string>> bad_attributes = {
      {{{"9lives", {{"int", 1}}}}, "'9lives' is not a qualified name"},
      {{{"a/b/c", {{"int", 1}}}}, "'a/b/c' is not a qualified name"},
      {{{"Bad_Domain/x", {{"int", 1}}}}, "'Bad_Domain/x' is not a qualified name"},
      {{{std::string(33, 'x'), {{"int", 1}}}}, "is not a qualified name"},
      {{{"two", {{"int", 1}, {"string", "x"}}}}, "attributes.two: exactly one value"},
      {{{"none", json::object()}}, "attributes.none: exactly one value"},
      {{{"long", {{"string", std::string(65, 's')}}}}, "attributes.long.string: longer than 64"},
      {{{"v", {{"version", "550.54"}}}}, "'550.54' is not a semver.org 2.0.0 version"},
      {{{"v", {{"version", "01.2.3"}}}}, "'01.2.3' is not a semver.org 2.0.0 version"},
      {{{"f", {{"float", 1.5}}}}, "'float' is not a bool, int, string or version"},
  };
  for (const auto& [attributes, want] : bad_attributes) {
    const std::string got = broken([&](auto& s) {
      for (const auto& [k, v] : attributes.items()) s[0]["spec"]["devices"][0]["attributes"][k] = v;
    });
    EXPECT_NE(got.find(want), std::string::npos) << attributes.dump() << " -> " << got;
  }
  for (const char* version : {"550.54.15", "1.0.0-rc.1+build.7", "0.0.0"}) {
    std::vector<json> copy = slices;
    copy[0]["spec"]["devices"][0]["attributes"]["driverVersion"] = {{"version", version}};
    copy[0]["spec"]["devices"][0]["attributes"]["resource.kubernetes.io/x_y"] = {{"bool", true}};
    EXPECT_TRUE(ValidatePoolSlices(copy).ok()) << version << ": " << ValidatePoolSlices(copy);
  }
  // Names stay valid for the longest node names.
  const std::string node = std::string(60, 'n') + "." + std::string(60, 'o') + "." +
                           std::string(60, 'd') + "." + std::string(60, 'e');
  std::vector<json> long_names = BuildWholeGpuSlices(kDriver, node, gpus, 1);
  EXPECT_TRUE(ValidatePoolSlices(long_names).ok()) << ValidatePoolSlices(long_names);
  EXPECT_NE(long_names[0]["metadata"]["name"], long_names[1]["metadata"]["name"]);
}

// A 1.34/1.35 API server has DRAPartitionableDevices and DRAConsumableCapacity off by default and
// drops their fields on write (strategy.go, dropDisabledFields). The publisher notices it in the
// answer, says so, and publishes at once what it can serve without them: whole GPUs, plain; no
// partitions of a GPU whose layout it owns (without counters any set of them could be
// allocated). The next publication changes nothing (no generation churn).
TEST(DraSlicesTest, AFeatureGateThatIsOffIsNoticedAndWhatNeedsItWithdrawn) {
  fakeapi::FakeApiServerOptions off;
  off.disabled_feature_gates = {"DRAPartitionableDevices", "DRAConsumableCapacity"};
  for (const bool gates_on : {false, true}) {
    fakeapi::FakeApiServer api(gates_on ? fakeapi::FakeApiServerOptions{} : off);
    ASSERT_TRUE(api.Start().ok());
    k8s::ClusterConfig config;
    config.server = api.url();
    auto client = k8s::Client::Create(config, k8s::ClientOptions{});
    ASSERT_TRUE(client.ok()) << client.status();
    DraGpu whole = Gpu(0, 0, "GPU-whole", 40960, false, "NVIDIA A100-SXM4-40GB");
    DraGpu mig = Gpu(1, 1, "GPU-mig", 40960, true, "NVIDIA A100-SXM4-40GB");
    const mig::GpuModel* a100 = mig::FindModel("A100-SXM4-40GB");
    ASSERT_NE(a100, nullptr);
    mig.mig_model = std::shared_ptr<const mig::GpuModel>(std::shared_ptr<void>(), a100);
    mig.mig_dynamic = true;
    DraPublishOptions options;
    options.consumable_capacity = true;
    MetricsRegistry metrics;
    DraSlicePublisher publisher(kDriver, kNode, client->get(), options, &metrics);
    const int64_t generation = publisher.Publish({whole, mig}).value_or(-1);
    std::vector<json> slices = api.List("resourceslices");
    EXPECT_TRUE(ValidatePoolSlices(slices).ok()) << ValidatePoolSlices(slices);
    std::map<std::string, json> devices;
    for (const json& slice : slices) {
      for (const json& d : slice["spec"].value("devices", json::array())) devices[d["name"]] = d;
    }
    if (gates_on) {
      EXPECT_EQ(generation, 1);
      EXPECT_TRUE(publisher.MissingFeatureGates().empty());
      EXPECT_EQ(metrics.Value("prism_dra_feature_gate_missing", {{"gate", "DRAConsumableCapacity"}}),
                0);
      EXPECT_NE(metrics.Render().find("prism_dra_feature_gate_missing{gate=\"DRAConsumableCapacity\"} 0"),
                std::string::npos)
          << metrics.Render();
      EXPECT_EQ(devices["gpu-0"]["allowMultipleAllocations"], true);
      EXPECT_GT(devices.size(), 20u);  // The whole GPU and every partition of the MIG one.
      continue;
    }
    EXPECT_EQ(generation, 2);  // The pool as first written, then without what needs the gates.
    EXPECT_EQ(publisher.MissingFeatureGates(),
              (std::vector<std::string>{"DRAConsumableCapacity", "DRAPartitionableDevices"}));
    for (const char* gate : {"DRAConsumableCapacity", "DRAPartitionableDevices"}) {
      EXPECT_EQ(metrics.Value("prism_dra_feature_gate_missing", {{"gate", gate}}), 1) << gate;
    }
    ASSERT_EQ(devices.size(), 1u) << json(slices).dump();
    EXPECT_FALSE(devices["gpu-0"].contains("allowMultipleAllocations"));
    EXPECT_EQ(devices["gpu-0"]["capacity"], json::parse(R"({"memory":{"value":"40960Mi"}})"));
    EXPECT_EQ(slices.size(), 1u);  // No counters slice, no slice of the MIG GPU.
    EXPECT_EQ(publisher.Publish({whole, mig}).value_or(-1), 2);  // Nothing changes.
  }
}

// The fake follows the API server: a gate's fields are kept on update when the stored slice
// already used them (the ...FeatureInUse checks), dropped otherwise.
TEST(DraSlicesTest, DroppedFieldsAreToldApartByGate) {
  const json sent = json::parse(R"({"spec":{"sharedCounters":[{"name":"s","counters":{}}],
      "devices":[{"name":"a","allowMultipleAllocations":true,
                  "capacity":{"memory":{"value":"1Mi","requestPolicy":{"default":"1Mi"}}}},
                 {"name":"b","consumesCounters":[{"counterSet":"s","counters":{}}]}]}})");
  EXPECT_TRUE(DroppedDraFeatureGates(sent, sent).empty());
  json stored = sent;
  fakeapi::DropDisabledSliceFields(&stored, nullptr, {"DRAConsumableCapacity"});
  EXPECT_EQ(DroppedDraFeatureGates(sent, stored),
            std::vector<std::string>{"DRAConsumableCapacity"});
  EXPECT_TRUE(stored["spec"].contains("sharedCounters"));
  stored = sent;
  fakeapi::DropDisabledSliceFields(&stored, nullptr, {"DRAPartitionableDevices"});
  EXPECT_EQ(DroppedDraFeatureGates(sent, stored),
            std::vector<std::string>{"DRAPartitionableDevices"});
  EXPECT_FALSE(stored["spec"]["devices"][1].contains("consumesCounters"));
  stored = sent;
  fakeapi::DropDisabledSliceFields(&stored, &sent, {"DRAPartitionableDevices", "DRAConsumableCapacity"});
  EXPECT_EQ(stored, sent);  // In use in the old object: kept.
  // An answer of another shape throws nothing; what it lacks reads as dropped.
  const std::vector<std::string> both{"DRAConsumableCapacity", "DRAPartitionableDevices"};
  for (const char* odd : {R"(5)", R"({"spec":5})", R"({"spec":{"devices":"x"}})",
                          R"({"spec":{"devices":[5,{"name":7},{"name":"a","capacity":"x"}]}})",
                          R"({"spec":{"devices":[{"name":"a","capacity":{"memory":3}}]}})"}) {
    std::vector<std::string> gates;
    EXPECT_NO_THROW(gates = DroppedDraFeatureGates(sent, json::parse(odd))) << odd;
    EXPECT_EQ(gates, both) << odd;
  }
  EXPECT_TRUE(DroppedDraFeatureGates(json::parse(R"({"spec":"x"})"), sent).empty());
}

TEST_F(DraTest, OlderKubeletChoosesV1beta1AndPrepares) {
  StartAgent();
  StartKubelet(/*v1beta1_only=*/true);
  EXPECT_EQ(kubelet_->Plugin(kDriver)->chosen_service, kubelet::kDraV1beta1Service);
  CreateClaim("c", json::array({Result("gpu", "gpu-0")}));
  ASSERT_TRUE(kubelet_->PrepareResources(Pod("c")).ok());
  auto container = kubelet_->CreateContainer(Pod("c"), "main");
  ASSERT_TRUE(container.ok()) << container.status();
  EXPECT_TRUE(HasMount(container->edits, "/dev/null", "/var/run/nvidia-container-devices/GPU-aaaa"));
}

TEST_F(DraTest, PreparesWholeGpuIntoACdiSpecTheResponseNames) {
  StartAgent();
  StartKubelet();
  const std::string uid = CreateClaim("c", json::array({Result("gpu", "gpu-1")}));
  const auto answer = PrepareOne("c", uid);
  ASSERT_EQ(answer.error(), "");
  ASSERT_EQ(answer.devices_size(), 1);
  const auto& device = answer.devices(0);
  EXPECT_EQ(device.pool_name(), kNode);
  EXPECT_EQ(device.device_name(), "gpu-1");
  EXPECT_EQ(std::vector<std::string>(device.request_names().begin(), device.request_names().end()),
            std::vector<std::string>{"gpu"});
  ASSERT_EQ(device.cdi_device_ids_size(), 1);
  EXPECT_EQ(device.cdi_device_ids(0), "prism.io/claim=" + uid + "-gpu-1");

  // The spec the runtime resolves that ID from.
  const fs::path spec = DraCdiSpecPath(cdi_dir(), uid);
  ASSERT_TRUE(fs::exists(spec));
  json parsed = json::parse(ReadText(spec));
  EXPECT_EQ(parsed["kind"], "prism.io/claim");
  auto edits = kubelet::ResolveCdiDevices(cdi_dir(), {device.cdi_device_ids(0)});
  ASSERT_TRUE(edits.ok()) << edits.status();
  // Devices are named by the toolkit's device-list mounts, which compose; the env only says
  // "void", once, for the spec (as the toolkit's own CDI specs: nvcdi GetCommonEdits).
  EXPECT_TRUE(HasEnv(*edits, "NVIDIA_VISIBLE_DEVICES=void"));
  EXPECT_TRUE(HasMount(*edits, "/dev/null", "/var/run/nvidia-container-devices/GPU-bbbb"));
  EXPECT_EQ(parsed["containerEdits"]["env"], json::array({"NVIDIA_VISIBLE_DEVICES=void"}));
  EXPECT_TRUE(parsed["devices"][0]["containerEdits"].value("env", json::array()).empty());
  EXPECT_TRUE(HasNode(*edits, "/dev/nvidia1"));
  EXPECT_TRUE(HasNode(*edits, "/dev/nvidiactl"));
  EXPECT_TRUE(HasNode(*edits, "/dev/nvidia-uvm"));
  EXPECT_FALSE(HasNode(*edits, "/dev/nvidia0"));
  // A whole GPU: no slice limits, no region, no preload.
  for (const std::string& e : edits->env) EXPECT_EQ(e.find("CUDA_DEVICE_"), std::string::npos);
}

TEST_F(DraTest, KubeletHandsEachContainerTheDevicesOfItsRequest) {
  StartAgent();
  StartKubelet();
  const std::string uid =
      CreateClaim("c", json::array({Result("a", "gpu-0"), Result("b/large", "gpu-1")}));
  kubelet::FakeDraPod pod = Pod("c", "a");
  pod.containers.push_back({"second", {{"gpus", "b"}}});
  ASSERT_TRUE(kubelet_->PrepareResources(pod).ok());
  auto first = kubelet_->CreateContainer(pod, "main");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->cdi_devices, std::vector<std::string>{"prism.io/claim=" + uid + "-gpu-0"});
  EXPECT_TRUE(HasNode(first->edits, "/dev/nvidia0"));
  EXPECT_FALSE(HasNode(first->edits, "/dev/nvidia1"));
  // "b/large" answers under its base request "b", which the container names.
  auto second = kubelet_->CreateContainer(pod, "second");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->cdi_devices, std::vector<std::string>{"prism.io/claim=" + uid + "-gpu-1"});
  EXPECT_TRUE(HasMount(second->edits, "/dev/null", "/var/run/nvidia-container-devices/GPU-bbbb"));
  // A prepared claim is not sent again.
  const int calls = kubelet_->prepare_calls();
  ASSERT_TRUE(kubelet_->PrepareResources(pod).ok());
  EXPECT_EQ(kubelet_->prepare_calls(), calls);
}

TEST_F(DraTest, PrepareIsIdempotent) {
  StartAgent();
  StartKubelet();
  const std::string uid = CreateClaim("c", json::array({Result("gpu", "gpu-0")}));
  const auto first = PrepareOne("c", uid);
  ASSERT_EQ(first.error(), "");
  const std::string spec = ReadText(DraCdiSpecPath(cdi_dir(), uid));
  // Asked again (a kubelet that lost the answer), even once the claim is gone from the API.
  ASSERT_TRUE(api_.Delete("resourceclaims", "default", "c").ok());
  const auto second = PrepareOne("c", uid);
  EXPECT_EQ(second.SerializeAsString(), first.SerializeAsString());
  EXPECT_EQ(ReadText(DraCdiSpecPath(cdi_dir(), uid)), spec);
  EXPECT_EQ(driver_->Prepared().size(), 1u);
}

TEST_F(DraTest, UnprepareRemovesTheSpecAndUnknownClaimsSucceed) {
  StartAgent();
  StartKubelet();
  const std::string uid = CreateClaim("c", json::array({Result("gpu", "gpu-0")}));
  ASSERT_TRUE(kubelet_->PrepareResources(Pod("c")).ok());
  ASSERT_TRUE(fs::exists(DraCdiSpecPath(cdi_dir(), uid)));
  ASSERT_TRUE(fs::exists(fs::path(state_dir()) / "claims" / (uid + ".json")));
  ASSERT_TRUE(kubelet_->UnprepareResources(Pod("c")).ok());
  EXPECT_FALSE(fs::exists(DraCdiSpecPath(cdi_dir(), uid)));
  EXPECT_FALSE(fs::exists(fs::path(state_dir()) / "claims" / (uid + ".json")));
  EXPECT_TRUE(driver_->Prepared().empty());

  auto unknown = kubelet_->NodeUnprepareResources(
      kDriver, {{"default", "never", "0b7c1a2e-5d3f-4e6a-9b8c-7d6e5f4a3b2c"}});
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  ASSERT_EQ(unknown->claims_size(), 1);
  EXPECT_EQ(unknown->claims().at("0b7c1a2e-5d3f-4e6a-9b8c-7d6e5f4a3b2c").error(), "");
  // A UID that could name a file elsewhere is refused, not acted on.
  auto hostile = kubelet_->NodeUnprepareResources(kDriver, {{"default", "x", "../../etc"}});
  ASSERT_TRUE(hostile.ok());
  EXPECT_NE(hostile->claims().at("../../etc").error().find("claim.uid"), std::string::npos);
}

TEST_F(DraTest, ClaimOfAnotherDriverOrPoolGetsAPerClaimError) {
  StartAgent();
  StartKubelet();
  const std::string nvidia =
      CreateClaim("nvidia", json::array({Result("gpu", "gpu-0", "gpu.nvidia.com")}));
  const std::string other_node =
      CreateClaim("elsewhere", json::array({Result("gpu", "gpu-0", kDriver, "node-b")}));
  const std::string good = CreateClaim("good", json::array({Result("gpu", "gpu-1")}));
  auto response = kubelet_->NodePrepareResources(kDriver, {{"default", "nvidia", nvidia},
                                                           {"default", "elsewhere", other_node},
                                                           {"default", "good", good}});
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->claims_size(), 3);
  const std::string& e1 = response->claims().at(nvidia).error();
  EXPECT_NE(e1.find("ResourceClaim default/nvidia"), std::string::npos) << e1;
  EXPECT_NE(e1.find("no device of driver gpu.prism.io"), std::string::npos) << e1;
  EXPECT_NE(e1.find("gpu.nvidia.com"), std::string::npos) << e1;
  const std::string& e2 = response->claims().at(other_node).error();
  EXPECT_NE(e2.find("status.allocation.devices.results[0]: pool 'node-b'"), std::string::npos)
      << e2;
  // The others' failures touch nothing of this one.
  EXPECT_EQ(response->claims().at(good).error(), "");
  EXPECT_EQ(response->claims().at(good).devices_size(), 1);
  EXPECT_FALSE(fs::exists(DraCdiSpecPath(cdi_dir(), nvidia)));
  EXPECT_FALSE(fs::exists(DraCdiSpecPath(cdi_dir(), other_node)));
  EXPECT_EQ(driver_->Prepared().size(), 1u);
}

TEST_F(DraTest, AllocationsPrismDidNotMakeAreNeverPrepared) {
  StartAgent();
  StartKubelet();
  // kube-scheduler's own first fit (a pod that bypassed Prism's gate): no marker.
  const std::string first_fit = CreateClaim("first-fit", json::array({Result("gpu", "gpu-0")}));
  json stripped = *api_.Get("resourceclaims", "default", "first-fit");
  stripped["status"]["allocation"]["devices"].erase("config");
  ASSERT_TRUE(client_->Update(kResourceClaims, "default", stripped, "status").ok());
  // A tenant's FromClaim copy of the marker proves nothing; nor does a marker for another node.
  const std::string copied = CreateClaim("copied", json::array({Result("gpu", "gpu-0")}));
  json forged = *api_.Get("resourceclaims", "default", "copied");
  forged["status"]["allocation"]["devices"]["config"][0]["source"] = "FromClaim";
  ASSERT_TRUE(client_->Update(kResourceClaims, "default", forged, "status").ok());
  const std::string moved = CreateClaim("moved", json::array({Result("gpu", "gpu-1")}));
  json elsewhere = *api_.Get("resourceclaims", "default", "moved");
  elsewhere["status"]["allocation"]["devices"]["config"] =
      json::array({config::DraAllocationMarker("pod-1", "node-b")});
  ASSERT_TRUE(client_->Update(kResourceClaims, "default", elsewhere, "status").ok());

  EXPECT_NE(PrepareOne("first-fit", first_fit).error().find("was not allocated by Prism"),
            std::string::npos)
      << PrepareOne("first-fit", first_fit).error();
  EXPECT_NE(PrepareOne("copied", copied).error().find("was not allocated by Prism"),
            std::string::npos);
  EXPECT_NE(PrepareOne("moved", moved).error().find("for node node-b, not this node"),
            std::string::npos)
      << PrepareOne("moved", moved).error();
  EXPECT_TRUE(driver_->Prepared().empty());
  EXPECT_FALSE(fs::exists(DraCdiSpecPath(cdi_dir(), first_fit)));
}

TEST_F(DraTest, MalformedClaimStatusGetsAnErrorNamingTheField) {
  StartAgent();
  StartKubelet();
  json bad_type = Result("gpu", "gpu-0");
  bad_type["device"] = 42;
  const std::string uid1 = CreateClaim("number", json::array({bad_type}));
  EXPECT_NE(PrepareOne("number", uid1)
                .error()
                .find("status.allocation.devices.results[0].device: expected a string"),
            std::string::npos)
      << PrepareOne("number", uid1).error();
  const std::string uid2 =
      CreateClaim("forged", json::array({Result("gpu", "gpu-0"), Result("gpu", "GPU_0/../x")}));
  const std::string e2 = PrepareOne("forged", uid2).error();
  EXPECT_NE(e2.find("status.allocation.devices.results[1].device: 'GPU_0/../x' is not a device"),
            std::string::npos)
      << e2;
  const std::string uid3 = CreateClaim("many", json(std::vector<json>(33, Result("gpu", "gpu-0"))));
  EXPECT_NE(PrepareOne("many", uid3).error().find("33 entries, more than 32"), std::string::npos);
  EXPECT_TRUE(driver_->Prepared().empty());
  EXPECT_FALSE(fs::exists(DraCdiSpecPath(cdi_dir(), uid1)));
  EXPECT_FALSE(fs::exists(DraCdiSpecPath(cdi_dir(), uid2)));
}

TEST_F(DraTest, RefusesWhatThisSliceDoesNotPrepareNamingTheDevice) {
  StartAgent();
  StartKubelet();
  const std::string mig = CreateClaim("mig", json::array({Result("gpu", "gpu-0-mig-1g5gb-19-0")}));
  // GPU 0 is not in MIG mode: it has no partitions.
  EXPECT_NE(PrepareOne("mig", mig).error().find("no device 'gpu-0-mig-1g5gb-19-0' on this node"),
            std::string::npos);
  json share = Result("gpu", "gpu-0");
  share["shareID"] = "1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9";
  const std::string shared = CreateClaim("shared", json::array({share}));
  EXPECT_NE(PrepareOne("shared", shared).error().find("does not publish shared devices"),
            std::string::npos);
  const std::string in_mig = CreateClaim("inmig", json::array({Result("gpu", "gpu-2")}));
  EXPECT_NE(PrepareOne("inmig", in_mig).error().find("'gpu-2' (GPU-cccc) is in MIG mode"),
            std::string::npos);
  const std::string missing = CreateClaim("missing", json::array({Result("gpu", "gpu-7")}));
  EXPECT_NE(PrepareOne("missing", missing).error().find("no device 'gpu-7' on this node"),
            std::string::npos);
  const std::string other = CreateClaim("other", json::array({Result("gpu", "tpu-0")}));
  EXPECT_NE(PrepareOne("other", other).error().find("no device 'tpu-0' in pool 'node-a'"),
            std::string::npos);
  EXPECT_TRUE(driver_->Prepared().empty());
}

TEST_F(DraTest, ADeviceIsNeverPreparedForTwoClaims) {
  StartAgent();
  StartKubelet();
  const std::string first = CreateClaim("first", json::array({Result("gpu", "gpu-0")}));
  const std::string second = CreateClaim("second", json::array({Result("gpu", "gpu-0")}));
  ASSERT_EQ(PrepareOne("first", first).error(), "");
  const std::string error = PrepareOne("second", second).error();
  EXPECT_NE(error.find("device 'gpu-0' is already prepared for ResourceClaim default/first (" +
                       first + ")"),
            std::string::npos)
      << error;
  EXPECT_FALSE(fs::exists(DraCdiSpecPath(cdi_dir(), second)));
}

TEST_F(DraTest, TheSameClaimPreparedConcurrentlyGetsOneAnswer) {
  StartAgent();
  StartKubelet();
  const std::string uid = CreateClaim("c", json::array({Result("gpu", "gpu-1")}));
  const std::string rival = CreateClaim("rival", json::array({Result("gpu", "gpu-1")}));
  constexpr int kCalls = 8;
  // Even calls ask for the claim, odd ones for a rival claim of the same device.
  std::vector<::k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourceResponse> answers(kCalls);
  std::vector<std::thread> threads;
  for (int i = 0; i < kCalls; ++i) {
    threads.emplace_back([&, i] {
      const std::string& claim_uid = i % 2 == 0 ? uid : rival;
      auto response = kubelet_->NodePrepareResources(
          kDriver, {{"default", i % 2 == 0 ? "c" : "rival", claim_uid}});
      if (response.ok() && response->claims().count(claim_uid) > 0) {
        answers[i] = response->claims().at(claim_uid);
      } else {
        answers[i].set_error("call failed");
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // One claim holds the device: every call for it got the same answer, every call for the other
  // an error naming the holder, and one spec exists.
  ASSERT_EQ(driver_->Prepared().size(), 1u);
  const int winner = driver_->Prepared()[0].uid == uid ? 0 : 1;
  for (int i = 0; i < kCalls; ++i) {
    if (i % 2 == winner) {
      EXPECT_EQ(answers[i].error(), "");
      EXPECT_EQ(answers[i].SerializeAsString(), answers[winner].SerializeAsString());
    } else {
      EXPECT_NE(answers[i].error().find("is already prepared for ResourceClaim"), std::string::npos)
          << answers[i].error();
    }
  }
  int specs = 0;
  for (const auto& entry : fs::directory_iterator(cdi_dir())) {
    if (entry.path().extension() == ".json") ++specs;
  }
  EXPECT_EQ(specs, 1);
}

TEST_F(DraTest, ClaimNotFoundOrReplaced) {
  StartAgent();
  StartKubelet();
  const std::string uid = "3a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d";
  EXPECT_EQ(PrepareOne("gone", uid).error(), "ResourceClaim default/gone not found");
  // The kubelet itself stops earlier, at its own GET.
  absl::Status status = kubelet_->PrepareResources(Pod("gone"));
  EXPECT_NE(status.message().find("fetch ResourceClaim gone"), std::string::npos) << status;
  // Same name, another object.
  CreateClaim("c", json::array({Result("gpu", "gpu-0")}));
  EXPECT_NE(PrepareOne("c", uid).error().find("(deleted and created again)"), std::string::npos);
  // Not reserved for the pod: the kubelet refuses before calling the plugin.
  CreateClaim("theirs", json::array({Result("gpu", "gpu-1")}), "pod-2");
  status = kubelet_->PrepareResources(Pod("theirs"));
  EXPECT_NE(status.message().find("is not allowed to use ResourceClaim theirs"), std::string::npos)
      << status;
}

TEST_F(DraTest, RestartBetweenPrepareAndUnprepareLosesNothing) {
  StartAgent();
  StartKubelet();
  const std::string uid = CreateClaim("c", json::array({Result("gpu", "gpu-0")}));
  ASSERT_TRUE(kubelet_->PrepareResources(Pod("c")).ok());
  const auto before = PrepareOne("c", uid);
  StopAgent();
  // The claim is deleted while the agent is down: only the checkpoint knows what was prepared.
  ASSERT_TRUE(api_.Delete("resourceclaims", "default", "c").ok());
  StartAgent();
  ASSERT_TRUE(WaitFor([&] { return server_->registered(); }, absl::Seconds(10)));
  ASSERT_EQ(driver_->Prepared().size(), 1u);
  // A second device claim for the same GPU is still refused after the restart.
  const std::string rival = CreateClaim("rival", json::array({Result("gpu", "gpu-0")}));
  EXPECT_NE(PrepareOne("rival", rival).error().find("already prepared"), std::string::npos);
  EXPECT_EQ(PrepareOne("c", uid).SerializeAsString(), before.SerializeAsString());
  ASSERT_TRUE(kubelet_->UnprepareResources(Pod("c")).ok());
  EXPECT_FALSE(fs::exists(DraCdiSpecPath(cdi_dir(), uid)));
  EXPECT_TRUE(driver_->Prepared().empty());
  EXPECT_EQ(PrepareOne("rival", rival).error(), "");
}

// An unhealthy GPU (the agent's XID or probe verdict) is withdrawn from the pool and refused at
// Prepare; a claim already prepared on it keeps its answer.
TEST_F(DraTest, AnUnhealthyGpuIsWithdrawnAndRefused) {
  StartAgent();
  StartKubelet();
  ASSERT_TRUE(WaitFor([&] { return Slices(api_).size() == 2; }, absl::Seconds(5)));
  const std::string kept = CreateClaim("kept", json::array({Result("gpu", "gpu-1")}));
  const auto before = PrepareOne("kept", kept);
  ASSERT_EQ(before.error(), "");
  gpus_[0].healthy = false;
  gpus_[1].healthy = false;
  ASSERT_EQ(publisher_->Publish(gpus_).value_or(-1), 2);
  // Both slices gone (GPU 2, in MIG mode without a model here, publishes nothing).
  EXPECT_TRUE(Slices(api_).empty());
  gpus_[1].healthy = true;
  // An empty pool kept no generation: it starts again (no slice of an older one is left).
  ASSERT_EQ(publisher_->Publish(gpus_).value_or(-1), 1);
  ASSERT_EQ(Slices(api_).size(), 1u);
  EXPECT_EQ(Slices(api_)[0]["spec"]["devices"][0]["name"], "gpu-1");
  const std::string refused = CreateClaim("refused", json::array({Result("gpu", "gpu-0")}),
                                          "pod-2");
  const std::string error = PrepareOne("refused", refused).error();
  EXPECT_NE(error.find("GPU GPU-aaaa, which is unhealthy"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(DraCdiSpecPath(cdi_dir(), refused)));
  EXPECT_EQ(PrepareOne("kept", kept).SerializeAsString(), before.SerializeAsString());
}

// The node's two paths share one GpuHolds (gpu_holds.h): a claim's whole GPU and shares are
// checked against the device-plugin path's slices, released at Unprepare, and restored from
// the checkpoint after a restart so that the device-plugin path still sees them.
TEST_F(DraTest, ClaimsHoldTheirGpusAgainstTheDevicePluginPathAcrossRestarts) {
  GpuHolds holds(10);
  auto with_holds = [&](DraDriverOptions& o) { o.gpu_holds = &holds; };
  // A device-plugin slice on GPU 0.
  ASSERT_TRUE(holds.Take(GpuPath::kDevicePlugin, "pod-dp", "main", "pod team/dp container main",
                         {GpuHold{"GPU-aaaa", 40960, false, 1000, 0, 1}})
                  .ok());
  StartAgentWith(with_holds);
  StartKubelet();
  const std::string on0 = CreateClaim("on0", json::array({Result("gpu", "gpu-0")}));
  const std::string error = PrepareOne("on0", on0).error();
  EXPECT_NE(error.find("pod team/dp container main"), std::string::npos) << error;
  EXPECT_TRUE(driver_->Prepared().empty());
  const std::string on1 = CreateClaim("on1", json::array({Result("gpu", "gpu-1")}), "pod-2");
  ASSERT_EQ(PrepareOne("on1", on1).error(), "");
  EXPECT_THAT(holds.HoldersOf(GpuPath::kDra, "GPU-bbbb"),
              ::testing::ElementsAre("ResourceClaim default/on1"));
  // A restart: the agent's memory is gone, the checkpoint brings the hold back.
  StopAgent();
  holds.Release(GpuPath::kDra, on1);
  StartAgentWith(with_holds);
  EXPECT_THAT(holds.HoldersOf(GpuPath::kDra, "GPU-bbbb"),
              ::testing::ElementsAre("ResourceClaim default/on1"));
  EXPECT_FALSE(holds.Take(GpuPath::kDevicePlugin, "pod-dp2", "main", "pod dp2",
                          {GpuHold{"GPU-bbbb", 40960, false, 1000, 0, 1}})
                   .ok());
  ASSERT_TRUE(WaitFor([&] { return server_->registered(); }, absl::Seconds(10)));
  ASSERT_TRUE(driver_->Unprepare({"default", "on1", on1}).ok());
  EXPECT_TRUE(holds.HoldersOf(GpuPath::kDra, "GPU-bbbb").empty());
}

TEST_F(DraTest, RefusedRegistrationServesTheSocketAgain) {
  StartAgent();
  StartKubelet();
  ASSERT_TRUE(WaitFor([&] { return server_->notifications() == 1; }, absl::Seconds(5)));
  // A kubelet's refusal (as notifyPlugin sends it): the plugin logs it and offers a new socket,
  // whose create event brings the kubelet back.
  {
    auto channel = grpc::CreateChannel(kubelet::UnixTarget(server_->registration_socket()),
                                       grpc::InsecureChannelCredentials());
    auto stub = ::pluginregistration::Registration::NewStub(channel);
    ::pluginregistration::RegistrationStatus status;
    status.set_plugin_registered(false);
    status.set_error("refused for the test");
    ::pluginregistration::RegistrationStatusResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(stub->NotifyRegistrationStatus(&context, status, &response).ok());
  }
  EXPECT_FALSE(server_->registered());
  EXPECT_EQ(server_->registration_error(), "refused for the test");
  // Notifications: the first registration, the refusal, the registration on the new socket.
  EXPECT_TRUE(WaitFor([&] { return server_->registered() && server_->notifications() >= 3; },
                      absl::Seconds(10)));
  EXPECT_TRUE(kubelet_->Plugin(kDriver).has_value());
  // Removing the socket deregisters the plugin in the kubelet.
  fs::remove(server_->registration_socket());
  EXPECT_TRUE(WaitFor([&] { return !kubelet_->Plugin(kDriver).has_value(); }, absl::Seconds(5)));
}

// --- The node's GPUs, decoding and the checkpoint, without servers ----------------------------

TEST(DraGpusTest, MinorsFromTheDriverAndMigModeFromNvml) {
  const fs::path dir = TestDir();
  const std::string gpus = testing::WriteFile(dir / "gpus.yaml", R"(gpus:
  - model: A100-SXM4-40GB
    mig: {enabled: true, pending: true}
  - model: A100-SXM4-40GB
  - model: Tesla T4
    memory_mib: 15360
)");
  auto nvml = nvml::OpenNvml("sim:" + gpus);
  ASSERT_TRUE(nvml.ok()) << nvml.status();
  auto infos = (*nvml)->ListGpus();
  ASSERT_TRUE(infos.ok()) << infos.status();
  ASSERT_EQ(infos->size(), 3u);
  // The driver numbers GPU 1 as minor 4; GPU 2 has no information file (minor = its index).
  const fs::path proc = dir / "proc";
  fs::create_directories(proc / "driver/nvidia/gpus/0000:07:00.0");
  fs::create_directories(proc / "driver/nvidia/gpus/0000:0a:00.0");
  testing::WriteFile(proc / "driver/nvidia/gpus/0000:07:00.0/information",
                     "Model: \t A100\nGPU UUID: \t " + (*infos)[0].uuid + "\nDevice Minor: \t 0\n");
  testing::WriteFile(proc / "driver/nvidia/gpus/0000:0a:00.0/information",
                     "Model: \t A100\nGPU UUID: \t " + (*infos)[1].uuid + "\nDevice Minor: \t 4\n");
  auto read = ReadDraGpus(nvml->get(), proc.string());
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 3u);
  EXPECT_EQ((*read)[0].minor, 0u);
  EXPECT_TRUE((*read)[0].mig_enabled);
  EXPECT_EQ((*read)[1].minor, 4u);
  EXPECT_EQ((*read)[1].index, 1);
  EXPECT_FALSE((*read)[1].mig_enabled);
  EXPECT_EQ((*read)[1].uuid, (*infos)[1].uuid);
  EXPECT_EQ((*read)[2].minor, 2u);
  EXPECT_FALSE((*read)[2].mig_enabled);
  EXPECT_EQ((*read)[2].memory_mib, 15360);
  EXPECT_EQ(DraGpuDeviceName((*read)[1].minor), "gpu-4");
}

// What a claim's matchAttribute constraint or CEL selector needs to keep devices together: the
// PCI bus (NVIDIA's pcieBusID, Kubernetes' pciBusID) and the NUMA node, left out where the
// machine reports none (upstream's GetNUMANodeAttribute refuses -1: it would match every other
// NUMA-less device).
TEST(DraGpusTest, PublishesWhereEachGpuSits) {
  const fs::path dir = TestDir();
  const std::string gpus = testing::WriteFile(dir / "gpus.yaml", R"(gpus:
  - model: A100-SXM4-40GB
    mig: {enabled: true}
  - model: A100-SXM4-40GB
  - model: A100-SXM4-40GB
topology:
  numa: [0, 1, -1]
  matrix:
    - X SYS SYS
    - SYS X SYS
    - SYS SYS X
)");
  auto nvml = nvml::OpenNvml("sim:" + gpus);
  ASSERT_TRUE(nvml.ok()) << nvml.status();
  auto read = ReadDraGpus(nvml->get(), (dir / "no-proc").string());
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 3u);
  EXPECT_EQ((*read)[0].pci_bus_id, "0000:07:00.0");  // NVML's 00000000:07:00.0.
  EXPECT_EQ((*read)[1].pci_bus_id, "0000:0f:00.0");  // Lower case, as sysfs writes it.
  EXPECT_EQ((*read)[0].numa_node, 0);
  EXPECT_EQ((*read)[1].numa_node, 1);
  EXPECT_EQ((*read)[2].numa_node, -1);
  const std::vector<json> slices = BuildWholeGpuSlices(kDriver, kNode, *read, 1);
  ASSERT_TRUE(ValidatePoolSlices(slices).ok()) << ValidatePoolSlices(slices);
  std::map<std::string, json> attributes;
  for (const json& slice : slices) {
    if (!slice["spec"].contains("devices")) continue;
    for (const json& d : slice["spec"]["devices"]) attributes[d["name"]] = d["attributes"];
  }
  ASSERT_TRUE(attributes.contains("gpu-1") && attributes.contains("gpu-2"));
  EXPECT_EQ(attributes["gpu-1"]["pcieBusID"]["string"], "0000:0f:00.0");
  EXPECT_EQ(attributes["gpu-1"]["resource.kubernetes.io/pciBusID"]["string"], "0000:0f:00.0");
  EXPECT_EQ(attributes["gpu-1"]["resource.kubernetes.io/numaNode"]["int"], 1);
  EXPECT_FALSE(attributes["gpu-2"].contains("resource.kubernetes.io/numaNode"));
  // Every partition of the MIG GPU carries its parent's place.
  int partitions = 0;
  for (const auto& [name, a] : attributes) {
    if (name.rfind("gpu-0-mig-", 0) != 0) continue;
    ++partitions;
    EXPECT_EQ(a["resource.kubernetes.io/numaNode"]["int"], 0) << name;
    EXPECT_EQ(a["pcieBusID"]["string"], "0000:07:00.0") << name;
  }
  EXPECT_GT(partitions, 0);
  // A bus id NVML garbles is left out rather than published wrong.
  EXPECT_EQ(nvml::PciBusIdSysfsForm("00000000:07:00.0"), "0000:07:00.0");
  EXPECT_EQ(nvml::PciBusIdSysfsForm("0000:3B:00.1"), "0000:3b:00.1");
  EXPECT_EQ(nvml::PciBusIdSysfsForm("garbage"), "");
  EXPECT_EQ(nvml::PciBusIdSysfsForm("0000:07:00"), "");
  EXPECT_EQ(nvml::PciBusIdSysfsForm("0000:0g:00.0"), "");
}

TEST(DraClaimTest, DecodesResultsAndNamesBadFields) {
  json claim{
      {"metadata", {{"name", "c"}, {"namespace", "ns"}, {"uid", "u-1"}}},
      {"status",
       {{"allocation", {{"devices", {{"results", json::array({Result("r/s", "gpu-0")})}}}}}}}};
  auto parsed = ParseResourceClaim(claim);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->allocated);
  ASSERT_EQ(parsed->results.size(), 1u);
  EXPECT_EQ(parsed->results[0].request, "r/s");
  EXPECT_EQ(BaseRequestName(parsed->results[0].request), "r");

  json unallocated = claim;
  unallocated["status"].erase("allocation");
  EXPECT_FALSE(ParseResourceClaim(unallocated)->allocated);

  json bad = claim;
  bad["status"]["allocation"]["devices"]["results"][0]["pool"] = "a//b";
  EXPECT_NE(
      ParseResourceClaim(bad).status().message().find("status.allocation.devices.results[0].pool"),
      std::string::npos);
  bad = claim;
  bad["status"]["allocation"]["devices"]["results"][0]["driver"] = std::string(64, 'a');
  EXPECT_NE(ParseResourceClaim(bad).status().message().find(".driver"), std::string::npos);
  bad = claim;
  bad["status"]["allocation"]["devices"]["results"][0].erase("request");
  EXPECT_NE(ParseResourceClaim(bad).status().message().find(".request"), std::string::npos);
  bad = claim;
  bad["status"]["allocation"] = "x";
  EXPECT_NE(
      ParseResourceClaim(bad).status().message().find("status.allocation: expected an object"),
      std::string::npos);
  EXPECT_TRUE(IsPoolName("node-a"));
  EXPECT_TRUE(IsPoolName("a.b/c"));
  EXPECT_FALSE(IsPoolName("a/"));
  EXPECT_FALSE(IsPoolName(std::string(254, 'a')));
}

TEST(DraCheckpointTest, RoundTripsAndSkipsHostileRecords) {
  const fs::path dir = TestDir();
  PreparedClaim claim{"0b7c1a2e-5d3f-4e6a-9b8c-7d6e5f4a3b2c",
                      "default",
                      "c",
                      1234,
                      false,
                      {{"gpu", "node-a", "gpu-0", "GPU-a", {"prism.io/claim=x-gpu-0"}, "", -1, -1, -1,
                        "", "", 0, 0, 0},
                       {"mig", "node-a", "gpu-1-mig-3g20gb-9-4", "GPU-b",
                        {"prism.io/claim=x-gpu-1-mig-3g20gb-9-4"}, "3g.20gb", 4, 2, 0, "MIG-x", "",
                        0, 0, 0},
                       {"s", "node-a", "gpu-2", "GPU-c", {"prism.io/claim=x-gpu-2-s"}, "", -1, -1,
                        -1, "", "1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9", 10240, 30, 1}}};
  auto parsed = ParsePreparedClaim(PreparedClaimToJson(claim));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, claim);

  {
    DraCheckpoint checkpoint(dir.string());
    ASSERT_TRUE(checkpoint.Load().ok());
    ASSERT_TRUE(checkpoint.Put(claim).ok());
  }
  const fs::path claims = dir / "claims";
  // Hostile and damaged files beside the good one.
  testing::WriteFile(claims / "other-uid.json", PreparedClaimToJson(claim));  // Wrong name.
  json escape = json::parse(PreparedClaimToJson(claim));
  escape["uid"] = "../x";
  testing::WriteFile(claims / "..x.json", escape.dump());
  testing::WriteFile(claims / "junk.json", "{oops");
  json bad_device = json::parse(PreparedClaimToJson(claim));
  bad_device["devices"][0]["device"] = "../../etc";
  testing::WriteFile(claims / "dev.json", bad_device.dump());
  testing::WriteFile(claims / "big.json", std::string(300 << 10, ' '));
  DraCheckpoint reloaded(dir.string());
  ASSERT_TRUE(reloaded.Load().ok());
  ASSERT_EQ(reloaded.All().size(), 1u);
  EXPECT_EQ(reloaded.All()[0], claim);

  EXPECT_NE(ParsePreparedClaim(escape.dump()).status().message().find("claim.uid"),
            std::string::npos);
  EXPECT_NE(ParsePreparedClaim(bad_device.dump()).status().message().find("devices[0].device"),
            std::string::npos);
  EXPECT_FALSE(reloaded.Remove("../x").ok());
  ASSERT_TRUE(reloaded.Remove(claim.uid).ok());
  EXPECT_FALSE(fs::exists(claims / (claim.uid + ".json")));
  EXPECT_TRUE(reloaded.Remove(claim.uid).ok());
}

}  // namespace
}  // namespace prism::deviceplugin
