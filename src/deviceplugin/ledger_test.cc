#include "deviceplugin/ledger.h"

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "deviceplugin/test_util.h"

namespace prism::deviceplugin {
namespace {

using ::testing::ElementsAre;

TEST(LedgerTest, PersistsAndContinuesTheSequenceAfterARestart) {
  const auto dir = testing::TestDir();
  {
    Ledger ledger(dir.string(), "run1");
    ASSERT_TRUE(ledger.Load().ok());
    auto a = ledger.Add({"g::0"}, 1000);
    auto b = ledger.Add({"g::1", "g::2"}, 1001);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->id, "run1-1");
    EXPECT_EQ(b->seq, 2u);
    AllocationRecord r = *b;
    r.pod_uid = "uid";
    r.pod_namespace = "ns";
    r.pod_name = "p";
    r.container = "main";
    r.state = AllocationState::kFailed;
    r.error = "boom";
    ASSERT_TRUE(ledger.Put(r).ok());
    ASSERT_TRUE(ledger.Remove(a->id).ok());
  }
  Ledger ledger(dir.string(), "run2");
  ASSERT_TRUE(ledger.Load().ok());
  auto all = ledger.All();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].id, "run1-2");
  EXPECT_THAT(all[0].device_ids, ElementsAre("g::1", "g::2"));
  EXPECT_EQ(all[0].PodKey(), "ns/p");
  EXPECT_EQ(all[0].container, "main");
  EXPECT_EQ(all[0].state, AllocationState::kFailed);
  EXPECT_EQ(all[0].error, "boom");
  auto c = ledger.Add({"g::3"}, 2000);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->id, "run2-3");
}

TEST(LedgerTest, SkipsUnreadableRecordsAndWorksInMemory) {
  const auto dir = testing::TestDir();
  std::filesystem::create_directories(dir / "allocations");
  testing::WriteFile(dir / "allocations" / "bad.json", "{nope");
  // Numbers a cast would mangle (1e300 as an integer is undefined behaviour) and wrong types.
  testing::WriteFile(dir / "allocations" / "huge.json",
                     R"({"id":"x-1","seq":1e300,"deviceIds":["g::0"]})");
  testing::WriteFile(dir / "allocations" / "negative.json",
                     R"({"id":"x-2","seq":-1,"deviceIds":["g::0"]})");
  testing::WriteFile(dir / "allocations" / "ids.json",
                     R"({"id":"x-3","seq":3,"deviceIds":"g::0"})");
  testing::WriteFile(dir / "allocations" / "state.json",
                     R"({"id":"x-4","seq":4,"deviceIds":[],"state":"gone"})");
  testing::WriteFile(dir / "allocations" / "x-5.json",
                     R"({"id":"x-5","seq":5,"deviceIds":["g::1"],"state":"ready"})");
  Ledger ledger(dir.string(), "r");
  EXPECT_TRUE(ledger.Load().ok());
  ASSERT_EQ(ledger.size(), 1u);
  EXPECT_EQ(ledger.All()[0].id, "x-5");
  auto next = ledger.Add({"g::2"}, 1);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->seq, 6u);  // The skipped files' sequence numbers are not trusted.
  Ledger memory("", "m");
  ASSERT_TRUE(memory.Load().ok());
  ASSERT_TRUE(memory.Add({"g::0"}, 1).ok());
  EXPECT_EQ(memory.size(), 1u);
}

// Records rebuilt from pod annotations carry IDs anyone who may edit a pod can write; an ID
// names the record's file, so one that is not the agent's "<prefix>-<seq>" is refused.
TEST(LedgerTest, RefusesIdsThatAreNotTheAgentsOwn) {
  const auto dir = testing::TestDir();
  Ledger ledger(dir.string(), "run1");
  ASSERT_TRUE(ledger.Load().ok());
  for (const char* id : {"../../escape-1", "a/b-1", "", "run1", "RUN-1"}) {
    SCOPED_TRACE(id);
    AllocationRecord r;
    r.id = id;
    r.seq = 1;
    absl::Status put = ledger.Put(r);
    EXPECT_EQ(put.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(put.message()), ::testing::HasSubstr("is not an allocation ID"));
  }
  EXPECT_TRUE(ledger.All().empty());
  EXPECT_FALSE(std::filesystem::exists(dir.parent_path() / "escape-1.json"));
  AllocationRecord good;
  good.id = "forged-7";
  good.seq = 7;
  EXPECT_TRUE(ledger.Put(good).ok());
  // Nor does a record whose container or pod UID is no name the API server would accept: the
  // agent joins them into the file names it removes when the pod ends.
  AllocationRecord hostile = good;
  hostile.id = "forged-8";
  hostile.seq = 8;
  hostile.pod_uid = "uid";
  hostile.container = "x/l/var/run/cdi";
  EXPECT_THAT(std::string(ledger.Put(hostile).message()),
              ::testing::HasSubstr("pod.container: 'x/l/var/run/cdi' is not a DNS-1123 label"));
  hostile.container = "main";
  hostile.pod_uid = "..";
  EXPECT_EQ(ledger.Put(hostile).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ledger.Get("forged-8").has_value());
}

