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
// A Kubernetes object or container name: 1..253 bytes of UTF-8 without control characters.
// (The API server holds names to DNS rules; files read by `prism plan` and `prism sim` are not
// checked by it, and a byte that is not UTF-8 cannot be written as JSON.)
absl::StatusOr<std::string> ReadName(const YAML::Node& node, std::string_view path);
// The same check on a string already read.
absl::Status ValidateName(std::string_view name, std::string_view path);

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
