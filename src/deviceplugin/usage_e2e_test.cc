// Per-container usage end to end: the real node agent between the fake kubelet and the fake API
// server; a slice pod's container is the probe program under the real libprism-vgpu and the fake
// CUDA driver, with exactly the env and region file of the CDI spec the agent wrote; a MIG
// pod's process is a simulated NVML process. The agent's /metrics, scraped over HTTP, shows what
// each container uses next to its grant, passes `promtool check metrics`, and forgets a pod when
// it ends.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

#include "base/strings.h"
#include "config/device_config_yaml.h"
#include "deviceplugin/agent_harness.h"
#include "deviceplugin/container_edits.h"
#include "deviceplugin/container_process_env.h"
#include "deviceplugin/metrics.h"
#include "deviceplugin/node_files.h"
#include "deviceplugin/promtool.h"
#include "deviceplugin/test_util.h"
#include "deviceplugin/usage.h"
#include "intercept/testing/spawn.h"
#include "nvml/sim/sim_state_file.h"

namespace prism::deviceplugin {
namespace {

namespace fs = std::filesystem;
using testing::AgentHarness;
using testing::ContainerSpec;
using testing::Eventually;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::PodSpec;

// GPU 0 in MIG mode; GPU 1 shares out slices and is the fake CUDA driver's device 0 (its UUID is
// the fake's "PRISM-FAKE-GPU\0\0" in NVML's spelling), so the region's entry names it.
constexpr char kFakeGpuUuid[] = "GPU-50524953-4d2d-4641-4b45-2d4750550000";
const std::string kNodeGpus = StrCat(R"(gpus:
  - model: A100-SXM4-40GB
    mig: {enabled: true, pending: true}
  - model: A100-SXM4-40GB
    uuid: )",
                                     kFakeGpuUuid, "\n");

// The value of the first sample of `family` whose labels contain every `needles` ("" if none).
std::string Sample(const std::string& text, const std::string& family,
                   const std::vector<std::string>& needles) {
  size_t pos = 0;
  while ((pos = text.find(family + "{", pos)) != std::string::npos) {
    const size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos, end - pos);
    pos = end;
    bool all = true;
    for (const std::string& n : needles) all = all && line.find(n) != std::string::npos;
    if (all) return line.substr(line.rfind(' ') + 1);
  }
  return "";
}

class UsageEndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sched::DeviceConfig config = config::DefaultDeviceConfig();
    config.mig_strategy = sched::MigStrategy::kPlacement;
    h_ = std::make_unique<AgentHarness>(testing::TestDir(), kNodeGpus, config);
    ASSERT_TRUE(h_->StartCluster().ok());
    absl::Status started = h_->StartAgent([](NodeAgentOptions& o) {
      o.vgpu.library_host_path = PRISM_VGPU_LIB;
      o.usage_interval = absl::Milliseconds(50);
    });
    ASSERT_TRUE(started.ok()) << started;
    ASSERT_TRUE(h_->InitScheduler().ok());
    server_ =
        std::make_unique<MetricsServer>(&h_->metrics(), MetricsServer::Options{"127.0.0.1", 0});
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  std::string Scrape() {
    httplib::Client client("127.0.0.1", server_->port());
    auto res = client.Get("/metrics");
    EXPECT_TRUE(res && res->status == 200);
    return res ? res->body : "";
  }

  kubelet::CreatedContainer Run(const PodSpec& pod, std::string* uid) {
    absl::StatusOr<std::string> submitted = h_->SubmitPod(pod);
    EXPECT_TRUE(submitted.ok()) << submitted.status();
    *uid = submitted.value_or("");
    EXPECT_TRUE(h_->Admit(*uid).ok());
    absl::StatusOr<kubelet::CreatedContainer> c = h_->CreateContainer(*uid, "main");
    EXPECT_TRUE(c.ok()) << c.status();
    return c.value_or(kubelet::CreatedContainer{});
  }

  // The container's process: its env from the CDI spec, its region path translated to the host.
  vgpu::testing::Env ContainerEnv(const kubelet::CreatedContainer& c) const {
    vgpu::testing::Env env = testing::ContainerProcessEnv(c);
    env.Set("LD_LIBRARY_PATH", PRISM_FAKE_GPU_DIR);
    env.Set("PRISM_FAKE_GPU_STATE", (h_->dir() / "fake-gpu.state").string());
    env.Set("ASAN_OPTIONS", "detect_leaks=0");
    const std::string sanitizer = PRISM_SANITIZER_PRELOAD;
    env.Set("LD_PRELOAD", (sanitizer.empty() ? "" : sanitizer + ":") + PRISM_VGPU_LIB);
    return env;
  }

  std::unique_ptr<AgentHarness> h_;
  std::unique_ptr<MetricsServer> server_;
};

