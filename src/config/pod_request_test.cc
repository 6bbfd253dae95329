#include "config/pod_request.h"

#include <string>
#include <string_view>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "config/device_config_yaml.h"
#include "config/pod_yaml.h"
#include "core/sched/engine.h"
#include "core/sched/test_util.h"

namespace prism::config {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<sched::PodRequest> Build(const std::string& yaml,
                                        const sched::DeviceConfig& config = {}) {
  auto pods = ParsePodYaml(yaml, "test.yaml");
  if (!pods.ok()) return pods.status();
  return BuildPodRequest(pods->front(), config);
}

constexpr char kSeedPod[] = R"(
apiVersion: v1
kind: Pod
metadata:
  name: gpu-pod1
  annotations:
    nvidia.com/vgpu-mode: "mig"
spec:
  containers:
    - name: ubuntu-container1
      image: ubuntu:20.04
      resources:
        limits:
          nvidia.com/gpu: 2
          nvidia.com/gpumem: 8000
)";

TEST(PodRequestTest, SeedPod) {
  auto req = Build(kSeedPod);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->Key(), "default/gpu-pod1");
  EXPECT_EQ(req->modes, sched::kModeMig);
  ASSERT_EQ(req->containers.size(), 1u);
  EXPECT_EQ(req->containers[0].gpu.count, 2);
  EXPECT_EQ(req->containers[0].gpu.memory_mib, 8000);
  EXPECT_EQ(req->containers[0].gpu.cores_permille, 0);
}

PodManifest Manifest(std::map<std::string, std::string> limits) {
  PodManifest p;
  p.name = "p";
  ContainerManifest c;
  c.name = "main";
  c.limits = std::move(limits);
  p.containers.push_back(c);
  return p;
}

TEST(PodRequestTest, ExtendedResourceCountReadsLimitsThenRequestsAsWholeNumbers) {
  PodManifest p = Manifest({{"nvidia.com/gpu", "2"}});
  p.containers[0].requests["nvidia.com/gpu"] = "5";
  EXPECT_EQ(ExtendedResourceCount(p, p.containers[0], "nvidia.com/gpu").value(), 2);
  p.containers[0].limits.clear();
  EXPECT_EQ(ExtendedResourceCount(p, p.containers[0], "nvidia.com/gpu").value(), 5);
  EXPECT_EQ(ExtendedResourceCount(p, p.containers[0], "example.com/other").value(), 0);
  // The node agent once read these with stoll: "lots" became 0 and "500m" 500.
  for (const char* bad : {"lots", "500m", "1.5", "-1"}) {
    SCOPED_TRACE(bad);
    p.containers[0].limits["nvidia.com/gpu"] = bad;
    absl::StatusOr<int64_t> n = ExtendedResourceCount(p, p.containers[0], "nvidia.com/gpu");
    ASSERT_FALSE(n.ok());
    EXPECT_THAT(std::string(n.status().message()),
                HasSubstr("pod default/p container main: nvidia.com/gpu"));
  }
}

