#include "config/quantity.h"

#include <cctype>
#include <limits>

#include "base/strings.h"

namespace prism::config {
namespace {

__extension__ typedef __int128 Int128;

constexpr Int128 kLimit = static_cast<Int128>(std::numeric_limits<int64_t>::max());

absl::Status Bad(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(StrCat("invalid quantity '", text, "': ", why));
}

// Parses `text` and returns ceil(value * scale) where scale is 1 or 1000.
absl::StatusOr<int64_t> Parse(std::string_view text, int scale) {
  const std::string_view t = StripWhitespace(text);
  if (t.empty()) return Bad(text, "empty");
  size_t i = 0;
  if (t[i] == '+') {
    ++i;
  } else if (t[i] == '-') {
    return Bad(text, "negative");
  }
  // Mantissa: digits [. digits].
  Int128 mantissa = 0;
  int fraction_digits = 0;
  int significant = 0;
  bool any_digit = false;
  bool dot = false;
  for (; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '.') {
      if (dot) return Bad(text, "two decimal points");
      dot = true;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(c))) break;
    any_digit = true;
    if (mantissa != 0 || c != '0') ++significant;
    if (significant > 30) return Bad(text, "too many digits");
    mantissa = mantissa * 10 + (c - '0');
    if (dot) ++fraction_digits;
  }
  if (!any_digit) return Bad(text, "no number");
  const std::string_view suffix = t.substr(i);
  // value = mantissa * 10^pow10 * 2^pow2 / 10^fraction_digits
  int pow10 = 0;
  int pow2 = 0;
  if (suffix.empty()) {
  } else if (suffix == "Ki") {
    pow2 = 10;
  } else if (suffix == "Mi") {
    pow2 = 20;
  } else if (suffix == "Gi") {
    pow2 = 30;
  } else if (suffix == "Ti") {
    pow2 = 40;
  } else if (suffix == "Pi") {
    pow2 = 50;
  } else if (suffix == "Ei") {
    pow2 = 60;
  } else if (suffix == "n") {
    pow10 = -9;
  } else if (suffix == "u") {
    pow10 = -6;
  } else if (suffix == "m") {
    pow10 = -3;
  } else if (suffix == "k") {
    pow10 = 3;
  } else if (suffix == "M") {
    pow10 = 6;
  } else if (suffix == "G") {
    pow10 = 9;
  } else if (suffix == "T") {
    pow10 = 12;
  } else if (suffix == "P") {
    pow10 = 15;
  } else if (suffix == "E") {
    pow10 = 18;
  } else if (suffix[0] == 'e' || suffix[0] == 'E') {
    size_t k = 1;
    bool negative = false;
    if (k < suffix.size() && (suffix[k] == '+' || suffix[k] == '-')) negative = suffix[k++] == '-';
    if (k == suffix.size()) return Bad(text, "exponent without digits");
    int exponent = 0;
    for (; k < suffix.size(); ++k) {
      if (!std::isdigit(static_cast<unsigned char>(suffix[k]))) return Bad(text, "bad exponent");
      exponent = exponent * 10 + (suffix[k] - '0');
      if (exponent > 40) return Bad(text, "exponent out of range");
    }
    pow10 = negative ? -exponent : exponent;
  } else {
    return Bad(text, StrCat("unknown suffix '", suffix, "'"));
  }
  if (scale == 1000) pow10 += 3;
  pow10 -= fraction_digits;
  Int128 numerator = mantissa;
  Int128 denominator = 1;
  for (int k = 0; k < pow2; ++k) {
    numerator *= 2;
    if (numerator > kLimit * 1000) return Bad(text, "too large");
  }
  for (int k = 0; k < pow10; ++k) {
    numerator *= 10;
    if (numerator > kLimit * 1000) return Bad(text, "too large");
  }
  for (int k = 0; k < -pow10; ++k) {
    denominator *= 10;
    if (denominator > kLimit) {
      // Far below one unit: rounds up to 1 unless zero.
      return numerator == 0 ? 0 : 1;
    }
  }
  const Int128 value = (numerator + denominator - 1) / denominator;
  if (value > kLimit) return Bad(text, "too large");
  return static_cast<int64_t>(value);
}

}  // namespace

absl::StatusOr<int64_t> ParseQuantityMilli(std::string_view text) { return Parse(text, 1000); }
absl::StatusOr<int64_t> ParseQuantity(std::string_view text) { return Parse(text, 1); }

}  // namespace prism::config
