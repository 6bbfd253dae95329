// Fuzzes the extender's wire decoders (src/extender/wire.h). Selector bit 0: 0 = ExtenderArgs
// (checked against nlohmann's reading of the same body; then the pod, with
// config::PodManifestFromJson, and any full nodes it carries are decoded as the extender does),
// 1 = ExtenderBindingArgs.
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
  // The request is parsed with simdjson; what it accepts, nlohmann (the reference the pod is
  // read with) must read the same: the pod equal, the names those of the array chosen.
  const extender::Json doc = extender::Json::parse(in.text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) fuzz::Violated("accepted a body nlohmann refuses", absl::OkStatus());
  const extender::Json* pod = extender::FindField(doc, "Pod");
  if (pod == nullptr || *pod != args->pod)
    fuzz::Violated("pod differs from nlohmann's", absl::OkStatus());
  if (const extender::Json* names = extender::FindField(doc, "NodeNames");
      names != nullptr && names->is_array()) {
    if (names->size() != args->node_names.size()) {
      fuzz::Violated("node name count differs from nlohmann's", absl::OkStatus());
    }
    for (size_t i = 0; i < names->size(); ++i) {
      if ((*names)[i].get_ref<const std::string&>() != args->node_names[i]) {
        fuzz::Violated("node name differs from nlohmann's", absl::OkStatus());
      }
    }
  }
  (void)config::PodManifestFromJson(args->pod);
  if (args->nodes) {
    for (const extender::Json& node : *args->nodes) (void)extender::NodeSpecFromJson(node);
  }
  return 0;
}