TEST(PodRequestTest, HamiDefaults) {
  sched::DeviceConfig config;
  // A whole GPU: all memory and exclusive cores (HAMi's webhook).
  auto whole = BuildPodRequest(Manifest({{"nvidia.com/gpu", "1"}}), config);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->containers[0].gpu.memory_permille, 1000);
  EXPECT_EQ(whole->containers[0].gpu.cores_permille, 1000);
  // Memory alone: one GPU (defaultGPUNum), no core share.
  auto mem = BuildPodRequest(Manifest({{"nvidia.com/gpumem", "3000"}}), config);
  ASSERT_TRUE(mem.ok());
  EXPECT_EQ(mem->containers[0].gpu.count, 1);
  EXPECT_EQ(mem->containers[0].gpu.memory_mib, 3000);
  EXPECT_EQ(mem->containers[0].gpu.cores_permille, 0);
  // Percentage and clamped cores.
  auto pct = BuildPodRequest(Manifest({{"nvidia.com/gpu", "1"},
                                       {"nvidia.com/gpumem-percentage", "25"},
                                       {"nvidia.com/gpucores", "150"}}),
                             config);
  ASSERT_TRUE(pct.ok());
  EXPECT_EQ(pct->containers[0].gpu.memory_permille, 250);
  EXPECT_EQ(pct->containers[0].gpu.cores_permille, 1000);
  // memoryFactor and defaultMemory.
  config.memory_factor = 2;
  config.default_memory_mib = 1024;
  auto factor =
      BuildPodRequest(Manifest({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "100"}}), config);
  EXPECT_EQ(factor->containers[0].gpu.memory_mib, 200);
  auto deflt =
      BuildPodRequest(Manifest({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "20"}}), config);
  EXPECT_EQ(deflt->containers[0].gpu.memory_mib, 1024);
  EXPECT_EQ(deflt->containers[0].gpu.cores_permille, 200);
}

TEST(PodRequestTest, CustomResourceNames) {
  sched::DeviceConfig config;
  config.resource_count_name = "example.com/vgpu";
  auto req =
      BuildPodRequest(Manifest({{"example.com/vgpu", "3"}, {"nvidia.com/gpu", "1"}}), config);
  ASSERT_TRUE(req.ok());
  EXPECT_EQ(req->containers[0].gpu.count, 3);
}

TEST(PodRequestTest, CpuMemoryAndInitContainers) {
  auto req = Build(R"(
kind: Pod
metadata: {name: p, namespace: ml}
spec:
  containers:
    - name: main
      resources:
        requests: {cpu: 1500m, memory: 2Gi}
        limits: {cpu: "4", nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}
  initContainers:
    - name: setup
      resources:
        limits: {cpu: "3", memory: 1Gi}
)");
  ASSERT_TRUE(req.ok()) << req.status();
  ASSERT_EQ(req->containers.size(), 2u);
  EXPECT_TRUE(req->containers[0].init);           // Init containers first.
  EXPECT_EQ(req->containers[0].cpu_milli, 3000);  // Request defaults to the limit.
  EXPECT_EQ(req->containers[1].cpu_milli, 1500);
  EXPECT_EQ(req->containers[1].memory_bytes, int64_t{2} << 30);
  EXPECT_EQ(req->EffectiveCpuMilli(), 3000);
}

// A sidecar (an init container with restartPolicy: Always) runs for the pod's whole life beside
// the app containers: Kubernetes adds its requests to theirs, and so must the GPU charge. It was
// charged as an init container (max'ed with the app), which let a GPU be overcommitted.
constexpr char kSidecarPod[] = R"(
kind: Pod
metadata: {name: p}
spec:
  initContainers:
    - name: setup
      resources:
        limits: {cpu: "2"}
    - name: proxy
      restartPolicy: Always
      resources:
        limits: {cpu: "1", nvidia.com/gpu: 1, nvidia.com/gpumem: 6000}
  containers:
    - name: main
      resources:
        limits: {cpu: "2", nvidia.com/gpu: 1, nvidia.com/gpumem: 10000}
)";

TEST(PodRequestTest, SidecarIsChargedBesideTheAppContainers) {
  auto req = Build(kSidecarPod);
  ASSERT_TRUE(req.ok()) << req.status();
  ASSERT_EQ(req->containers.size(), 3u);
  // Pod order is kept (decisions are matched to containers by index).
  EXPECT_EQ(req->containers[0].name, "setup");
  EXPECT_EQ(req->containers[1].name, "proxy");
  EXPECT_EQ(req->containers[2].name, "main");
  EXPECT_TRUE(req->containers[0].init);
  EXPECT_FALSE(req->containers[1].init) << "a sidecar runs beside the app containers";
  EXPECT_FALSE(req->containers[2].init);
  EXPECT_EQ(req->EffectiveCpuMilli(), 3000);  // max(setup 2, proxy 1 + main 2).
}

