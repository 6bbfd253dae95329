// End to end: the MIG manager against the fake API server and simulated GPUs
// (manager_test_fixture.h): reconfiguration, failures, crashes, operands, reboots, ownership.
#include "migmanager/manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "migmanager/manager_test_fixture.h"

namespace prism::migmanager {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using namespace ::prism::migmanager::test_fixture;  // NOLINT: the fixture.

struct ModelCase {
  std::string name;
  std::string gpus;
  std::string product;  // As labelled.
  std::string layout_1g10gb;
  int count_1g10gb;
  std::string layout_balanced;
  std::map<std::string, std::string> balanced_counts;
};

class ModelTest : public MigManagerTest, public ::testing::WithParamInterface<ModelCase> {};

// The done-when sequence: label -> pending -> success with the expected layout and labels, for
// all-1g.10gb, all-balanced and all-disabled.
TEST_P(ModelTest, ReconfiguresThroughNvidiasDefaultConfigs) {
  const ModelCase& c = GetParam();
  SetGpus(c.gpus);
  CreateNode({{kConfigLabel, "all-1g.10gb"}, {kDevicePluginLabel, "true"}});
  daemonsets_->Add({"nvidia-device-plugin-daemonset",
                    {{kDevicePluginLabel, "true"}},
                    {{"app", "nvidia-device-plugin-daemonset"}}});
  daemonsets_->Sync();
  daemonsets_->Start();
  StartManager(Options());

  ReconcileResult r = Attempt(1);
  ASSERT_EQ(r.outcome, Outcome::kSuccess) << r.reason << ": " << r.message;
  EXPECT_EQ(Layout(0), c.layout_1g10gb);
  EXPECT_EQ(Label(kStateLabel), "success");
  EXPECT_EQ(Label("nvidia.com/mig-1g.10gb.count"), StrCat(c.count_1g10gb));
  EXPECT_EQ(Label("nvidia.com/mig-1g.10gb.product"), c.product + "-MIG-1g.10gb");
  EXPECT_EQ(Label("nvidia.com/mig.strategy"), "mixed");
  EXPECT_EQ(Label("nvidia.com/mig.capable"), "true");
  EXPECT_EQ(Label(kDevicePluginLabel), "true");
  EXPECT_THAT(Writes(kStateLabel), ElementsAre("pending", "success"));
  EXPECT_THAT(Writes(kDevicePluginLabel), ElementsAre(kPausedValue, "true"));

  SetLabel(kConfigLabel, "all-balanced");
  r = Attempt(2);
  ASSERT_EQ(r.outcome, Outcome::kSuccess) << r.reason << ": " << r.message;
  EXPECT_EQ(Layout(0), c.layout_balanced);
  for (const auto& [profile, count] : c.balanced_counts) {
    EXPECT_EQ(Label("nvidia.com/mig-" + profile + ".count"), count) << profile;
  }
  if (!c.balanced_counts.count("1g.10gb")) {
    EXPECT_EQ(Label("nvidia.com/mig-1g.10gb.count"), "<none>");  // Stale labels go.
  }
  EXPECT_EQ(Label("nvidia.com/gpu.product"), c.product);
  EXPECT_EQ(Label("nvidia.com/gpu.replicas"), "0");

  SetLabel(kConfigLabel, "all-disabled");
  r = Attempt(3);
  ASSERT_EQ(r.outcome, Outcome::kSuccess) << r.reason << ": " << r.message;
  EXPECT_EQ(Layout(0), "MIG off");
  EXPECT_EQ(Label("nvidia.com/gpu.product"), c.product);
  EXPECT_EQ(Label("nvidia.com/gpu.count"), "1");
  EXPECT_EQ(Label("nvidia.com/gpu.replicas"), "1");
  for (const auto& [key, value] : Labels()) {
    EXPECT_EQ(key.rfind("nvidia.com/mig-", 0), std::string::npos) << key << " left behind";
  }
  EXPECT_THAT(Writes(kStateLabel),
              ElementsAre("pending", "success", "pending", "success", "pending", "success"));
  EXPECT_EQ(Label(kDevicePluginLabel), "true");
  EXPECT_FALSE(Annotations().count(kInFlightAnnotation));
  // The operand was bounced each time.
  auto entries = log_.entries();
  EXPECT_EQ(std::count(entries.begin(), entries.end(), "delete nvidia-device-plugin-daemonset"), 3);
  manager_->Stop();
  const std::vector<std::string> reasons = EventReasons();
  EXPECT_EQ(std::count(reasons.begin(), reasons.end(), "MigConfigApplied"), 3);
  EXPECT_EQ(std::count(reasons.begin(), reasons.end(), "MigConfigPending"), 3);
}

INSTANTIATE_TEST_SUITE_P(
    Models, ModelTest,
    ::testing::Values(
        ModelCase{"H100_80GB",
                  kH100,
                  "NVIDIA-H100-80GB-HBM3",
                  "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6",
                  7,
                  "1g.10gb@0 1g.10gb@1 2g.20gb@2 3g.40gb@4",
                  {{"1g.10gb", "2"}, {"2g.20gb", "1"}, {"3g.40gb", "1"}}},
        ModelCase{"A100_40GB",
                  kA100,
                  "NVIDIA-A100-SXM4-40GB",
                  "1g.10gb@0 1g.10gb@2 1g.10gb@4 1g.10gb@6",
                  4,
                  "1g.5gb@0 1g.5gb@1 2g.10gb@2 3g.20gb@4",
                  {{"1g.5gb", "2"}, {"2g.10gb", "1"}, {"3g.20gb", "1"}}}),
    [](const ::testing::TestParamInfo<ModelCase>& p) { return p.param.name; });

TEST_F(MigManagerTest, SingleStrategyLabelsAsTheSeedShowsAndARestartChangesNothing) {
  SetGpus(kH100);
  CreateNode({{kConfigLabel, "all-1g.10gb"}, {kDevicePluginLabel, "true"}});
  ManagerOptions options = Options();
  options.reconciler.strategy = MigStrategy::kSingle;
  StartManager(options);
  ASSERT_EQ(Attempt(1).outcome, Outcome::kSuccess);
  EXPECT_EQ(Label("nvidia.com/gpu.product"), "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb");
  EXPECT_EQ(Label("nvidia.com/gpu.count"), "7");
  EXPECT_EQ(Label("nvidia.com/gpu.slices.gi"), "1");
  EXPECT_EQ(Label("nvidia.com/gpu.slices.ci"), "1");
  EXPECT_EQ(Label("nvidia.com/mig.strategy"), "single");
  manager_->Stop();

  // A restart re-applies the label: already applied, so no pause and no GPU call.
  server_->ClearRequests();
  const std::string before = GpuFile();
  StartManager(options);
  const ReconcileResult r = Attempt(1);
  EXPECT_EQ(r.outcome, Outcome::kSuccess);
  EXPECT_THAT(r.message, HasSubstr("is applied"));
  EXPECT_EQ(GpuFile(), before);
  EXPECT_TRUE(Writes(kStateLabel).empty());  // Still `success`: nothing to write.
  EXPECT_TRUE(Writes(kDevicePluginLabel).empty());
}

TEST_F(MigManagerTest, NvmlFailureFailsWithReasonLeavesGpuConsistentAndIsRetried) {
  SetGpus(kH100);
  CreateNode({{kConfigLabel, "all-balanced"}, {kDevicePluginLabel, "true"}});
  StartManager(Options());
  ASSERT_EQ(Attempt(1).outcome, Outcome::kSuccess);
  const std::string balanced = Layout(0);

  InjectFault("CreateGpuInstance", 1, 3);  // NVML_ERROR_NOT_SUPPORTED on the second create.
  SetLabel(kConfigLabel, "all-1g.10gb");
  const ReconcileResult failed = Attempt(2);
  EXPECT_EQ(failed.outcome, Outcome::kFailed);
  EXPECT_EQ(failed.reason, "ApplyFailed");
  EXPECT_TRUE(failed.retry);
  EXPECT_THAT(failed.message, HasSubstr("NVML_ERROR_NOT_SUPPORTED"));
  EXPECT_THAT(failed.message, HasSubstr("rolled back to the previous layout"));

  // The retry (after a short backoff, with no label change) succeeds: the fault was one-shot.
  const ReconcileResult retried = Attempt(3);
  EXPECT_EQ(retried.outcome, Outcome::kSuccess) << retried.message;
  EXPECT_EQ(Layout(0), "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6");
  EXPECT_THAT(Writes(kStateLabel),
              ElementsAre("pending", "success", "pending", "failed", "pending", "success"));
  EXPECT_THAT(Writes(kDevicePluginLabel),
              ElementsAre(kPausedValue, "true", kPausedValue, "true", kPausedValue, "true"));
  EXPECT_FALSE(Annotations().count(kReasonAnnotation));  // Cleared by the success.
  manager_->Stop();
  EXPECT_THAT(EventReasons(), ::testing::Contains("ApplyFailed"));
  (void)balanced;
}

TEST_F(MigManagerTest, FailedApplyLeavesTheGpuInItsPreviousLayout) {
  SetGpus(kH100);
  CreateNode({{kConfigLabel, "all-balanced"}});
  ManagerOptions options = Options();
  options.retry = {absl::Hours(1), absl::Hours(1), 2.0, 0.0};  // No retry within the test.
  StartManager(options);
  ASSERT_EQ(Attempt(1).outcome, Outcome::kSuccess);
  const std::string balanced = Layout(0);
  InjectFault("CreateGpuInstance", 2, 23);  // INSUFFICIENT_RESOURCES on the third create.
  SetLabel(kConfigLabel, "all-1g.10gb");
  const ReconcileResult r = Attempt(2);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(Layout(0), balanced);
  EXPECT_EQ(Label(kStateLabel), "failed");
  EXPECT_THAT(Annotations()[kReasonAnnotation], HasSubstr("ApplyFailed"));
  EXPECT_THAT(Annotations()[kReasonAnnotation], HasSubstr("INSUFFICIENT_RESOURCES"));
  // The labels describe what the GPU has, not what was asked.
  EXPECT_EQ(Label("nvidia.com/mig-3g.40gb.count"), "1");
}

TEST_F(MigManagerTest, RestartMidChangeFinishesTheChangeAndRestoresTheLabels) {
  SetGpus(kH100);
  CreateNode({{kConfigLabel, "all-1g.10gb"},
              {kDevicePluginLabel, "true"},
              {"nvidia.com/gpu.deploy.gpu-feature-discovery", "true"}});
  daemonsets_->Add({"nvidia-device-plugin-daemonset",
                    {{kDevicePluginLabel, "true"}},
                    {{"app", "nvidia-device-plugin-daemonset"}}});
  daemonsets_->Sync();
  daemonsets_->SetStuck(true);  // Its pod does not go away: the manager waits.
  daemonsets_->Start();
  StartManager(Options());
  ASSERT_TRUE(Eventually([&] {
    return Label(kStateLabel) == "pending" && Label(kDevicePluginLabel) == kPausedValue &&
           Annotations().count(kInFlightAnnotation);
  }));
  manager_->Abandon();  // As if killed.
  EXPECT_EQ(Label(kDevicePluginLabel), kPausedValue);
  EXPECT_EQ(Label("nvidia.com/gpu.deploy.gpu-feature-discovery"), kPausedValue);
  auto record = DecodeInFlight(Annotations()[kInFlightAnnotation]);
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->config, "all-1g.10gb");
  EXPECT_EQ(record->labels[kDevicePluginLabel], "true");
  EXPECT_EQ(Layout(0), "MIG off");

