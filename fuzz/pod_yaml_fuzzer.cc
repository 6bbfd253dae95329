// Fuzzes the pod manifest YAML reader (src/config/pod_yaml.h) and the simulator's pod reader
// (src/sim/yaml_input.h), then turns each pod into a scheduling request under the default
// device config. Selector bit 0: 0 = pod_yaml, 1 = sim PodsFromYaml.
#include "config/device_config_yaml.h"
#include "config/pod_request.h"
#include "config/pod_yaml.h"
#include "fuzz/fuzz_util.h"
#include "sim/yaml_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism;
  static const sched::DeviceConfig config = config::DefaultDeviceConfig();
  const fuzz::Selected in = fuzz::Select(data, size);
  if (in.selector & 1) {
    (void)sim::PodsFromYaml(in.text, "fuzz.yaml", config, {"A100-PCIE-40GB", "Tesla-T4"}, 40960);
    return 0;
  }
  auto pods = config::ParsePodYaml(in.text, "fuzz.yaml");
  if (!pods.ok()) return 0;
  for (const config::PodManifest& pod : *pods) (void)config::BuildPodRequest(pod, config);
  return 0;
}
