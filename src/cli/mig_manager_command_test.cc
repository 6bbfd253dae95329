// Runs the real `prism mig-manager` binary against an in-process fake API server and simulated
// GPUs: one-shot runs, a long-running manager following label changes, SIGTERM, and SIGKILL in
// the middle of a change followed by a restart.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/time/clock.h"

#include "k8s/objects.h"
#include "testing/fake_apiserver/fake_apiserver.h"

extern char** environ;

namespace prism::cli {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr char kConfigLabel[] = "nvidia.com/mig.config";
constexpr char kStateLabel[] = "nvidia.com/mig.config.state";
constexpr char kDevicePlugin[] = "nvidia.com/gpu.deploy.device-plugin";

class MigManagerCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "prism-mmcli-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
    std::ofstream(dir_ + "/gpus.yaml") << "gpus:\n  - model: H100-SXM5-80GB\n";
    ASSERT_TRUE(server_.Start().ok());
    std::ofstream(dir_ + "/kubeconfig") << server_.KubeconfigYaml();
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    server_.Stop();
    fs::remove_all(dir_);
  }

  void CreateNode(std::map<std::string, std::string> labels) {
    Json node = {{"apiVersion", "v1"},
                 {"kind", "Node"},
                 {"metadata", {{"name", "node-1"}, {"labels", labels}}}};
    ASSERT_TRUE(server_.Create("nodes", node).ok());
  }
  void SetLabel(const std::string& key, const std::string& value) {
    ASSERT_TRUE(
        server_.MergePatch("nodes", "", "node-1", {{"metadata", {{"labels", {{key, value}}}}}})
            .ok());
  }
  std::string Label(const std::string& key) {
    auto node = server_.Get("nodes", "", "node-1");
    if (!node.ok()) return "<no node>";
    auto labels = k8s::Labels(*node);
    return labels.count(key) ? labels.at(key) : "<none>";
  }
  bool HasInFlightRecord() {
    auto node = server_.Get("nodes", "", "node-1");
    return node.ok() && k8s::Annotation(*node, "prism.io/mig-manager.in-flight").has_value();
  }
  std::string Read(const std::string& name) {
    std::stringstream s;
    s << std::ifstream(dir_ + "/" + name).rdbuf();
    return s.str();
  }
  bool Eventually(const std::function<bool()>& condition) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      if (condition()) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return condition();
  }

  std::vector<std::string> BaseArgs(bool with_node_name = true) {
    std::vector<std::string> args = {"--log-level=debug",
                                     "mig-manager",
                                     "--kubeconfig=" + dir_ + "/kubeconfig",
                                     "--nvml=sim:" + dir_ + "/gpus.yaml",
                                     "--retry-min=50ms",
                                     "--retry-max=200ms"};
    if (with_node_name) args.push_back("--node-name=node-1");
    return args;
  }

  // Runs the binary to completion.
  int RunOnce(std::vector<std::string> extra, bool with_node_name = true) {
    std::vector<std::string> args = BaseArgs(with_node_name);
    args.push_back("--once");
    args.insert(args.end(), extra.begin(), extra.end());
    // The manager's environment variables must not leak in from the test's environment.
    std::string cmd = std::string(
                          "env -u NODE_NAME -u CONFIG_FILE -u DEFAULT_CONFIG_FILE -u MIG_STRATEGY "
                          "-u WITH_REBOOT -u PRISM_NVML -u CDI_ENABLED ") +
                      PRISM_BINARY;
    for (const std::string& a : args) cmd += " '" + a + "'";
    cmd += " >" + dir_ + "/out 2>" + dir_ + "/err";
    const int status = std::system(cmd.c_str());
    return WEXITSTATUS(status);
  }

  // Starts the long-running manager in the background.
  void Spawn() {
    std::vector<std::string> args = BaseArgs();
    args.insert(args.begin(), PRISM_BINARY);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = dir_ + "/manager.log";
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    ASSERT_EQ(::posix_spawn(&pid_, PRISM_BINARY, &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
  }
  // Signals the manager and returns its exit status (-1 if killed by a signal).
  int Signal(int sig) {
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::string dir_;
  fakeapi::FakeApiServer server_;
  pid_t pid_ = -1;
};

TEST_F(MigManagerCommandTest, OnceAppliesTheLabelledConfig) {
  CreateNode({{kConfigLabel, "all-balanced"}});
  EXPECT_EQ(RunOnce({}), 0) << Read("err");
  EXPECT_THAT(Read("out"), HasSubstr("success: applied MIG config 'all-balanced'"));
  EXPECT_EQ(Label(kStateLabel), "success");
  EXPECT_EQ(Label("nvidia.com/mig-3g.40gb.count"), "1");
  // The seed's step logs.
  const std::string err = Read("err");
  for (const char* step :
       {"Parsing config file...", "Selecting specific MIG config...",
        "Checking current MIG mode...",
        "Walking MigConfig for (device-filter=[0x233010DE 0x233110DE", "GPU 0: 0x233010DE",
        "Asserting MIG mode: Enabled", "Current MIG mode: Disabled",
        "Asserting MIG config: map[1g.10gb:2 2g.20gb:1 3g.40gb:1]",
        "Applying MIG device configuration...", "MIG configuration applied successfully",
        "Changing the 'nvidia.com/mig.config.state' node label to 'success'"}) {
    EXPECT_THAT(err, HasSubstr(step));
  }
}

TEST_F(MigManagerCommandTest, OnceFailsWithTheReasonForBadInput) {
  CreateNode({{kConfigLabel, "all-typo"}});
  EXPECT_EQ(RunOnce({}), 1);
  EXPECT_THAT(Read("out"), HasSubstr("failed (UnknownConfig): MIG config 'all-typo' is not in"));
  EXPECT_EQ(Label(kStateLabel), "failed");

  std::ofstream(dir_ + "/config.yaml") << "version: v1\nmig-configs: {oops: [}\n";
  SetLabel(kConfigLabel, "oops");
  EXPECT_EQ(RunOnce({"--config-file=" + dir_ + "/config.yaml"}), 1);
  EXPECT_THAT(Read("out"), HasSubstr("failed (ConfigInvalid)"));
}

TEST_F(MigManagerCommandTest, RejectsBadFlags) {
  EXPECT_EQ(RunOnce({}, /*with_node_name=*/false), 1);
  EXPECT_THAT(Read("err"), HasSubstr("--node-name (or NODE_NAME) is required"));
  EXPECT_EQ(RunOnce({"--pod-wait-timeout=soon"}), 1);
  EXPECT_THAT(Read("err"), HasSubstr("--pod-wait-timeout: 'soon' is not a duration"));
  EXPECT_EQ(RunOnce({"--mig-strategy=both"}), 1);
  EXPECT_THAT(Read("err"), HasSubstr("unknown MIG strategy 'both'"));
  EXPECT_EQ(RunOnce({"--config-configmap=just-a-name"}), 1);
  EXPECT_THAT(Read("err"), HasSubstr("expected <namespace>/<name>"));
  std::ofstream(dir_ + "/clients.yaml") << "version: v2\n";
  EXPECT_EQ(RunOnce({"--gpu-clients-file=" + dir_ + "/clients.yaml"}), 1);
  EXPECT_THAT(Read("err"), HasSubstr("unknown version 'v2'"));
  EXPECT_EQ(RunOnce({"--cdi-refresh-command=true"}), 1);
  EXPECT_THAT(Read("err"), HasSubstr("--cdi-refresh-command needs --cdi-enabled"));
  EXPECT_EQ(RunOnce({"--pause-label==app=x"}), 1);
  EXPECT_THAT(Read("err"), HasSubstr("--pause-label: expected <label>[=<pod selector>]"));
  EXPECT_EQ(RunOnce({"--pause-label=a=app!=x"}), 1);
  EXPECT_THAT(Read("err"), HasSubstr("only key=value terms"));
}

TEST_F(MigManagerCommandTest, CdiRefreshCommandsRunAfterAChange) {
  CreateNode({{kConfigLabel, "all-balanced"}});
  const std::string marker = dir_ + "/refreshed";
  EXPECT_EQ(RunOnce({"--cdi-enabled", "--cdi-refresh-command=touch " + marker,
                     "--cdi-refresh-command=cp " + dir_ + "/gpus.yaml " + marker}),
            0)
      << Read("err");
  // Both ran, in order, after the instances were created.
  EXPECT_THAT(Read("refreshed"), HasSubstr("3g.40gb"));
  EXPECT_THAT(Read("err"), HasSubstr("Refreshing CDI for the new MIG devices"));
  // CDI_ENABLED=false (as the shipped DaemonSet sets it) means off.
  fs::remove(marker);
  SetLabel(kConfigLabel, "all-1g.10gb");
  const std::string cmd = std::string("env -u NODE_NAME CDI_ENABLED=false ") + PRISM_BINARY +
                          " mig-manager --once --node-name=node-1 --kubeconfig=" + dir_ +
                          "/kubeconfig --nvml=sim:" + dir_ + "/gpus.yaml >/dev/null 2>&1";
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 0);
  EXPECT_EQ(Label(kStateLabel), "success");
  EXPECT_FALSE(fs::exists(marker));
}

TEST_F(MigManagerCommandTest, FollowsLabelChangesAndStopsOnSigterm) {
  CreateNode({{kConfigLabel, "all-1g.10gb"}});
  Spawn();
  ASSERT_TRUE(Eventually([&] {
    return Label(kStateLabel) == "success" && Label("nvidia.com/mig-1g.10gb.count") == "7";
  })) << Read("manager.log");
  SetLabel(kConfigLabel, "all-3g.40gb");
  ASSERT_TRUE(Eventually([&] {
    return Label(kStateLabel) == "success" && Label("nvidia.com/mig-3g.40gb.count") == "2";
  })) << Read("manager.log");
  EXPECT_EQ(Label("nvidia.com/mig-1g.10gb.count"), "<none>");
  EXPECT_EQ(Signal(SIGTERM), 0);
  EXPECT_THAT(Read("manager.log"), HasSubstr("Received signal"));
}

TEST_F(MigManagerCommandTest, RecoversAfterBeingKilledMidChange) {
  CreateNode({{kConfigLabel, "all-balanced"}, {kDevicePlugin, "true"}});
  // An operand pod that does not go away by itself: the manager waits for it.
  Json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "nvidia-device-plugin-x"}, {"namespace", "gpu-operator"}}},
              {"spec",
               {{"nodeName", "node-1"},
                {"nodeSelector", {{kDevicePlugin, "true"}}},
                {"containers", {{{"name", "main"}, {"image", "plugin"}}}}}}};
  ASSERT_TRUE(server_.Create("pods", pod).ok());
  Spawn();
  ASSERT_TRUE(Eventually([&] {
    return Label(kStateLabel) == "pending" && Label(kDevicePlugin) == "paused-for-mig-change" &&
           HasInFlightRecord();
  })) << Read("manager.log");
  EXPECT_EQ(Signal(SIGKILL), -1);
  EXPECT_EQ(Label(kDevicePlugin), "paused-for-mig-change");

  ASSERT_TRUE(server_.Delete("pods", "gpu-operator", "nvidia-device-plugin-x").ok());
  Spawn();
  ASSERT_TRUE(Eventually([&] { return Label(kStateLabel) == "success"; })) << Read("manager.log");
  EXPECT_EQ(Label(kDevicePlugin), "true");
  EXPECT_FALSE(HasInFlightRecord());
  EXPECT_EQ(Label("nvidia.com/mig-1g.10gb.count"), "2");
  EXPECT_THAT(Read("manager.log"), HasSubstr("Finishing a change interrupted earlier"));
  EXPECT_EQ(Signal(SIGTERM), 0);
}

}  // namespace
}  // namespace prism::cli
