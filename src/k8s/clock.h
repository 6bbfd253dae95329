// src/k8s/clock.h: the time source of the Kubernetes adapters (leases, token refresh, events).
//
// Leader election and token rotation decide by elapsed time; tests inject `FakeClock` so those
// decisions are deterministic. Waiting (sleeping between retries) is not the clock's job: loops
// wait on real condition variables, and only their decisions read the clock. Thread-safe.
#pragma once

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace prism::k8s {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// The wall clock.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  // A process-wide instance (stateless, never destroyed).
  static const Clock* Get() {
    static const RealClock* clock = new RealClock();
    return clock;
  }
};

// A clock that moves only when told to.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  void Set(absl::Time t) {
    absl::MutexLock lock(&mu_);
    now_ = t;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prism::k8s
