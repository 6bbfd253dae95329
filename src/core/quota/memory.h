// src/core/quota/memory.h: the memory accounting rules of the interception library: what an
// allocation is charged, when a reservation fits under a limit, and what the virtualized memory
// queries report.
//
// Pure and dependency-free (only <cstdint>): no allocation, no I/O, no clocks. All arithmetic is
// overflow-checked or saturating; nothing here can wrap around (the class of bug behind
// HAMi-core's "17 TB used" reports, core#200 / hami#1181). Thread-safe (no state).
#pragma once

#include <cstdint>

namespace prism::quota {

inline constexpr uint64_t kKiB = uint64_t{1} << 10;
inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kGiB = uint64_t{1} << 30;

// The driver hands out device memory in 2 MiB pages; smaller requests are sub-allocated with at
// least 512-byte alignment. Charging the rounded size keeps the container's count at or above what
// the GPU really spends.
inline constexpr uint64_t kLargePageBytes = 2 * kMiB;
inline constexpr uint64_t kSmallAllocationThreshold = 1 * kMiB;
inline constexpr uint64_t kSmallAlignment = 512;
// Upper bound of the row alignment cuMemAllocPitch applies (texture pitch alignment).
inline constexpr uint64_t kMaxPitchAlignment = 512;

// `value` rounded up to a multiple of `alignment` (a power of two), or UINT64_MAX when that does
// not fit.
constexpr uint64_t RoundUpSaturating(uint64_t value, uint64_t alignment) {
  const uint64_t mask = alignment - 1;
  if (value > UINT64_MAX - mask) return UINT64_MAX;
  return (value + mask) & ~mask;
}

// a * b, or UINT64_MAX when the product does not fit.
constexpr uint64_t MulSaturating(uint64_t a, uint64_t b) {
  if (a != 0 && b > UINT64_MAX / a) return UINT64_MAX;
  return a * b;
}

// a + b, or UINT64_MAX when the sum does not fit.
constexpr uint64_t AddSaturating(uint64_t a, uint64_t b) {
  return (a > UINT64_MAX - b) ? UINT64_MAX : a + b;
}

// Bytes charged for a linear device allocation (cuMemAlloc, cuMemAllocManaged, pool allocations)
// of `bytes`: whole 2 MiB pages from 1 MiB up, 512-byte granules below. 0 stays 0.
constexpr uint64_t ChargeForLinearAllocation(uint64_t bytes) {
  if (bytes == 0) return 0;
  if (bytes >= kSmallAllocationThreshold) return RoundUpSaturating(bytes, kLargePageBytes);
  return RoundUpSaturating(bytes, kSmallAlignment);
}

// Upper bound of the bytes cuMemAllocPitch(width, height) can take, reserved before the driver
// picks the real pitch (the charge is corrected to pitch * height afterwards).
constexpr uint64_t PitchedAllocationUpperBound(uint64_t width_bytes, uint64_t height) {
  return ChargeForLinearAllocation(
      MulSaturating(RoundUpSaturating(width_bytes, kMaxPitchAlignment), height));
}

// Bytes of a CUDA array estimated from its descriptor (used when the driver cannot report the
// array's memory requirements). A zero height or depth means a lower-dimensional array.
constexpr uint64_t ArrayBytesEstimate(uint64_t width, uint64_t height, uint64_t depth,
                                      uint64_t bytes_per_element) {
  uint64_t elements = MulSaturating(width, height == 0 ? 1 : height);
  elements = MulSaturating(elements, depth == 0 ? 1 : depth);
  return ChargeForLinearAllocation(MulSaturating(elements, bytes_per_element));
}

// The outcome of trying to add `bytes` to a device's `used` counter.
struct Reservation {
  bool fits = false;
  uint64_t new_used = 0;  // Valid when `fits`.
};

// Whether `bytes` more fit under `limit` (0 = no limit) given `used`. An unlimited device still
// refuses a sum that would overflow 64 bits.
constexpr Reservation TryReserve(uint64_t used, uint64_t limit, uint64_t bytes) {
  if (bytes > UINT64_MAX - used) return {};
  const uint64_t total = used + bytes;
  if (limit != 0 && total > limit) return {};
  return {true, total};
}

// The result of subtracting from a counter that must never go negative.
struct Subtraction {
  uint64_t value = 0;
  bool underflow = false;  // True when `b > a`: the result was clamped to 0 (a bookkeeping bug).
};

constexpr Subtraction SubtractSaturating(uint64_t a, uint64_t b) {
  if (b > a) return {0, true};
  return {a - b, false};
}

// What cuMemGetInfo / nvmlDeviceGetMemoryInfo report inside a container.
struct MemoryView {
  uint64_t total = 0;
  uint64_t free = 0;
  uint64_t used = 0;
};

// With `limit` == 0 (no limit) the physical view is returned unchanged. Otherwise the device looks
// like one of min(limit, physical_total) bytes of which the container's `used` bytes are taken;
// free is never more than what is physically free nor below 0 (even when `used` > the limit).
constexpr MemoryView VirtualizeMemory(uint64_t limit, uint64_t used, uint64_t physical_total,
                                      uint64_t physical_free) {
  if (limit == 0) {
    return {physical_total, physical_free, SubtractSaturating(physical_total, physical_free).value};
  }
  const uint64_t total = (physical_total != 0 && physical_total < limit) ? physical_total : limit;
  uint64_t free = SubtractSaturating(total, used).value;
  if (free > physical_free) free = physical_free;
  return {total, free, used};
}

// cuDeviceTotalMem inside a container: the limit when one is set (never more than the physical
// size), the physical size otherwise (never 0, unlike HAMi-core without a limit).
constexpr uint64_t VirtualTotal(uint64_t limit, uint64_t physical_total) {
  if (limit == 0) return physical_total;
  return (physical_total != 0 && physical_total < limit) ? physical_total : limit;
}

}  // namespace prism::quota
