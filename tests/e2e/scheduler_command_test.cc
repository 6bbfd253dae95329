// `prism scheduler` as a process: flags, kubeconfig, serving, a bind through the real binary,
// SIGTERM. The fake API server runs in this test's process.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

#include "base/strings.h"
#include "extender/test_util.h"
#include "k8s/test_util.h"
#include "testing/fake_apiserver/fake_apiserver.h"
#include "tests/e2e/harness/deploy_bundle.h"

namespace prism::e2e {
namespace {

using json = nlohmann::json;
using k8s::testing_util::WaitUntil;
using ::testing::HasSubstr;

pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* out = std::fopen(log.c_str(), "w");
    if (out != nullptr) {
      dup2(fileno(out), 1);
      dup2(fileno(out), 2);
    }
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

int WaitExit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class SchedulerCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           StrCat("prism-scheduler-command-", getpid(), "-", reinterpret_cast<uintptr_t>(this));
    std::filesystem::create_directories(dir_);
    ASSERT_OK(api_.Start());
    std::ofstream(dir_ / "kubeconfig") << api_.KubeconfigYaml();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  fakeapi::FakeApiServer api_;
};

TEST_F(SchedulerCommandTest, ServesBindsAndStopsOnSigterm) {
  ASSERT_OK(
      api_.Create("nodes", extender::testing::NodeJson("n1", {extender::testing::TestGpu{}})));
  absl::StatusOr<json> pod = api_.Create("pods", extender::testing::GpuPod("p", 1, 8000));
  ASSERT_TRUE(pod.ok()) << pod.status();
  const int port = FreeLoopbackPort();
  const int probe_port = FreeLoopbackPort();
  const std::string log = (dir_ / "scheduler.log").string();
  const pid_t pid =
      Spawn({PRISM_BINARY, "scheduler", "--kubeconfig", (dir_ / "kubeconfig").string(),
             "--bind-address", "127.0.0.1", "--port", std::to_string(port), "--probe-port",
             std::to_string(probe_port), "--log-format", "json"},
            log);
  ASSERT_GT(pid, 0);
  httplib::Client probes("127.0.0.1", probe_port);
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto res = probes.Get("/readyz");
        return res && res->status == 200;
      },
      absl::Seconds(30)))
      << ReadFile(log);
  httplib::Client cli("127.0.0.1", port);
  json args{{"Pod", *pod}, {"NodeNames", {"n1"}}};
  auto res = cli.Post("/filter", args.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["NodeNames"], json({"n1"}));
  res = cli.Post("/bind",
                 json{{"PodName", "p"},
                      {"PodNamespace", "default"},
                      {"PodUID", (*pod)["metadata"]["uid"]},
                      {"Node", "n1"}}
                     .dump(),
                 "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["Error"], "");
  absl::StatusOr<json> bound = api_.Get("pods", "default", "p");
  ASSERT_TRUE(bound.ok());
  EXPECT_EQ((*bound)["spec"]["nodeName"], "n1");
  EXPECT_TRUE((*bound)["metadata"]["annotations"].contains("prism.io/decision"));
  res = probes.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_THAT(res->body,
              HasSubstr("prism_scheduler_requests_total{result=\"ok\",verb=\"bind\"} 1"));
  kill(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid), 0) << ReadFile(log);
  // Structured logs: one JSON object per line.
  const std::string text = ReadFile(log);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.front(), '{') << text;
}

TEST_F(SchedulerCommandTest, BadConfigurationExitsTwoWithTheReason) {
  const std::string log = (dir_ / "bad.log").string();
  pid_t pid = Spawn({PRISM_BINARY, "scheduler", "--kubeconfig", (dir_ / "missing").string()}, log);
  EXPECT_EQ(WaitExit(pid), 2);
  EXPECT_THAT(ReadFile(log), HasSubstr("missing"));
  std::ofstream(dir_ / "device-config.yaml") << "nvidia:\n  deviceSplitCount: lots\n";
  pid = Spawn({PRISM_BINARY, "scheduler", "--kubeconfig", (dir_ / "kubeconfig").string(),
               "--device-config", (dir_ / "device-config.yaml").string()},
              log);
  EXPECT_EQ(WaitExit(pid), 2);
  EXPECT_THAT(ReadFile(log), HasSubstr("deviceSplitCount"));
  pid = Spawn({PRISM_BINARY, "scheduler", "--kubeconfig", (dir_ / "kubeconfig").string(),
               "--tls-cert-file", (dir_ / "nope.crt").string(), "--port", "0"},
              log);
  EXPECT_EQ(WaitExit(pid), 2);
  EXPECT_THAT(ReadFile(log), HasSubstr("TLS"));
}

