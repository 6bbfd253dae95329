// Runs the real `prism` binary: exit codes, output lines, both NVML backends.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace prism::cli {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

struct Result {
  int exit_code;
  std::string out;
  std::string err;
};

class MigCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "prism-migcli-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
    Write("gpus.yaml", "gpus:\n  - model: A100-SXM4-40GB\n  - model: H100-SXM5-80GB\n");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
  }
  std::string Read(const std::string& name) {
    std::stringstream s;
    s << std::ifstream(dir_ + "/" + name).rdbuf();
    return s.str();
  }

  // Runs `prism <args>` with PRISM_NVML=<nvml> (sim by default).
  Result Run(const std::string& args, std::string nvml = "") {
    if (nvml.empty()) nvml = "sim:" + dir_ + "/gpus.yaml";
    const std::string cmd = "PRISM_NVML='" + nvml + "' PRISM_NVIDIA_SMI='" + PRISM_BINARY_DIR +
                            "/fake-nvml/nvidia-smi' PRISM_FAKE_NVML_STATE='" + dir_ +
                            "/gpus.yaml' " + PRISM_BINARY + " " + args + " >" + dir_ + "/out 2>" +
                            dir_ + "/err";
    const int status = std::system(cmd.c_str());
    return Result{WEXITSTATUS(status), Read("out"), Read("err")};
  }

  std::string dir_;
};

TEST_F(MigCommandTest, AssertApplyAssertWithNvidiasDefaultConfig) {
  Result before = Run("mig assert -c all-balanced");
  EXPECT_EQ(before.exit_code, 1);
  EXPECT_THAT(before.err,
              HasSubstr("Assertion failure: selected configuration not currently applied"));
  Result apply = Run("mig apply -c all-balanced");
  EXPECT_EQ(apply.exit_code, 0) << apply.err;
  EXPECT_EQ(apply.out, "MIG configuration applied successfully\n");
  EXPECT_THAT(apply.err, HasSubstr("GPU 0: created 3g.20gb at slot 4"));
  Result after = Run("mig assert -c all-balanced");
  EXPECT_EQ(after.exit_code, 0) << after.err;
  EXPECT_EQ(after.out, "Selected MIG configuration currently applied\n");
  Result status = Run("mig status");
  EXPECT_THAT(status.out, HasSubstr("layout: 1g.5gb@0 1g.5gb@1 2g.10gb@2 3g.20gb@4"));
  EXPECT_THAT(status.out, HasSubstr("layout: 1g.10gb@0 1g.10gb@1 2g.20gb@2 3g.40gb@4"));
}

TEST_F(MigCommandTest, WorksThroughTheRealDlopenBackendToo) {
  const std::string lib = std::string(PRISM_BINARY_DIR) + "/fake-nvml/libnvidia-ml.so.1";
  Result apply = Run("mig apply -c all-1g.10gb", "nvml:" + lib);
  // all-1g.10gb: 4 on the A100-40GB (double memory), 7 on the H100.
  EXPECT_EQ(apply.exit_code, 0) << apply.err;
  Result assert_ok = Run("mig assert -c all-1g.10gb", "nvml:" + lib);
  EXPECT_EQ(assert_ok.exit_code, 0) << assert_ok.err;
  Result exported = Run("mig export -o json", "nvml:" + lib);
  EXPECT_THAT(exported.out, HasSubstr("\"1g.10gb\": 7"));
  EXPECT_THAT(exported.out, HasSubstr("\"1g.10gb\": 4"));
}

