// src/core/quota/limits.h: parses the limit values of the HAMi-core environment contract
// (memory sizes, SM percentages, the utilization policy, booleans, log levels).
//
// Pure and dependency-free: no allocation, no I/O, no exceptions, only <cstdint>. The
// interception library (src/intercept) links it into foreign processes, so it must stay that way.
// Every function is thread-safe (no state).
//
// Accepted spellings (docs/intercept.md):
//   bytes:   "<digits>" or "<digits><unit>" with unit k/K, m/M, g/G, t/T (binary, as HAMi-core),
//            optionally followed by "i", "iB" or "B" ("4g", "4G", "4Gi", "4GiB", "4096m", "512").
//            Surrounding spaces are ignored. "0" means "no limit" to callers.
//   percent: a decimal number that is a whole percentage 0..100, optionally followed by "%":
//            "30", "30%", "30.0", "1e2", "2.5e1". A fraction of a percent ("30.5") is an error.
//   policy:  "default", "force", "disable" in any case.
//   bool:    "1", "true", "yes", "on" / "0", "false", "no", "off", "" in any case.
#pragma once

#include <cstdint>

namespace prism::quota {

enum class ParseError : uint8_t {
  kNone = 0,
  kEmpty,        // Nothing but spaces.
  kNotANumber,   // No leading digits.
  kBadSuffix,    // Digits followed by something that is not a known unit.
  kOverflow,     // The value does not fit in 64 bits.
  kOutOfRange,   // A number outside the allowed range (percent > 100, log level > 4).
  kUnknownWord,  // A word that is not one of the accepted names.
  kTrailing,     // A number followed by characters that are not part of it.
  kFraction,     // A number with a fractional part where a whole number is needed.
};

// A short English description of `error` ("not a number", ...), for log messages.
constexpr const char* ParseErrorName(ParseError error) {
  switch (error) {
    case ParseError::kNone:
      return "ok";
    case ParseError::kEmpty:
      return "empty value";
    case ParseError::kNotANumber:
      return "not a number";
    case ParseError::kBadSuffix:
      return "unknown unit suffix (use k, m, g or t)";
    case ParseError::kOverflow:
      return "value too large";
    case ParseError::kOutOfRange:
      return "value out of range";
    case ParseError::kUnknownWord:
      return "unknown word";
    case ParseError::kTrailing:
      return "unexpected characters after the number";
    case ParseError::kFraction:
      return "not a whole number";
  }
  return "unknown error";
}

template <typename T>
struct Parsed {
  T value{};
  ParseError error = ParseError::kNone;
  constexpr bool ok() const { return error == ParseError::kNone; }
};

enum class UtilizationPolicy : uint8_t {
  kDefault = 0,  // Work-conserving: the SM limit applies only while another tenant uses the GPU.
  kForce = 1,    // The SM limit always applies, even to a lone container.
  kDisable = 2,  // No SM limiting at all.
};

namespace internal {

constexpr bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
constexpr char Lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

// [begin, end) of `text` without surrounding spaces.
struct Span {
  const char* begin;
  const char* end;
  constexpr bool empty() const { return begin == end; }
};

constexpr Span Trim(const char* text) {
  if (text == nullptr) return {nullptr, nullptr};
  const char* begin = text;
  while (IsSpace(*begin)) ++begin;
  const char* end = begin;
  while (*end != '\0') ++end;
  while (end > begin && IsSpace(end[-1])) --end;
  return {begin, end};
}

// Case-insensitive comparison of `span` with the lower-case `word`.
constexpr bool EqualsWord(Span span, const char* word) {
  const char* p = span.begin;
  for (; p != span.end && *word != '\0'; ++p, ++word) {
    if (Lower(*p) != *word) return false;
  }
  return p == span.end && *word == '\0';
}

// Parses the leading decimal digits of `span`; `*rest` points past them.
constexpr Parsed<uint64_t> ParseDigits(Span span, const char** rest) {
  Parsed<uint64_t> out;
  const char* p = span.begin;
  if (p == span.end || *p < '0' || *p > '9') {
    out.error = ParseError::kNotANumber;
    *rest = p;
    return out;
  }
  uint64_t value = 0;
  for (; p != span.end && *p >= '0' && *p <= '9'; ++p) {
    const uint64_t digit = static_cast<uint64_t>(*p - '0');
    if (value > (UINT64_MAX - digit) / 10) {
      out.error = ParseError::kOverflow;
      *rest = p;
      return out;
    }
    value = value * 10 + digit;
  }
  out.value = value;
  *rest = p;
  return out;
}

// Parses a decimal number that must be a whole number: "<digits>[.<digits>][(e|E)[+|-]<digits>]"
// ("30", "30.0", "1e2", "2.5e1"), stopping at the first character that cannot continue it (`*rest`).
// Values above `max` are kOutOfRange; a non-zero fractional part is kFraction.
constexpr Parsed<uint64_t> ParseWholeDecimal(Span span, uint64_t max, const char** rest) {
  Parsed<uint64_t> out;
  Parsed<uint64_t> mantissa = ParseDigits(span, rest);
  if (!mantissa.ok()) return mantissa;
  const char* p = *rest;
  int64_t exponent = 0;  // Power of ten applied to `value`.
  uint64_t value = mantissa.value;
  if (p != span.end && *p == '.') {
    ++p;
    for (; p != span.end && *p >= '0' && *p <= '9'; ++p) {
      const uint64_t digit = static_cast<uint64_t>(*p - '0');
      if (value > (UINT64_MAX - digit) / 10) {
        // Further digits cannot change whether it is whole unless they are non-zero.
        if (digit != 0) {
          out.error = ParseError::kFraction;
          *rest = p;
          return out;
        }
        continue;
      }
      value = value * 10 + digit;
      --exponent;
    }
  }
  if (p != span.end && (*p == 'e' || *p == 'E')) {
    const char* q = p + 1;
    bool negative = false;
    if (q != span.end && (*q == '+' || *q == '-')) {
      negative = *q == '-';
      ++q;
    }
    if (q != span.end && *q >= '0' && *q <= '9') {
      int64_t e = 0;
      for (; q != span.end && *q >= '0' && *q <= '9'; ++q) {
        if (e < 100000) e = e * 10 + (*q - '0');
      }
      exponent += negative ? -e : e;
      p = q;
    }
  }
  *rest = p;
  while (exponent < 0 && value != 0 && value % 10 == 0) {
    value /= 10;
    ++exponent;
  }
  if (value == 0) {
    out.value = 0;
    return out;
  }
  if (exponent < 0) {
    out.error = ParseError::kFraction;
    return out;
  }
  for (; exponent > 0; --exponent) {
    if (value > max / 10 + 1) break;
    value *= 10;
  }
  if (exponent > 0 || value > max) {
    out.error = ParseError::kOutOfRange;
    return out;
  }
  out.value = value;
  return out;
}

}  // namespace internal

// Parses a byte count ("4g", "512", "1536M", "2GiB"). See the file comment for the grammar.
constexpr Parsed<uint64_t> ParseBytes(const char* text) {
  Parsed<uint64_t> out;
  const internal::Span span = internal::Trim(text);
  if (span.empty()) {
    out.error = ParseError::kEmpty;
    return out;
  }
  const char* rest = nullptr;
  Parsed<uint64_t> number = internal::ParseDigits(span, &rest);
  if (!number.ok()) return number;
  int shift = 0;
  if (rest != span.end) {
    switch (internal::Lower(*rest)) {
      case 'k':
        shift = 10;
        break;
      case 'm':
        shift = 20;
        break;
      case 'g':
        shift = 30;
        break;
      case 't':
        shift = 40;
        break;
      case 'b':
        shift = 0;
        break;
      default:
        out.error = ParseError::kBadSuffix;
        return out;
    }
    const bool bare_b = internal::Lower(*rest) == 'b';
    ++rest;
    // After a unit letter: nothing, "b", "i" or "ib".
    if (!bare_b && rest != span.end && internal::Lower(*rest) == 'i') ++rest;
    if (!bare_b && rest != span.end && internal::Lower(*rest) == 'b') ++rest;
    if (rest != span.end) {
      out.error = ParseError::kBadSuffix;
      return out;
    }
  }
  if (shift > 0 && number.value > (UINT64_MAX >> shift)) {
    out.error = ParseError::kOverflow;
    return out;
  }
  out.value = number.value << shift;
  return out;
}


// Parses an SM share in percent, 0..100 ("30", "30%", "30.0", "1e2"). See the file comment.
constexpr Parsed<uint32_t> ParsePercent(const char* text) {
  Parsed<uint32_t> out;
  const internal::Span span = internal::Trim(text);
  if (span.empty()) {
    out.error = ParseError::kEmpty;
    return out;
  }
  const char* rest = nullptr;
  Parsed<uint64_t> number = internal::ParseWholeDecimal(span, 100, &rest);
  if (!number.ok()) {
    out.error = number.error;
    return out;
  }
  if (rest != span.end && *rest == '%') ++rest;
  if (rest != span.end) {
    out.error = ParseError::kTrailing;
    return out;
  }
  out.value = static_cast<uint32_t>(number.value);
  return out;
}

// Parses GPU_CORE_UTILIZATION_POLICY. An empty value is the default policy.
constexpr Parsed<UtilizationPolicy> ParsePolicy(const char* text) {
  Parsed<UtilizationPolicy> out;
  const internal::Span span = internal::Trim(text);
  if (span.empty() || internal::EqualsWord(span, "default")) {
    out.value = UtilizationPolicy::kDefault;
  } else if (internal::EqualsWord(span, "force")) {
    out.value = UtilizationPolicy::kForce;
  } else if (internal::EqualsWord(span, "disable")) {
    out.value = UtilizationPolicy::kDisable;
  } else {
    out.error = ParseError::kUnknownWord;
  }
  return out;
}

// Parses a boolean switch such as CUDA_DISABLE_CONTROL. An empty value is false.
constexpr Parsed<bool> ParseBool(const char* text) {
  Parsed<bool> out;
  const internal::Span span = internal::Trim(text);
  if (span.empty() || internal::EqualsWord(span, "0") || internal::EqualsWord(span, "false") ||
      internal::EqualsWord(span, "no") || internal::EqualsWord(span, "off")) {
    out.value = false;
  } else if (internal::EqualsWord(span, "1") || internal::EqualsWord(span, "true") ||
             internal::EqualsWord(span, "yes") || internal::EqualsWord(span, "on")) {
    out.value = true;
  } else {
    out.error = ParseError::kUnknownWord;
  }
  return out;
}

// Parses LIBCUDA_LOG_LEVEL: 0 errors, 1 warnings, 2 notices (default), 3 info, 4 debug.
constexpr Parsed<int> ParseLogLevel(const char* text) {
  Parsed<int> out;
  const internal::Span span = internal::Trim(text);
  if (span.empty()) {
    out.error = ParseError::kEmpty;
    return out;
  }
  const char* rest = nullptr;
  Parsed<uint64_t> number = internal::ParseDigits(span, &rest);
  if (!number.ok()) {
    out.error = number.error;
    return out;
  }
  if (rest != span.end) {
    out.error = ParseError::kBadSuffix;
    return out;
  }
  if (number.value > 4) {
    out.error = ParseError::kOutOfRange;
    return out;
  }
  out.value = static_cast<int>(number.value);
  return out;
}

}  // namespace prism::quota
