#include "config/device_config_yaml.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/mig/gpu_model.h"
#include "core/sched/cluster.h"

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

// Every MIG model of the catalog, in mig mode under the shipped default device config, gets the
// geometries written for it or none (placement mode), never another model's: HAMi's substring
// rule made "H20" name the H200 NVL and GH200 144GB, whose profiles differ (issue 11, item 4).
TEST(DeviceConfigYamlTest, EveryCatalogModelGetsItsOwnGeometriesFromTheDefaults) {
  auto parsed = ParseDeviceConfigYaml(DefaultDeviceConfigYaml());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const std::map<std::string, std::string> expected_first_profile = {
      {"A30-24GB", "1g.6gb"},         {"A100-SXM4-40GB", "1g.5gb"},
      {"A100-PCIE-40GB", "1g.5gb"},   {"A100-SXM4-80GB", "1g.10gb"},
      {"A100-PCIE-80GB", "1g.10gb"},  {"H100-SXM5-80GB", "1g.10gb"},
      {"H100-PCIE-80GB", "1g.10gb"},  {"H100-NVL-94GB", "1g.12gb"},
      {"GH200-96GB", "1g.12gb"},      {"H200-SXM5-141GB", "1g.18gb"},
      {"H200-NVL-141GB", "1g.18gb"},  {"B200-180GB", "1g.23gb"},
      // HAMi's entry names "H20" (issue 17 added the H20 to the catalog).
      {"H20-96GB", "1g.12gb"},
  };
  for (const mig::GpuModel& model : mig::Catalog()) {
    SCOPED_TRACE(model.name);
    sched::GpuSpec gpu;
    gpu.model = model.name;
    gpu.mode = sched::GpuMode::kMig;
    sched::NodeSpec node;
    node.name = "n";
    node.cpu_milli = 1000;
    node.gpus = {gpu};
    auto state = sched::ClusterState::Build({node}, parsed->config);
    ASSERT_TRUE(state.ok()) << state.status();
    const sched::TemplateSet* set = state->template_set_of(0);
    auto want = expected_first_profile.find(model.name);
    if (want == expected_first_profile.end()) {
      EXPECT_EQ(set, nullptr) << "no knownMigGeometries entry is written for this model";
      continue;
    }
    ASSERT_NE(set, nullptr);
    const auto& first_slot = set->geometries.front().slots.front();
    EXPECT_EQ(model.profiles[first_slot.profile].Name(), want->second);
  }
}

TEST(DeviceConfigYamlTest, ModelPatternsMatchWholeWordsAndExactNamesFirst) {
  constexpr char kYaml[] = R"(
nvidia:
  knownMigGeometries:
    - models: [ "H20" ]
      allowedGeometries:
        - - {name: 1g.12gb, memory: 12288, count: 7}
    - models: [ "H100" ]
      allowedGeometries:
        - - {name: 1g.10gb, memory: 10240, count: 7}
    - models: [ "H100-PCIE-80GB" ]
      allowedGeometries:
        - - {name: 3g.40gb, memory: 40960, count: 2}
)";
  auto parsed = ParseDeviceConfigYaml(kYaml);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto build = [&](const std::string& model) {
    sched::GpuSpec gpu;
    gpu.model = model;
    gpu.mode = sched::GpuMode::kMig;
    sched::NodeSpec node;
    node.name = "n";
    node.gpus = {gpu};
    return sched::ClusterState::Build({node}, parsed->config);
  };
  // "H20" is not a word of "H200-NVL-141GB": placement mode, not an error.
  auto h200 = build("H200-NVL-141GB");
  ASSERT_TRUE(h200.ok()) << h200.status();
  EXPECT_EQ(h200->template_set_of(0), nullptr);
  // The entry naming the model exactly wins over an earlier whole-word match.
  auto pcie = build("H100-PCIE-80GB");
  ASSERT_TRUE(pcie.ok()) << pcie.status();
  ASSERT_NE(pcie->template_set_of(0), nullptr);
  EXPECT_EQ(pcie->template_set_of(0)->geometries[0].slots.size(), 2u);
  // "H100" is a word of "H100-SXM5-80GB" (and a catalog alias of it).
  auto sxm = build("H100-SXM5-80GB");
  ASSERT_TRUE(sxm.ok()) << sxm.status();
  ASSERT_NE(sxm->template_set_of(0), nullptr);
  EXPECT_EQ(sxm->template_set_of(0)->geometries[0].slots.size(), 7u);
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