// A pod's owner may write any valid ID into the pod's allocation-status, and the agent adopts
// it at its next start. One at the top of the range must not leave the agent unable to make IDs
// (every later allocation would fail), then or after the record comes back from disk.
TEST(LedgerTest, AForgedHugeSequenceNumberDoesNotExhaustTheAgentsIds) {
  const auto dir = testing::TestDir();
  {
    Ledger ledger(dir.string(), "run1");
    ASSERT_TRUE(ledger.Load().ok());
    AllocationRecord forged;
    forged.id = "forged-9007199254740992";  // 2^53, the largest an ID may carry.
    forged.seq = uint64_t{1} << 53;
    ASSERT_TRUE(ledger.Put(forged).ok());
    auto next = ledger.Add({"g::0"}, 1);
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(next->id, "run1-1");
    ASSERT_TRUE(ledger.Put(*next).ok()) << "the agent's own ID must stay valid";
  }
  Ledger restarted(dir.string(), "run2");
  ASSERT_TRUE(restarted.Load().ok());
  EXPECT_EQ(restarted.size(), 2u);
  auto next = restarted.Add({"g::1"}, 2);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->id, "run2-2");
  EXPECT_TRUE(restarted.Put(*next).ok());
}

// The record files live on a host path anyone with node access may edit. An ID from a file
// names the file Put rewrites and Remove deletes, so a file holding "../../victim-1" must not
// become a record (Remove would delete <state-dir>/../victim-1.json, outside the ledger).
TEST(LedgerTest, RecordFilesWithForeignIdsAreSkipped) {
  const auto dir = testing::TestDir();
  const auto records = dir / "allocations";
  std::filesystem::create_directories(records);
  testing::WriteFile(records / "a-1.json",
                     R"({"id":"../../victim-1","seq":1,"deviceIds":["g::0"]})");
  testing::WriteFile(records / "a-2.json", R"({"id":"a-3","seq":3,"deviceIds":["g::0"]})");
  testing::WriteFile(records / "a-4.json", R"({"id":"a-4","seq":5,"deviceIds":["g::0"]})");
  testing::WriteFile(records / "a-6.json", R"({"id":"a-6","seq":6,"deviceIds":[""]})");
  testing::WriteFile(records / "a-7.json", "[" + std::string(2 << 20, ' ') + "]");
  testing::WriteFile(records / "a-8.json", R"({"id":"a-8","seq":8,"deviceIds":["g::8"]})");
  Ledger ledger(dir.string(), "r");
  ASSERT_TRUE(ledger.Load().ok());
  ASSERT_EQ(ledger.size(), 1u);
  EXPECT_EQ(ledger.All()[0].id, "a-8");
  EXPECT_TRUE(ledger.Remove("a-8").ok());
  EXPECT_FALSE(std::filesystem::exists(records / "a-8.json"));
}

TEST(LedgerTest, ParseAllocationRecordNamesTheFieldAndRoundTrips) {
  struct Case {
    const char* text;
    const char* error;
  };
  for (const Case& c : std::vector<Case>{
           {"[1]", "expected an object"},
           {R"({"id":"a/b-1","seq":1,"deviceIds":[]})", "id: "},
           {R"({"id":"a-1","seq":2,"deviceIds":[]})", "seq: 2 is not the number in id 'a-1'"},
           {R"({"id":"a-1","seq":1,"deviceIds":[7]})", "deviceIds[0]"},
           {R"({"id":"a-1","seq":1,"deviceIds":[],"pod":{"uid":3}})", "pod.uid"},
           // Names the agent joins into file names it removes (issue 39).
           {R"({"id":"a-1","seq":1,"deviceIds":[],)"
            R"("pod":{"uid":"u","container":"x/l/var/run/cdi"}})",
            "pod.container: 'x/l/var/run/cdi' is not a DNS-1123 label"},
           {R"({"id":"a-1","seq":1,"deviceIds":[],"pod":{"uid":"../u","container":"main"}})",
            "pod.uid: '../u' is not a pod UID"},
           {R"({"id":"a-1","seq":1,"deviceIds":[],"pod":{"uid":"u","namespace":"A_b"}})",
            "pod.namespace"},
           {R"({"id":"a-1","seq":1,"deviceIds":[],"pod":{"uid":"u","name":"p/q"}})", "pod.name"},
       }) {
    SCOPED_TRACE(c.text);
    absl::StatusOr<AllocationRecord> r = ParseAllocationRecord(c.text);
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr(c.error));
  }
  AllocationRecord r;
  r.id = "mx1ogiv5-7";
  r.seq = 7;
  r.device_ids = {"GPU-a::0", "GPU-a::1"};
  r.created_ms = 1700000000000;
  r.pod_name = "p";  // Named but not yet attributed by UID: still written and read back.
  r.state = AllocationState::kFailed;
  r.error = "no GPU";
  absl::StatusOr<AllocationRecord> back = ParseAllocationRecord(AllocationRecordToJson(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r);
}

TEST(LedgerTest, Base36) {
  EXPECT_EQ(Base36(0), "0");
  EXPECT_EQ(Base36(35), "z");
  EXPECT_EQ(Base36(36), "10");
}

}  // namespace
}  // namespace prism::deviceplugin
