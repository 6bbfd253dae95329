#include "config/yaml_util.h"

#include <charconv>
#include <cmath>
#include <sstream>

#include "yaml-cpp/eventhandler.h"

#include "base/status_macros.h"
#include "base/strings.h"

namespace prism::config {

namespace {

// Counts nothing: only drives the parser through a stream's documents.
class DocumentWalker : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { start_ = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
  const YAML::Mark& start() const { return start_; }

 private:
  YAML::Mark start_;
};

// yaml-cpp 0.7 does not consume a ',' (or other flow token) at the start of a document: it
// yields an empty document and starts the next one at the same place, so LoadAll loops forever
// (growing memory) and Load returns null. Walks the stream's documents the way LoadAll does and
// fails where one starts where the previous one did. YAML::Exception passes through.
absl::Status CheckDocumentsAdvance(const std::string& text, std::string_view what) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentWalker walker;
  int previous = -1;
  while (parser.HandleNextDocument(walker)) {
    const YAML::Mark& m = walker.start();
    if (m.pos <= previous) {
      const char c = m.pos >= 0 && static_cast<size_t>(m.pos) < text.size() ? text[m.pos] : ' ';
      return absl::InvalidArgumentError(StrCat(what, ": not valid YAML: line ", m.line + 1,
                                               ", column ", m.column + 1, ": unexpected '", c,
                                               "' at the start of a document"));
    }
    previous = m.pos;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<YAML::Node> LoadYaml(std::string_view text, std::string_view what) {
  try {
    const std::string copy(text);
    RETURN_IF_ERROR(CheckDocumentsAdvance(copy, what));
    return YAML::Load(copy);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(what, ": not valid YAML: ", e.what()));
  }
}

absl::StatusOr<std::vector<YAML::Node>> LoadAllYaml(std::string_view text, std::string_view what) {
  try {
    const std::string copy(text);
    RETURN_IF_ERROR(CheckDocumentsAdvance(copy, what));
    std::vector<YAML::Node> out;
    for (const YAML::Node& doc : YAML::LoadAll(copy)) {
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

namespace {

// The length of the UTF-8 sequence at `s[i]`, or 0 if it is not one (overlong forms, surrogates
// and code points above U+10FFFF included).
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = byte(i);
  if (b < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if ((b & 0xE0) == 0xC0) {
    n = 2;
    cp = b & 0x1F;
  } else if ((b & 0xF0) == 0xE0) {
    n = 3;
    cp = b & 0x0F;
  } else if ((b & 0xF8) == 0xF0) {
    n = 4;
    cp = b & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

absl::Status ValidateName(std::string_view name, std::string_view path) {
  if (name.empty()) return absl::InvalidArgumentError(StrCat(path, ": empty"));
  if (name.size() > 253) {
    return absl::InvalidArgumentError(
        StrCat(path, ": ", name.size(), " bytes, more than a Kubernetes name's 253"));
  }
  for (size_t i = 0; i < name.size();) {
    const size_t n = Utf8SequenceLength(name, i);
    const auto b = static_cast<unsigned char>(name[i]);
    if (n == 0 || b < 0x20 || b == 0x7F) {
      static constexpr char kHex[] = "0123456789abcdef";
      return absl::InvalidArgumentError(
          StrCat(path, ": byte 0x", std::string{kHex[b >> 4], kHex[b & 15]}, " at offset ", i,
                 n == 0 ? " is not UTF-8" : " is a control character",
                 " (Kubernetes names are DNS names)"));
    }
    i += n;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadName(const YAML::Node& node, std::string_view path) {
  ASSIGN_OR_RETURN(std::string name, ReadString(node, path));
  RETURN_IF_ERROR(ValidateName(name, path));
  return name;
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
