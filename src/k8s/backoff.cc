#include "k8s/backoff.h"

#include <algorithm>
#include <cmath>

namespace prism::k8s {

Backoff::Backoff(BackoffOptions options, uint64_t seed) : options_(options), rng_(seed) {}

absl::Duration Backoff::Next() {
  double factor = std::pow(options_.multiplier, std::min(attempts_, 62));
  absl::Duration base = options_.initial * factor;
  if (base > options_.max || base < absl::ZeroDuration()) base = options_.max;
  ++attempts_;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  return base * (1.0 + options_.jitter * unit(rng_));
}

TokenBucket::TokenBucket(double qps, int burst, const Clock* clock)
    : qps_(qps), burst_(std::max(1, burst)), clock_(clock), tokens_(burst_), last_(clock->Now()) {}

void TokenBucket::Refill(absl::Time now) {
  double elapsed = absl::ToDoubleSeconds(now - last_);
  if (elapsed > 0) {
    tokens_ = std::min(burst_, tokens_ + elapsed * qps_);
    last_ = now;
  }
}

bool TokenBucket::TryTake() {
  if (qps_ <= 0) return true;
  absl::MutexLock lock(&mu_);
  Refill(clock_->Now());
  if (tokens_ < 1.0) return false;
  tokens_ -= 1.0;
  return true;
}

absl::Duration TokenBucket::Reserve() {
  if (qps_ <= 0) return absl::ZeroDuration();
  absl::MutexLock lock(&mu_);
  Refill(clock_->Now());
  tokens_ -= 1.0;
  if (tokens_ >= 0) return absl::ZeroDuration();
  return absl::Seconds(-tokens_ / qps_);
}

}  // namespace prism::k8s