// docs/mig-slices.md: prism.migSharing names shareable profiles per MIG model.
TEST(DeviceConfigYamlTest, MigSharingReadsModelsAndProfiles) {
  auto parsed = ParseDeviceConfigYaml(R"(
nvidia: {}
prism:
  migSharing:
    - models: [H100-SXM5-80GB, H100-PCIE-80GB]
      profiles: [1g.10gb, 1g.20gb]
    - {models: A100-PCIE-40GB, profiles: 1g.5gb}
)");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  // The node agent serves slices (docs/mig-slices.md): nothing to warn about.
  EXPECT_TRUE(parsed->warnings.empty());
  const auto& sharing = parsed->config.mig_sharing;
  ASSERT_EQ(sharing.size(), 2u);
  EXPECT_THAT(sharing[0].models, ElementsAre("H100-SXM5-80GB", "H100-PCIE-80GB"));
  EXPECT_THAT(sharing[0].profiles, ElementsAre("1g.10gb", "1g.20gb"));
  EXPECT_THAT(sharing[1].models, ElementsAre("A100-PCIE-40GB"));
  EXPECT_THAT(sharing[1].profiles, ElementsAre("1g.5gb"));
  // Absent: nothing is shared (the default config too).
  EXPECT_TRUE(DefaultDeviceConfig().mig_sharing.empty());
}

TEST(DeviceConfigYamlTest, MigSharingErrorsNameTheField) {
  auto error = [](const std::string& sharing) {
    auto parsed = ParseDeviceConfigYaml("prism:\n  migSharing:\n" + sharing);
    EXPECT_FALSE(parsed.ok()) << sharing;
    return std::string(parsed.status().message());
  };
  // A GPU without MIG has no instance to share.
  EXPECT_THAT(error("    - {models: [H100-SXM5-80GB, T4], profiles: [1g.10gb]}\n"),
              HasSubstr("prism.migSharing[0].models[1]: 'T4' is not a MIG-capable model"));
  // A profile the model does not have (the A100-40GB's smallest is 1g.5gb).
  EXPECT_THAT(error("    - {models: [H100-SXM5-80GB, A100-PCIE-40GB], profiles: [1g.20gb]}\n"),
              HasSubstr("prism.migSharing[0].profiles[0]: profile '1g.20gb' does not exist on "
                        "A100-PCIE-40GB"));
  EXPECT_THAT(error("    - {models: [A30], profiles: [banana]}\n"),
              HasSubstr("prism.migSharing[0].profiles[0]: profile 'banana' does not exist"));
  EXPECT_THAT(error("    - {models: [A30], profiles: [1g.6gb+me]}\n"),
              HasSubstr("prism.migSharing[0].profiles[0]: 1g.6gb+me has media-engine attributes"));
  EXPECT_THAT(error("    - {models: [A30]}\n"), HasSubstr("prism.migSharing[0].profiles: missing"));
  EXPECT_THAT(error("    - {models: [], profiles: [1g.6gb]}\n"),
              HasSubstr("prism.migSharing[0].models: expected 1 to 8 names, got 0"));
  EXPECT_THAT(error("    - {models: [A30], profiles: [1g.6gb], count: 3}\n"),
              HasSubstr("prism.migSharing[0].count: unknown key"));
  EXPECT_THAT(error("    - {models: [A30], profiles: {a: 1}}\n"),
              HasSubstr("prism.migSharing[0].profiles: expected a list"));
  EXPECT_THAT(error("    - A30\n"), HasSubstr("prism.migSharing[0]: expected a map"));
  EXPECT_THAT(error("    - {models: [A30], profiles: [1g.6gb]}\n"
                    "    - {models: [A100-SXM4-40GB, A30], profiles: [1g.5gb]}\n"),
              HasSubstr("prism.migSharing[1].models[1]: A30-24GB is already in "
                        "prism.migSharing[0]"));
  std::string many;
  for (int i = 0; i < 33; ++i) many += "    - {models: [A30], profiles: [1g.6gb]}\n";
  EXPECT_THAT(error(many), HasSubstr("prism.migSharing: 33 entries, at most 32"));
  auto scalar = ParseDeviceConfigYaml("prism:\n  migSharing: yes\n");
  EXPECT_THAT(std::string(scalar.status().message()),
              HasSubstr("prism.migSharing: expected a list"));
}

}  // namespace
}  // namespace prism::config
