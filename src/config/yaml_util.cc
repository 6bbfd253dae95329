#include "config/yaml_util.h"

#include <charconv>
#include <cmath>

#include "base/strings.h"

namespace prism::config {

absl::StatusOr<YAML::Node> LoadYaml(std::string_view text, std::string_view what) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(what, ": not valid YAML: ", e.what()));
  }
}

absl::StatusOr<std::vector<YAML::Node>> LoadAllYaml(std::string_view text, std::string_view what) {
  try {
    std::vector<YAML::Node> out;
    for (const YAML::Node& doc : YAML::LoadAll(std::string(text))) {
      if (doc.IsNull()) continue;
      out.push_back(doc);
    }
    return out;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(what, ": not valid YAML: ", e.what()));
  }
}

std::string Describe(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  if (node.IsMap()) return "<map>";
  if (node.IsSequence()) return "<list>";
  return "<null>";
}

absl::StatusOr<std::string> ReadString(const YAML::Node& node, std::string_view path) {
  if (!node.IsScalar()) {
    return absl::InvalidArgumentError(StrCat(path, ": expected a string, got ", Describe(node)));
  }
  return node.Scalar();
}

absl::StatusOr<int64_t> ReadInt(const YAML::Node& node, std::string_view path, int64_t min,
                                int64_t max) {
  if (!node.IsScalar()) {
    return absl::InvalidArgumentError(StrCat(path, ": expected an integer, got ", Describe(node)));
  }
  const std::string text(StripWhitespace(node.Scalar()));
  int64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  if (begin != end && *begin == '+') ++begin;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || begin == end) {
    return absl::InvalidArgumentError(
        StrCat(path, ": expected an integer, got '", node.Scalar(), "'"));
  }
  if (value < min || value > max) {
    return absl::InvalidArgumentError(
        StrCat(path, ": ", value, " is out of range ", min, "..", max));
  }
  return value;
}

absl::StatusOr<double> ReadDouble(const YAML::Node& node, std::string_view path, double min,
                                  double max) {
  if (!node.IsScalar()) {
    return absl::InvalidArgumentError(StrCat(path, ": expected a number, got ", Describe(node)));
  }
  const std::string text(StripWhitespace(node.Scalar()));
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty() ||
      !std::isfinite(value)) {
    return absl::InvalidArgumentError(
        StrCat(path, ": expected a number, got '", node.Scalar(), "'"));
  }
  if (value < min || value > max) {
    return absl::InvalidArgumentError(
        StrCat(path, ": ", text, " is out of range ", min, "..", max));
  }
  return value;
}

absl::StatusOr<bool> ReadBool(const YAML::Node& node, std::string_view path) {
  if (node.IsScalar()) {
    const std::string v = AsciiLower(StripWhitespace(node.Scalar()));
    if (v == "true" || v == "yes" || v == "on") return true;
    if (v == "false" || v == "no" || v == "off") return false;
  }
  return absl::InvalidArgumentError(
      StrCat(path, ": expected true or false, got '", Describe(node), "'"));
}

absl::StatusOr<std::vector<std::string>> ReadStringList(const YAML::Node& node,
                                                        std::string_view path) {
  std::vector<std::string> out;
  if (node.IsNull()) return out;
  if (node.IsScalar()) {
    for (std::string_view part : StrSplit(node.Scalar(), ',', true)) {
      const std::string_view p = StripWhitespace(part);
      if (!p.empty()) out.emplace_back(p);
    }
    return out;
  }
  if (!node.IsSequence()) {
    return absl::InvalidArgumentError(StrCat(path, ": expected a list, got ", Describe(node)));
  }
  for (size_t i = 0; i < node.size(); ++i) {
    if (!node[i].IsScalar()) {
      return absl::InvalidArgumentError(
          StrCat(path, "[", i, "]: expected a string, got ", Describe(node[i])));
    }
    out.push_back(node[i].Scalar());
  }
  return out;
}

}  // namespace prism::config
