// Fuzzes the v1.Pod JSON reader (config::PodManifestFromJson, src/config/pod_json.h) and the
// request builder (src/config/pod_request.h) under the default device config. Property: where
// the YAML reader (pod_yaml.h) also accepts the same object (JSON is YAML), both give the same
// manifest, so the scheduler, the node agent and `prism plan` read a pod alike.
#include "yaml-cpp/yaml.h"

#include "config/device_config_yaml.h"
#include "config/pod_json.h"
#include "config/pod_request.h"
#include "config/pod_yaml.h"
#include "config/yaml_util.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism;
  static const sched::DeviceConfig config = config::DefaultDeviceConfig();
  const nlohmann::json pod = nlohmann::json::parse(fuzz::AsText(data, size), nullptr, false);
  if (pod.is_discarded()) return 0;
  auto manifest = config::PodManifestFromJson(pod);
  if (!manifest.ok()) return 0;
  (void)config::BuildPodRequest(*manifest, config);
  nlohmann::json with_kind = pod;
  with_kind["kind"] = "Pod";
  // Replaces bytes that are not UTF-8 instead of throwing; the reader accepted only UTF-8 names,
  // but other fields it ignores may hold anything.
  const std::string text = with_kind.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  absl::StatusOr<YAML::Node> node = config::LoadYaml(text, "fuzz");
  if (!node.ok()) return 0;
  auto from_yaml = config::ParsePodNode(*node, "fuzz");
  if (from_yaml.ok() && !(*from_yaml == *manifest)) {
    fuzz::Violated("the JSON and YAML pod readers disagree", absl::OkStatus());
  }
  return 0;
}
