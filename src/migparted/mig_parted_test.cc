// apply / assert / export on simulated GPUs (SimNvml over a temp file).
#include "migparted/mig_parted.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/mig/layout.h"
#include "migparted/default_config.h"
#include "nvml/gpu_state.h"
#include "nvml/sim_nvml.h"

namespace prism::migparted {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class MigPartedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "prism-migparted-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
    SetGpus("gpus:\n  - model: A100-SXM4-40GB\n  - model: H100-SXM5-80GB\n");
    auto file = ParseMigConfig(std::string(DefaultMigPartedConfig()));
    ASSERT_TRUE(file.ok());
    defaults_ = *file;
  }
  void TearDown() override { fs::remove_all(dir_); }

  void SetGpus(const std::string& yaml) {
    path_ = dir_ + "/gpus.yaml";
    std::ofstream(path_) << yaml;
    nvml_ = std::make_unique<nvml::SimNvml>(path_);
  }

  std::vector<MigConfigSpec> Config(const std::string& name) {
    auto specs = SelectMigConfig(defaults_, name);
    EXPECT_TRUE(specs.ok()) << specs.status();
    return specs.ok() ? *specs : std::vector<MigConfigSpec>{};
  }
  std::vector<MigConfigSpec> Custom(const std::string& yaml) {
    auto file = ParseMigConfig("version: v1\nmig-configs:\n  custom:\n" + yaml);
    EXPECT_TRUE(file.ok()) << file.status();
    return file.ok() ? file->configs.at("custom") : std::vector<MigConfigSpec>{};
  }

  std::string Layout(int gpu) {
    auto gpus = nvml_->ListGpus();
    auto state = nvml::ReadGpuMigState(*nvml_, (*gpus)[gpu]);
    EXPECT_TRUE(state.ok()) << state.status();
    return mig::LayoutToString(state->model, state->layout);
  }
  std::string FileText() {
    std::stringstream s;
    s << std::ifstream(path_).rdbuf();
    return s.str();
  }
  int Calls(const std::string& op) {
    auto state = nvml_->file().Read();
    auto it = state->calls.find(op);
    return it == state->calls.end() ? 0 : it->second;
  }

  std::string dir_;
  std::string path_;
  std::unique_ptr<nvml::SimNvml> nvml_;
  MigConfigFile defaults_;
};

TEST_F(MigPartedTest, AllBalancedOnA100AndH100) {
  EXPECT_EQ(Assert(*nvml_, Config("all-balanced"), false).code(),
            absl::StatusCode::kFailedPrecondition);
  auto result = Apply(*nvml_, Config("all-balanced"), {});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->created, 8);
  EXPECT_EQ(result->resets, 1);  // The A100's mode change needs a reset; the H100's does not.
  EXPECT_EQ(Layout(0), "1g.5gb@0 1g.5gb@1 2g.10gb@2 3g.20gb@4");
  EXPECT_EQ(Layout(1), "1g.10gb@0 1g.10gb@1 2g.20gb@2 3g.40gb@4");
  EXPECT_TRUE(Assert(*nvml_, Config("all-balanced"), false).ok());
  EXPECT_TRUE(Assert(*nvml_, Config("all-enabled"), true).ok());
}

TEST_F(MigPartedTest, ReapplyingASatisfiedConfigChangesNothing) {
  ASSERT_TRUE(Apply(*nvml_, Config("all-balanced"), {}).ok());
  const std::string before = FileText();
  const int creates = Calls("CreateGpuInstance");
  auto again = Apply(*nvml_, Config("all-balanced"), {});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->created + again->destroyed + again->mode_changes + again->resets, 0);
  EXPECT_EQ(Calls("CreateGpuInstance"), creates);
  EXPECT_EQ(Calls("DestroyGpuInstance"), 0);
  EXPECT_EQ(FileText(), before);
}

