#include "deviceplugin/device_nodes.h"

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "deviceplugin/fake_driver_tree.h"
#include "deviceplugin/test_util.h"

namespace prism::deviceplugin {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::FakeCapMinor;
using testing::kFakeCapsMajor;
using testing::kFakeNvidiaMajor;
using testing::kFakeUvmMajor;

RealizedDevice FullGpu(int index, const std::string& uuid = "GPU-a") {
  RealizedDevice d;
  d.gpu_index = index;
  d.gpu_uuid = uuid;
  return d;
}

RealizedDevice MigDevice(int index, int gi, int ci) {
  RealizedDevice d = FullGpu(index);
  d.mode = sched::GpuMode::kMig;
  d.profile = "2g.10gb";
  d.gpu_instance_id = gi;
  d.compute_instance_id = ci;
  d.mig_uuid = "MIG-x";
  return d;
}

DeviceNodeOptions Under(const fs::path& root) {
  DeviceNodeOptions o;
  o.dev_root = root.string();
  o.proc_root = (root / "proc").string();
  return o;
}

std::vector<std::string> Paths(const std::vector<DeviceNodeEdit>& nodes) {
  std::vector<std::string> out;
  for (const DeviceNodeEdit& n : nodes) out.push_back(n.path);
  return out;
}

TEST(DeviceNodesTest, ParsesProcDevicesCharacterPartOnly) {
  auto majors = ParseProcDevices(
      "Character devices:\n  1 mem\n195 nvidia\n236 nvidia-caps\n\nBlock devices:\n"
      "259 blkext\n  9 nvidia-fake-block\n");
  EXPECT_EQ(majors["nvidia"], 195u);
  EXPECT_EQ(majors["nvidia-caps"], 236u);
  EXPECT_EQ(majors["mem"], 1u);
  EXPECT_EQ(majors.count("nvidia-fake-block"), 0u);
}

TEST(DeviceNodesTest, ParsesMigMinorsAndNamesABadLine) {
  auto minors = ParseMigMinors("config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n");
  ASSERT_TRUE(minors.ok()) << minors.status();
  EXPECT_EQ(minors->at("gpu0/gi1/access"), 12u);
  EXPECT_EQ(minors->at("gpu0/gi1/ci0/access"), 13u);
  auto bad = ParseMigMinors("config 1\ngpu0/gi1/access twelve\n");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("line 2 'gpu0/gi1/access twelve'"));
}

TEST(DeviceNodesTest, ParsesGpuInformation) {
  auto info = ParseGpuInformation(
      "Model: \t\t NVIDIA A100-SXM4-40GB\nGPU UUID: \t GPU-6c2f\nBus Location: \t 0000:07:00.0\n"
      "Device Minor: \t 3\n");
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->first, "GPU-6c2f");
  EXPECT_EQ(info->second, 3u);
  EXPECT_FALSE(ParseGpuInformation("GPU UUID: GPU-1\n").has_value());
}

TEST(DeviceNodesTest, FullGpuGetsControlNodesAndItsOwnNode) {
  const fs::path root = testing::TestDir();
  testing::WriteFakeDriverTree(root, 2);
  auto nodes = NvidiaDeviceNodes({FullGpu(1)}, Under(root));
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_THAT(Paths(*nodes), ElementsAre("/dev/nvidiactl", "/dev/nvidia-uvm",
                                         "/dev/nvidia-uvm-tools", "/dev/nvidia1"));
  EXPECT_EQ((*nodes)[0], (DeviceNodeEdit{"/dev/nvidiactl", kFakeNvidiaMajor, 255, 0666, "rwm"}));
  EXPECT_EQ((*nodes)[1], (DeviceNodeEdit{"/dev/nvidia-uvm", kFakeUvmMajor, 0, 0666, "rwm"}));
  EXPECT_EQ((*nodes)[2], (DeviceNodeEdit{"/dev/nvidia-uvm-tools", kFakeUvmMajor, 1, 0666, "rwm"}));
  EXPECT_EQ((*nodes)[3], (DeviceNodeEdit{"/dev/nvidia1", kFakeNvidiaMajor, 1, 0666, "rwm"}));
}

TEST(DeviceNodesTest, ModesetOnlyWhereTheHostHasIt) {
  const fs::path root = testing::TestDir();
  testing::WriteFakeDriverTree(root, 1, /*modeset=*/true);
  auto nodes = NvidiaDeviceNodes({FullGpu(0)}, Under(root));
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_THAT(Paths(*nodes), ::testing::Contains("/dev/nvidia-modeset"));
  EXPECT_EQ((*nodes)[3], (DeviceNodeEdit{"/dev/nvidia-modeset", kFakeNvidiaMajor, 254, 0666,
                                         "rwm"}));
}

