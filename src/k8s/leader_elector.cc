#include "k8s/leader_elector.h"

#include <cmath>
#include <utility>

#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "k8s/errors.h"

namespace prism::k8s {
namespace {

int64_t CeilSeconds(absl::Duration d) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(d))));
}

}  // namespace

LeaderElector::LeaderElector(Client* client, LeaderElectionConfig config, const Clock* clock)
    : client_(client), config_(std::move(config)), clock_(clock) {}

LeaderElector::~LeaderElector() { Stop(); }

absl::Status LeaderElector::Validate() const {
  if (config_.identity.empty())
    return absl::InvalidArgumentError("leader election: empty identity");
  if (config_.lease_name.empty() || config_.lease_namespace.empty()) {
    return absl::InvalidArgumentError("leader election: lease name and namespace are required");
  }
  if (config_.retry_period <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("leader election: retry period must be positive");
  }
  if (config_.renew_deadline <= config_.retry_period) {
    return absl::InvalidArgumentError(
        "leader election: renew deadline must be longer than the retry period");
  }
  if (config_.lease_duration <= config_.renew_deadline) {
    return absl::InvalidArgumentError(
        "leader election: lease duration must be longer than the renew deadline");
  }
  return absl::OkStatus();
}

void LeaderElector::SetObserved(const LeaseSpec& spec, absl::Time now) {
  observed_ = spec;
  observed_time_ = now;
}

absl::StatusOr<bool> LeaderElector::TryAcquireOrRenew() {
  const std::string context =
      StrCat("leader election on lease ", ObjectKey(config_.lease_namespace, config_.lease_name));
  absl::Time now = clock_->Now();
  LeaseSpec desired;
  desired.holder_identity = config_.identity;
  desired.lease_duration_seconds = CeilSeconds(config_.lease_duration);
  desired.acquire_time = now;
  desired.renew_time = now;

  absl::StatusOr<Json> lease = client_->Get(kLeases, config_.lease_namespace, config_.lease_name);
  if (!lease.ok()) {
    if (!absl::IsNotFound(lease.status())) return WithContext(lease.status(), context);
    Json object = {
        {"apiVersion", kLeases.api_version},
        {"kind", kLeases.kind},
        {"metadata", {{"name", config_.lease_name}, {"namespace", config_.lease_namespace}}},
        {"spec", LeaseSpecToJson(desired)}};
    absl::StatusOr<Json> created = client_->Create(kLeases, config_.lease_namespace, object);
    if (!created.ok()) {
      if (absl::IsAlreadyExists(created.status())) return false;  // Another candidate was faster.
      return WithContext(created.status(), context);
    }
    absl::MutexLock lock(&mu_);
    SetObserved(desired, now);
    leader_ = true;
    return true;
  }

  absl::StatusOr<LeaseSpec> current = LeaseSpecFromJson(*lease);
  if (!current.ok()) return WithContext(current.status(), context);
  {
    absl::MutexLock lock(&mu_);
    if (!observed_.has_value() || !(*observed_ == *current)) SetObserved(*current, now);
    bool held_by_other =
        !current->holder_identity.empty() && current->holder_identity != config_.identity;
    if (held_by_other && observed_time_ + absl::Seconds(current->lease_duration_seconds) > now) {
      leader_ = false;
      return false;
    }
  }
  if (current->holder_identity == config_.identity) {
    desired.acquire_time = current->acquire_time.value_or(now);
    desired.lease_transitions = current->lease_transitions;
  } else {
    desired.lease_transitions = current->lease_transitions + 1;
  }
  Json updated = *lease;
  updated["spec"] = LeaseSpecToJson(desired);
  absl::StatusOr<Json> written = client_->Update(kLeases, config_.lease_namespace, updated);
  if (!written.ok()) {
    if (IsConflict(written.status())) {
      // Someone wrote first: until the next read shows otherwise, do not claim the lease.
      absl::MutexLock lock(&mu_);
      leader_ = false;
      return false;
    }
    return WithContext(written.status(), context);
  }
  absl::MutexLock lock(&mu_);
  SetObserved(desired, now);
  leader_ = true;
  return true;
}

