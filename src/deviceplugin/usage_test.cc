// Per-container usage: reading libprism-vgpu's shared regions (real regions written by the
// library's own Region code), attributing NVML processes to MIG instances and whole GPUs, and the
// series the collector exports (and removes).
#include "deviceplugin/usage.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "deviceplugin/container_edits.h"
#include "deviceplugin/node_files.h"
#include "deviceplugin/promtool.h"
#include "deviceplugin/test_util.h"
#include "intercept/liveness.h"
#include "intercept/region.h"
#include "intercept/uuid.h"

namespace prism::deviceplugin {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kGpu[] = "GPU-5052494d-2d46-414b-452d-475055000001";
constexpr char kOtherGpu[] = "GPU-5052494d-2d46-414b-452d-475055000002";
constexpr uint64_t kMiB = uint64_t{1} << 20;

// A region as the library leaves it: one GPU claimed with a 1000 MiB limit, 300 MiB charged to
// this process, one allocation refused for the limit.
class RegionFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TestDir();
    path_ = (dir_ / "vgpu.cache").string();
    int err = 0;
    ASSERT_EQ(region_.OpenFile(path_.c_str(), &err), vgpu::RegionError::kNone) << err;
    uint8_t uuid[16];
    ASSERT_TRUE(vgpu::ParseNvmlUuid(kGpu, uuid));
    bool mismatch = false;
    device_ = region_.ClaimDevice(uuid, 1000 * kMiB, 30, 0, 132, &mismatch);
    ASSERT_GE(device_, 0);
    slot_ = region_.AcquireSlot(getpid(), vgpu::ProcessStartTime(getpid()));
    ASSERT_GE(slot_, 0);
    ASSERT_TRUE(region_.Reserve(slot_, device_, 300 * kMiB).ok);
    ASSERT_FALSE(region_.Reserve(slot_, device_, 900 * kMiB).ok);
    region_.slot(slot_).host_pid.store(4242);
  }

  fs::path dir_;
  std::string path_;
  vgpu::Region region_;
  int device_ = -1;
  int slot_ = -1;
};

TEST_F(RegionFixture, ReadsUsageLimitAndRefusals) {
  absl::StatusOr<RegionUsage> usage = ReadRegionUsage(path_, MonotonicNowNs(), true);
  ASSERT_TRUE(usage.ok()) << usage.status();
  ASSERT_EQ(usage->devices.size(), 1u);
  const RegionDeviceUsage& d = usage->devices[0];
  EXPECT_EQ(d.gpu_uuid, kGpu);
  EXPECT_EQ(d.used_bytes, 300 * kMiB);
  EXPECT_EQ(d.peak_bytes, 300 * kMiB);
  EXPECT_EQ(d.memory_limit_bytes, 1000 * kMiB);
  EXPECT_EQ(d.sm_limit_percent, 30);
  EXPECT_EQ(d.refusals, 1u);
  EXPECT_FALSE(d.utilization.has_value());  // No SM controller ran.
  EXPECT_THAT(usage->host_pids, ::testing::ElementsAre(4242u));
  // Without the slot table: the same devices, no PIDs.
  usage = ReadRegionUsage(path_, MonotonicNowNs(), false);
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->devices[0].used_bytes, 300 * kMiB);
  EXPECT_TRUE(usage->host_pids.empty());
}