// Issue 17: the GPUs NVIDIA's default config names that Prism's catalog lacked (this failed with
// "model … is not a MIG-capable model Prism knows"), through both NVML backends: the simulator
// and the real dlopen backend over the fake libnvidia-ml (names derived from NVML's tables).
TEST_F(MigCommandTest, AllBalancedOnTheBlackwellPartsAndTheH20) {
  const std::string lib = std::string(PRISM_BINARY_DIR) + "/fake-nvml/libnvidia-ml.so.1";
  for (const std::string& nvml : {std::string(), "nvml:" + lib}) {
    SCOPED_TRACE(nvml.empty() ? "sim" : nvml);
    Write("gpus.yaml",
          "gpus:\n  - model: GB200-186GB\n  - model: B300-269GB\n  - model: GB300-278GB\n"
          "  - model: RTX-PRO-6000-96GB\n  - model: H20-96GB\n");
    Result apply = Run("mig apply -c all-balanced", nvml);
    EXPECT_EQ(apply.exit_code, 0) << apply.err;
    EXPECT_EQ(apply.out, "MIG configuration applied successfully\n");
    Result assert_ok = Run("mig assert -c all-balanced", nvml);
    EXPECT_EQ(assert_ok.exit_code, 0) << assert_ok.err;
    Result status = Run("mig status", nvml);
    for (const char* layout : {"layout: 1g.23gb@0 1g.23gb@1 2g.47gb@2 3g.93gb@4",
                               "layout: 1g.34gb@0 1g.34gb@1 2g.67gb@2 3g.135gb@4",
                               "layout: 1g.35gb@0 1g.35gb@1 2g.70gb@2 3g.139gb@4",
                               "layout: 1g.24gb@0 1g.24gb@3 2g.48gb@6",
                               "layout: 1g.12gb@0 1g.12gb@1 2g.24gb@2 3g.48gb@4"}) {
      EXPECT_THAT(status.out, HasSubstr(layout)) << status.out;
    }
    // The new profile kinds by NVIDIA's names.
    Write("gpus.yaml", "gpus:\n  - model: RTX-PRO-6000-96GB\n");
    Result me_all = Run("mig apply -c all-1g.24gb.me.all", nvml);
    EXPECT_EQ(me_all.exit_code, 0) << me_all.err;
    Result exported = Run("mig export", nvml);
    EXPECT_THAT(exported.out, HasSubstr("1g.24gb+me.all")) << exported.out;
    Result gfx = Run("mig apply -c all-2g.48gb.gfx", nvml);
    EXPECT_EQ(gfx.exit_code, 0) << gfx.err;
    EXPECT_THAT(Run("mig status", nvml).out, HasSubstr("layout: 2g.48gb+gfx@0 2g.48gb+gfx@6"));
  }
}

TEST_F(MigCommandTest, BadInputIsOneErrorLineAndChangesNothing) {
  const std::string before = Read("gpus.yaml");
  Write("bad.yaml", "version: v1\nmig-configs: [oops");
  Write("v2.yaml", "version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\n");
  Write("index.yaml", "version: v1\nmig-configs: {a: [{devices: [7], mig-enabled: false}]}\n");
  struct Case {
    std::string args;
    std::string message;
  } cases[] = {
      {"mig apply -c no-such-config", "unknown MIG config 'no-such-config'"},
      {"mig apply -f " + dir_ + "/bad.yaml -c a", "malformed MIG config"},
      {"mig apply -f " + dir_ + "/v2.yaml -c a", "unknown version 'v2'"},
      {"mig apply -f " + dir_ + "/index.yaml -c a", "names GPU 7, but this node has 2 GPUs"},
      {"mig apply -c all-1g.5gb", "MIG profile '1g.5gb' does not exist on H100-SXM5-80GB"},
      {"mig apply -f " + dir_ + "/missing.yaml -c a", "cannot read"},
      {"mig export -o xml", "unknown output format 'xml'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    Result r = Run(c.args);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr("Error: "));
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_EQ(Read("gpus.yaml"), before);
  }
  Result bad_state = Run("mig status", "sim:" + dir_ + "/nothing.yaml");
  EXPECT_EQ(bad_state.exit_code, 1);
  EXPECT_THAT(bad_state.err, HasSubstr("does not exist"));
}

TEST_F(MigCommandTest, DemoRuns) {
  Result demo = Run("mig demo --state " + dir_ + "/demo.yaml");
  EXPECT_EQ(demo.exit_code, 0) << demo.err;
  EXPECT_THAT(demo.out, HasSubstr("NVML calls: 0 GPU instances created, 0 destroyed"));
  EXPECT_THAT(demo.out, HasSubstr("destroyed 1 (only the A100's 2g.10gb), created 2"));
}

}  // namespace
}  // namespace prism::cli
