// src/config/pod_yaml.h: Pod manifests from YAML (one or more documents, or a
// `kind: List`). Anything that is not `kind: Pod` is an error naming its kind.
// Thread-safe.
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "yaml-cpp/yaml.h"

#include "config/pod_request.h"

namespace prism::config {

// `where` names the source in errors (e.g. the file name).
absl::StatusOr<std::vector<PodManifest>> ParsePodYaml(std::string_view text,
                                                      std::string_view where);
absl::StatusOr<PodManifest> ParsePodNode(const YAML::Node& node, std::string_view where);

}  // namespace prism::config
