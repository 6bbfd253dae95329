// src/k8s/token_source.h: the bearer token for API requests, following token rotation.
//
// Projected service-account tokens are rewritten by the kubelet (default lifetime 1 h). Like
// client-go, the file is re-read when the cached copy is older than the refresh period (1 min) and
// immediately after the server answers 401 (`Invalidate`). If a re-read fails the last good token
// is kept, so a transient read error does not break a running process. Thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "k8s/clock.h"

namespace prism::k8s {

class TokenSource {
 public:
  // `token_file` wins over `static_token` when set. `clock` must outlive this object.
  TokenSource(std::string static_token, std::string token_file, const Clock* clock,
              absl::Duration refresh_period = absl::Minutes(1));

  // The current token ("" when no token is configured). Error only when the file has never been
  // readable (NotFound / FailedPrecondition naming it).
  absl::StatusOr<std::string> Token();

  // Forces a re-read on the next Token() call (the server rejected the cached token).
  void Invalidate();

  // True if the token can change (it comes from a file).
  bool Rotates() const { return !token_file_.empty(); }

  // Number of times the file was read, for tests.
  int reads() const;

 private:
  const std::string static_token_;
  const std::string token_file_;
  const Clock* const clock_;
  const absl::Duration refresh_period_;
  mutable absl::Mutex mu_;
  std::string cached_ ABSL_GUARDED_BY(mu_);
  absl::Time read_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool stale_ ABSL_GUARDED_BY(mu_) = true;
  int reads_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace prism::k8s