  daemonsets_->SetStuck(false);
  StartManager(Options());
  const ReconcileResult r = Attempt(1);
  ASSERT_EQ(r.outcome, Outcome::kSuccess) << r.message;
  EXPECT_EQ(Layout(0), "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6");
  EXPECT_EQ(Label(kDevicePluginLabel), "true");
  EXPECT_EQ(Label("nvidia.com/gpu.deploy.gpu-feature-discovery"), "true");
  EXPECT_EQ(Label(kStateLabel), "success");
  EXPECT_FALSE(Annotations().count(kInFlightAnnotation));
  EXPECT_TRUE(Eventually([&] {
    return server_->Get("pods", "gpu-operator", "nvidia-device-plugin-daemonset-node-1").ok();
  }));
}

TEST_F(MigManagerTest, CrashAfterStoppingHostServicesRestartsThemOnRecovery) {
  SetGpus(kA100);
  CreateNode({{kConfigLabel, "all-balanced"}, {kDevicePluginLabel, "true"}});
  host_->fake().AddRunning("nvsm.service");
  host_->fake().AddRunning("dcgm.service");
  ReconcilerOptions options = Options().reconciler;
  options.shutdown_host_gpu_clients = true;
  options.gpu_clients.systemd_services = {"nvsm.service", "dcgm.service"};
  Interrupt crash;
  host_->on_stop = [&](const std::string& unit) {
    if (unit == "dcgm.service") crash.Request(/*abandon=*/true);
  };
  Reconciler first(client_.get(), nvml_.get(), host_.get(), nullptr, nullptr, options);
  EXPECT_EQ(first.Reconcile(crash).outcome, Outcome::kInterrupted);
  EXPECT_EQ(host_->fake().Get("dcgm.service").active_state, "inactive");
  EXPECT_EQ(Label(kDevicePluginLabel), kPausedValue);
  auto record = DecodeInFlight(Annotations()[kInFlightAnnotation]);
  ASSERT_TRUE(record.ok());
  EXPECT_THAT(record->services, ElementsAre("nvsm.service", "dcgm.service"));

  host_->on_stop = nullptr;
  Reconciler second(client_.get(), nvml_.get(), host_.get(), nullptr, nullptr, options);
  Interrupt none;
  const ReconcileResult r = second.Reconcile(none);
  ASSERT_EQ(r.outcome, Outcome::kSuccess) << r.message;
  EXPECT_EQ(host_->fake().Get("nvsm.service").active_state, "active");
  EXPECT_EQ(host_->fake().Get("dcgm.service").active_state, "active");
  EXPECT_EQ(Label(kDevicePluginLabel), "true");
  EXPECT_EQ(Layout(0), "1g.5gb@0 1g.5gb@1 2g.10gb@2 3g.20gb@4");
  EXPECT_FALSE(Annotations().count(kInFlightAnnotation));
}

