#include "config/cluster_yaml.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ClusterYamlTest, ParsesNodesGpusInstancesAndRunningPods) {
  constexpr char kYaml[] = R"(
nodes:
  - name: node-a
    cpu: "64"
    memory: 256Gi
    gpus:
      - model: A100-PCIE-40GB
        mode: mig
        count: 2
        uuid: GPU-a
      - model: T4
        memory: 15Gi
  - name: node-b
    cpu: 500m
    memory: "1e9"
    gpus:
      - model: H100-SXM5-80GB
        mode: mig
        instances:
          - {profile: 3g.40gb, start: 4, inUse: true}
pods:
  - kind: Pod
    metadata: {name: running}
    spec:
      nodeName: node-b
      containers: [{name: c}]
)";
  auto file = ParseClusterYaml(kYaml);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->nodes.size(), 2u);
  const sched::NodeSpec& a = file->nodes[0];
  EXPECT_EQ(a.cpu_milli, 64000);
  EXPECT_EQ(a.memory_bytes, int64_t{256} << 30);
  ASSERT_EQ(a.gpus.size(), 3u);
  EXPECT_EQ(a.gpus[0].uuid, "GPU-a-0");
  EXPECT_EQ(a.gpus[1].uuid, "GPU-a-1");
  EXPECT_EQ(a.gpus[0].mode, sched::GpuMode::kMig);
  EXPECT_EQ(a.gpus[2].memory_mib, 15 * 1024);
  EXPECT_FALSE(a.gpus[2].mode.has_value());
  EXPECT_EQ(file->nodes[1].cpu_milli, 500);
  ASSERT_EQ(file->nodes[1].gpus[0].instances.size(), 1u);
  EXPECT_TRUE(file->nodes[1].gpus[0].instances[0].in_use);
  ASSERT_EQ(file->running.size(), 1u);
  EXPECT_EQ(file->running[0].node_name, "node-b");
  EXPECT_TRUE(file->warnings.empty());
}

TEST(ClusterYamlTest, ErrorsNameTheKey) {
  auto cpu = ParseClusterYaml("nodes:\n  - {name: a, cpu: many, memory: 1Gi}\n");
  EXPECT_THAT(std::string(cpu.status().message()), HasSubstr("nodes[0].cpu: invalid quantity"));
  auto mode = ParseClusterYaml(
      "nodes:\n  - {name: a, cpu: 1, memory: 1Gi, gpus: [{model: T4, mode: vulkan}]}\n");
  EXPECT_THAT(std::string(mode.status().message()),
              HasSubstr("nodes[0].gpus[0].mode: unknown mode 'vulkan'"));
  auto missing = ParseClusterYaml("nodes:\n  - {name: a, memory: 1Gi}\n");
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("nodes[0].cpu: missing"));
  auto twice = ParseClusterYaml(
      "nodes:\n  - {name: a, cpu: 1, memory: 1Gi}\n  - {name: a, cpu: 1, memory: 1Gi}\n");
  EXPECT_THAT(std::string(twice.status().message()), HasSubstr("listed twice"));
  auto running = ParseClusterYaml(
      "nodes: []\npods:\n  - {kind: Pod, metadata: {name: p}, spec: {containers: [{name: c}]}}\n");
  EXPECT_THAT(std::string(running.status().message()), HasSubstr("spec.nodeName"));
  auto negative = ParseClusterYaml("nodes:\n  - {name: a, cpu: -4, memory: 1Gi}\n");
  EXPECT_THAT(std::string(negative.status().message()), HasSubstr("negative"));
  EXPECT_FALSE(ParseClusterYaml("just text").ok());
  EXPECT_FALSE(ParseClusterYaml("nodes: {a: 1}").ok());
}

TEST(ClusterYamlTest, UnknownKeysWarn) {
  auto file = ParseClusterYaml("nodes:\n  - {name: a, cpu: 1, memory: 1Gi, zone: x}\nextra: 1\n");
  ASSERT_TRUE(file.ok());
  EXPECT_THAT(file->warnings,
              ElementsAre("nodes[0].zone: unknown key (ignored)", "extra: unknown key (ignored)"));
}

}  // namespace
}  // namespace prism::config
