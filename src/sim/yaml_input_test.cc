#include "sim/yaml_input.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "config/device_config_yaml.h"

namespace prism::sim {
namespace {

using ::testing::HasSubstr;

constexpr char kCluster[] = R"(
nodes:
  - name: node-a
    cpu: "64"
    memory: 256Gi
    gpus:
      - model: A100-SXM4-80GB
        mode: mig
        count: 2
  - name: node-b
    cpu: "32"
    memory: 128Gi
    gpus:
      - model: A100-SXM4-80GB
        mode: hami-core
        count: 4
)";

TEST(ClusterFromYamlTest, ReadsNodesWithMigAndSharedGpus) {
  auto y = ClusterFromYaml(kCluster, config::DefaultDeviceConfig());
  ASSERT_TRUE(y.ok()) << y.status();
  const Cluster& c = y->cluster;
  ASSERT_EQ(c.node_count(), 2);
  EXPECT_EQ(c.total_gpus(), 6);
  EXPECT_EQ(c.node(0).milli_cpu, 64000);
  EXPECT_EQ(c.node(0).memory_mib, 262144);
  ASSERT_NE(c.node(0).mig_model, nullptr);
  EXPECT_EQ(c.node(0).mig_model->name, "A100-SXM4-80GB");
  EXPECT_EQ(c.node(1).mig_model, nullptr);
  EXPECT_EQ(y->gpu_memory_mib, 81920);
}

TEST(ClusterFromYamlTest, RejectsMixedGpusOnANode) {
  auto y = ClusterFromYaml(R"(
nodes:
  - name: n
    cpu: "8"
    memory: 8Gi
    gpus:
      - {model: T4, memoryMiB: 15109}
      - {model: A10, memoryMiB: 22731}
)",
                           config::DefaultDeviceConfig());
  EXPECT_THAT(std::string(y.status().message()), HasSubstr("one GPU model and mode per node"));
}

TEST(PodsFromYamlTest, TurnsGpuRequestsIntoShares) {
  constexpr char kPods[] = R"(
apiVersion: v1
kind: Pod
metadata: {name: half}
spec:
  containers:
    - name: main
      resources:
        requests: {cpu: "2", memory: 4Gi}
        limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: "40960"}
---
apiVersion: v1
kind: Pod
metadata: {name: pct, annotations: {nvidia.com/use-gputype: "a100"}}
spec:
  containers:
    - name: main
      resources:
        limits: {nvidia.com/gpu: 2, nvidia.com/gpumem-percentage: 25}
---
apiVersion: v1
kind: Pod
metadata: {name: cpu}
spec:
  containers:
    - name: main
      resources:
        requests: {cpu: 500m}
)";
  auto pods = PodsFromYaml(kPods, "pods.yaml", config::DefaultDeviceConfig(),
                           {"A100-SXM4-80GB", "T4"}, 81920);
  ASSERT_TRUE(pods.ok()) << pods.status();
  ASSERT_EQ(pods->size(), 3u);
  EXPECT_EQ((*pods)[0].name, "default/half");
  EXPECT_EQ((*pods)[0].milli_cpu, 2000);
  EXPECT_EQ((*pods)[0].memory_mib, 4096);
  EXPECT_EQ((*pods)[0].num_gpu, 1);
  EXPECT_EQ((*pods)[0].gpu_milli, 500);
  EXPECT_EQ((*pods)[1].num_gpu, 2);
  EXPECT_EQ((*pods)[1].gpu_milli, 250);
  EXPECT_EQ((*pods)[1].gpu_spec, "A100-SXM4-80GB");
  EXPECT_EQ((*pods)[2].num_gpu, 0);
}

TEST(PodsFromYamlTest, NeedsAKnownGpuMemoryForMibRequests) {
  constexpr char kPod[] = R"(
apiVersion: v1
kind: Pod
metadata: {name: mib}
spec:
  containers:
    - name: main
      resources:
        limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: "1000"}
)";
  auto pods = PodsFromYaml(kPod, "p.yaml", config::DefaultDeviceConfig(), {"T4"}, 0);
  EXPECT_THAT(std::string(pods.status().message()),
              HasSubstr("pod default/mib, container main: asks for 1000 MiB"));
}

}  // namespace
}  // namespace prism::sim