TEST_F(MigManagerTest, PausesAndRestoresGpuClientsInOrder) {
  SetGpus(kH100);
  CreateNode({{kConfigLabel, "all-3g.40gb"},
              {kDevicePluginLabel, "true"},
              {"nvidia.com/gpu.deploy.gpu-feature-discovery", "true"},
              {"nvidia.com/gpu.deploy.dcgm-exporter", "true"},
              {"nvidia.com/gpu.deploy.dcgm", "false"}});  // Switched off by the admin.
  daemonsets_->Add({"nvidia-device-plugin-daemonset", {{kDevicePluginLabel, "true"}}, {}});
  daemonsets_->Add(
      {"gpu-feature-discovery", {{"nvidia.com/gpu.deploy.gpu-feature-discovery", "true"}}, {}});
  daemonsets_->Add({"nvidia-dcgm-exporter", {{"nvidia.com/gpu.deploy.dcgm-exporter", "true"}}, {}});
  // A third-party client selected by the `client` switch is not on this node (no label).
  daemonsets_->Sync();
  const size_t before = log_.entries().size();  // The pods' first creation.
  ASSERT_EQ(before, 3u);
  daemonsets_->Start();
  host_->fake().AddRunning("nvsm.service");
  host_->fake().AddRunning("dcgm.service");
  host_->fake().Set("nvidia-dcgm.service", {"loaded", "failed", "enabled", "simple"});
  host_->fake().Set("dcgm-exporter.service", {"loaded", "inactive", "disabled", "simple"});
  ManagerOptions options = Options();
  options.reconciler.shutdown_host_gpu_clients = true;
  options.reconciler.gpu_clients.systemd_services = {"nvsm.service", "nv_peer_mem.service",
                                                     "dcgm.service", "nvidia-dcgm.service",
                                                     "dcgm-exporter.service"};
  StartManager(options);
  ASSERT_EQ(Attempt(1).outcome, Outcome::kSuccess);
  EXPECT_TRUE(Eventually([&] { return log_.entries().size() >= before + 11; }));
  const std::vector<std::string> all = log_.entries();
  const std::vector<std::string> entries(all.begin() + before, all.end());
  ASSERT_EQ(entries.size(), 11u) << StrJoin(entries, ", ");
  // Operand pods go first (any order), then host services stop in file order...
  EXPECT_THAT(std::vector<std::string>(entries.begin(), entries.begin() + 3),
              UnorderedElementsAre("delete nvidia-device-plugin-daemonset",
                                   "delete gpu-feature-discovery", "delete nvidia-dcgm-exporter"));
  // ...and come back in reverse: host services (the failed one is started too), then operands.
  EXPECT_THAT(std::vector<std::string>(entries.begin() + 3, entries.begin() + 8),
              ElementsAre("stop nvsm.service", "stop dcgm.service", "start nvidia-dcgm.service",
                          "start dcgm.service", "start nvsm.service"));
  EXPECT_THAT(std::vector<std::string>(entries.begin() + 8, entries.end()),
              UnorderedElementsAre("create nvidia-device-plugin-daemonset",
                                   "create gpu-feature-discovery", "create nvidia-dcgm-exporter"));
  EXPECT_EQ(Label("nvidia.com/gpu.deploy.dcgm"), "false");
  EXPECT_TRUE(Writes("nvidia.com/gpu.deploy.dcgm").empty());
  EXPECT_EQ(Label("nvidia.com/gpu.deploy.dcgm-exporter"), "true");
  EXPECT_EQ(Layout(0), "3g.40gb@0 3g.40gb@4");
}

