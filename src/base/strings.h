// src/base/strings.h: string concatenation, joining and splitting over std::string_view.
//
// Debian 12's Abseil is built with its own absl::string_view (not an alias of
// std::string_view), so absl::StrCat and friends reject std::string_view
// arguments. These helpers cover what Prism needs and accept both.
#pragma once

#include <charconv>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace prism {
namespace strings_internal {

template <typename T>
void AppendPiece(std::string* out, const T& value) {
  if constexpr (std::is_same_v<T, bool>) {
    out->append(value ? "true" : "false");
  } else if constexpr (std::is_same_v<T, char>) {
    out->push_back(value);
  } else if constexpr (std::is_integral_v<T> || std::is_enum_v<T>) {
    char buf[32];
    std::to_chars_result res;
    if constexpr (std::is_unsigned_v<T>) {
      res = std::to_chars(buf, buf + sizeof(buf), static_cast<unsigned long long>(value));
    } else {
      res = std::to_chars(buf, buf + sizeof(buf), static_cast<long long>(value));
    }
    out->append(buf, res.ptr);
  } else if constexpr (std::is_floating_point_v<T>) {
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf), static_cast<double>(value));
    out->append(buf, res.ptr);
  } else if constexpr (std::is_same_v<T, absl::string_view>) {
    out->append(value.data(), value.size());
  } else {
    out->append(std::string_view(value));
  }
}

}  // namespace strings_internal

// Appends each argument (strings, string views, chars, integers, floating
// point, bools) to `out`.
template <typename... Args>
void StrAppend(std::string* out, const Args&... args) {
  (strings_internal::AppendPiece(out, args), ...);
}

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  StrAppend(&out, args...);
  return out;
}

// Joins `range` with `separator`, formatting each element with
// `format(std::string* out, const Element&)`.
template <typename Range, typename Formatter>
std::string StrJoin(const Range& range, std::string_view separator, Formatter&& format) {
  std::string out;
  bool first = true;
  for (const auto& element : range) {
    if (!first) out.append(separator);
    first = false;
    format(&out, element);
  }
  return out;
}

// Joins elements that StrAppend accepts.
template <typename Range>
std::string StrJoin(const Range& range, std::string_view separator) {
  return StrJoin(range, separator,
                 [](std::string* out, const auto& element) { StrAppend(out, element); });
}

// Splits `text` at every `separator`. With `skip_empty`, empty pieces are dropped.
std::vector<std::string_view> StrSplit(std::string_view text, char separator,
                                       bool skip_empty = false);

// `text` without leading and trailing ASCII whitespace.
std::string_view StripWhitespace(std::string_view text);

// Lower-cases ASCII letters.
std::string AsciiLower(std::string_view text);

// Equal but for the case of ASCII letters (how Go's encoding/json matches field names).
inline bool EqualsIgnoreAsciiCase(std::string_view a, std::string_view b) {
  return absl::EqualsIgnoreCase(absl::string_view(a.data(), a.size()),
                                absl::string_view(b.data(), b.size()));
}

// At most `max_bytes` of `text` from outside (a device ID, a container name, an annotation value)
// for an error message or a log line: quoted, with every byte a terminal could act on escaped
// (TerminalSafe), and, when cut, followed by "... (N bytes)" with the full length. Error texts
// that echo what a client sent stay short whatever it sent (a 64 KiB device ID in a gRPC status).
inline constexpr size_t kQuotedPrefixBytes = 96;
std::string QuoteBounded(std::string_view text, size_t max_bytes = kQuotedPrefixBytes);

// Converts an Abseil string view (e.g. absl::Status::message()).
inline std::string_view ToStd(absl::string_view s) { return std::string_view(s.data(), s.size()); }

}  // namespace prism