absl::Status LeaderElector::Release() {
  {
    absl::MutexLock lock(&mu_);
    if (!leader_) return absl::OkStatus();
  }
  const std::string context =
      StrCat("release lease ", ObjectKey(config_.lease_namespace, config_.lease_name));
  absl::StatusOr<Json> lease = client_->Get(kLeases, config_.lease_namespace, config_.lease_name);
  if (!lease.ok()) return WithContext(lease.status(), context);
  absl::StatusOr<LeaseSpec> current = LeaseSpecFromJson(*lease);
  if (!current.ok()) return WithContext(current.status(), context);
  if (current->holder_identity != config_.identity) {
    absl::MutexLock lock(&mu_);
    leader_ = false;
    return absl::OkStatus();
  }
  absl::Time now = clock_->Now();
  LeaseSpec released;
  released.lease_duration_seconds = 1;
  released.acquire_time = now;
  released.renew_time = now;
  released.lease_transitions = current->lease_transitions;
  Json updated = *lease;
  updated["spec"] = LeaseSpecToJson(released);
  absl::StatusOr<Json> written = client_->Update(kLeases, config_.lease_namespace, updated);
  absl::MutexLock lock(&mu_);
  leader_ = false;
  if (!written.ok()) return WithContext(written.status(), context);
  SetObserved(released, now);
  return absl::OkStatus();
}

absl::Status LeaderElector::Start(LeaderCallbacks callbacks) {
  RETURN_IF_ERROR(Validate());
  absl::MutexLock lock(&mu_);
  if (running_ || stopping_) {
    return absl::FailedPreconditionError("leader elector already started or stopped");
  }
  running_ = true;
  callbacks_ = std::move(callbacks);
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void LeaderElector::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

bool LeaderElector::IsLeader() const {
  absl::MutexLock lock(&mu_);
  return leader_;
}

std::string LeaderElector::ObservedLeader() const {
  absl::MutexLock lock(&mu_);
  return observed_.has_value() ? observed_->holder_identity : std::string();
}

void LeaderElector::Loop() {
  bool leading = false;
  absl::Time last_renew = absl::InfinitePast();
  std::optional<std::string> reported;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    absl::StatusOr<bool> held = TryAcquireOrRenew();
    absl::Time now = clock_->Now();
    if (!held.ok()) {
      LogWarning("k8s", ToStd(held.status().message()));
    }
    std::string holder = ObservedLeader();
    if (!reported.has_value() || *reported != holder) {
      reported = holder;
      if (callbacks_.on_new_leader) callbacks_.on_new_leader(holder);
    }
    if (held.ok() && *held) {
      last_renew = now;
      if (!leading) {
        leading = true;
        LogInfo("k8s", config_.identity, " became leader of lease ", config_.lease_name);
        if (callbacks_.on_started_leading) callbacks_.on_started_leading();
      }
    } else if (leading) {
      bool taken = held.ok() && !holder.empty() && holder != config_.identity;
      if (taken || now - last_renew >= config_.renew_deadline) {
        leading = false;
        {
          absl::MutexLock lock(&mu_);
          leader_ = false;
        }
        LogWarning("k8s", config_.identity, " lost leadership of lease ", config_.lease_name);
        if (callbacks_.on_stopped_leading) callbacks_.on_stopped_leading();
      }
    }
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), config_.retry_period)) break;
  }
  if (leading) {
    if (config_.release_on_stop) {
      absl::Status released = Release();
      if (!released.ok()) LogWarning("k8s", ToStd(released.message()));
    }
    {
      absl::MutexLock lock(&mu_);
      leader_ = false;
    }
    if (callbacks_.on_stopped_leading) callbacks_.on_stopped_leading();
  }
}

}  // namespace prism::k8s