TEST_F(MigPartedTest, SwitchingConfigsDestroysOnlyWhatMustGo) {
  ASSERT_TRUE(Apply(*nvml_, Config("all-balanced"), {}).ok());
  auto result = Apply(*nvml_,
                      Custom("    - {devices: [0], mig-enabled: true, mig-devices: "
                             "{1g.5gb: 4, 3g.20gb: 1}}\n"),
                      {});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->destroyed, 1);  // only the 2g.10gb
  EXPECT_EQ(result->created, 2);
  EXPECT_EQ(Layout(0), "1g.5gb@0 1g.5gb@1 1g.5gb@2 1g.5gb@3 3g.20gb@4");
  EXPECT_EQ(Layout(1), "1g.10gb@0 1g.10gb@1 2g.20gb@2 3g.40gb@4");  // GPU 1 untouched
}

TEST_F(MigPartedTest, AFailingCreateIsRolledBack) {
  ASSERT_TRUE(Apply(*nvml_, Config("all-balanced"), {}).ok());
  ASSERT_TRUE(nvml_->file()
                  .Transact([](nvml::sim::SimState& s, bool* changed) {
                    s.faults.push_back(nvml::sim::SimFault{"CreateGpuInstance", 1, 1, 999, ""});
                    *changed = true;
                    return absl::OkStatus();
                  })
                  .ok());
  auto result = Apply(*nvml_,
                      Custom("    - {devices: [0], mig-enabled: true, mig-devices: "
                             "{1g.5gb: 7}}\n"),
                      {});
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("NVML_ERROR_UNKNOWN (999)"));
  EXPECT_THAT(
      std::string(result.status().message()),
      HasSubstr("rolled back to the previous layout: 1g.5gb@0 1g.5gb@1 2g.10gb@2 3g.20gb@4"));
  EXPECT_EQ(Layout(0), "1g.5gb@0 1g.5gb@1 2g.10gb@2 3g.20gb@4");
  EXPECT_TRUE(Assert(*nvml_, Config("all-balanced"), false).ok());
}

TEST_F(MigPartedTest, BadInputLeavesTheGpusUntouched) {
  ASSERT_TRUE(Apply(*nvml_, Config("all-balanced"), {}).ok());
  const std::string before = FileText();
  // A profile the A100 lacks (no device filter: mig-parted would fail midway).
  auto lacks = Apply(*nvml_, Config("all-1g.10gb.me"), {});
  EXPECT_EQ(lacks.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(lacks.status().message()),
              HasSubstr("GPU 0 (NVIDIA A100-SXM4-40GB): MIG profile '1g.10gb+me' does not exist"));
  auto index = Apply(*nvml_, Custom("    - {devices: [5], mig-enabled: false}\n"), {});
  EXPECT_THAT(std::string(index.status().message()),
              HasSubstr("names GPU 5, but this node has 2 GPUs (0-1)"));
  auto impossible =
      Apply(*nvml_,
            Custom("    - {devices: [0], mig-enabled: true, mig-devices: {4g.20gb: 1, "
                   "3g.20gb: 2}}\n"),
            {});
  EXPECT_EQ(impossible.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(impossible.status().message()), HasSubstr("is impossible"));
  EXPECT_EQ(FileText(), before);
}

