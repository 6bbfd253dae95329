#include "deviceplugin/prestart.h"

#include <atomic>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "deviceplugin/cdi_spec.h"
#include "deviceplugin/test_util.h"

namespace prism::deviceplugin {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

AllocationRecord Record(uint64_t seq, std::vector<std::string> ids, const std::string& pod = "",
                        AllocationState state = AllocationState::kPending) {
  AllocationRecord r;
  r.id = "a-" + std::to_string(seq);
  r.seq = seq;
  r.device_ids = std::move(ids);
  r.state = state;
  if (!pod.empty()) {
    r.pod_uid = pod;
    r.pod_namespace = "ns";
    r.pod_name = pod;
    r.container = "main";
  }
  return r;
}

std::vector<std::string> Ids(const std::vector<AllocationRecord>& records) {
  std::vector<std::string> out;
  for (const AllocationRecord& r : records) out.push_back(r.id);
  return out;
}

TEST(PreStartTargetsTest, ThisPodsAllocationsWithExactlyTheseIds) {
  const std::vector<AllocationRecord> records = {
      Record(1, {"g::0"}, "old", AllocationState::kReady),  // An ended pod's, same token.
      Record(2, {"g::0", "g::1"}, "other"),                 // Other IDs.
      Record(3, {"g::0"}),                                  // The init container: not yet matched.
      Record(4, {"g::0"}, "p"),                             // The app container reusing them.
  };
  // Order of the IDs does not matter (the kubelet sends a set).
  EXPECT_THAT(Ids(PreStartTargets(records, {"g::0"})), ElementsAre("a-3", "a-4"));
  EXPECT_THAT(Ids(PreStartTargets(records, {"g::1", "g::0"})), ElementsAre("a-2"));
  EXPECT_TRUE(PreStartTargets(records, {"g::9"}).empty());
}

TEST(PreStartTargetsTest, UnattributedNewestWaitsForItsOwnRunOnly) {
  const std::vector<AllocationRecord> records = {
      Record(1, {"g::0"}),                                 // Stale, before another pod's.
      Record(2, {"g::0"}, "old", AllocationState::kReady),
      Record(3, {"g::0"}),
      Record(4, {"g::0"}),
  };
  EXPECT_THAT(Ids(PreStartTargets(records, {"g::0"})), ElementsAre("a-3", "a-4"));
}

class WaitForAllocationSpecsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TestDir().string();
    ASSERT_TRUE(ledger_.Load().ok());
  }
  // What the resolver does when it is done: the spec, then the ledger.
  void Settle(AllocationRecord r, AllocationState state = AllocationState::kReady) {
    ASSERT_TRUE(WriteCdiSpec(dir_, r.id, {{{"NVIDIA_VISIBLE_DEVICES", "GPU-1"}}, {}, {}}).ok());
    r.pod_uid = "p";
    r.pod_namespace = "ns";
    r.pod_name = "p";
    r.container = "main";
    r.state = state;
    ASSERT_TRUE(ledger_.Put(r).ok());
  }
  std::string dir_;
  Ledger ledger_{"", "t"};
};

TEST_F(WaitForAllocationSpecsTest, ReturnsOnceTheSpecIsWritten) {
  auto r = ledger_.Add({"g::0"}, 0);
  ASSERT_TRUE(r.ok());
  std::atomic<bool> settled{false};
  std::thread resolver([&] {
    absl::SleepFor(absl::Milliseconds(150));
    settled = true;
    Settle(*r);
  });
  // OK (not DeadlineExceeded) is the proof that the wait ended on the settle, not its timeout.
  absl::Status status = WaitForAllocationSpecs(ledger_, {"g::0"}, dir_, absl::Seconds(10), {});
  resolver.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(settled.load());
  // Settled already: at once.
  EXPECT_TRUE(WaitForAllocationSpecs(ledger_, {"g::0"}, dir_, absl::ZeroDuration(), {}).ok());
}

TEST_F(WaitForAllocationSpecsTest, AFailedAllocationWithItsSpecLetsTheContainerStart) {
  auto r = ledger_.Add({"g::0"}, 0);
  ASSERT_TRUE(r.ok());
  Settle(*r, AllocationState::kFailed);
  EXPECT_TRUE(WaitForAllocationSpecs(ledger_, {"g::0"}, dir_, absl::Seconds(1), {}).ok());
  // A settled allocation whose spec is missing (the write failed) is an error.
  ASSERT_TRUE(RemoveCdiSpec(dir_, r->id).ok());
  absl::Status status = WaitForAllocationSpecs(ledger_, {"g::0"}, dir_, absl::Seconds(1), {});
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("has no CDI spec"));
}

TEST_F(WaitForAllocationSpecsTest, ClearErrorsForTimeoutUnknownDevicesAndCancel) {
  auto r = ledger_.Add({"g::0"}, 0);
  ASSERT_TRUE(r.ok());
  absl::Status status =
      WaitForAllocationSpecs(ledger_, {"g::0"}, dir_, absl::Milliseconds(120), {});
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("CDI spec for devices g::0 is not written after 120ms"));
  EXPECT_THAT(status.message(), HasSubstr(r->id + " (not yet matched to a pod)"));

  status = WaitForAllocationSpecs(ledger_, {"g::7"}, dir_, absl::Seconds(1), {});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("no allocation of this node agent holds devices g::7"));
  EXPECT_EQ(WaitForAllocationSpecs(ledger_, {}, dir_, absl::Seconds(1), {}).code(),
            absl::StatusCode::kInvalidArgument);

  // Cancelled rather than DeadlineExceeded: the cancel ended the wait, not its 10 minutes (a
  // wait that ignored it would also run into CTest's timeout).
  status = WaitForAllocationSpecs(ledger_, {"g::0"}, dir_, absl::Minutes(10), [] { return true; });
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace prism::deviceplugin
