// Fuzzes the scheduler extender's node reader (extender::NodeSpecFromJson: the inventory
// annotation and status.allocatable of a v1.Node from the informer) and the cache's in-place
// node update behind it. Selector bit 0: 0 = the whole v1.Node JSON; 1 = the value of
// prism.io/gpu-inventory on an otherwise good node named "hostile". The hostile node joins a
// cache holding a good node, replaces an earlier good version of itself (the per-node update
// path), is replaced by a good version again, then deleted; a well-formed pod must still fit the
// good node after each step: one bad node never takes the others down.
#include <algorithm>

#include "config/device_config_yaml.h"
#include "config/pod_json.h"
#include "deviceplugin/annotations.h"
#include "extender/cache.h"
#include "extender/test_util.h"
#include "extender/wire.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism;
  using extender::Json;
  using extender::testing::NodeJson;
  using extender::testing::TestGpu;
  static const sched::DeviceConfig config = config::DefaultDeviceConfig();
  static const Json good = NodeJson("good", {TestGpu("A100-PCIE-40GB", 40960, false)});
  static const Json hostile_before =
      NodeJson("hostile", {TestGpu("A100-PCIE-40GB", 40960, true), TestGpu("Tesla-T4", 15360)});
  const fuzz::Selected in = fuzz::Select(data, size);
  Json node;
  if (in.selector & 1) {
    node = hostile_before;
    node["metadata"]["annotations"][deviceplugin::kInventoryAnnotation] = std::string(in.text);
  } else {
    node = Json::parse(in.text, nullptr, false);
    if (node.is_discarded()) return 0;
    // A node of that name legitimately replaces the good one.
    const Json* metadata = extender::FindField(node, "metadata");
    const Json* name = metadata != nullptr ? extender::FindField(*metadata, "name") : nullptr;
    if (name != nullptr && name->is_string() && name->get<std::string>() == "good") return 0;
  }
  (void)extender::NodeSpecFromJson(node);

  static const config::PodManifest probe =
      *config::PodManifestFromJson(extender::testing::GpuPod("probe", 1, 1000));
  auto good_still_fits = [&](extender::SchedulerCache& cache, const char* when) {
    const extender::FilterOutcome out = cache.Filter(probe, {"good", "hostile"}, /*assume=*/false);
    if (std::find(out.feasible.begin(), out.feasible.end(), "good") == out.feasible.end()) {
      fuzz::Violated(when, absl::InternalError(out.Summary(2)));
    }
  };
  extender::SchedulerCache cache(config);
  cache.UpsertNode(good);
  cache.UpsertNode(hostile_before);
  cache.RebuildIfDirty();
  good_still_fits(cache, "the good node fits before");
  cache.UpsertNode(node);
  cache.RebuildIfDirty();
  good_still_fits(cache, "the good node fits beside the hostile one");
  (void)cache.GpuSnapshots();
  cache.UpsertNode(hostile_before);
  cache.RebuildIfDirty();
  good_still_fits(cache, "the good node fits after the hostile one is replaced");
  cache.DeleteNode("hostile");
  cache.RebuildIfDirty();
  good_still_fits(cache, "the good node fits after the hostile one is deleted");
  return 0;
}
