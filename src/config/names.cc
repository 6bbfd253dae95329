#include "config/names.h"

#include "base/strings.h"

namespace prism::config {
namespace {

bool LowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// One DNS-1123 label, without the length bound (the caller applies its own).
bool LabelChars(std::string_view s) {
  if (s.empty() || !LowerAlnum(s.front()) || !LowerAlnum(s.back())) return false;
  for (char c : s) {
    if (!LowerAlnum(c) && c != '-') return false;
  }
  return true;
}

absl::Status Invalid(std::string_view field, std::string_view value, std::string_view kind) {
  if (value.empty()) return absl::InvalidArgumentError(StrCat(field, ": empty"));
  return absl::InvalidArgumentError(StrCat(field, ": ", QuoteBounded(value), " is not ", kind));
}

constexpr char kLabelRule[] =
    "a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter or "
    "digit, at most 63 bytes)";
constexpr char kSubdomainRule[] =
    "a DNS-1123 subdomain (DNS-1123 labels joined by '.', at most 253 bytes)";

}  // namespace

bool IsDnsLabel(std::string_view s) { return s.size() <= kMaxDnsLabelBytes && LabelChars(s); }

bool IsDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > kMaxDnsSubdomainBytes) return false;
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    const std::string_view label =
        s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (!LabelChars(label)) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool IsPodUid(std::string_view s) {
  if (s.empty() || s.size() > kMaxPodUidBytes) return false;
  for (char c : s) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::Status ValidateContainerName(std::string_view name, std::string_view field) {
  if (IsDnsLabel(name)) return absl::OkStatus();
  return Invalid(field, name, StrCat(kLabelRule, ", as a container name must be"));
}

absl::Status ValidateNamespace(std::string_view name, std::string_view field) {
  if (IsDnsLabel(name)) return absl::OkStatus();
  return Invalid(field, name, StrCat(kLabelRule, ", as a namespace must be"));
}

absl::Status ValidatePodName(std::string_view name, std::string_view field) {
  if (IsDnsSubdomain(name)) return absl::OkStatus();
  return Invalid(field, name, StrCat(kSubdomainRule, ", as a pod name must be"));
}

absl::Status ValidateNodeName(std::string_view name, std::string_view field) {
  if (IsDnsSubdomain(name)) return absl::OkStatus();
  return Invalid(field, name, StrCat(kSubdomainRule, ", as a node name must be"));
}

absl::Status ValidatePodUid(std::string_view uid, std::string_view field) {
  if (IsPodUid(uid)) return absl::OkStatus();
  return Invalid(field, uid, "a pod UID (1..64 ASCII letters, digits and '-')");
}

std::string QuoteBounded(std::string_view value) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  const size_t shown = value.size() < kMaxQuotedBytes ? value.size() : kMaxQuotedBytes;
  for (size_t i = 0; i < shown; ++i) {
    const auto b = static_cast<unsigned char>(value[i]);
    if (b >= 0x20 && b < 0x7F && b != '\'' && b != '\\') {
      out.push_back(static_cast<char>(b));
    } else {
      out += "\\x";
      out.push_back(kHex[b >> 4]);
      out.push_back(kHex[b & 15]);
    }
  }
  out.push_back('\'');
  if (shown < value.size()) out += StrCat("...(", value.size(), " bytes)");
  return out;
}

}  // namespace prism::config