TEST(PodRequestTest, SidecarAndAppDoNotShareAGpuTooSmallForBoth) {
  using namespace ::prism::sched::testing;  // NOLINT: test builders.
  // One GPU with room for the app (10000 MiB) but not for the app and the sidecar (16000).
  sched::Engine engine =
      MakeEngine({Node("n", 8, 16, 1, Gpu("T4", std::nullopt, 15360))}, sched::DeviceConfig{});
  auto sidecar = Build(kSidecarPod);
  ASSERT_TRUE(sidecar.ok()) << sidecar.status();
  sched::ScheduleResult r = engine.Schedule(*sidecar);
  EXPECT_FALSE(r.scheduled) << "app + sidecar need 16000 MiB of a 15360 MiB GPU";

  // The same container as a regular init container has finished before the app starts: it fits.
  std::string init_yaml = kSidecarPod;
  init_yaml.erase(init_yaml.find("      restartPolicy: Always\n"),
                  std::string_view("      restartPolicy: Always\n").size());
  auto init = Build(init_yaml);
  ASSERT_TRUE(init.ok()) << init.status();
  ASSERT_TRUE(init->containers[1].init);
  EXPECT_TRUE(engine.Schedule(*init).scheduled);
}

// An init container after a sidecar runs while the sidecar does: on one GPU they need the sum
// of their memory. Charged as an init container (max'ed with the others) it under-charged.
TEST(PodRequestTest, AnInitContainerAfterASidecarIsChargedBesideIt) {
  using namespace ::prism::sched::testing;  // NOLINT: test builders.
  constexpr char kPod[] = R"(
kind: Pod
metadata: {name: p}
spec:
  initContainers:
    - name: before
      resources:
        limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 12000}
    - name: proxy
      restartPolicy: Always
      resources:
        limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 6000}
    - name: after
      resources:
        limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 12000}
  containers:
    - name: main
      resources:
        limits: {cpu: "1"}
)";
  auto req = Build(kPod);
  ASSERT_TRUE(req.ok()) << req.status();
  ASSERT_EQ(req->containers.size(), 4u);
  EXPECT_TRUE(req->containers[0].init) << "before the sidecar: an init container as ever";
  EXPECT_FALSE(req->containers[1].init);
  EXPECT_FALSE(req->containers[2].init) << "after the sidecar: runs beside it";
  // One 15360 MiB GPU: `before` (12000) runs alone, but `after` (12000) with `proxy` (6000)
  // needs 18000 at once.
  sched::Engine engine =
      MakeEngine({Node("n", 8, 16, 1, Gpu("T4", std::nullopt, 15360))}, sched::DeviceConfig{});
  EXPECT_FALSE(engine.Schedule(*req).scheduled) << "proxy + after need 18000 MiB of 15360";
  // With two such GPUs they fit.
  sched::Engine two =
      MakeEngine({Node("n", 8, 16, 2, Gpu("T4", std::nullopt, 15360))}, sched::DeviceConfig{});
  EXPECT_TRUE(two.Schedule(*req).scheduled);
}

