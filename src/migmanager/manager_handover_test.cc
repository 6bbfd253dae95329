// Day-2 behaviour of the MIG manager (manager_test_fixture.h): handing a node back (removing
// nvidia.com/mig.config), pausing Prism's own device plugin around a change, and the CDI refresh
// after a layout change.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "migmanager/manager_test_fixture.h"
#include "migmanager/operands.h"

namespace prism::migmanager {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace ::prism::migmanager::test_fixture;  // NOLINT: the fixture.

constexpr char kPrismPluginLabel[] = "prism.io/gpu.deploy.device-plugin";
constexpr char kPrismPluginPod[] = "prism-device-plugin-node-1";

// Prism's device plugin as deploy/ ships it: runs unless its switch says paused or false.
FakeDaemonSets::DaemonSet PrismDevicePlugin() {
  FakeDaemonSets::DaemonSet ds;
  ds.name = "prism-device-plugin";
  ds.labels = {{"app.kubernetes.io/name", "prism-device-plugin"}};
  ds.not_in = {{kPrismPluginLabel, {kPausedValue, "false"}}};
  return ds;
}

DeployComponent PrismPluginComponent() {
  auto c = ParseDeployComponent(
      std::string(kPrismPluginLabel) + "=app.kubernetes.io/name=prism-device-plugin",
      /*on_when_absent=*/true, "pause-label");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

class HandoverTest : public MigManagerTest {
 protected:
  bool PrismPluginRuns() { return server_->Get("pods", "gpu-operator", kPrismPluginPod).ok(); }
};

// Leftover of issue 11 item 7: NVIDIA's manager leaves nvidia.com/mig.config.state when the
// config label goes; so does this one, and it does not touch the GPUs either.
TEST_F(HandoverTest, RemovingTheConfigLabelKeepsTheStateAndTheGpus) {
  SetGpus(kH100);
  CreateNode({{kConfigLabel, "all-1g.10gb"}});
  StartManager(Options());
  ASSERT_EQ(Attempt(1).outcome, Outcome::kSuccess);
  const std::string layout = GpuFile();

  SetLabel(kConfigLabel, std::nullopt);
  EXPECT_EQ(Attempt(2).outcome, Outcome::kNoConfig);
  EXPECT_EQ(Label(kStateLabel), "success");
  EXPECT_THAT(Writes(kStateLabel), ElementsAre("pending", "success"));  // No removal.
  EXPECT_EQ(GpuFile(), layout);

  // A failed state stays too, with its reason.
  SetLabel(kConfigLabel, "all-typo");
  EXPECT_EQ(Attempt(3).reason, "UnknownConfig");
  SetLabel(kConfigLabel, std::nullopt);
  EXPECT_EQ(Attempt(4).outcome, Outcome::kNoConfig);
  EXPECT_EQ(Label(kStateLabel), "failed");
  EXPECT_THAT(Annotations()[kReasonAnnotation], HasSubstr("UnknownConfig"));
  EXPECT_EQ(GpuFile(), layout);
}

// A node without the label may be Prism's device plugin's (dynamic MIG): the manager neither
// changes its GPUs nor pauses anything there, even with instances it did not make.
TEST_F(HandoverTest, WithoutTheLabelTheGpusAreNeverTouched) {
  SetGpus(
      "gpus:\n  - model: H100-SXM5-80GB\n    mig: {enabled: true}\n"
      "    gpu_instances: [{profile: 2g.20gb, start: 2}]\n");
  CreateNode({{kDevicePluginLabel, "true"}});
  ManagerOptions options = Options();
  options.reconciler.deploy_components.push_back(PrismPluginComponent());
  daemonsets_->Add(PrismDevicePlugin());
  daemonsets_->Sync();
  daemonsets_->Start();
  const std::string before = GpuFile();
  StartManager(options);
  EXPECT_EQ(Attempt(1).outcome, Outcome::kNoConfig);
  EXPECT_EQ(GpuFile(), before);
  EXPECT_EQ(Layout(0), "2g.20gb@2");
  EXPECT_TRUE(Writes(kPrismPluginLabel).empty());
  EXPECT_TRUE(Writes(kDevicePluginLabel).empty());
  EXPECT_EQ(Label(kStateLabel), "<none>");
  EXPECT_TRUE(PrismPluginRuns());
}

TEST_F(HandoverTest, PrismDevicePluginIsPausedByAddingItsSwitchAndResumedByRemovingIt) {
  SetGpus(kH100);
  CreateNode({{kConfigLabel, "all-1g.10gb"}});
  daemonsets_->Add(PrismDevicePlugin());
  daemonsets_->Sync();
  ASSERT_TRUE(PrismPluginRuns());
  daemonsets_->Start();
  ManagerOptions options = Options();
  options.reconciler.deploy_components.push_back(PrismPluginComponent());
  StartManager(options);
  const ReconcileResult r = Attempt(1);
  ASSERT_EQ(r.outcome, Outcome::kSuccess) << r.reason << ": " << r.message;
  EXPECT_EQ(Layout(0), "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6");
  EXPECT_THAT(Writes(kPrismPluginLabel), ElementsAre(kPausedValue, "<removed>"));
  EXPECT_EQ(Label(kPrismPluginLabel), "<none>");
  // It left before the GPUs changed and came back after: a fresh inventory.
  EXPECT_TRUE(Eventually([&] { return log_.entries().size() >= 3 && PrismPluginRuns(); }));
  EXPECT_THAT(log_.entries(), ElementsAre("create prism-device-plugin",
                                          "delete prism-device-plugin",
                                          "create prism-device-plugin"));

  // An admin's `false` is theirs: never touched, not waited for.
  SetLabel(kPrismPluginLabel, "false");
  EXPECT_TRUE(Eventually([&] { return !PrismPluginRuns(); }));
  SetLabel(kConfigLabel, "all-3g.40gb");
  ASSERT_EQ(Attempt(2).outcome, Outcome::kSuccess);
  EXPECT_EQ(Label(kPrismPluginLabel), "false");
  EXPECT_THAT(Writes(kPrismPluginLabel), ElementsAre(kPausedValue, "<removed>"));
}

TEST_F(HandoverTest, CrashWhilePrismDevicePluginIsPausedRemovesItsSwitchOnRecovery) {
  SetGpus(kH100);
  CreateNode({{kConfigLabel, "all-balanced"}});
  daemonsets_->Add(PrismDevicePlugin());
  daemonsets_->Sync();
  daemonsets_->SetStuck(true);  // The pod does not leave: the manager waits on its selector.
  daemonsets_->Start();
  ManagerOptions options = Options();
  options.reconciler.deploy_components.push_back(PrismPluginComponent());
  StartManager(options);
  ASSERT_TRUE(Eventually([&] {
    return Label(kPrismPluginLabel) == kPausedValue && Annotations().count(kInFlightAnnotation);
  }));
  manager_->Abandon();
  auto record = DecodeInFlight(Annotations()[kInFlightAnnotation]);
  ASSERT_TRUE(record.ok());
  EXPECT_THAT(record->added, ElementsAre(kPrismPluginLabel));
  EXPECT_TRUE(record->labels.empty());
  EXPECT_EQ(Layout(0), "MIG off");  // It waited for the pod.

  daemonsets_->SetStuck(false);
  StartManager(options);
  ASSERT_EQ(Attempt(1).outcome, Outcome::kSuccess);
  EXPECT_EQ(Label(kPrismPluginLabel), "<none>");
  EXPECT_FALSE(Annotations().count(kInFlightAnnotation));
  EXPECT_TRUE(Eventually([&] { return PrismPluginRuns(); }));
}

// A script standing in for nvidia-smi / nvidia-ctk: appends its argument and the number of
// 1g.10gb instances the GPUs have when it runs to a log, fails while `fail` exists, and while
// `hold` exists waits for the test to look around.
class CdiRefreshTest : public HandoverTest {
 protected:
  void SetUp() override {
    HandoverTest::SetUp();
    script_ = dir_ + "/refresh.sh";
    std::ofstream(script_) << "#!/bin/sh\n"
                           << "echo \"$1 $(grep -c '1g.10gb' " << dir_ << "/gpus.yaml)\" >> "
                           << dir_ << "/refresh.log\n"
                           << "if [ -e " << dir_ << "/fail ]; then echo 'nvidia-ctk: boom'; exit 1; fi\n"
                           // With `hold`: say so, and wait for `release` (the test looks around).
                           << "if [ -e " << dir_ << "/hold ]; then touch " << dir_ << "/started; "
                           << "while [ ! -e " << dir_ << "/release ]; do sleep 0.01; done; fi\n";
    ::chmod(script_.c_str(), 0755);
  }
  std::vector<std::string> RefreshLog() {
    std::vector<std::string> out;
    std::ifstream in(dir_ + "/refresh.log");
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
  ManagerOptions CdiOptions() {
    ManagerOptions options = Options();
    options.reconciler.cdi_refresh_commands = {{script_, "nodes"}, {script_, "spec"}};
    options.reconciler.deploy_components.push_back(PrismPluginComponent());
    return options;
  }
  std::string script_;
};

TEST_F(CdiRefreshTest, RunsOnceAfterALayoutChangeBeforeTheDevicePluginComesBack) {
  SetGpus(kH100);
  CreateNode({{kConfigLabel, "all-1g.10gb"}});
  daemonsets_->Add(PrismDevicePlugin());
  daemonsets_->Sync();
  daemonsets_->Start();
  std::ofstream(dir_ + "/hold") << "";
  StartManager(CdiOptions());
  // While it runs, Prism's device plugin is still away: it comes back to the refreshed node.
  ASSERT_TRUE(Eventually([&] { return fs::exists(dir_ + "/started"); }));
  EXPECT_EQ(Label(kPrismPluginLabel), kPausedValue);
  EXPECT_FALSE(PrismPluginRuns());
  std::ofstream(dir_ + "/release") << "";
  ASSERT_EQ(Attempt(1).outcome, Outcome::kSuccess);
  // In order, once, with the new instances in place.
  EXPECT_THAT(RefreshLog(), ElementsAre("nodes 7", "spec 7"));
  EXPECT_TRUE(Eventually([&] { return log_.entries().size() >= 3; }));
  EXPECT_EQ(log_.entries().back(), "create prism-device-plugin");

  // Nothing to change (a restart of the manager): no refresh.
  manager_->Stop();
  StartManager(CdiOptions());
  ASSERT_EQ(Attempt(1).outcome, Outcome::kSuccess);
  EXPECT_EQ(RefreshLog().size(), 2u);
}

TEST_F(CdiRefreshTest, AFailedRefreshFailsTheAttemptAndIsRetriedUntilItWorks) {
  SetGpus(kH100);
  CreateNode({{kConfigLabel, "all-1g.10gb"}});
  std::ofstream(dir_ + "/fail") << "";
  StartManager(CdiOptions());
  const ReconcileResult failed = Attempt(1);
  EXPECT_EQ(failed.outcome, Outcome::kFailed);
  EXPECT_EQ(failed.reason, "CdiRefreshFailed");
  EXPECT_TRUE(failed.retry);
  EXPECT_THAT(failed.message, HasSubstr("nvidia-ctk: boom"));
  EXPECT_EQ(Label(kStateLabel), "failed");
  EXPECT_EQ(Label(kPrismPluginLabel), "<none>");  // Given back.
  // The layout is applied; the retries (which find nothing to change) run the refresh again.
  EXPECT_EQ(Layout(0), "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6");
  ASSERT_TRUE(Eventually([&] { return RefreshLog().size() >= 2; }));
  fs::remove(dir_ + "/fail");
  ASSERT_TRUE(Eventually([&] { return Label(kStateLabel) == "success"; }));
  const std::vector<std::string> log = RefreshLog();
  EXPECT_EQ(log[log.size() - 2], "nodes 7");
  EXPECT_EQ(log.back(), "spec 7");
  EXPECT_FALSE(Annotations().count(kReasonAnnotation));
}

TEST(OperandsTest, DeployComponentsParseAndRecordsKeepAddedLabels) {
  auto c = ParseDeployComponent("prism.io/gpu.deploy.device-plugin=app.kubernetes.io/name=x",
                                true, "pause-label");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->label, "prism.io/gpu.deploy.device-plugin");
  EXPECT_EQ(c->pod_selector, "app.kubernetes.io/name=x");
  EXPECT_TRUE(c->on_when_absent);
  EXPECT_THAT(std::string(ParseDeployComponent("=x", true, "pause-label").status().message()),
              HasSubstr("--pause-label: expected <label>[=<pod selector>]"));
  EXPECT_FALSE(ParseDeployComponent("a=b!=c", false, "deploy-label").ok());

  InFlightRecord record{"all-balanced", {{"nvidia.com/gpu.deploy.dcgm", "true"}},
                        {"a.service"}, {"prism.io/gpu.deploy.device-plugin"}};
  auto back = DecodeInFlight(EncodeInFlight(record));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->added, record.added);
  // A record written before `added` existed reads as before.
  auto old = DecodeInFlight(R"({"config":"x","labels":{"k":"true"},"services":[]})");
  ASSERT_TRUE(old.ok());
  EXPECT_TRUE(old->added.empty());
  EXPECT_EQ(old->labels.at("k"), "true");
}

TEST(OperandsTest, PodsSelectingOnALabelByNodeSelectorOrRequiredAffinity) {
  const Json by_selector = {{"spec", {{"nodeSelector", {{"a", "true"}}}}}};
  const Json by_affinity = Json::parse(R"({"spec":{"affinity":{"nodeAffinity":{
      "requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[
        {"matchExpressions":[{"key":"b","operator":"NotIn","values":["false"]}]}]}}}}})");
  EXPECT_TRUE(SelectsOnAnyLabel(by_selector, {"a"}));
  EXPECT_FALSE(SelectsOnAnyLabel(by_selector, {"b"}));
  EXPECT_TRUE(SelectsOnAnyLabel(by_affinity, {"b"}));
  EXPECT_FALSE(SelectsOnAnyLabel(by_affinity, {"a"}));
  EXPECT_FALSE(SelectsOnAnyLabel(Json::object(), {"a"}));
}

}  // namespace
}  // namespace prism::migmanager
