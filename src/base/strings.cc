#include "base/strings.h"

#include <cctype>

#include "base/terminal_text.h"

namespace prism {

std::vector<std::string_view> StrSplit(std::string_view text, char separator, bool skip_empty) {
  std::vector<std::string_view> out;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(separator, begin);
    const std::string_view piece =
        text.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin);
    if (!skip_empty || !piece.empty()) out.push_back(piece);
    if (end == std::string_view::npos) break;
    begin = end + 1;
  }
  return out;
}

std::string_view StripWhitespace(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

std::string AsciiLower(std::string_view text) {
  std::string out(text);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

std::string QuoteBounded(std::string_view text, size_t max_bytes) {
  const bool cut = text.size() > max_bytes;
  std::string out = "'";
  out += TerminalSafe(cut ? text.substr(0, max_bytes) : text);
  out += "'";
  if (cut) {
    out += "... (";
    StrAppend(&out, text.size());
    out += " bytes)";
  }
  return out;
}

}  // namespace prism
