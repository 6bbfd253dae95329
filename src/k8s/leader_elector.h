// src/k8s/leader_elector.h: leader election on a coordination.k8s.io/v1 Lease (client-go's
// leaderelection with the Lease lock).
//
// Candidates share one Lease. The holder renews `spec.renewTime` every retry period with a PUT
// carrying the lease's resourceVersion, so two writers can never both succeed (the loser gets 409).
// Another candidate takes over only after it has watched the lease stay unchanged for a full
// `leaseDurationSeconds` by its own clock (not by comparing its clock with the holder's, so clock
// skew between machines does not matter), then bumps `leaseTransitions`. Releasing writes an
// empty holder so a successor need not wait for expiry.
//
// TryAcquireOrRenew is one deterministic step (tests drive it with a FakeClock). Start runs the
// loop on a thread: acquire, then renew; if renewals fail for `renew_deadline`, or another holder
// appears, leadership is lost (on_stopped_leading) and the elector goes back to candidacy. Stop
// releases the lease if held (`release_on_stop`). Thread-safe. The Client and Clock must outlive
// the elector.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "k8s/client.h"
#include "k8s/clock.h"
#include "k8s/objects.h"

namespace prism::k8s {

struct LeaderElectionConfig {
  std::string lease_namespace;
  std::string lease_name;
  // Unique per candidate (pod name + random suffix, say).
  std::string identity;
  // client-go defaults.
  absl::Duration lease_duration = absl::Seconds(15);
  absl::Duration renew_deadline = absl::Seconds(10);
  absl::Duration retry_period = absl::Seconds(2);
  bool release_on_stop = true;
};

struct LeaderCallbacks {
  std::function<void()> on_started_leading;
  std::function<void()> on_stopped_leading;
  // Called when the observed holder changes (including to this candidate; "" when released).
  std::function<void(const std::string& identity)> on_new_leader;
};

class LeaderElector {
 public:
  // InvalidArgument via Validate() for a bad config; the constructor does not fail.
  LeaderElector(Client* client, LeaderElectionConfig config, const Clock* clock = RealClock::Get());
  ~LeaderElector();  // Stops.
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  // InvalidArgument naming the problem (empty identity/name, renew_deadline >= lease_duration...).
  absl::Status Validate() const;

  // One election step: creates the lease if missing, renews it if held by us, takes it over if
  // the holder let it expire. True if this candidate holds the lease afterwards. Errors are API
  // failures (the caller keeps its current belief until the renew deadline passes).
  absl::StatusOr<bool> TryAcquireOrRenew();

  // Gives the lease up if this candidate holds it (empty holder, duration 1 s).
  absl::Status Release();

  // Runs the election loop on a thread. Validate() first; returns its error if any.
  absl::Status Start(LeaderCallbacks callbacks);
  void Stop();

  bool IsLeader() const;
  // The holder last observed ("" if none or unknown).
  std::string ObservedLeader() const;

 private:
  void Loop();
  void SetObserved(const LeaseSpec& spec, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Client* const client_;
  const LeaderElectionConfig config_;
  const Clock* const clock_;

  mutable absl::Mutex mu_;
  std::optional<LeaseSpec> observed_ ABSL_GUARDED_BY(mu_);
  absl::Time observed_time_ ABSL_GUARDED_BY(mu_);
  bool leader_ ABSL_GUARDED_BY(mu_) = false;
  std::string reported_leader_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  LeaderCallbacks callbacks_;
  std::thread thread_;
};

}  // namespace prism::k8s
