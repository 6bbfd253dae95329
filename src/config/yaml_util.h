// src/config/yaml_util.h: typed reads from yaml-cpp nodes with errors that
// name the key path ("nvidia.deviceSplitCount: expected an integer, got 'x'").
//
// yaml-cpp throws; these helpers never do. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "yaml-cpp/yaml.h"

namespace prism::config {

// Parses one YAML document. InvalidArgument with yaml-cpp's line/column on a syntax error.
absl::StatusOr<YAML::Node> LoadYaml(std::string_view text, std::string_view what);
// Every document of a multi-document stream ("---" separated), empty ones dropped.
absl::StatusOr<std::vector<YAML::Node>> LoadAllYaml(std::string_view text, std::string_view what);

absl::StatusOr<std::string> ReadString(const YAML::Node& node, std::string_view path);
absl::StatusOr<int64_t> ReadInt(const YAML::Node& node, std::string_view path, int64_t min,
                                int64_t max);
absl::StatusOr<double> ReadDouble(const YAML::Node& node, std::string_view path, double min,
                                  double max);
absl::StatusOr<bool> ReadBool(const YAML::Node& node, std::string_view path);
// A sequence of scalars, or one scalar holding a comma-separated list.
absl::StatusOr<std::vector<std::string>> ReadStringList(const YAML::Node& node,
                                                        std::string_view path);
// The scalar text of `node` for messages ("<map>" / "<list>" otherwise).
std::string Describe(const YAML::Node& node);

}  // namespace prism::config
