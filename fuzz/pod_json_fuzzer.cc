// Fuzzes the v1.Pod JSON reader (extender::PodManifestFromJson, src/extender/wire.h) and the
// request builder (src/config/pod_request.h) under the default device config.
#include "config/device_config_yaml.h"
#include "config/pod_request.h"
#include "extender/wire.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism;
  static const sched::DeviceConfig config = config::DefaultDeviceConfig();
  const extender::Json pod = extender::Json::parse(fuzz::AsText(data, size), nullptr, false);
  if (pod.is_discarded()) return 0;
  auto manifest = extender::PodManifestFromJson(pod);
  if (manifest.ok()) (void)config::BuildPodRequest(*manifest, config);
  return 0;
}