// Issue 13, finding 7: --min-rebuild-interval (docs/scheduler.md) was rejected as unexpected.
TEST_F(SchedulerCommandTest, AcceptsAndChecksMinRebuildInterval) {
  const std::string log = (dir_ / "rebuild.log").string();
  // Accepted: the run gets as far as reading the (missing) kubeconfig.
  pid_t pid = Spawn({PRISM_BINARY, "scheduler", "--kubeconfig", (dir_ / "missing").string(),
                     "--min-rebuild-interval", "0.2"},
                    log);
  EXPECT_EQ(WaitExit(pid), 2);
  EXPECT_THAT(ReadFile(log), HasSubstr("Kubernetes configuration"));
  pid = Spawn({PRISM_BINARY, "scheduler", "--kubeconfig", (dir_ / "missing").string(),
               "--min-rebuild-interval", "120"},
              log);
  EXPECT_NE(WaitExit(pid), 0);
  EXPECT_THAT(ReadFile(log), HasSubstr("--min-rebuild-interval"));
  EXPECT_THAT(ReadFile(log), ::testing::Not(HasSubstr("Kubernetes configuration")));
}

// Issue 34: PreemptionOptions from the command line; a value out of range is refused by name
// before anything starts.
TEST_F(SchedulerCommandTest, AcceptsAndChecksThePreemptionFlags) {
  const std::string log = (dir_ / "preemption.log").string();
  const std::string missing = (dir_ / "missing").string();
  pid_t pid = Spawn({PRISM_BINARY, "scheduler", "--kubeconfig", missing, "--no-preemption",
                     "--preemption-filter-trials", "0", "--preemption-trials", "500",
                     "--preemption-reservation-ttl", "30",
                     "--preemption-min-candidate-nodes-percentage", "0",
                     "--preemption-min-candidate-nodes-absolute", "5"},
                    log);
  EXPECT_EQ(WaitExit(pid), 2);
  EXPECT_THAT(ReadFile(log), HasSubstr("Kubernetes configuration"));
  for (const char* bad : {"--preemption-filter-trials=-1", "--preemption-trials=0",
                          "--preemption-reservation-ttl=0",
                          "--preemption-min-candidate-nodes-percentage=101",
                          "--preemption-min-candidate-nodes-absolute=-1"}) {
    pid = Spawn({PRISM_BINARY, "scheduler", "--kubeconfig", missing, bad}, log);
    EXPECT_NE(WaitExit(pid), 0) << bad;
    const std::string text = ReadFile(log);
    const std::string flag(bad, std::string(bad).find('='));
    EXPECT_THAT(text, HasSubstr(flag)) << bad;
    EXPECT_THAT(text, ::testing::Not(HasSubstr("Kubernetes configuration"))) << bad;
  }
  // Both bounds 0 would search no node (kube-scheduler refuses it too).
  pid = Spawn({PRISM_BINARY, "scheduler", "--kubeconfig", missing,
               "--preemption-min-candidate-nodes-percentage=0",
               "--preemption-min-candidate-nodes-absolute=0"},
              log);
  EXPECT_EQ(WaitExit(pid), 2);
  EXPECT_THAT(ReadFile(log), HasSubstr("cannot both be 0"));
}

// Issue 32: --dra-hami-claims (docs/dra.md, "HAMi pods under DRA") is accepted with --dra and
// refused, saying why, without it.
TEST_F(SchedulerCommandTest, DraHamiClaimsNeedsDra) {
  const std::string log = (dir_ / "dra-hami.log").string();
  const std::string missing = (dir_ / "missing").string();
  pid_t pid =
      Spawn({PRISM_BINARY, "scheduler", "--kubeconfig", missing, "--dra", "--dra-hami-claims"}, log);
  EXPECT_EQ(WaitExit(pid), 2);
  EXPECT_THAT(ReadFile(log), HasSubstr("Kubernetes configuration"));
  pid = Spawn({PRISM_BINARY, "scheduler", "--kubeconfig", missing, "--dra-hami-claims"}, log);
  EXPECT_EQ(WaitExit(pid), 2);
  EXPECT_THAT(ReadFile(log), HasSubstr("--dra-hami-claims needs --dra"));
}

}  // namespace
}  // namespace prism::e2e