TEST_F(MigManagerTest, BadInputFailsWithAReasonAndChangesNothing) {
  SetGpus(kH100);
  CreateNode({{kConfigLabel, "no-such-config"}, {kDevicePluginLabel, "true"}});
  SetConfigMap("config.yaml",
               "version: v1\nmig-configs:\n"
               "  all-disabled:\n    - devices: all\n      mig-enabled: false\n"
               "  too-big:\n    - devices: all\n      mig-enabled: true\n"
               "      mig-devices: {\"4g.40gb\": 1, \"3g.40gb\": 2}\n"
               "  wrong-model:\n    - devices: all\n      mig-enabled: true\n"
               "      mig-devices: {\"1g.5gb\": 7}\n"
               "  three-of-seven:\n    - devices: all\n      mig-enabled: true\n"
               "      mig-devices: {\"2g.20gb\": 3}\n");
  ManagerOptions options = Options();
  options.reconciler.config = {"gpu-operator", "custom-mig-config", "config.yaml", ""};
  StartManager(options);
  const std::string before = GpuFile();
  size_t n = 0;
  auto expect_refused = [&](const std::string& reason, const std::string& message) {
    const ReconcileResult r = Attempt(++n);
    EXPECT_EQ(r.outcome, Outcome::kFailed);
    EXPECT_EQ(r.reason, reason);
    EXPECT_FALSE(r.retry);
    EXPECT_THAT(r.message, HasSubstr(message));
    EXPECT_EQ(Label(kStateLabel), "failed");
    EXPECT_THAT(Annotations()[kReasonAnnotation], HasSubstr(message));
    EXPECT_EQ(GpuFile(), before);
    EXPECT_TRUE(Writes(kDevicePluginLabel).empty()) << "paused for bad input";
  };
  expect_refused("UnknownConfig",
                 "'no-such-config' is not in ConfigMap gpu-operator/custom-mig-config");
  SetLabel(kConfigLabel, "too-big");
  expect_refused("ConfigDoesNotFit", "MIG config 'too-big' cannot apply");
  SetLabel(kConfigLabel, "wrong-model");
  expect_refused("ConfigDoesNotFit", "'1g.5gb'");
  SetConfigMap("config.yaml", "version: v1\nmig-configs: [oops\n");
  expect_refused("ConfigInvalid", "ConfigMap gpu-operator/custom-mig-config key config.yaml");
  SetConfigMap("other.yaml", "version: v1\n");
  expect_refused("ConfigInvalid", "has no key 'config.yaml' (keys: other.yaml)");
  EXPECT_THAT(Writes(kStateLabel), ElementsAre("failed"));  // Only once: the same state.

  // Fixing the ConfigMap is enough to try again (it is watched).
  SetConfigMap("config.yaml",
               "version: v1\nmig-configs:\n  wrong-model:\n    - devices: all\n"
               "      mig-enabled: true\n      mig-devices: {\"2g.20gb\": 3}\n");
  const ReconcileResult fixed = Attempt(++n);
  EXPECT_EQ(fixed.outcome, Outcome::kSuccess) << fixed.message;
  EXPECT_EQ(Layout(0), "2g.20gb@0 2g.20gb@2 2g.20gb@4");
  EXPECT_FALSE(Annotations().count(kReasonAnnotation));
}

