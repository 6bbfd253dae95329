// src/intercept/uuid.h: GPU UUIDs as CUDA (16 raw bytes, cuDeviceGetUuid) and NVML ("GPU-" +
// 8-4-4-4-12 hex digits, nvmlDeviceGetUUID) spell them. No allocation; thread-safe.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace prism::vgpu {

inline constexpr size_t kNvmlUuidLength = 40;  // "GPU-" + 36, without the terminating NUL.

// Writes "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" and a NUL into `out` (>= 41 bytes).
inline void FormatNvmlUuid(const uint8_t bytes[16], char* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out[0] = 'G';
  out[1] = 'P';
  out[2] = 'U';
  out[3] = '-';
  size_t pos = 4;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out[pos++] = '-';
    out[pos++] = kHex[bytes[i] >> 4];
    out[pos++] = kHex[bytes[i] & 0xf];
  }
  out[pos] = '\0';
}

// Parses the NVML spelling (with or without the "GPU-"/"MIG-" prefix, hex in any case). Returns
// false unless exactly 32 hex digits (and dashes) follow.
inline bool ParseNvmlUuid(const char* text, uint8_t bytes[16]) {
  if (text == nullptr) return false;
  if ((text[0] == 'G' && text[1] == 'P' && text[2] == 'U' && text[3] == '-') ||
      (text[0] == 'M' && text[1] == 'I' && text[2] == 'G' && text[3] == '-')) {
    text += 4;
  }
  int nibbles = 0;
  for (; *text != '\0'; ++text) {
    const char c = *text;
    int v;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      v = c - 'A' + 10;
    } else if (c == '-') {
      continue;
    } else {
      return false;
    }
    if (nibbles >= 32) return false;
    if (nibbles % 2 == 0) {
      bytes[nibbles / 2] = static_cast<uint8_t>(v << 4);
    } else {
      bytes[nibbles / 2] = static_cast<uint8_t>(bytes[nibbles / 2] | v);
    }
    ++nibbles;
  }
  return nibbles == 32;
}

}  // namespace prism::vgpu
