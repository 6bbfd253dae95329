// Fuzzes the scheduler extender's cache (src/extender/cache.h) with hostile pods from the
// informer: the pods the scheduler must survive (finding 1 of issue 13). Selector % 4:
// 0 = the whole v1.Pod JSON; 1 = the value of prism.io/decision, 2 = of
// prism.io/allocation-status, 3 = of hami.io/vgpu-devices-allocated, on a running GPU pod
// bound to the node. After each pod the cache must still filter a well-formed pod.
#include "extender/cache.h"
#include "config/device_config_yaml.h"
#include "extender/test_util.h"
#include "extender/wire.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism;
  using extender::Json;
  static const sched::DeviceConfig config = config::DefaultDeviceConfig();
  static const Json node = extender::testing::NodeJson(
      "gpu-node", {extender::testing::TestGpu("A100-PCIE-40GB", 40960, true),
                   extender::testing::TestGpu("Tesla-T4", 15360, false)});
  const fuzz::Selected in = fuzz::Select(data, size);
  Json pod;
  if (in.selector % 4 == 0) {
    pod = Json::parse(in.text, nullptr, false);
    if (pod.is_discarded()) return 0;
  } else {
    pod = Json{{"apiVersion", "v1"},
               {"kind", "Pod"},
               {"metadata",
                {{"name", "hostile"},
                 {"namespace", "default"},
                 {"uid", "uid-hostile"},
                 {"annotations", Json::object()}}},
               {"spec",
                {{"nodeName", "gpu-node"},
                 {"containers",
                  Json::array({{{"name", "main"},
                                {"resources",
                                 {{"limits", {{"nvidia.com/gpu", "1"},
                                              {"nvidia.com/gpumem", "3000"}}}}}}})}}},
               {"status", {{"phase", "Running"}}}};
    const char* key = in.selector % 4 == 1   ? "prism.io/decision"
                      : in.selector % 4 == 2 ? "prism.io/allocation-status"
                                             : "hami.io/vgpu-devices-allocated";
    pod["metadata"]["annotations"][key] = std::string(in.text);
    if (in.selector % 4 == 3) pod["metadata"]["annotations"]["hami.io/vgpu-node"] = "gpu-node";
  }
  extender::SchedulerCache cache(config);
  cache.UpsertNode(node);
  cache.UpsertPod(pod);
  cache.RebuildIfDirty();
  config::PodManifest probe;
  probe.name = "probe";
  probe.uid = "uid-probe";
  probe.containers.push_back({.name = "main",
                              .init = false,
                              .requests = {},
                              .limits = {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}}});
  (void)cache.Filter(probe, {"gpu-node"});
  (void)cache.GpuSnapshots();
  cache.DeletePod(pod);
  return 0;
}