TEST(PodRequestTest, Annotations) {
  PodManifest p = Manifest({{"nvidia.com/gpu", "1"}});
  p.annotations = {{"nvidia.com/vgpu-mode", "hami-core,mig"},
                   {"nvidia.com/use-gputype", "A100, H100"},
                   {"nvidia.com/nouse-gpuuuid", "GPU-1"},
                   {"hami.io/node-scheduler-policy", "spread"},
                   {"hami.io/gpu-scheduler-policy", "binpack"}};
  auto req = BuildPodRequest(p, {});
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->modes, sched::kModeAny);
  EXPECT_EQ(req->use_types, (std::vector<std::string>{"A100", "H100"}));
  EXPECT_EQ(req->nouse_uuids, (std::vector<std::string>{"GPU-1"}));
  EXPECT_EQ(req->node_policy, "spread");
  p.annotations = {{"nvidia.com/vgpu-mode", "mps"}};
  EXPECT_THAT(std::string(BuildPodRequest(p, {}).status().message()), HasSubstr("vgpu-mode"));
  // Issue 13, finding 6: HAMi's substring test took these as hami-core (or mig).
  for (const char* mode : {"hami-core,mps", "mig, mps", "hami-core-ish", "mig,", "xmigx"}) {
    p.annotations = {{"nvidia.com/vgpu-mode", mode}};
    auto bad = BuildPodRequest(p, {});
    EXPECT_FALSE(bad.ok()) << mode;
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("nvidia.com/vgpu-mode")) << mode;
  }
  EXPECT_THAT(std::string(BuildPodRequest(p, {}).status().message()), HasSubstr("mode 'xmigx'"));
  p.annotations = {{"nvidia.com/vgpu-mode", " MIG "}};
  ASSERT_TRUE(BuildPodRequest(p, {}).ok());
  EXPECT_EQ(BuildPodRequest(p, {})->modes, sched::kModeMig);
  p.annotations = {{"hami.io/node-scheduler-policy", "fastest"}};
  EXPECT_THAT(std::string(BuildPodRequest(p, {}).status().message()), HasSubstr("fastest"));
}

TEST(PodRequestTest, TopologyAnnotations) {
  PodManifest p = Manifest({{"nvidia.com/gpu", "4"}});
  auto req = BuildPodRequest(p, {});
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_FALSE(req->topology.Any());
  // HAMi's spellings: the topology-aware policy (also in a chain) and numa-bind as Go's
  // strconv.ParseBool reads it.
  p.annotations = {{"hami.io/gpu-scheduler-policy", "binpack, Topology-Aware"},
                   {"nvidia.com/numa-bind", "True"}};
  req = BuildPodRequest(p, {});
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_TRUE(req->topology.preferred);
  EXPECT_TRUE(req->topology.numa_bind);
  EXPECT_EQ(req->topology.required, topo::Tier::kAny);
  EXPECT_NE(req->ShapeKey(), BuildPodRequest(Manifest({{"nvidia.com/gpu", "4"}}), {})->ShapeKey());
  p.annotations = {{"nvidia.com/numa-bind", "0"}};
  ASSERT_TRUE(BuildPodRequest(p, {}).ok());
  EXPECT_FALSE(BuildPodRequest(p, {})->topology.numa_bind);
  // Prism's annotation.
  const std::pair<const char*, topo::Tier> required[] = {
      {"required", topo::Tier::kNvLink},
      {"required:nvlink", topo::Tier::kNvLink},
      {" Required:PCIE-Switch ", topo::Tier::kSwitch},
      {"required:numa", topo::Tier::kNuma}};
  for (const auto& [value, tier] : required) {
    p.annotations = {{"prism.io/gpu-topology", value}};
    req = BuildPodRequest(p, {});
    ASSERT_TRUE(req.ok()) << value << ": " << req.status();
    EXPECT_EQ(req->topology.required, tier) << value;
    EXPECT_FALSE(req->topology.preferred) << value;
  }
  p.annotations = {{"prism.io/gpu-topology", "preferred"}};
  EXPECT_TRUE(BuildPodRequest(p, {})->topology.preferred);
  // Values it does not know are errors naming the annotation and the value.
  for (const char* bad : {"yes", "", "required:any", "required:", "required:nvswitch", "best"}) {
    p.annotations = {{"prism.io/gpu-topology", bad}};
    auto status = BuildPodRequest(p, {}).status();
    EXPECT_FALSE(status.ok()) << bad;
    EXPECT_THAT(std::string(status.message()), HasSubstr("prism.io/gpu-topology")) << bad;
  }
  p.annotations = {{"nvidia.com/numa-bind", "yes"}};
  EXPECT_THAT(std::string(BuildPodRequest(p, {}).status().message()),
              HasSubstr("nvidia.com/numa-bind 'yes' is not a boolean"));
}

