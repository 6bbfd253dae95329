// src/k8s/backoff.h: exponential backoff with jitter, and a token-bucket rate limiter.
//
// Backoff spaces out retries after failures (relists, rewatches, API retries) so that many
// clients recovering at once do not hit the API server in lockstep. Backoff is thread-compatible;
// TokenBucket is thread-safe.
#pragma once

#include <cstdint>
#include <random>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "k8s/clock.h"

namespace prism::k8s {

struct BackoffOptions {
  absl::Duration initial = absl::Milliseconds(200);
  absl::Duration max = absl::Seconds(30);
  double multiplier = 2.0;
  // Each delay is stretched by a random factor in [1, 1 + jitter).
  double jitter = 0.2;
};

class Backoff {
 public:
  explicit Backoff(BackoffOptions options = {}, uint64_t seed = std::random_device{}());
  // The delay before the next attempt; grows with each call until Reset().
  absl::Duration Next();
  void Reset() { attempts_ = 0; }
  int attempts() const { return attempts_; }

 private:
  BackoffOptions options_;
  std::mt19937_64 rng_;
  int attempts_ = 0;
};

// Allows `qps` operations per second on average with bursts of up to `burst`. qps <= 0 means
// unlimited.
class TokenBucket {
 public:
  TokenBucket(double qps, int burst, const Clock* clock);
  // Takes a token if one is available now.
  bool TryTake();
  // Takes a token, possibly borrowing from the future; returns how long the caller must wait
  // before acting (zero if a token was available).
  absl::Duration Reserve();

 private:
  void Refill(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const double qps_;
  const double burst_;
  const Clock* const clock_;
  absl::Mutex mu_;
  double tokens_ ABSL_GUARDED_BY(mu_);
  absl::Time last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prism::k8s