TEST(DeviceNodesTest, MigDeviceGetsItsParentAndBothCapabilityNodes) {
  const fs::path root = testing::TestDir();
  testing::WriteFakeDriverTree(root, 2);
  // Two instances on GPU 1: the parent node once.
  auto nodes = NvidiaDeviceNodes({MigDevice(1, 3, 0), MigDevice(1, 5, 0)}, Under(root));
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  const std::string cap = "/dev/nvidia-caps/nvidia-cap";
  EXPECT_THAT(Paths(*nodes),
              ElementsAre("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                          "/dev/nvidia1", cap + std::to_string(FakeCapMinor(1, 3)),
                          cap + std::to_string(FakeCapMinor(1, 3, 0)),
                          cap + std::to_string(FakeCapMinor(1, 5)),
                          cap + std::to_string(FakeCapMinor(1, 5, 0))));
  EXPECT_EQ((*nodes)[4], (DeviceNodeEdit{cap + std::to_string(FakeCapMinor(1, 3)), kFakeCapsMajor,
                                         FakeCapMinor(1, 3), 0444, "rwm"}));
}

TEST(DeviceNodesTest, DeviceMinorComesFromTheDriverNotTheNvmlIndex) {
  const fs::path root = testing::TestDir();
  testing::WriteFakeDriverTree(root, 4);
  const fs::path gpu = root / "proc" / "driver" / "nvidia" / "gpus" / "0000:07:00.0";
  fs::create_directories(gpu);
  testing::WriteFile(gpu / "information", "GPU UUID: \t GPU-b\nDevice Minor: \t 3\n");
  auto nodes = NvidiaDeviceNodes({MigDevice(0, 1, 0)}, Under(root));
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_THAT(Paths(*nodes), ::testing::Contains("/dev/nvidia0"));  // GPU-a: not listed.
  RealizedDevice b = MigDevice(0, 1, 0);
  b.gpu_uuid = "GPU-b";
  nodes = NvidiaDeviceNodes({b}, Under(root));
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_THAT(Paths(*nodes), ::testing::Contains("/dev/nvidia3"));
  EXPECT_THAT(Paths(*nodes), ::testing::Contains("/dev/nvidia-caps/nvidia-cap" +
                                                 std::to_string(FakeCapMinor(3, 1, 0))));
}

TEST(DeviceNodesTest, ARealCharacterDeviceGivesItsOwnNumbers) {
  const fs::path root = testing::TestDir();
  testing::WriteFakeDriverTree(root, 1);
  fs::remove(root / "dev" / "nvidiactl");
  fs::create_symlink("/dev/null", root / "dev" / "nvidiactl");  // A char device: 1:3.
  auto nodes = NvidiaDeviceNodes({FullGpu(0)}, Under(root));
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_EQ((*nodes)[0].path, "/dev/nvidiactl");
  EXPECT_EQ((*nodes)[0].major, 1u);
  EXPECT_EQ((*nodes)[0].minor, 3u);
}

TEST(DeviceNodesTest, NoDriverIsAClearError) {
  const fs::path root = testing::TestDir();
  auto nodes = NvidiaDeviceNodes({FullGpu(0)}, Under(root));
  EXPECT_EQ(nodes.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(nodes.status().message(), HasSubstr("/dev/nvidiactl"));
  EXPECT_THAT(nodes.status().message(), HasSubstr("--device-nodes=false"));

  testing::WriteFakeDriverTree(root, 1);
  fs::remove(root / "proc" / "driver" / "nvidia-caps" / "mig-minors");
  nodes = NvidiaDeviceNodes({MigDevice(0, 1, 0)}, Under(root));
  EXPECT_THAT(nodes.status().message(), HasSubstr("mig-minors"));
  testing::WriteFile(root / "proc" / "driver" / "nvidia-caps" / "mig-minors", "config 1\n");
  nodes = NvidiaDeviceNodes({MigDevice(0, 1, 0)}, Under(root));
  EXPECT_THAT(nodes.status().message(), HasSubstr("no 'gpu0/gi1/access'"));
}

TEST(DeviceNodesTest, AddDeviceNodesHonoursTheSwitch) {
  const fs::path root = testing::TestDir();
  testing::WriteFakeDriverTree(root, 1);
  DeviceNodeOptions options = Under(root);
  ContainerEdits edits;
  ASSERT_TRUE(AddDeviceNodes({FullGpu(0)}, options, &edits).ok());
  EXPECT_EQ(edits.device_nodes.size(), 4u);
  options.enabled = false;
  ContainerEdits off;
  ASSERT_TRUE(AddDeviceNodes({FullGpu(0)}, options, &off).ok());
  EXPECT_TRUE(off.device_nodes.empty());
  ContainerEdits none;  // No GPU: no nodes.
  ASSERT_TRUE(AddDeviceNodes({}, Under(root), &none).ok());
  EXPECT_TRUE(none.device_nodes.empty());
}

}  // namespace
}  // namespace prism::deviceplugin
