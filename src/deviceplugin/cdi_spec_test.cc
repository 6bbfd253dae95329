#include "deviceplugin/cdi_spec.h"

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "deviceplugin/test_util.h"
#include "kubelet/cdi_resolver.h"

namespace prism::deviceplugin {
namespace {

using ::testing::ElementsAre;

TEST(CdiSpecTest, TheRuntimeResolvesWhatTheAgentWrites) {
  const auto dir = testing::TestDir();
  ContainerEdits edits;
  edits.env = {{"NVIDIA_VISIBLE_DEVICES", "MIG-1"}, {"A", "b=c"}};
  edits.mounts = {{"/host/lib.so", "/usr/local/prism/lib/libprism-vgpu.so", true},
                  {"/host/run", "/usr/local/prism/run", false}};
  ASSERT_TRUE(WriteCdiSpec(dir.string(), "k1-7", edits).ok());
  EXPECT_TRUE(std::filesystem::exists(CdiSpecPath(dir.string(), "k1-7")));
  auto resolved = kubelet::ResolveCdiDevices(dir.string(), {CdiDeviceName("k1-7")});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_THAT(resolved->env, ElementsAre("NVIDIA_VISIBLE_DEVICES=MIG-1", "A=b=c"));
  ASSERT_EQ(resolved->mounts.size(), 2u);
  EXPECT_THAT(resolved->mounts[0].options, ::testing::Contains("ro"));
  EXPECT_THAT(resolved->mounts[1].options, ::testing::Contains("rw"));
}

TEST(CdiSpecTest, DeviceNodesCarryTypeNumbersModeAndCgroupPermissions) {
  const auto dir = testing::TestDir();
  ContainerEdits edits;
  edits.env = {{"NVIDIA_VISIBLE_DEVICES", "MIG-1"}};
  edits.device_nodes = {{"/dev/nvidiactl", 195, 255, 0666, "rwm"},
                        {"/dev/nvidia-caps/nvidia-cap21", 511, 21, 0444, "rwm"}};
  ASSERT_TRUE(WriteCdiSpec(dir.string(), "k1-8", edits).ok());
  const std::string text = CdiSpecJson("k1-8", edits);
  EXPECT_THAT(text, ::testing::HasSubstr(R"("type": "c")"));
  EXPECT_THAT(text, ::testing::HasSubstr(R"("fileMode": 438)"));
  auto resolved = kubelet::ResolveCdiDevices(dir.string(), {CdiDeviceName("k1-8")});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  ASSERT_EQ(resolved->device_nodes.size(), 2u);
  EXPECT_EQ(resolved->device_nodes[0].path, "/dev/nvidiactl");
  EXPECT_EQ(resolved->device_nodes[0].type, "c");
  EXPECT_EQ(resolved->device_nodes[0].major, 195);
  EXPECT_EQ(resolved->device_nodes[0].minor, 255);
  EXPECT_EQ(resolved->device_nodes[0].permissions, "rwm");
  EXPECT_EQ(resolved->device_nodes[1].path, "/dev/nvidia-caps/nvidia-cap21");
  EXPECT_EQ(resolved->device_nodes[1].major, 511);
  EXPECT_EQ(resolved->device_nodes[1].minor, 21);
  EXPECT_EQ(resolved->device_nodes[1].file_mode, 0444);
}

TEST(CdiSpecTest, ListsAndRemovesOnlyPrismSpecs) {
  const auto dir = testing::TestDir();
  testing::WriteFile(dir / "nvidia.yaml", "cdiVersion: 0.5.0\n");
  ASSERT_TRUE(WriteCdiSpec(dir.string(), "a-1", {{{"X", "1"}}, {}, {}}).ok());
  ASSERT_TRUE(WriteCdiSpec(dir.string(), "a-2", {{{"X", "2"}}, {}, {}}).ok());
  EXPECT_THAT(ListCdiSpecIds(dir.string()), ElementsAre("a-1", "a-2"));
  ASSERT_TRUE(RemoveCdiSpec(dir.string(), "a-1").ok());
  ASSERT_TRUE(RemoveCdiSpec(dir.string(), "a-1").ok());  // Idempotent.
  EXPECT_THAT(ListCdiSpecIds(dir.string()), ElementsAre("a-2"));
  EXPECT_TRUE(std::filesystem::exists(dir / "nvidia.yaml"));
}

}  // namespace
}  // namespace prism::deviceplugin