TEST_F(UsageEndToEndTest, ASlicePodShowsItsUsageAndLimitUntilItEnds) {
  std::string uid;
  const PodSpec pod{
      "infer", {ContainerSpec{"main", 1, 6000, 25}}, {{"nvidia.com/vgpu-mode", "hami-core"}}};
  const kubelet::CreatedContainer c = Run(pod, &uid);
  ASSERT_EQ(c.env.at("NVIDIA_VISIBLE_DEVICES"), kFakeGpuUuid);
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(10)));

  const std::vector<std::string> who{"namespace=\"team\"", "pod=\"infer\"", "container=\"main\"",
                                     StrCat("device_uuid=\"", kFakeGpuUuid, "\"")};
  // Before any CUDA process: the grant, and nothing used.
  std::string text = Scrape();
  EXPECT_EQ(Sample(text, kLimitBytesMetric, who), StrCat(int64_t{6000} << 20));
  EXPECT_EQ(Sample(text, kShareMetric, who), "0.25");
  EXPECT_EQ(Sample(text, kUsedBytesMetric, who), "0");

  std::unique_ptr<vgpu::testing::Child> probe = vgpu::testing::Child::Start(
      {PRISM_VGPU_PROBE, "init", "alloc", "600m", "alloc", "6000m", "step", "hold"},
      ContainerEnv(c));
  ASSERT_TRUE(probe->WaitForLine("step hold", 30000));

  // The very next scrape shows the memory the container holds, and the refusal of the
  // allocation that did not fit its 6000 MiB.
  text = Scrape();
  EXPECT_EQ(Sample(text, kUsedBytesMetric, who), StrCat(int64_t{600} << 20)) << text;
  EXPECT_EQ(Sample(text, kLimitBytesMetric, who), StrCat(int64_t{6000} << 20));
  EXPECT_EQ(Sample(text, kOomRefusalsMetric, who), "1");
  EXPECT_EQ(Sample(text, kPeakBytesMetric, who), StrCat(int64_t{600} << 20));
  EXPECT_THAT(text, Not(HasSubstr("prism_device_plugin_usage_region_errors{")));
  if (auto promtool = testing::FindPromtool()) {
    EXPECT_EQ(testing::PromtoolProblems(*promtool, text), "") << text;
  } else {
    GTEST_LOG_(WARNING) << "promtool not installed: /metrics not linted";
  }

  probe->Send("\n");
  const vgpu::testing::ExitInfo exit = probe->Wait(30000);
  EXPECT_EQ(exit.exit_code, 0) << exit.err;
  // The process is gone, and so is what it held.
  EXPECT_EQ(Sample(Scrape(), kUsedBytesMetric, who), "0");

  // The pod ends: its series go with it.
  ASSERT_TRUE(h_->DeletePod(uid).ok());
  ASSERT_TRUE(Eventually([&] { return Scrape().find("pod=\"infer\"") == std::string::npos; }))
      << Scrape();
}