// docs/mig-slices.md: a pod may keep to whole MIG instances where the device config shares some.
TEST(PodRequestTest, MigSharingAnnotation) {
  PodManifest p = Manifest({{"nvidia.com/gpu", "1"}});
  auto req = BuildPodRequest(p, {});
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_TRUE(req->mig_sharing);
  const std::string shared_key = req->ShapeKey();
  p.annotations = {{"prism.io/mig-sharing", " OFF "}};
  req = BuildPodRequest(p, {});
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_FALSE(req->mig_sharing);
  EXPECT_NE(req->ShapeKey(), shared_key);  // Placed differently, so indexed apart.
  p.annotations = {{"prism.io/mig-sharing", "on"}};
  EXPECT_TRUE(BuildPodRequest(p, {})->mig_sharing);
  p.annotations = {{"prism.io/mig-sharing", "false"}};
  EXPECT_THAT(std::string(BuildPodRequest(p, {}).status().message()),
              HasSubstr("prism.io/mig-sharing 'false': expected on or off"));
}

TEST(PodRequestTest, BadInputIsAClearError) {
  EXPECT_THAT(
      std::string(BuildPodRequest(Manifest({{"nvidia.com/gpu", "two"}}), {}).status().message()),
      HasSubstr("container main: nvidia.com/gpu: invalid quantity 'two'"));
  EXPECT_THAT(
      std::string(BuildPodRequest(Manifest({{"nvidia.com/gpu", "1.5"}}), {}).status().message()),
      HasSubstr("not a whole number"));
  EXPECT_THAT(
      std::string(BuildPodRequest(Manifest({{"nvidia.com/gpu", "-1"}}), {}).status().message()),
      HasSubstr("negative"));
  EXPECT_THAT(std::string(BuildPodRequest(Manifest({{"nvidia.com/gpu", "1"},
                                                    {"nvidia.com/gpumem-percentage", "120"}}),
                                          {})
                              .status()
                              .message()),
              HasSubstr("0..100"));
  EXPECT_THAT(std::string(BuildPodRequest(Manifest({{"cpu", "lots"}}), {}).status().message()),
              HasSubstr("cpu"));
  EXPECT_THAT(
      std::string(BuildPodRequest(Manifest({{"nvidia.com/gpu", "100000"}}), {}).status().message()),
      HasSubstr("absurd"));
}

TEST(PodYamlTest, RejectsWhatIsNotAPod) {
  EXPECT_THAT(
      std::string(
          ParsePodYaml("kind: Deployment\nmetadata: {name: d}\n", "d.yaml").status().message()),
      HasSubstr("d.yaml: is a Deployment, not a Pod"));
  EXPECT_THAT(std::string(ParsePodYaml("name: x\n", "x.yaml").status().message()),
              HasSubstr("no kind"));
  EXPECT_THAT(std::string(ParsePodYaml("- 1\n- 2\n", "l.yaml").status().message()),
              HasSubstr("not a Pod"));
  EXPECT_THAT(
      std::string(
          ParsePodYaml("kind: Pod\nmetadata: {name: p}\nspec: {}\n", "e.yaml").status().message()),
      HasSubstr("spec.containers is empty"));
  EXPECT_FALSE(ParsePodYaml("kind: Pod\n  bad: [", "b.yaml").ok());
}

TEST(PodYamlTest, MultipleDocumentsAndLists) {
  constexpr char kTwo[] = R"(
kind: Pod
metadata: {name: a}
spec: {containers: [{name: c}]}
---
kind: List
items:
  - kind: Pod
    metadata: {name: b}
    spec: {containers: [{name: c}]}
)";
  auto pods = ParsePodYaml(kTwo, "two.yaml");
  ASSERT_TRUE(pods.ok()) << pods.status();
  ASSERT_EQ(pods->size(), 2u);
  EXPECT_EQ((*pods)[1].name, "b");
}

}  // namespace
}  // namespace prism::config