TEST_F(MigPartedTest, NeverDestroysInstancesInUse) {
  ASSERT_TRUE(Apply(*nvml_, Config("all-balanced"), {}).ok());
  ASSERT_TRUE(nvml_->file()
                  .Transact([](nvml::sim::SimState& s, bool* changed) {
                    // A process on the A100's 2g.10gb (GPU instance 4: the 2-slice at slot 2).
                    auto& gi = *nvml::sim::FindGpuInstance(s.gpus[0], 4);
                    s.gpus[0].processes.push_back(
                        nvml::sim::SimProcess{99, 512, gi.id, gi.compute_instances[0].id});
                    *changed = true;
                    return absl::OkStatus();
                  })
                  .ok());
  const std::string before = FileText();
  auto result = Apply(*nvml_,
                      Custom("    - {devices: [0], mig-enabled: true, mig-devices: "
                             "{1g.5gb: 7}}\n"),
                      {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("2g.10gb@2 (GPU instance 4) is in use"));
  auto disable = Apply(*nvml_, Config("all-disabled"), {});
  EXPECT_THAT(std::string(disable.status().message()),
              HasSubstr("cannot change MIG mode while 1 process"));
  EXPECT_EQ(FileText(), before);
  // A target that keeps the busy instance is fine.
  auto keeps = Apply(*nvml_,
                     Custom("    - {devices: [0], mig-enabled: true, mig-devices: "
                            "{2g.10gb: 3, 1g.5gb: 1}}\n"),
                     {});
  ASSERT_TRUE(keeps.ok()) << keeps.status();
  EXPECT_THAT(Layout(0), HasSubstr("2g.10gb@2"));
}

TEST_F(MigPartedTest, PreviewTellsWhatApplyWouldChangeWithoutChangingIt) {
  const std::string before = FileText();
  auto preview = PreviewApply(*nvml_, Config("all-balanced"));
  ASSERT_TRUE(preview.ok()) << preview.status();
  EXPECT_EQ(FileText(), before);
  ASSERT_EQ(preview->gpus.size(), 2u);
  EXPECT_TRUE(preview->NeedsChanges());
  EXPECT_TRUE(preview->NeedsModeChange());
  for (const GpuApplyPreview& g : preview->gpus) {
    EXPECT_TRUE(g.matched);
    EXPECT_TRUE(g.mig_enabled);
    EXPECT_TRUE(g.mode_change);
    EXPECT_TRUE(g.layout_change);
    EXPECT_EQ(g.plan.create.size(), 4u);
  }
  EXPECT_EQ(preview->gpus[1].desired,
            (std::map<std::string, int>{{"1g.10gb", 2}, {"2g.20gb", 1}, {"3g.40gb", 1}}));

  ASSERT_TRUE(Apply(*nvml_, Config("all-balanced"), {}).ok());
  preview = PreviewApply(*nvml_, Config("all-balanced"));
  ASSERT_TRUE(preview.ok()) << preview.status();
  EXPECT_FALSE(preview->NeedsChanges());
  EXPECT_EQ(preview->gpus[0].current, preview->gpus[0].desired);

  // Only GPU 1 named: GPU 0 is unmatched and would stay as it is.
  preview = PreviewApply(*nvml_, Custom("    - {devices: [1], mig-enabled: false}\n"));
  ASSERT_TRUE(preview.ok()) << preview.status();
  EXPECT_FALSE(preview->gpus[0].matched);
  EXPECT_FALSE(preview->gpus[0].mode_change);
  EXPECT_TRUE(preview->gpus[1].mode_change);
  EXPECT_TRUE(preview->gpus[1].layout_change);
  EXPECT_FALSE(preview->gpus[1].mig_enabled);

  // Bad input fails the same way Apply does.
  auto lacks = PreviewApply(*nvml_, Config("all-1g.10gb.me"));
  EXPECT_EQ(lacks.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(MigPartedTest, SkipResetLeavesAmpereModeChangePending) {
  ApplyOptions options;
  options.skip_reset = true;
  auto result = Apply(*nvml_, Config("all-balanced"), options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("unable to apply MIG config with MIG mode disabled"));
  auto mode = nvml_->GetMigMode(0);
  EXPECT_TRUE(mode->ResetPending());
  EXPECT_THAT(std::string(Assert(*nvml_, Config("all-balanced"), true).message()),
              HasSubstr("change pending a reset"));
  options.skip_reset = false;
  ASSERT_TRUE(Apply(*nvml_, Config("all-balanced"), options).ok());
}

TEST_F(MigPartedTest, ModeOnlyStopsAfterTheModePhase) {
  ApplyOptions options;
  options.mode_only = true;
  auto result = Apply(*nvml_, Config("all-balanced"), options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->created, 0);
  EXPECT_TRUE(Assert(*nvml_, Config("all-balanced"), true).ok());
  EXPECT_FALSE(Assert(*nvml_, Config("all-balanced"), false).ok());
}

TEST_F(MigPartedTest, RunsHooksAtTheRightMoments) {
  const std::string log = dir_ + "/hooks.log";
  auto hooks = ParseHooks(
      "version: v1\nhooks:\n"
      "  apply-start: [{command: /bin/sh, args: ['-c', 'echo start >> " +
      log +
      "']}]\n"
      "  pre-apply-mode: [{command: /bin/sh, args: ['-c', 'echo mode >> " +
      log +
      "']}]\n"
      "  pre-apply-config: [{command: /bin/sh, args: ['-c', 'echo config >> " +
      log +
      "']}]\n"
      "  apply-exit: [{command: /bin/sh, args: ['-c', 'echo exit >> " +
      log + "']}]\n");
  ASSERT_TRUE(hooks.ok());
  ApplyOptions options;
  options.hooks = &*hooks;
  ASSERT_TRUE(Apply(*nvml_, Config("all-balanced"), options).ok());
  ASSERT_TRUE(
      Apply(*nvml_, Config("all-balanced"), options).ok());  // nothing to do: no pre-* hooks
  std::stringstream s;
  s << std::ifstream(log).rdbuf();
  EXPECT_EQ(s.str(), "start\nmode\nconfig\nexit\nstart\nexit\n");

  auto failing = ParseHooks(
      "version: v1\nhooks:\n  pre-apply-config: [{command: /bin/false}]\n"
      "  apply-exit: [{command: /bin/sh, args: ['-c', 'echo exit2 >> " +
      log + "']}]\n");
  options.hooks = &*failing;
  auto result =
      Apply(*nvml_, Custom("    - {devices: [0], mig-enabled: true, mig-devices: {2g.10gb: 3}}\n"),
            options);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("hook pre-apply-config"));
  std::stringstream s2;
  s2 << std::ifstream(log).rdbuf();
  EXPECT_THAT(s2.str(), HasSubstr("exit2"));  // apply-exit ran anyway
}

TEST_F(MigPartedTest, ExportReproducesTheState) {
  SetGpus("gpus: [{model: A100-SXM4-40GB}, {model: A100-SXM4-40GB}, {model: A100-SXM4-40GB}]\n");
  ASSERT_TRUE(Apply(*nvml_,
                    Custom("    - {devices: [0, 2], mig-enabled: true, mig-devices: {3g.20gb: 2}}\n"
                           "    - {devices: [1], mig-enabled: false}\n"),
                    {})
                  .ok());
  auto exported = Export(*nvml_, "current");
  ASSERT_TRUE(exported.ok()) << exported.status();
  const std::string text = SerializeMigConfig(*exported, false);
  EXPECT_THAT(text, HasSubstr("devices: [0, 2]"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("device-filter")));  // one PCI ID on the node
  auto reparsed = ParseMigConfig(text);
  ASSERT_TRUE(reparsed.ok()) << reparsed.status() << text;
  EXPECT_TRUE(Assert(*nvml_, reparsed->configs.at("current"), false).ok());
  // Applied to fresh GPUs, the export recreates the layout.
  SetGpus("gpus: [{model: A100-SXM4-40GB}, {model: A100-SXM4-40GB}, {model: A100-SXM4-40GB}]\n");
  ASSERT_TRUE(Apply(*nvml_, reparsed->configs.at("current"), {}).ok());
  EXPECT_EQ(Layout(2), "3g.20gb@0 3g.20gb@4");
}

// Every config of NVIDIA's default file either applies (and then asserts) or
// is refused up front without touching the GPUs.
TEST_F(MigPartedTest, EveryDefaultConfigAppliesOrIsRefusedCleanly) {
  for (const std::string& name : defaults_.names) {
    SCOPED_TRACE(name);
    SetGpus(
        "gpus:\n  - model: A100-SXM4-40GB\n  - model: H100-SXM5-80GB\n"
        "    mig: {enabled: true}\n    gpu_instances: [{profile: 7g.80gb, start: 0}]\n");
    const std::string before = FileText();
    auto result = Apply(*nvml_, Config(name), {});
    bool matches_any = false;
    for (const MigConfigSpec& spec : Config(name)) {
      matches_any = matches_any || spec.Applies(0, 0x20B010DE, 0) || spec.Applies(1, 0x233010DE, 0);
    }
    if (result.ok() && matches_any) {
      EXPECT_TRUE(Assert(*nvml_, Config(name), false).ok()) << Assert(*nvml_, Config(name), false);
    } else if (result.ok()) {
      EXPECT_EQ(FileText(), before);  // Nothing applied to these GPUs.
    } else {
      EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
      EXPECT_EQ(FileText(), before);
    }
  }
}

}  // namespace
}  // namespace prism::migparted