TEST_F(MigManagerTest, MissingConfigMapFailsUntilItAppears) {
  SetGpus(kH100);
  CreateNode({{kConfigLabel, "custom"}});
  ManagerOptions options = Options();
  options.reconciler.config = {"gpu-operator", "custom-mig-config", "config.yaml", ""};
  StartManager(options);
  const ReconcileResult missing = Attempt(1);
  EXPECT_EQ(missing.reason, "ConfigMissing");
  EXPECT_THAT(missing.message,
              HasSubstr("ConfigMap gpu-operator/custom-mig-config does not exist"));
  SetConfigMap("config.yaml",
               "version: v1\nmig-configs:\n  custom:\n    - devices: all\n"
               "      mig-enabled: true\n      mig-devices: {\"7g.80gb\": 1}\n");
  const ReconcileResult r = Attempt(2);
  EXPECT_EQ(r.outcome, Outcome::kSuccess) << r.message;
  EXPECT_EQ(Layout(0), "7g.80gb@0");
}

TEST_F(MigManagerTest, RefusesToChangeGpusThatPodsUseUnlessForced) {
  SetGpus(kH100);
  CreateNode({{kConfigLabel, "all-balanced"}});
  Json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "training"}, {"namespace", "ml"}}},
              {"spec",
               {{"nodeName", kNode},
                {"containers",
                 {{{"name", "main"},
                   {"image", "pytorch"},
                   {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}}}}}},
              {"status", {{"phase", "Running"}}}};
  ASSERT_TRUE(server_->Create("pods", pod).ok());
  ManagerOptions options = Options();
  options.retry = {absl::Hours(1), absl::Hours(1), 2.0, 0.0};
  StartManager(options);
  const std::string before = GpuFile();
  const ReconcileResult refused = Attempt(1);
  EXPECT_EQ(refused.outcome, Outcome::kFailed);
  EXPECT_EQ(refused.reason, "GpuInUse");
  EXPECT_TRUE(refused.retry);
  EXPECT_THAT(refused.message, HasSubstr("ml/training (nvidia.com/gpu)"));
  EXPECT_THAT(refused.message, HasSubstr(kForceAnnotation));
  EXPECT_EQ(GpuFile(), before);

  SetAnnotation(kForceAnnotation, "true");
  const ReconcileResult forced = Attempt(2);
  EXPECT_EQ(forced.outcome, Outcome::kSuccess) << forced.message;
  EXPECT_EQ(Layout(0), "1g.10gb@0 1g.10gb@1 2g.20gb@2 3g.40gb@4");
}