TEST_F(RegionFixture, UtilizationCountsOnlyWhileTheControllerIsAlive) {
  vgpu::RegionDevice& d = region_.device(device_);
  const int64_t now = MonotonicNowNs();
  d.watcher_pid.store(getpid());
  d.watcher_heartbeat_ns.store(now - 100'000'000);
  d.own_util_permille.store(420);
  absl::StatusOr<RegionUsage> usage = ReadRegionUsage(path_, now, false);
  ASSERT_TRUE(usage.ok()) << usage.status();
  ASSERT_TRUE(usage->devices[0].utilization.has_value());
  EXPECT_DOUBLE_EQ(*usage->devices[0].utilization, 0.42);
  // A stale heartbeat: the last sample says nothing about now.
  usage = ReadRegionUsage(path_, now + kUtilizationFreshNs + 1'000'000'000, false);
  ASSERT_TRUE(usage.ok());
  EXPECT_FALSE(usage->devices[0].utilization.has_value());
  // A value no controller writes is not believed.
  d.own_util_permille.store(5000);
  usage = ReadRegionUsage(path_, now, false);
  ASSERT_TRUE(usage.ok());
  EXPECT_FALSE(usage->devices[0].utilization.has_value());
}

TEST_F(RegionFixture, DamagedOrForeignFilesAreErrorsNamingThePath) {
  // A device entry neither free nor claimed.
  region_.device(device_).claimed.store(7);
  absl::StatusOr<RegionUsage> usage = ReadRegionUsage(path_, MonotonicNowNs(), false);
  EXPECT_EQ(usage.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(usage.status().message()), HasSubstr(path_));
  region_.device(device_).claimed.store(1);
  // A slot in an unknown state is damage too (when the slots are read).
  region_.slot(slot_).state.store(9);
  EXPECT_EQ(ReadRegionUsage(path_, MonotonicNowNs(), true).status().code(),
            absl::StatusCode::kDataLoss);
  region_.slot(slot_).state.store(vgpu::kSlotLive);
  // Another ABI version.
  region_.layout()->header.abi_version = 99;
  EXPECT_EQ(ReadRegionUsage(path_, MonotonicNowNs(), false).status().code(),
            absl::StatusCode::kFailedPrecondition);
  region_.layout()->header.abi_version = vgpu::kRegionAbiVersion;
  ASSERT_TRUE(ReadRegionUsage(path_, MonotonicNowNs(), false).ok());

  // Another size (HAMi-core's cache, a truncated file).
  const std::string small = (dir_ / "small.cache").string();
  std::ofstream(small) << std::string(4096, 'x');
  EXPECT_EQ(ReadRegionUsage(small, MonotonicNowNs(), false).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Not there yet.
  EXPECT_EQ(ReadRegionUsage((dir_ / "none").string(), MonotonicNowNs(), false).status().code(),
            absl::StatusCode::kNotFound);
  // The agent's pre-sized file before the first CUDA process: zeros, "no region yet"; once the
  // library has opened it, a region like any other.
  const fs::path regions = dir_ / "regions";
  ASSERT_TRUE(CreateSizedFile(regions.string(), "u_main", RegionFileBytes()).ok());
  const std::string fresh = (regions / "u_main").string();
  absl::StatusOr<RegionUsage> unused = ReadRegionUsage(fresh, MonotonicNowNs(), true);
  EXPECT_EQ(unused.status().code(), absl::StatusCode::kNotFound) << unused.status();
  vgpu::Region joined;
  int err = 0;
  ASSERT_EQ(joined.OpenFile(fresh.c_str(), &err), vgpu::RegionError::kNone) << err;
  absl::StatusOr<RegionUsage> initialized = ReadRegionUsage(fresh, MonotonicNowNs(), true);
  ASSERT_TRUE(initialized.ok()) << initialized.status();
  EXPECT_TRUE(initialized->devices.empty());
  EXPECT_EQ(fs::file_size(fresh), RegionFileBytes());  // The library did not resize it.
  // A FIFO in its place must not block the agent; a symlink must not be followed.
  const std::string fifo = (dir_ / "fifo.cache").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(ReadRegionUsage(fifo, MonotonicNowNs(), false).status().code(),
            absl::StatusCode::kFailedPrecondition);
  const std::string link = (dir_ / "link.cache").string();
  fs::create_symlink(path_, link);
  EXPECT_EQ(ReadRegionUsage(link, MonotonicNowNs(), false).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(RegionFixture, RandomDamageNeverCrashesTheReader) {
  // Overwrite random bytes (never the mutex the live region still uses) and read: every outcome
  // is a value or an error, never a crash (this runs under ASan/UBSan in CI).
  std::mt19937 rng(16);
  const std::string copy = (dir_ / "copy.cache").string();
  std::vector<char> original(sizeof(vgpu::RegionLayout));
  {
    std::ifstream in(path_, std::ios::binary);
    in.read(original.data(), static_cast<std::streamsize>(original.size()));
  }
  int errors = 0;
  for (int round = 0; round < 300; ++round) {
    std::vector<char> bytes = original;
    const int flips = 1 + static_cast<int>(rng() % 64);
    for (int i = 0; i < flips; ++i) {
      // Mostly the header and device table, where the reader looks.
      const size_t limit = rng() % 4 == 0 ? bytes.size() : 192 + 16 * 320;
      bytes[rng() % limit] = static_cast<char>(rng());
    }
    std::ofstream(copy, std::ios::binary | std::ios::trunc)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    absl::StatusOr<RegionUsage> usage = ReadRegionUsage(copy, MonotonicNowNs(), true);
    if (!usage.ok()) {
      ++errors;
      continue;
    }
    for (const RegionDeviceUsage& d : usage->devices) {
      EXPECT_LE(d.used_bytes, uint64_t{1} << 56);
      EXPECT_LE(d.sm_limit_percent, 100);
      if (d.utilization) {
        EXPECT_LE(*d.utilization, 1.0);
      }
    }
  }
  EXPECT_GT(errors, 0);
}

RealizedDevice Slice(const char* uuid, int index, int64_t memory_mib, int32_t cores_permille) {
  RealizedDevice d;
  d.gpu_index = index;
  d.gpu_uuid = uuid;
  d.mode = sched::GpuMode::kHamiCore;
  d.gpu_memory_mib = 40960;
  d.memory_mib = memory_mib;
  d.cores_permille = cores_permille;
  return d;
}

RealizedDevice Mig(int gi, int ci) {
  RealizedDevice d;
  d.gpu_index = 0;
  d.gpu_uuid = kOtherGpu;
  d.mode = sched::GpuMode::kMig;
  d.gpu_memory_mib = 40960;
  d.memory_mib = 19968;
  d.cores_permille = 428;
  d.profile = "3g.20gb";
  d.gpu_instance_id = gi;
  d.compute_instance_id = ci;
  d.mig_uuid = "MIG-1111";
  return d;
}

MetricLabels Labels(const std::string& pod, const RealizedDevice& d) {
  MetricLabels l{{"node", "n1"},
                 {"namespace", "team"},
                 {"pod", pod},
                 {"container", "main"},
                 {"device_uuid", d.gpu_uuid},
                 {"device_index", std::to_string(d.gpu_index)}};
  if (d.IsMig()) {
    l.emplace_back("mig_uuid", d.mig_uuid);
    l.emplace_back("mig_profile", d.profile);
  }
  return l;
}

TEST(ComputeUsageSeriesTest, MigInstancesCountOnlyTheirOwnProcesses) {
  const RealizedDevice mig = Mig(2, 0);
  const UsageTarget target{"uid-1", "team", "train", "main", {mig}, ""};
  GpuUsageSample gpu;
  gpu.processes_ok = true;
  gpu.processes = {{10, 1000, 2, 0}, {11, 500, 2, 0}, {12, 7000, 1, 0}};
  const UsageSeries s = ComputeUsageSeries("n1", {target}, {}, {{0, gpu}});
  const MetricLabels l = Labels("train", mig);
  EXPECT_EQ(s.at(kUsedBytesMetric).at(l), 1500.0 * kMiB);
  EXPECT_EQ(s.at(kProcessesMetric).at(l), 2);
  EXPECT_EQ(s.at(kLimitBytesMetric).at(l), 19968.0 * kMiB);
  EXPECT_DOUBLE_EQ(s.at(kShareMetric).at(l), 0.428);
  // NVML reports no process utilization in MIG mode: no series rather than a made-up 0.
  EXPECT_EQ(s.at(kUtilizationMetric).count(l), 0u);
}

TEST(ComputeUsageSeriesTest, AWholeGpuTakesItsProcessesAndTheirUtilization) {
  const RealizedDevice whole = Slice(kGpu, 1, 40960, 0);
  const UsageTarget target{"uid-2", "team", "big", "main", {whole}, ""};
  GpuUsageSample gpu;
  gpu.processes_ok = true;
  gpu.processes = {{20, 30000, -1, -1}, {21, 2000, -1, -1}};
  gpu.utilization_ok = true;
  gpu.sm_percent_by_pid = {{20, 70}, {21, 45}};  // NVML's samples may add up past 100.
  const UsageSeries s = ComputeUsageSeries("n1", {target}, {}, {{1, gpu}});
  const MetricLabels l = Labels("big", whole);
  EXPECT_EQ(s.at(kUsedBytesMetric).at(l), 32000.0 * kMiB);
  EXPECT_EQ(s.at(kUtilizationMetric).at(l), 1.0);  // Capped: never above 100 % (HAMi #1864).
  EXPECT_EQ(s.at(kShareMetric).at(l), 1.0);
  EXPECT_EQ(s.at(kLimitBytesMetric).at(l), 40960.0 * kMiB);
}

TEST(ComputeUsageSeriesTest, SlicesComeFromTheirRegionAndItsProcesses) {
  const RealizedDevice slice = Slice(kGpu, 1, 6000, 250);
  const UsageTarget target{"uid-3", "team", "infer", "main", {slice}, "/r/infer"};
  RegionRead region{true, {}};
  // The region spells the UUID in lower case, NVML may not.
  RegionDeviceUsage used;
  used.gpu_uuid = "gpu-5052494D-2d46-414b-452d-475055000001";
  used.used_bytes = 700 * kMiB;
  used.peak_bytes = 900 * kMiB;
  used.memory_limit_bytes = 999999 * kMiB;  // A raised stored limit: never exported.
  used.refusals = 3;
  region.usage.devices = {used};
  region.usage.host_pids = {30, 31};
  GpuUsageSample gpu;
  gpu.processes_ok = true;
  gpu.processes = {{30, 700, -1, -1}, {99, 5000, -1, -1}};  // 99: a neighbour.
  gpu.utilization_ok = true;
  gpu.sm_percent_by_pid = {{30, 12}, {31, 8}, {99, 60}};
  UsageSeries s = ComputeUsageSeries("n1", {target}, {{"/r/infer", region}}, {{1, gpu}});
  const MetricLabels l = Labels("infer", slice);
  EXPECT_EQ(s.at(kUsedBytesMetric).at(l), 700.0 * kMiB);
  EXPECT_EQ(s.at(kPeakBytesMetric).at(l), 900.0 * kMiB);
  EXPECT_EQ(s.at(kLimitBytesMetric).at(l), 6000.0 * kMiB);
  EXPECT_EQ(s.at(kOomRefusalsMetric).at(l), 3);
  EXPECT_DOUBLE_EQ(s.at(kShareMetric).at(l), 0.25);
  EXPECT_DOUBLE_EQ(s.at(kUtilizationMetric).at(l), 0.20);  // Its own PIDs, not the neighbour's.
  EXPECT_EQ(s.at(kProcessesMetric).at(l), 1);
  // The SM limiter's own sample wins over NVML's when it is live.
  region.usage.devices[0].utilization = 0.31;
  s = ComputeUsageSeries("n1", {target}, {{"/r/infer", region}}, {{1, gpu}});
  EXPECT_DOUBLE_EQ(s.at(kUtilizationMetric).at(l), 0.31);
  // An unreadable region: the grant is still shown, the usage is not guessed.
  s = ComputeUsageSeries("n1", {target}, {{"/r/infer", RegionRead{}}}, {{1, gpu}});
  EXPECT_EQ(s.at(kLimitBytesMetric).at(l), 6000.0 * kMiB);
  EXPECT_EQ(s.at(kUsedBytesMetric).count(l), 0u);
  EXPECT_EQ(s.at(kUtilizationMetric).count(l), 0u);
}

// Issue 36: a slice of a shared MIG instance is told apart from the instance's other slices by
// its region (whose entry is the MIG device CUDA sees), with the instance's labels.
TEST(ComputeUsageSeriesTest, ASliceOfASharedMigInstanceComesFromItsRegion) {
  RealizedDevice slice = Mig(3, 0);
  slice.shared = true;
  slice.memory_mib = 2048;
  slice.cores_permille = 0;
  slice.mig_uuid = "MIG-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";
  const UsageTarget target{"uid-5", "team", "notebook", "main", {slice}, "/r/notebook"};
  RegionRead region{true, {}};
  RegionDeviceUsage used;
  used.gpu_uuid = "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";  // The region's spelling.
  used.used_bytes = 1536 * kMiB;
  used.peak_bytes = 1600 * kMiB;
  region.usage.devices = {used};
  region.usage.host_pids = {40};
  GpuUsageSample gpu;
  gpu.processes_ok = true;
  gpu.processes = {{40, 1700, 3, 0}, {41, 3000, 3, 0}};  // 41: another slice's process.
  UsageSeries s = ComputeUsageSeries("n1", {target}, {{"/r/notebook", region}}, {{0, gpu}});
  const MetricLabels l = Labels("notebook", slice);
  EXPECT_EQ(s.at(kUsedBytesMetric).at(l), 1536.0 * kMiB);
  EXPECT_EQ(s.at(kPeakBytesMetric).at(l), 1600.0 * kMiB);
  EXPECT_EQ(s.at(kLimitBytesMetric).at(l), 2048.0 * kMiB);
  EXPECT_EQ(s.at(kProcessesMetric).at(l), 1);
  EXPECT_EQ(s.at(kShareMetric).count(l), 0u);
}

TEST_F(RegionFixture, TheCollectorExportsContainersAndForgetsEndedPods) {
  MetricsRegistry metrics;
  auto collector = std::make_unique<UsageCollector>("n1", &metrics);
  const RealizedDevice slice = Slice(kGpu, 1, 1000, 300);
  collector->SetContainer(UsageTarget{"uid-1", "team", "infer", "main", {slice}, path_});
  const RealizedDevice other = Slice(kOtherGpu, 0, 2000, 0);
  const std::string broken = (dir_ / "broken.cache").string();
  std::ofstream(broken) << "HAMi-core cache";
  collector->SetContainer(UsageTarget{"uid-2", "team", "old", "main", {other}, broken});

  std::string text = metrics.Render();
  EXPECT_THAT(text,
              HasSubstr("prism_container_gpu_memory_used_bytes{node=\"n1\",namespace=\"team\","
                        "pod=\"infer\",container=\"main\",device_uuid=\"" +
                        std::string(kGpu) + "\",device_index=\"1\"} 314572800\n"));
  EXPECT_THAT(text, HasSubstr("prism_container_gpu_memory_limit_bytes{node=\"n1\",namespace="
                              "\"team\",pod=\"infer\",container=\"main\",device_uuid=\"" +
                              std::string(kGpu) + "\",device_index=\"1\"} 1048576000\n"));
  EXPECT_THAT(text, HasSubstr("prism_container_gpu_oom_refusals_total{node=\"n1\""));
  EXPECT_THAT(text, HasSubstr("pod=\"old\""));  // Its grant, though its region is foreign.
  EXPECT_THAT(text,
              HasSubstr("prism_device_plugin_usage_region_errors{reason=\"incompatible\"} 1"));
  if (auto promtool = testing::FindPromtool()) {
    EXPECT_EQ(testing::PromtoolProblems(*promtool, text), "") << text;
  }

  // Usage changes show in the next scrape.
  ASSERT_TRUE(region_.Reserve(slot_, device_, 100 * kMiB).ok);
  EXPECT_THAT(metrics.Render(), HasSubstr("} 419430400\n"));

  collector->RemovePod("uid-1");
  collector->RemovePod("uid-2");
  text = metrics.Render();
  EXPECT_THAT(text, Not(HasSubstr("pod=\"infer\"")));
  EXPECT_THAT(text, Not(HasSubstr("pod=\"old\"")));
  EXPECT_THAT(text, Not(HasSubstr("region_errors{")));
  // The families stay documented in the output.
  EXPECT_THAT(text, HasSubstr("# TYPE prism_container_gpu_memory_used_bytes gauge\n"));
  // Destroying the collector unregisters it: a later scrape does not touch it.
  collector.reset();
  EXPECT_THAT(metrics.Render(), HasSubstr("# TYPE prism_container_gpu_oom_refusals_total counter"));
}

}  // namespace
}  // namespace prism::deviceplugin
