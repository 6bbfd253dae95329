// src/intercept/testing/race_shared.h: the shared-memory rendezvous of the allocation race test:
// N probe processes meet at a process-shared barrier before each round, allocate at once, and
// record how many of them hold an allocation at the same time.
#pragma once

#include <pthread.h>

#include <atomic>

namespace prism::vgpu::testing {

inline constexpr int kMaxRaceRounds = 2000;

struct RaceShared {
  pthread_barrier_t barrier;
  std::atomic<int> live;      // Processes holding their allocation right now.
  std::atomic<int> max_live;  // The most that ever held one at once.
  std::atomic<int> successes[kMaxRaceRounds];
};

}  // namespace prism::vgpu::testing