TEST_F(MigManagerTest, PodsOnOtherGpusDoNotBlockAChange) {
  SetGpus("gpus:\n  - model: H100-SXM5-80GB\n  - model: H100-SXM5-80GB\n");
  nvml::SimNvml nvml(gpus_path_);
  const std::string gpu1 = (*nvml.ListGpus())[1].uuid;
  CreateNode({{kConfigLabel, "custom"}});
  SetConfigMap("config.yaml",
               "version: v1\nmig-configs:\n  custom:\n    - devices: [0]\n"
               "      mig-enabled: true\n      mig-devices: {\"7g.80gb\": 1}\n");
  // A Prism pod whose decision puts it on GPU 1, which the config leaves alone.
  Json decision = {{"node", kNode},
                   {"containers", {{{"name", "main"}, {"devices", {{{"uuid", gpu1}}}}}}}};
  Json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", "inference"},
                {"namespace", "ml"},
                {"annotations", {{"prism.io/decision", decision.dump()}}}}},
              {"spec",
               {{"nodeName", kNode},
                {"containers",
                 {{{"name", "main"},
                   {"image", "x"},
                   {"resources", {{"limits", {{"nvidia.com/gpumem", "4000"}}}}}}}}}}};
  ASSERT_TRUE(server_->Create("pods", pod).ok());
  ManagerOptions options = Options();
  options.reconciler.config = {"gpu-operator", "custom-mig-config", "config.yaml", ""};
  StartManager(options);
  const ReconcileResult r = Attempt(1);
  EXPECT_EQ(r.outcome, Outcome::kSuccess) << r.message;
  EXPECT_EQ(Layout(0), "7g.80gb@0");
  EXPECT_EQ(Layout(1), "MIG off");
}

TEST_F(MigManagerTest, RebootsOnceForAModeChangeThatNeedsIt) {
  // An A100 in a VM that cannot reset its GPU: the mode change stays pending until a reboot.
  SetGpus("gpus:\n  - model: A100-SXM4-40GB\n    reset_supported: false\n");
  CreateNode({{kConfigLabel, "all-balanced"}, {kDevicePluginLabel, "true"}});
  rebooter_ = std::make_unique<FakeRebooter>([&] {
    // The host goes down: the pending mode takes effect (Ampere keeps it in the InfoROM).
    return nvml::sim::SimStateFile(gpus_path_).Transact([](nvml::sim::SimState& s, bool* changed) {
      nvml::sim::Reboot(s);
      *changed = true;
      return absl::OkStatus();
    });
  });
  ManagerOptions options = Options();
  options.reconciler.with_reboot = true;
  StartManager(options, rebooter_.get());
  const ReconcileResult rebooting = Attempt(1);
  ASSERT_EQ(rebooting.outcome, Outcome::kRebooting) << rebooting.message;
  EXPECT_EQ(rebooter_->reboots(), 1);
  EXPECT_EQ(Label(kStateLabel), "rebooting");
  EXPECT_EQ(Label(kDevicePluginLabel), kPausedValue);  // Operands stay away across the reboot.
  manager_->Abandon();                                 // The reboot kills the manager.

  StartManager(options, rebooter_.get());  // ...and the node comes back.
  const ReconcileResult r = Attempt(1);
  ASSERT_EQ(r.outcome, Outcome::kSuccess) << r.message;
  EXPECT_EQ(rebooter_->reboots(), 1);
  EXPECT_EQ(Layout(0), "1g.5gb@0 1g.5gb@1 2g.10gb@2 3g.20gb@4");
  EXPECT_EQ(Label(kDevicePluginLabel), "true");
  EXPECT_THAT(Writes(kStateLabel), ElementsAre("pending", "rebooting", "pending", "success"));
}

