#include "config/device_config_yaml.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(DeviceConfigYamlTest, HamiChartDefaultsParseWithoutWarnings) {
  auto parsed = ParseDeviceConfigYaml(DefaultDeviceConfigYaml());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->warnings.empty());
  const sched::DeviceConfig& c = parsed->config;
  EXPECT_EQ(c.device_split_count, 10);
  EXPECT_EQ(c.resource_memory_name, "nvidia.com/gpumem");
  ASSERT_EQ(c.known_mig_geometries.size(), 8u);
  const auto& a100 = c.known_mig_geometries[1];
  EXPECT_THAT(a100.models, ElementsAre("A100-SXM4-40GB", "A100-40GB-PCIe", "A100-PCIE-40GB"));
  ASSERT_EQ(a100.geometries.size(), 4u);
  ASSERT_EQ(a100.geometries[1].size(), 2u);
  EXPECT_EQ(a100.geometries[1][1].name, "2g.10gb");
  EXPECT_EQ(a100.geometries[1][1].memory_mib, 10240);
  EXPECT_EQ(a100.geometries[1][1].count, 3);
}

TEST(DeviceConfigYamlTest, ReadsAConfigMapAndPrismExtensions) {
  constexpr char kYaml[] = R"(
apiVersion: v1
kind: ConfigMap
metadata: {name: hami-scheduler-device}
data:
  device-config.yaml: |
    nvidia:
      deviceSplitCount: 4
      nodeconfig:
        - name: nodeA
          operatingmode: hami-core
        - name: nodeB
          operatingmode: mig
          prismMigStrategy: placement
          gpus:
            - {index: 1, operatingmode: hami-core}
    prism:
      migStrategy: template
      defaultNodePolicy: binpack
)";
  auto parsed = ParseDeviceConfigYaml(kYaml);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const sched::DeviceConfig& c = parsed->config;
  EXPECT_EQ(c.device_split_count, 4);
  EXPECT_EQ(c.mig_strategy, sched::MigStrategy::kTemplate);
  EXPECT_EQ(c.default_node_policy, "binpack");
  ASSERT_EQ(c.node_configs.size(), 2u);
  EXPECT_EQ(c.node_configs[1].mode, sched::GpuMode::kMig);
  EXPECT_EQ(c.node_configs[1].mig_strategy, sched::MigStrategy::kPlacement);
  ASSERT_EQ(c.node_configs[1].gpus.size(), 1u);
  EXPECT_EQ(c.node_configs[1].gpus[0].mode, sched::GpuMode::kHamiCore);
}

TEST(DeviceConfigYamlTest, UnknownKeysWarnInvalidValuesFail) {
  auto parsed = ParseDeviceConfigYaml("nvidia:\n  deviceSplitCount: 3\n  fancy: 1\nother: 2\n");
  ASSERT_TRUE(parsed.ok());
  EXPECT_THAT(parsed->warnings,
              ElementsAre("nvidia.fancy: unknown key (ignored)", "other: unknown key (ignored)"));
  auto bad = ParseDeviceConfigYaml("nvidia:\n  deviceSplitCount: ten\n");
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("nvidia.deviceSplitCount: expected an integer, got 'ten'"));
  auto zero = ParseDeviceConfigYaml("nvidia:\n  deviceSplitCount: 0\n");
  EXPECT_THAT(std::string(zero.status().message()), HasSubstr("nvidia.deviceSplitCount"));
  auto mode =
      ParseDeviceConfigYaml("nvidia:\n  nodeconfig:\n    - name: a\n      operatingmode: turbo\n");
  EXPECT_THAT(std::string(mode.status().message()),
              HasSubstr("nvidia.nodeconfig[0].operatingmode: unknown mode 'turbo'"));
  auto geometry = ParseDeviceConfigYaml(
      "nvidia:\n  knownMigGeometries:\n    - models: [A30]\n      allowedGeometries:\n"
      "        - - {name: 1g.6gb, memory: lots, count: 4}\n");
  EXPECT_THAT(std::string(geometry.status().message()),
              HasSubstr("nvidia.knownMigGeometries[0].allowedGeometries[0][0].memory"));
  EXPECT_FALSE(ParseDeviceConfigYaml("nvidia: [1, 2").ok());
  EXPECT_FALSE(ParseDeviceConfigYaml("").ok());
  EXPECT_THAT(
      std::string(ParseDeviceConfigYaml("prism:\n  defaultNodePolicy: yolo\n").status().message()),
      HasSubstr("prism.defaultNodePolicy"));
}

// Issue 13, finding 6: an empty or colliding resource name was taken, so (with
// resourceMemoryName: nvidia.com/gpu) every GPU count was also read as a memory request.
TEST(DeviceConfigYamlTest, ResourceNamesMustBeNonEmptyAndDistinct) {
  auto empty = ParseDeviceConfigYaml("nvidia:\n  resourceCountName: \"\"\n");
  EXPECT_THAT(std::string(empty.status().message()),
              HasSubstr("nvidia.resourceCountName: must not be empty"));
  auto collide = ParseDeviceConfigYaml("nvidia:\n  resourceMemoryName: nvidia.com/gpu\n");
  EXPECT_THAT(std::string(collide.status().message()),
              HasSubstr("nvidia.resourceMemoryName: 'nvidia.com/gpu' is also "
                        "nvidia.resourceCountName"));
  auto spaces = ParseDeviceConfigYaml("nvidia:\n  resourceCoreName: \"nvidia.com/gpu cores\"\n");
  EXPECT_THAT(std::string(spaces.status().message()),
              HasSubstr("nvidia.resourceCoreName: 'nvidia.com/gpu cores' is not a resource name"));
  auto renamed = ParseDeviceConfigYaml(
      "nvidia:\n  resourceCountName: example.com/vgpu\n  resourceMemoryName: nvidia.com/gpu\n");
  ASSERT_TRUE(renamed.ok()) << renamed.status();  // Distinct after the rename.
  EXPECT_EQ(renamed->config.resource_memory_name, "nvidia.com/gpu");
}

}  // namespace
}  // namespace prism::config
