#include "k8s/leader_elector.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "k8s/test_util.h"

namespace prism::k8s {
namespace {

using testing_util::FakeClusterTest;
using testing_util::WaitUntil;

class LeaderElectorTest : public FakeClusterTest {
 protected:
  LeaderElectionConfig ConfigFor(std::string identity) {
    LeaderElectionConfig config;
    config.lease_namespace = "prism-system";
    config.lease_name = "prism-scheduler";
    config.identity = std::move(identity);
    return config;
  }

  LeaseSpec Lease() {
    auto lease = server_->Get("leases", "prism-system", "prism-scheduler");
    EXPECT_TRUE(lease.ok()) << lease.status();
    auto spec = LeaseSpecFromJson(lease.ok() ? *lease : Json::object());
    EXPECT_TRUE(spec.ok()) << spec.status();
    return spec.ok() ? *spec : LeaseSpec{};
  }

  FakeClock clock_;
};

INSTANTIATE_TEST_SUITE_P(Transports, LeaderElectorTest, ::testing::Bool(),
                         testing_util::TransportName);

TEST_P(LeaderElectorTest, FirstCandidateCreatesLeaseAndOthersWait) {
  LeaderElector a(client_.get(), ConfigFor("a"), &clock_);
  LeaderElector b(client_.get(), ConfigFor("b"), &clock_);
  ASSERT_OK_AND_ASSIGN(bool a_leads, a.TryAcquireOrRenew());
  EXPECT_TRUE(a_leads);
  ASSERT_OK_AND_ASSIGN(bool b_leads, b.TryAcquireOrRenew());
  EXPECT_FALSE(b_leads);
  EXPECT_TRUE(a.IsLeader());
  EXPECT_FALSE(b.IsLeader());
  EXPECT_EQ(b.ObservedLeader(), "a");
  LeaseSpec lease = Lease();
  EXPECT_EQ(lease.holder_identity, "a");
  EXPECT_EQ(lease.lease_duration_seconds, 15);
  EXPECT_EQ(lease.lease_transitions, 0);
  EXPECT_EQ(lease.renew_time, clock_.Now());
}

TEST_P(LeaderElectorTest, HolderRenewsAndKeepsAcquireTime) {
  LeaderElector a(client_.get(), ConfigFor("a"), &clock_);
  ASSERT_OK(a.TryAcquireOrRenew());
  absl::Time acquired = clock_.Now();
  clock_.Advance(absl::Seconds(2));
  ASSERT_OK_AND_ASSIGN(bool renewed, a.TryAcquireOrRenew());
  EXPECT_TRUE(renewed);
  LeaseSpec lease = Lease();
  EXPECT_EQ(lease.acquire_time, acquired);
  EXPECT_EQ(lease.renew_time, clock_.Now());
  EXPECT_EQ(lease.lease_transitions, 0);
}

TEST_P(LeaderElectorTest, TakesOverOnlyAfterTheLeaseExpires) {
  LeaderElector a(client_.get(), ConfigFor("a"), &clock_);
  LeaderElector b(client_.get(), ConfigFor("b"), &clock_);
  ASSERT_OK(a.TryAcquireOrRenew());
  ASSERT_OK(b.TryAcquireOrRenew());  // b starts watching the lease now.
  // a stops renewing (crashed). Just before the duration runs out, b must still wait.
  clock_.Advance(absl::Seconds(14));
  ASSERT_OK_AND_ASSIGN(bool early, b.TryAcquireOrRenew());
  EXPECT_FALSE(early);
  clock_.Advance(absl::Seconds(2));
  ASSERT_OK_AND_ASSIGN(bool late, b.TryAcquireOrRenew());
  EXPECT_TRUE(late);
  LeaseSpec lease = Lease();
  EXPECT_EQ(lease.holder_identity, "b");
  EXPECT_EQ(lease.lease_transitions, 1);
  EXPECT_EQ(lease.acquire_time, clock_.Now());

  // a comes back and finds itself deposed.
  ASSERT_OK_AND_ASSIGN(bool a_again, a.TryAcquireOrRenew());
  EXPECT_FALSE(a_again);
  EXPECT_FALSE(a.IsLeader());
  EXPECT_EQ(a.ObservedLeader(), "b");
}

TEST_P(LeaderElectorTest, RenewalsResetTheExpiryObservedByOthers) {
  LeaderElector a(client_.get(), ConfigFor("a"), &clock_);
  LeaderElector b(client_.get(), ConfigFor("b"), &clock_);
  ASSERT_OK(a.TryAcquireOrRenew());
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(absl::Seconds(5));
    ASSERT_OK(a.TryAcquireOrRenew());
    ASSERT_OK_AND_ASSIGN(bool b_leads, b.TryAcquireOrRenew());
    EXPECT_FALSE(b_leads) << "round " << i;
  }
}

TEST_P(LeaderElectorTest, ExpiryIsJudgedByTheObserversOwnClock) {
  // The holder's clock runs 1 h behind: its renewTime looks ancient to b, yet b must wait a full
  // lease duration of its own time before taking over.
  FakeClock skewed(clock_.Now() - absl::Hours(1));
  LeaderElector a(client_.get(), ConfigFor("a"), &skewed);
  LeaderElector b(client_.get(), ConfigFor("b"), &clock_);
  ASSERT_OK(a.TryAcquireOrRenew());
  ASSERT_OK_AND_ASSIGN(bool b_leads, b.TryAcquireOrRenew());
  EXPECT_FALSE(b_leads);
}

TEST_P(LeaderElectorTest, ReleaseLetsAnotherCandidateLeadAtOnce) {
  LeaderElector a(client_.get(), ConfigFor("a"), &clock_);
  LeaderElector b(client_.get(), ConfigFor("b"), &clock_);
  ASSERT_OK(a.TryAcquireOrRenew());
  ASSERT_OK(b.TryAcquireOrRenew());
  ASSERT_OK(a.Release());
  EXPECT_FALSE(a.IsLeader());
  EXPECT_EQ(Lease().holder_identity, "");
  ASSERT_OK_AND_ASSIGN(bool b_leads, b.TryAcquireOrRenew());
  EXPECT_TRUE(b_leads);
  EXPECT_EQ(Lease().lease_transitions, 1);
  // Releasing a lease one does not hold changes nothing.
  ASSERT_OK(a.Release());
  EXPECT_EQ(Lease().holder_identity, "b");
}

TEST_P(LeaderElectorTest, ConcurrentCandidatesNeverBothLead) {
  // Several rounds where the lease has expired and every candidate tries to take it at once:
  // the resourceVersion precondition lets exactly one win each round.
  constexpr int kCandidates = 4;
  std::vector<std::unique_ptr<LeaderElector>> electors;
  for (int i = 0; i < kCandidates; ++i) {
    electors.push_back(std::make_unique<LeaderElector>(
        client_.get(), ConfigFor("c" + std::to_string(i)), &clock_));
  }
  for (int round = 0; round < 5; ++round) {
    for (auto& e : electors) ASSERT_OK(e->TryAcquireOrRenew());  // Everyone observes the lease.
    clock_.Advance(absl::Seconds(16));                           // The holder went silent.
    std::atomic<int> winners{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kCandidates; ++i) {
      threads.emplace_back([&, i] {
        auto held = electors[i]->TryAcquireOrRenew();
        EXPECT_TRUE(held.ok()) << held.status();
        if (held.ok() && *held) ++winners;
      });
    }
    for (auto& t : threads) t.join();
    // The previous holder may renew its own (expired) lease or lose it, but only one wins.
    EXPECT_EQ(winners.load(), 1) << "round " << round;
    int leaders = 0;
    for (auto& e : electors) leaders += e->IsLeader() ? 1 : 0;
    EXPECT_LE(leaders, 1) << "round " << round;
  }
}

TEST_P(LeaderElectorTest, RunLoopHandsOverOnStop) {
  LeaderElectionConfig config_a = ConfigFor("a");
  config_a.lease_duration = absl::Seconds(3);
  config_a.renew_deadline = absl::Seconds(2);
  config_a.retry_period = absl::Milliseconds(50);
  LeaderElectionConfig config_b = config_a;
  config_b.identity = "b";
  // Both judge the lease by a clock that never moves: it never expires, so b can only lead
  // because a released it (no wall-clock bound needed to tell release from expiry).
  LeaderElector a(client_.get(), config_a, &clock_);
  LeaderElector b(client_.get(), config_b, &clock_);

  std::atomic<int> a_started{0}, a_stopped{0}, b_started{0};
  absl::Mutex mu;
  std::vector<std::string> b_saw;
  ASSERT_OK(a.Start({[&] { ++a_started; }, [&] { ++a_stopped; }, nullptr}));
  ASSERT_TRUE(WaitUntil([&] { return a_started == 1; }));
  ASSERT_OK(b.Start({[&] { ++b_started; }, nullptr,
                     [&](const std::string& leader) {
                       absl::MutexLock lock(&mu);
                       b_saw.push_back(leader);
                     }}));
  ASSERT_TRUE(WaitUntil([&] {
    absl::MutexLock lock(&mu);
    return !b_saw.empty();
  }));
  absl::SleepFor(absl::Milliseconds(200));  // Several renew rounds: b must stay a follower.
  EXPECT_EQ(b_started, 0);
  EXPECT_TRUE(a.IsLeader());

  a.Stop();  // Releases the lease.
  EXPECT_EQ(a_stopped, 1);
  ASSERT_TRUE(WaitUntil([&] { return b_started == 1; }));
  absl::MutexLock lock(&mu);
  EXPECT_EQ(b_saw.front(), "a");
  EXPECT_EQ(b_saw.back(), "b");
}

TEST_P(LeaderElectorTest, RunLoopGivesUpLeadershipWhenRenewalsFail) {
  LeaderElectionConfig config = ConfigFor("a");
  config.lease_duration = absl::Seconds(2);
  config.renew_deadline = absl::Milliseconds(500);
  config.retry_period = absl::Milliseconds(50);
  auto client = NewClient([] {
    ClientOptions options = FastRetries();
    options.max_attempts = 1;
    return options;
  }());
  LeaderElector a(client.get(), config);
  std::atomic<int> started{0}, stopped{0};
  ASSERT_OK(a.Start({[&] { ++started; }, [&] { ++stopped; }, nullptr}));
  ASSERT_TRUE(WaitUntil([&] { return started == 1; }));
  fakeapi::Fault fault;
  fault.count = -1;
  fault.status = 503;
  fault.path_prefix = "/apis/coordination.k8s.io";
  server_->InjectFault(fault);
  ASSERT_TRUE(WaitUntil([&] { return stopped == 1; }));
  EXPECT_FALSE(a.IsLeader());
  server_->ClearFaults();
  ASSERT_TRUE(WaitUntil([&] { return started == 2; }));  // Back as leader once the API heals.
}

TEST(LeaderElectorConfigTest, ValidateRejectsUnsafeTimings) {
  LeaderElectionConfig config;
  config.lease_namespace = "ns";
  config.lease_name = "lease";
  config.identity = "me";
  LeaderElector ok(nullptr, config);
  EXPECT_OK(ok.Validate());
  config.renew_deadline = config.lease_duration;
  EXPECT_TRUE(absl::IsInvalidArgument(LeaderElector(nullptr, config).Validate()));
  config.renew_deadline = absl::Seconds(10);
  config.retry_period = absl::Seconds(10);
  EXPECT_TRUE(absl::IsInvalidArgument(LeaderElector(nullptr, config).Validate()));
  config.retry_period = absl::Seconds(2);
  config.identity.clear();
  LeaderElector no_identity(nullptr, config);
  EXPECT_TRUE(absl::IsInvalidArgument(no_identity.Start({})));
}

}  // namespace
}  // namespace prism::k8s