TEST_F(MigManagerTest, DoesNotRebootAgainWhenARebootDidNotHelp) {
  SetGpus("gpus:\n  - model: A100-SXM4-40GB\n    reset_supported: false\n");
  CreateNode({{kConfigLabel, "all-balanced"}, {kDevicePluginLabel, "true"}});
  // The "reboot" changes nothing (vSphere passthrough, mig-parted #9).
  rebooter_ = std::make_unique<FakeRebooter>();
  ManagerOptions options = Options();
  options.reconciler.with_reboot = true;
  StartManager(options, rebooter_.get());
  ASSERT_EQ(Attempt(1).outcome, Outcome::kRebooting);
  manager_->Abandon();
  StartManager(options, rebooter_.get());
  const ReconcileResult r = Attempt(1);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.reason, "RebootDidNotHelp");
  EXPECT_FALSE(r.retry);
  EXPECT_THAT(r.message, HasSubstr("MIG mode change did not take effect after rebooting"));
  EXPECT_EQ(rebooter_->reboots(), 1);
  EXPECT_EQ(Label(kStateLabel), "failed");
  EXPECT_EQ(Label(kDevicePluginLabel), "true");  // Clients come back even so.
  EXPECT_FALSE(Annotations().count(kInFlightAnnotation));
}

TEST_F(MigManagerTest, ModeChangeNeedingAResetFailsClearlyWithoutReboot) {
  SetGpus("gpus:\n  - model: A100-SXM4-40GB\n    reset_supported: false\n");
  CreateNode({{kConfigLabel, "all-balanced"}, {kDevicePluginLabel, "true"}});
  StartManager(Options());
  const ReconcileResult r = Attempt(1);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.reason, "ModeChangeNeedsReset");
  EXPECT_FALSE(r.retry);
  EXPECT_THAT(r.message, HasSubstr("--with-reboot"));
  EXPECT_EQ(Label(kDevicePluginLabel), "true");
  EXPECT_EQ(Label(kStateLabel), "failed");
}

TEST_F(MigManagerTest, OperandPodsThatNeverLeaveTimeOutAndTheChangeIsRetried) {
  SetGpus(kH100);
  CreateNode({{kConfigLabel, "all-7g.80gb"}, {kDevicePluginLabel, "true"}});
  daemonsets_->Add({"nvidia-device-plugin-daemonset",
                    {{kDevicePluginLabel, "true"}},
                    {{"app", "nvidia-device-plugin-daemonset"}}});
  daemonsets_->Sync();
  daemonsets_->SetStuck(true);
  daemonsets_->Start();
  ManagerOptions options = Options();
  options.reconciler.clock = &clock_;
  options.reconciler.pod_wait_timeout = absl::Minutes(5);
  options.retry = {absl::Hours(1), absl::Hours(1), 2.0, 0.0};
  StartManager(options);
  // Time passes (a minute per step) until the wait gives up; the retry is an hour away.
  ASSERT_TRUE(Eventually([&] {
    clock_.Advance(absl::Minutes(1));
    return !manager_->results().empty();
  }));
  const ReconcileResult r = Attempt(1);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.reason, "OperandsDidNotStop");
  EXPECT_TRUE(r.retry);
  EXPECT_THAT(r.message, HasSubstr("gpu-operator/nvidia-device-plugin-daemonset-node-1"));
  // Not wedged (mig-parted #485): operands are back and the record is gone.
  EXPECT_EQ(Label(kDevicePluginLabel), "true");
  EXPECT_EQ(Label(kStateLabel), "failed");
  EXPECT_FALSE(Annotations().count(kInFlightAnnotation));
  EXPECT_EQ(Layout(0), "MIG off");

  daemonsets_->SetStuck(false);
  clock_.Advance(absl::Hours(2));  // Past the retry backoff.
  const ReconcileResult retried = Attempt(2);
  EXPECT_EQ(retried.outcome, Outcome::kSuccess) << retried.message;
  EXPECT_EQ(Layout(0), "7g.80gb@0");
}

TEST_F(MigManagerTest, StoppingMidChangeGivesTheClientsBack) {
  SetGpus(kH100);
  CreateNode({{kConfigLabel, "all-balanced"}, {kDevicePluginLabel, "true"}});
  daemonsets_->Add({"nvidia-device-plugin-daemonset", {{kDevicePluginLabel, "true"}}, {}});
  daemonsets_->Sync();
  daemonsets_->SetStuck(true);
  daemonsets_->Start();
  StartManager(Options());
  ASSERT_TRUE(Eventually([&] { return Label(kDevicePluginLabel) == kPausedValue; }));
  manager_->Stop();
  EXPECT_EQ(Label(kDevicePluginLabel), "true");
  EXPECT_EQ(Label(kStateLabel), "failed");
  EXPECT_THAT(Annotations()[kReasonAnnotation], HasSubstr("Interrupted"));
  EXPECT_FALSE(Annotations().count(kInFlightAnnotation));
  EXPECT_EQ(manager_->results().back().outcome, Outcome::kInterrupted);
}