namespace prism::migparted {
namespace {

// Issue 13, finding 8: on an A100 + T4 node, `all-1g.5gb` (devices: all, no device filter) is
// applied to the A100 and skips the T4, as mig-parted's apply does; assert must then pass (mig-
// parted's fails on the T4, so the MIG manager's assert-then-apply loop re-applies forever).
class MixedNodeTest : public MigPartedTest {
 protected:
  void SetUp() override {
    MigPartedTest::SetUp();
    SetGpus("gpus:\n  - model: A100-SXM4-40GB\n  - model: Tesla-T4\n    memory_mib: 15360\n");
  }
};

TEST_F(MixedNodeTest, ApplyThenAssertAgreeOnAGpuWithoutMig) {
  EXPECT_FALSE(Assert(*nvml_, Config("all-1g.5gb"), false).ok());  // The A100 is not there yet.
  auto applied = Apply(*nvml_, Config("all-1g.5gb"), {});
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(Layout(0), "1g.5gb@0 1g.5gb@1 1g.5gb@2 1g.5gb@3 1g.5gb@4 1g.5gb@5 1g.5gb@6");
  EXPECT_TRUE(Assert(*nvml_, Config("all-1g.5gb"), true).ok());
  absl::Status asserted = Assert(*nvml_, Config("all-1g.5gb"), false);
  EXPECT_TRUE(asserted.ok()) << asserted;
  // A second apply has nothing to do, as assert said.
  auto again = PreviewApply(*nvml_, Config("all-1g.5gb"));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->NeedsChanges());
  // Naming the T4 explicitly with MIG on is an error for both.
  const auto explicit_t4 = Custom("    - {devices: [1], mig-enabled: true, mig-devices: {}}\n");
  EXPECT_EQ(Apply(*nvml_, explicit_t4, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Assert(*nvml_, explicit_t4, false).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(MigPartedTest, ApplyThenAssertAgreeOnGpusNoSpecSelects) {
  const auto gpu0_only =
      Custom("    - {devices: [0], mig-enabled: true, mig-devices: {3g.20gb: 2}}\n");
  ASSERT_TRUE(Apply(*nvml_, gpu0_only, {}).ok());
  absl::Status asserted = Assert(*nvml_, gpu0_only, false);
  EXPECT_TRUE(asserted.ok()) << asserted;
  // A GPU the config does select still fails assert when it differs.
  EXPECT_FALSE(
      Assert(*nvml_, Custom("    - {devices: [1], mig-enabled: true, mig-devices: {}}\n"), true)
          .ok());
}

}  // namespace
}  // namespace prism::migparted

namespace prism::migparted {
namespace {

// Issue 17: on each GPU Prism's catalog lacked (GB200, B300, GB300, RTX PRO 6000 Blackwell, H20),
// every config of NVIDIA's default file that targets the GPU applies with exactly the counts it
// asks for, and asserts afterwards. A config targets a GPU when its last spec selecting the GPU
// asks for MIG off, or only for profiles the GPU has (a `devices: all` config of another GPU's
// profiles is refused up front, as mig-parted's would fail).
class DefaultConfigPerModelTest : public MigPartedTest,
                                  public ::testing::WithParamInterface<const char*> {};

struct ModelExpectation {
  const char* model;
  std::vector<std::string> targeted;  // Configs of the default file that target it.
  std::string balanced;               // all-balanced's layout.
};

const ModelExpectation& Expectation(const std::string& model) {
  static const auto* all = new std::vector<ModelExpectation>{
      {"GB200-186GB",
       {"all-disabled", "all-enabled", "all-1g.23gb", "all-1g.23gb.me", "all-1g.47gb",
        "all-2g.47gb", "all-3g.93gb", "all-4g.93gb", "all-7g.186gb", "all-balanced"},
       "1g.23gb@0 1g.23gb@1 2g.47gb@2 3g.93gb@4"},
      {"B300-269GB",
       {"all-disabled", "all-enabled", "all-balanced", "all-1g.34gb", "all-1g.34gb.me",
        "all-1g.67gb", "all-2g.67gb", "all-3g.135gb", "all-4g.135gb", "all-7g.269gb"},
       "1g.34gb@0 1g.34gb@1 2g.67gb@2 3g.135gb@4"},
      {"GB300-278GB",
       {"all-disabled", "all-enabled", "all-balanced", "all-1g.35gb", "all-1g.35gb.me",
        "all-1g.70gb", "all-2g.70gb", "all-3g.139gb", "all-4g.139gb", "all-7g.278gb"},
       "1g.35gb@0 1g.35gb@1 2g.70gb@2 3g.139gb@4"},
      {"RTX-PRO-6000-96GB",
       {"all-disabled", "all-enabled", "all-1g.24gb.gfx", "all-1g.24gb.me.all", "all-1g.24gb-me",
        "all-2g.48gb", "all-2g.48gb.gfx", "all-2g.48gb.me.all", "all-2g.48gb-me", "all-4g.96gb",
        "all-4g.96gb.gfx", "all-1g.24gb.me", "all-1g.24gb", "all-balanced"},
       "1g.24gb@0 1g.24gb@3 2g.48gb@6"},
      {"H20-96GB",
       {"all-disabled", "all-enabled", "all-1g.12gb", "all-1g.12gb.me", "all-1g.24gb",
        "all-2g.24gb", "all-3g.48gb", "all-4g.48gb", "all-7g.96gb", "all-balanced"},
       "1g.12gb@0 1g.12gb@1 2g.24gb@2 3g.48gb@4"},
  };
  for (const ModelExpectation& e : *all) {
    if (e.model == model) return e;
  }
  ADD_FAILURE() << "no expectation for " << model;
  return all->front();
}

TEST_P(DefaultConfigPerModelTest, EveryConfigTargetingTheGpuGivesExactlyItsLayout) {
  const std::string model_name = GetParam();
  const ModelExpectation& expected = Expectation(model_name);
  const mig::GpuModel* model = mig::FindModel(model_name);
  ASSERT_NE(model, nullptr);
  std::vector<std::string> targeted;
  for (const std::string& name : defaults_.names) {
    SCOPED_TRACE(name);
    const std::vector<MigConfigSpec> specs = Config(name);
    const MigConfigSpec* spec = nullptr;
    for (const MigConfigSpec& s : specs) {
      if (s.Applies(0, model->pci_device_id, 0)) spec = &s;
    }
    if (spec == nullptr) continue;
    bool has_all = true;
    for (const auto& [profile, count] : spec->mig_devices) {
      has_all = has_all && model->FindProfile(profile) >= 0;
    }
    SetGpus("gpus: [{model: " + model_name + "}]\n");
    const std::string before = FileText();
    auto result = Apply(*nvml_, Config(name), {});
    if (spec->mig_enabled && !has_all) {
      EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
      EXPECT_EQ(FileText(), before);
      continue;
    }
    targeted.push_back(name);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_TRUE(Assert(*nvml_, Config(name), false).ok()) << Assert(*nvml_, Config(name), false);
    auto gpus = nvml_->ListGpus();
    ASSERT_TRUE(gpus.ok());
    auto state = nvml::ReadGpuMigState(*nvml_, (*gpus)[0]);
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(state->mode.current, spec->mig_enabled);
    std::map<std::string, int> got;
    for (const mig::Instance& inst : state->layout)
      ++got[state->model.profiles[inst.profile].Name()];
    std::map<std::string, int> want;
    for (const auto& [profile, count] : spec->mig_devices) {
      if (count > 0) want[profile] += count;
    }
    EXPECT_EQ(got, want) << mig::LayoutToString(state->model, state->layout);
    if (name == "all-balanced") {
      EXPECT_EQ(mig::LayoutToString(state->model, state->layout), expected.balanced);
    }
  }
  EXPECT_EQ(targeted, expected.targeted);
}

INSTANTIATE_TEST_SUITE_P(NewModels, DefaultConfigPerModelTest,
                         ::testing::Values("GB200-186GB", "B300-269GB", "GB300-278GB",
                                           "RTX-PRO-6000-96GB", "H20-96GB"),
                         [](const ::testing::TestParamInfo<const char*>& param_info) {
                           std::string name = param_info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace prism::migparted