// Issue 39: the region a container sees is one pre-sized file; whatever the container does
// with its writable descriptor (write past the end, ftruncate, fallocate past the end), the
// agent puts it back to its size at once, and the container's limits and usage keep working.
TEST_F(UsageEndToEndTest, AContainerCannotGrowItsRegionBeyondItsFixedSize) {
  std::string uid;
  const PodSpec pod{
      "grow", {ContainerSpec{"main", 1, 6000, 25}}, {{"nvidia.com/vgpu-mode", "hami-core"}}};
  const kubelet::CreatedContainer c = Run(pod, &uid);
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(10)));
  std::string region;
  int region_mounts = 0;
  for (const auto& m : c.mounts) {
    if (m.host_path.find("/regions/") != std::string::npos) ++region_mounts;
    if (m.container_path == kVgpuRegionFile) region = m.host_path;
  }
  // The container gets the file alone, writable; nothing else of the agent's directory.
  ASSERT_EQ(region_mounts, 1);
  ASSERT_FALSE(region.empty());
  EXPECT_EQ(fs::file_size(region), RegionFileBytes());

  std::unique_ptr<vgpu::testing::Child> probe = vgpu::testing::Child::Start(
      {PRISM_VGPU_PROBE, "init", "alloc", "600m", "step", "hold"}, ContainerEnv(c));
  ASSERT_TRUE(probe->WaitForLine("step hold", 30000));

  auto allocated = [&] {
    struct stat st = {};
    ::stat(region.c_str(), &st);
    return static_cast<uint64_t>(st.st_blocks) * 512;
  };
  auto back_to_size = [&] {
    return fs::file_size(region) == RegionFileBytes() &&
           allocated() <= RegionFileBytes() + kTrimSlackBytes;
  };
  // The container's own descriptor on its mount: the same file.
  const int fd = ::open(region.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const std::string chunk(1 << 20, 'x');
  for (int i = 0; i < 32; ++i) {
    ASSERT_EQ(::pwrite(fd, chunk.data(), chunk.size(), RegionFileBytes() + i * chunk.size()),
              static_cast<ssize_t>(chunk.size()));
  }
  EXPECT_TRUE(Eventually(back_to_size)) << fs::file_size(region) << " bytes, " << allocated();
  ASSERT_EQ(::fallocate(fd, FALLOC_FL_KEEP_SIZE, RegionFileBytes(), 64 << 20), 0);
  EXPECT_TRUE(Eventually(back_to_size)) << allocated() << " bytes allocated";
  ASSERT_EQ(::ftruncate(fd, int64_t{1} << 40), 0);
  EXPECT_TRUE(Eventually(back_to_size)) << fs::file_size(region) << " bytes";
  ::close(fd);
  EXPECT_GE(h_->metrics().Value("prism_device_plugin_region_resets_total"), 3);

  // What the container holds still shows, and its process finishes cleanly on its region.
  const std::vector<std::string> who{"pod=\"grow\"", "container=\"main\""};
  EXPECT_EQ(Sample(Scrape(), kUsedBytesMetric, who), StrCat(int64_t{600} << 20));
  probe->Send("\n");
  const vgpu::testing::ExitInfo exit = probe->Wait(30000);
  EXPECT_EQ(exit.exit_code, 0) << exit.err;
  ASSERT_TRUE(h_->DeletePod(uid).ok());
  EXPECT_TRUE(Eventually([&] { return !fs::exists(fs::symlink_status(region)); }));
}

TEST_F(UsageEndToEndTest, AMigPodShowsWhatItsInstanceProcessesUse) {
  std::string uid;
  const PodSpec pod{"train", {ContainerSpec{"main", 1, 4000}}, {{"nvidia.com/vgpu-mode", "mig"}}};
  const kubelet::CreatedContainer c = Run(pod, &uid);
  ASSERT_THAT(c.env.at("NVIDIA_VISIBLE_DEVICES"), ::testing::StartsWith("MIG-"));
  ASSERT_TRUE(h_->agent().WaitIdle(absl::Seconds(10)));
  // A process of the container on its instance.
  ASSERT_TRUE(nvml::sim::SimStateFile(h_->state_file())
                  .Transact([&](nvml::sim::SimState& s, bool* changed) {
                    const auto& gi = s.gpus[0].gpu_instances.at(0);
                    s.gpus[0].processes.push_back({4242, 1536, gi.id, 0});
                    *changed = true;
                    return absl::OkStatus();
                  })
                  .ok());
  const std::vector<std::string> who{
      "pod=\"train\"", StrCat("mig_uuid=\"", c.env.at("NVIDIA_VISIBLE_DEVICES"), "\"")};
  ASSERT_TRUE(Eventually([&] {
    return Sample(Scrape(), kUsedBytesMetric, who) == StrCat(int64_t{1536} << 20);
  })) << Scrape();
  const std::string text = Scrape();
  EXPECT_EQ(Sample(text, kProcessesMetric, who), "1");
  EXPECT_NE(Sample(text, kLimitBytesMetric, who), "");
  // NVML has no per-process utilization in MIG mode: no series, rather than a wrong 0.
  EXPECT_EQ(Sample(text, kUtilizationMetric, who), "");
  if (auto promtool = testing::FindPromtool()) {
    EXPECT_EQ(testing::PromtoolProblems(*promtool, text), "") << text;
  }
}

}  // namespace
}  // namespace prism::deviceplugin
