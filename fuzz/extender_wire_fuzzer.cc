// Fuzzes the extender's wire decoders (src/extender/wire.h). Selector bit 0: 0 = ExtenderArgs
// (then the pod, with config::PodManifestFromJson, and any full nodes it carries are decoded as
// the extender does), 1 = ExtenderBindingArgs.
#include "config/pod_json.h"
#include "extender/wire.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism;
  const fuzz::Selected in = fuzz::Select(data, size);
  if (in.selector & 1) {
    (void)extender::ParseBindingArgs(in.text);
    return 0;
  }
  auto args = extender::ParseExtenderArgs(in.text);
  if (!args.ok()) return 0;
  (void)config::PodManifestFromJson(args->pod);
  if (args->nodes) {
    for (const extender::Json& node : *args->nodes) (void)extender::NodeSpecFromJson(node);
  }
  return 0;
}
