// Fuzzes the cluster file reader (src/config/cluster_yaml.h) and the simulator's use of it
// (src/sim/yaml_input.h): a cluster that parses is built into the scheduler's state and the
// simulator's cluster.
#include "config/cluster_yaml.h"
#include "config/device_config_yaml.h"
#include "core/sched/cluster.h"
#include "fuzz/fuzz_util.h"
#include "sim/yaml_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism;
  static const sched::DeviceConfig config = config::DefaultDeviceConfig();
  const std::string_view text = fuzz::AsText(data, size);
  auto file = config::ParseClusterYaml(text);
  if (file.ok()) {
    (void)sched::ClusterState::Build(file->nodes, config);
    for (const config::PodManifest& pod : file->running) (void)config::BuildPodRequest(pod, config);
  }
  (void)sim::ClusterFromYaml(text, config);
  return 0;
}
