// Fuzzes the placement-decision annotation decoder (src/config/annotations.h) against a fixed
// cluster (an A100 in MIG mode, an A100 and a T4 shared by slices). The selector picks which
// annotation carries the input: 0 prism.io/decision, 1 hami.io/vgpu-devices-allocated,
// 2 hami.io/vgpu-mig-allocations (with a HAMi device list), 3 hami.io/vgpu-devices-to-allocate.
// A decision that decodes must apply to a fresh engine or be refused with a Status.
#include "config/annotations.h"
#include "config/cluster_yaml.h"
#include "config/device_config_yaml.h"
#include "config/pod_request.h"
#include "core/sched/engine.h"
#include "fuzz/fuzz_util.h"

namespace {

constexpr char kCluster[] = R"(
nodes:
  - name: node-a
    cpu: "32"
    memory: 128Gi
    gpus:
      - {model: A100-PCIE-40GB, mode: mig, uuid: GPU-a100-mig}
      - {model: A100-PCIE-40GB, uuid: GPU-a100}
      - {model: T4, memory: 15Gi, uuid: GPU-t4}
)";

struct Fixture {
  prism::sched::DeviceConfig config = prism::config::DefaultDeviceConfig();
  std::vector<prism::sched::NodeSpec> nodes;
  prism::sched::PodRequest pod;
  Fixture() {
    auto file = prism::config::ParseClusterYaml(kCluster);
    if (!file.ok()) prism::fuzz::Violated("fixture cluster parses", file.status());
    nodes = file->nodes;
    prism::config::PodManifest manifest;
    manifest.name = "p";
    manifest.containers.push_back({.name = "main",
                                   .init = false,
                                   .requests = {},
                                   .limits = {{"nvidia.com/gpu", "2"},
                                              {"nvidia.com/gpumem", "4000"}}});
    auto request = prism::config::BuildPodRequest(manifest, config);
    if (!request.ok()) prism::fuzz::Violated("fixture pod builds", request.status());
    pod = *request;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism;
  static const Fixture fixture;
  const fuzz::Selected in = fuzz::Select(data, size);
  std::map<std::string, std::string> annotations;
  const std::string value(in.text);
  switch (in.selector % 4) {
    case 0:
      annotations[config::kPrismDecisionAnnotation] = value;
      break;
    case 1:
      annotations[config::kHamiNodeAnnotation] = "node-a";
      annotations[config::kHamiDevicesAllocatedAnnotation] = value;
      break;
    case 2:
      annotations[config::kHamiNodeAnnotation] = "node-a";
      annotations[config::kHamiDevicesAllocatedAnnotation] = "GPU-a100-mig,NVIDIA,10240,28:;";
      annotations[config::kHamiMigAllocationsAnnotation] = value;
      break;
    default:
      annotations[config::kHamiNodeAnnotation] = "node-a";
      annotations[config::kHamiDevicesToAllocateAnnotation] = value;
      break;
  }
  auto state = sched::ClusterState::Build(fixture.nodes, fixture.config);
  if (!state.ok()) fuzz::Violated("fixture cluster builds", state.status());
  sched::Engine engine(*std::move(state), fixture.config);
  auto decision = config::DecodeDecisionAnnotations(annotations, fixture.pod, engine.cluster());
  if (decision.ok()) (void)engine.Apply("default/p", *decision);
  return 0;
}
