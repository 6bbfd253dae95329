// src/intercept/clock.h: the clocks libprism-vgpu and its fake driver read. CLOCK_MONOTONIC is
// system-wide, so values compare across the processes sharing a region. Thread-safe.
#pragma once

#include <stdint.h>
#include <time.h>

namespace prism::vgpu {

inline int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

inline uint64_t RealtimeUs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000 + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns`, resuming after signals.
inline void SleepUntilNs(int64_t deadline_ns) {
  timespec ts;
  ts.tv_sec = deadline_ns / 1'000'000'000;
  ts.tv_nsec = deadline_ns % 1'000'000'000;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
  }
}

inline void SleepForNs(int64_t duration_ns) { SleepUntilNs(MonotonicNs() + duration_ns); }

}  // namespace prism::vgpu
