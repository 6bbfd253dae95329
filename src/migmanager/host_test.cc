// Host boundary: commands with deadlines, the gpu-clients file, systemd decisions, and the real
// systemctl/reboot implementations run against stand-in scripts.
#include "migmanager/host.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/time/clock.h"

#include "migmanager/command.h"

namespace prism::migmanager {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

class HostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "prism-host-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Script(const std::string& name, const std::string& body) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << "#!/bin/sh\n" << body;
    ::chmod(path.c_str(), 0755);
    return path;
  }
  std::string Read(const std::string& name) {
    std::stringstream s;
    s << std::ifstream(dir_ + "/" + name).rdbuf();
    return s.str();
  }

  std::string dir_;
};

TEST_F(HostTest, RunsCommandsAndCapturesOutput) {
  auto ok = RunCommand({"/bin/sh", "-c", "echo out; echo err >&2; exit 0"}, absl::Seconds(10));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->ok());
  EXPECT_THAT(ok->output, HasSubstr("out"));
  EXPECT_THAT(ok->output, HasSubstr("err"));

  auto failed = RunCommand({"/bin/sh", "-c", "echo oops; exit 3"}, absl::Seconds(10));
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->exit_code, 3);
  EXPECT_EQ(DescribeFailure({"x", "y"}, *failed), "'x y' failed (exit status 3): oops");

  EXPECT_EQ(RunCommand({"/nonexistent/prog"}, absl::Seconds(1)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(RunCommand({}, absl::Seconds(1)).status().code(), absl::StatusCode::kInvalidArgument);
}

// Whether process `pid` has ended (gone, or a zombie waiting for its reaper).
bool Ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

pid_t ReadPid(const std::string& path) {
  std::ifstream in(path);
  pid_t pid = -1;
  in >> pid;
  return pid;
}

// Oracles without a wall clock: the sleeps outlast any CTest timeout, so a RunCommand that
// waited for them would never return; a grandchild left alive is seen in /proc.
TEST_F(HostTest, KillsACommandThatHangs) {
  const std::string pid_file = dir_ + "/grandchild.pid";
  // The child's own child (sleep) must die too: the whole process group is killed.
  auto hung =
      RunCommand({"/bin/sh", "-c", "sleep 100000 & echo $! > " + pid_file + "; sleep 100000"},
                 absl::Milliseconds(200));
  ASSERT_TRUE(hung.ok()) << hung.status();
  EXPECT_TRUE(hung->timed_out);
  EXPECT_FALSE(hung->ok());
  EXPECT_THAT(DescribeFailure({"sleep"}, *hung), HasSubstr("timed out"));
  const pid_t grandchild = ReadPid(pid_file);
  ASSERT_GT(grandchild, 0);
  bool ended = false;
  for (int i = 0; i < 1000 && !ended; ++i) {
    ended = Ended(grandchild);
    if (!ended) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(ended) << "the background sleep of a killed command is still running";
  if (!ended) kill(grandchild, SIGKILL);
}

TEST_F(HostTest, ReturnsWhenACommandExitsLeavingADaemonBehind) {
  const std::string pid_file = dir_ + "/daemon.pid";
  // `sh` exits at once; the background sleep keeps the output pipe open. Waiting for the pipe
  // would end in the 60 s timeout (timed_out, not ok).
  auto r = RunCommand({"/bin/sh", "-c", "sleep 100000 & echo $! > " + pid_file + "; exit 0"},
                      absl::Seconds(60));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->timed_out);
  EXPECT_TRUE(r->ok());
  if (const pid_t daemon = ReadPid(pid_file); daemon > 0) kill(daemon, SIGKILL);
}

TEST(GpuClientsTest, ParsesTheOperatorsDefaultList) {
  auto config = ParseGpuClients(
      "version: v1\nsystemd-services:\n  - nvsm.service\n  - nvsm-mqtt.service\n"
      "  - nv_peer_mem.service\n  - nvidia-dcgm.service\n  - dcgm-exporter.service\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->systemd_services,
              ElementsAre("nvsm.service", "nvsm-mqtt.service", "nv_peer_mem.service",
                          "nvidia-dcgm.service", "dcgm-exporter.service"));
  EXPECT_TRUE(ParseGpuClients("version: v1\n")->systemd_services.empty());
}

TEST(GpuClientsTest, RejectsBadFilesNamingTheProblem) {
  auto msg = [](const std::string& yaml) {
    return std::string(ParseGpuClients(yaml).status().message());
  };
  EXPECT_THAT(msg("version: v2\n"), HasSubstr("unknown version 'v2'"));
  EXPECT_THAT(msg("systemd-services: []\n"), HasSubstr("missing 'version'"));
  EXPECT_THAT(msg("version: v1\nservices: [a]\n"), HasSubstr("unknown field 'services'"));
  EXPECT_THAT(msg("version: v1\nsystemd-services: [\"--now\"]\n"),
              HasSubstr("'--now' is not a systemd unit name"));
  EXPECT_THAT(msg("version: v1\nsystemd-services: [\"a b\"]\n"), HasSubstr("not a systemd unit"));
  EXPECT_THAT(msg("version: v1\nsystemd-services: {a: b}\n"), HasSubstr("must be a list"));
  EXPECT_THAT(msg("version: [v1\n"), HasSubstr("malformed YAML"));
}

TEST(DecidePauseTest, FollowsTheOperatorsRules) {
  std::string why;
  EXPECT_EQ(DecidePause({"loaded", "active", "enabled", "simple"}, &why),
            PauseAction::kStopAndRestart);
  EXPECT_EQ(DecidePause({"loaded", "failed", "enabled", "simple"}, &why),
            PauseAction::kRestartOnly);
  EXPECT_EQ(DecidePause({"not-found", "inactive", "", ""}, &why), PauseAction::kSkip);
  EXPECT_EQ(why, "not installed");
  EXPECT_EQ(DecidePause({"loaded", "inactive", "disabled", "simple"}, &why), PauseAction::kSkip);
  EXPECT_EQ(DecidePause({"loaded", "inactive", "enabled", "oneshot"}, &why), PauseAction::kSkip);
  EXPECT_EQ(DecidePause({"loaded", "inactive", "enabled", "simple"}, &why),
            PauseAction::kRestartOnly);
}

TEST_F(HostTest, SystemctlImplementationRunsTheRightCommands) {
  // A stand-in for `systemctl`: logs its arguments, answers `show` from a file per unit.
  const std::string systemctl = Script("systemctl", R"(echo "$@" >> ")" + dir_ + R"(/calls"
if [ "$1" = show ]; then
  unit="$3"
  if [ -f ")" + dir_ + R"(/$unit" ]; then cat ")" + dir_ +
                                                        R"(/$unit"; exit 0; fi
  printf 'Type=simple\nLoadState=not-found\nActiveState=inactive\nUnitFileState=\n'
  exit 0
fi
if [ "$2" = broken.service ]; then echo "Failed to stop broken.service: Access denied" >&2; exit 1; fi
exit 0
)");
  std::ofstream(dir_ + "/dcgm.service")
      << "Type=simple\nLoadState=loaded\nActiveState=active\nUnitFileState=enabled\n";
  SystemctlHostServices services({systemctl}, absl::Seconds(10));
  auto status = services.Status("dcgm.service");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->active_state, "active");
  EXPECT_EQ(status->unit_file_state, "enabled");
  EXPECT_EQ(status->type, "simple");
  EXPECT_EQ(services.Status("nvsm.service")->load_state, "not-found");
  EXPECT_TRUE(services.Stop("dcgm.service").ok());
  EXPECT_TRUE(services.Start("dcgm.service").ok());
  const absl::Status broken = services.Stop("broken.service");
  EXPECT_EQ(broken.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(broken.message()), HasSubstr("Access denied"));
  EXPECT_EQ(Read("calls"),
            "show --property=LoadState,ActiveState,UnitFileState,Type dcgm.service\n"
            "show --property=LoadState,ActiveState,UnitFileState,Type nvsm.service\n"
            "stop dcgm.service\nstart --no-block dcgm.service\nstop broken.service\n");

  SystemctlHostServices hung({"/bin/sh", "-c", "sleep 30", "sh"}, absl::Milliseconds(100));
  EXPECT_EQ(hung.Stop("x.service").code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(HostTest, CommandRebooterReportsFailures) {
  const std::string reboot = Script("reboot", "echo rebooted > " + dir_ + "/rebooted\n");
  EXPECT_TRUE(CommandRebooter({reboot}, absl::Seconds(10)).Reboot().ok());
  EXPECT_EQ(Read("rebooted"), "rebooted\n");
  const absl::Status failed =
      CommandRebooter({"/bin/sh", "-c", "echo no permission; exit 1"}, absl::Seconds(10)).Reboot();
  EXPECT_THAT(std::string(failed.message()), HasSubstr("no permission"));
  int reboots_seen = 0;
  FakeRebooter fake([&] {
    ++reboots_seen;
    return absl::OkStatus();
  });
  EXPECT_TRUE(fake.Reboot().ok());
  EXPECT_EQ(fake.reboots(), 1);
  EXPECT_EQ(reboots_seen, 1);
}

TEST(SplitCommandLineTest, SplitsOnSpaces) {
  EXPECT_THAT(SplitCommandLine("chroot /host  systemctl"),
              ElementsAre("chroot", "/host", "systemctl"));
  EXPECT_TRUE(SplitCommandLine("  ").empty());
}

}  // namespace
}  // namespace prism::migmanager
