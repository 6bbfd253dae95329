// fuzz/fuzz_util.h: shared helpers for the libFuzzer targets (docs/fuzzing.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace prism::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Splits off the first byte as a selector (which decoder, which key); the rest is the input.
struct Selected {
  uint8_t selector = 0;
  std::string_view text;
};
inline Selected Select(const uint8_t* data, size_t size) {
  if (size == 0) return {};
  return {data[0], AsText(data + 1, size - 1)};
}

// A property the decoder promises (e.g. "what it serializes it parses back") failed: abort so
// libFuzzer records the input as a crash.
[[noreturn]] inline void Violated(std::string_view what, const absl::Status& status) {
  std::fprintf(stderr, "fuzz property violated: %.*s: %s\n", static_cast<int>(what.size()),
               what.data(), status.ToString().c_str());
  std::abort();
}

}  // namespace prism::fuzz