TEST_F(MigManagerTest, DynamicNodesAreLeftToTheDevicePlugin) {
  SetGpus(kH100);
  CreateNode({{kConfigLabel, "all-1g.10gb"}, {kMigModeLabel, "dynamic"}});
  StartManager(Options());
  const std::string before = GpuFile();
  const ReconcileResult r = Attempt(1);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.reason, "DynamicNode");
  EXPECT_FALSE(r.retry);
  EXPECT_EQ(GpuFile(), before);
  EXPECT_EQ(Label("nvidia.com/gpu.product"), "<none>");  // Its labels are not ours either.
  // Handing the node to the manager is a change it reacts to.
  SetLabel(kMigModeLabel, "static");
  EXPECT_EQ(Attempt(2).outcome, Outcome::kSuccess);
  EXPECT_EQ(Label("nvidia.com/mig-1g.10gb.count"), "7");
}

TEST_F(MigManagerTest, DynamicGpusAreSkippedByDevicesAllAndRefusedByName) {
  SetGpus("gpus:\n  - model: H100-SXM5-80GB\n  - model: H100-SXM5-80GB\n");
  CreateNode({{kConfigLabel, "all-1g.10gb"}}, {{kDynamicGpusAnnotation, "1"}});
  ManagerOptions options = Options();
  options.reconciler.config = {"gpu-operator", "custom-mig-config", "config.yaml", ""};
  SetConfigMap("config.yaml",
               std::string("version: v1\nmig-configs:\n"
                           "  all-1g.10gb:\n    - devices: all\n      mig-enabled: true\n"
                           "      mig-devices: {\"1g.10gb\": 7}\n"
                           "  gpu-1:\n    - devices: [1]\n      mig-enabled: true\n"
                           "      mig-devices: {\"7g.80gb\": 1}\n"));
  StartManager(options);
  const ReconcileResult r = Attempt(1);
  ASSERT_EQ(r.outcome, Outcome::kSuccess) << r.message;
  EXPECT_EQ(Layout(0), "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6");
  EXPECT_EQ(Layout(1), "MIG off");
  EXPECT_EQ(Label("nvidia.com/mig-1g.10gb.count"), "7");  // GPU 1 is the device plugin's.
  EXPECT_EQ(Label("nvidia.com/gpu.count"), "1");

  SetLabel(kConfigLabel, "gpu-1");
  const ReconcileResult refused = Attempt(2);
  EXPECT_EQ(refused.reason, "DynamicGpu");
  EXPECT_THAT(refused.message, HasSubstr("names GPU 1, which Prism's device plugin manages"));
  EXPECT_EQ(Layout(1), "MIG off");

  SetAnnotation(kDynamicGpusAnnotation, "GPU-does-not-exist");
  const ReconcileResult bad = Attempt(3);
  EXPECT_EQ(bad.reason, "DynamicGpusInvalid");
}

TEST_F(MigManagerTest, NoLabelMeansNothingToDoButLabelsAreWritten) {
  SetGpus(kH100);
  CreateNode({});
  StartManager(Options());
  const ReconcileResult r = Attempt(1);
  EXPECT_EQ(r.outcome, Outcome::kNoConfig);
  EXPECT_EQ(Label("nvidia.com/gpu.product"), "NVIDIA-H100-80GB-HBM3");
  EXPECT_EQ(Label(kStateLabel), "<none>");
  SetLabel(kConfigLabel, "all-2g.20gb");
  EXPECT_EQ(Attempt(2).outcome, Outcome::kSuccess);
  EXPECT_EQ(Layout(0), "2g.20gb@0 2g.20gb@2 2g.20gb@4");
}

TEST(InFlightRecordTest, RoundTripsAndRejectsGarbage) {
  InFlightRecord record{"all-balanced", {{"nvidia.com/gpu.deploy.dcgm", "true"}}, {"a.service"}};
  auto back = DecodeInFlight(EncodeInFlight(record));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->config, "all-balanced");
  EXPECT_EQ(back->labels, record.labels);
  EXPECT_EQ(back->services, record.services);
  EXPECT_FALSE(DecodeInFlight("{oops").ok());
  EXPECT_FALSE(DecodeInFlight("[1]").ok());
}

TEST(SelectorTest, MatchesEqualityTerms) {
  const std::map<std::string, std::string> labels = {{"app", "x"}, {"tier", "gpu"}};
  EXPECT_TRUE(MatchesSelector(labels, "app=x").value());
  EXPECT_TRUE(MatchesSelector(labels, "app==x, tier=gpu").value());
  EXPECT_FALSE(MatchesSelector(labels, "app=y").value());
  EXPECT_FALSE(MatchesSelector(labels, "missing=x").value());
  EXPECT_FALSE(MatchesSelector(labels, "app!=x").ok());
  EXPECT_FALSE(MatchesSelector(labels, "app").ok());
}

}  // namespace
}  // namespace prism::migmanager
