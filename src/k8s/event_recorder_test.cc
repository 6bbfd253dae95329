#include "k8s/event_recorder.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "k8s/test_util.h"

namespace prism::k8s {
namespace {

using ::testing::HasSubstr;
using testing_util::FakeClusterTest;
using testing_util::MakePod;

class EventRecorderTest : public FakeClusterTest {
 protected:
  EventRecorderOptions Options() {
    EventRecorderOptions options;
    options.component = "prism-scheduler";
    options.host = "control-plane-1";
    options.instance = "prism-scheduler-7d9f";
    options.qps = 0;  // Unlimited unless a test says otherwise.
    return options;
  }

  ObjectReference PodRef(std::string_view name) {
    auto pod = server_->Get("pods", "default", name);
    if (!pod.ok()) pod = server_->Create("pods", MakePod("default", name));
    EXPECT_TRUE(pod.ok()) << pod.status();
    return ReferenceTo(*pod, "Pod", "v1");
  }

  FakeClock clock_;
};

INSTANTIATE_TEST_SUITE_P(Transports, EventRecorderTest, ::testing::Bool(),
                         testing_util::TransportName);

TEST_P(EventRecorderTest, WritesACoreEventAboutTheObject) {
  EventRecorder recorder(client_.get(), Options(), &clock_);
  ObjectReference pod = PodRef("trainer");
  recorder.Record(pod, EventType::kWarning, "FailedScheduling",
                  "0/3 nodes: 3 no MIG slice 3g.40gb free");
  recorder.Flush();
  std::vector<Json> events = server_->List("events", "default");
  ASSERT_EQ(events.size(), 1u);
  const Json& e = events[0];
  EXPECT_EQ(e["reason"], "FailedScheduling");
  EXPECT_EQ(e["type"], "Warning");
  EXPECT_EQ(e["message"], "0/3 nodes: 3 no MIG slice 3g.40gb free");
  EXPECT_EQ(e["count"], 1);
  EXPECT_EQ(e["involvedObject"]["kind"], "Pod");
  EXPECT_EQ(e["involvedObject"]["name"], "trainer");
  EXPECT_EQ(e["involvedObject"]["uid"], pod.uid);
  EXPECT_EQ(e["source"]["component"], "prism-scheduler");
  EXPECT_EQ(e["source"]["host"], "control-plane-1");
  EXPECT_EQ(e["reportingInstance"], "prism-scheduler-7d9f");
  EXPECT_EQ(e["firstTimestamp"], FormatTimestamp(clock_.Now()));
  EXPECT_THAT(Name(e), HasSubstr("trainer."));
  EXPECT_EQ(recorder.stats().created, 1);
}

TEST_P(EventRecorderTest, RepeatsAggregateIntoOneEventWithACount) {
  EventRecorder recorder(client_.get(), Options(), &clock_);
  ObjectReference pod = PodRef("trainer");
  for (int i = 0; i < 5; ++i) {
    recorder.Record(pod, EventType::kWarning, "FailedScheduling", "no GPU");
    clock_.Advance(absl::Seconds(30));
  }
  recorder.Flush();
  std::vector<Json> events = server_->List("events", "default");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["count"], 5);
  EXPECT_EQ(events[0]["lastTimestamp"], FormatTimestamp(clock_.Now() - absl::Seconds(30)));
  EXPECT_NE(events[0]["firstTimestamp"], events[0]["lastTimestamp"]);
  EventRecorderStats stats = recorder.stats();
  EXPECT_EQ(stats.created, 1);
  EXPECT_EQ(stats.aggregated, 4);
  EXPECT_EQ(server_->CountRequests("PATCH", "/api/v1/namespaces/default/events"), 4);
}

TEST_P(EventRecorderTest, DifferentReasonsOrObjectsAreSeparateEvents) {
  EventRecorder recorder(client_.get(), Options(), &clock_);
  recorder.Record(PodRef("a"), EventType::kWarning, "FailedScheduling", "no GPU");
  recorder.Record(PodRef("a"), EventType::kNormal, "Scheduled", "bound to n1");
  recorder.Record(PodRef("b"), EventType::kWarning, "FailedScheduling", "no GPU");
  recorder.Flush();
  EXPECT_EQ(server_->List("events", "default").size(), 3u);
}

TEST_P(EventRecorderTest, RepeatAfterTheWindowStartsANewEvent) {
  EventRecorderOptions options = Options();
  options.aggregation_window = absl::Minutes(1);
  EventRecorder recorder(client_.get(), options, &clock_);
  recorder.Record(PodRef("a"), EventType::kWarning, "FailedScheduling", "no GPU");
  clock_.Advance(absl::Minutes(2));
  recorder.Record(PodRef("a"), EventType::kWarning, "FailedScheduling", "no GPU");
  recorder.Flush();
  EXPECT_EQ(server_->List("events", "default").size(), 2u);
}

TEST_P(EventRecorderTest, RecreatesAnAggregatedEventThatWasDeleted) {
  EventRecorder recorder(client_.get(), Options(), &clock_);
  recorder.Record(PodRef("a"), EventType::kWarning, "FailedScheduling", "no GPU");
  recorder.Flush();
  std::vector<Json> first = server_->List("events", "default");
  ASSERT_EQ(first.size(), 1u);
  ASSERT_OK(server_->Delete("events", "default", Name(first[0])));  // Event TTL ran out.
  recorder.Record(PodRef("a"), EventType::kWarning, "FailedScheduling", "no GPU");
  recorder.Flush();
  std::vector<Json> second = server_->List("events", "default");
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0]["count"], 1);
  EXPECT_EQ(recorder.stats().created, 2);
}

TEST_P(EventRecorderTest, ClusterScopedObjectsGetEventsInDefaultNamespace) {
  ASSERT_OK_AND_ASSIGN(Json node, server_->Create("nodes", {{"metadata", {{"name", "gpu-1"}}}}));
  EventRecorder recorder(client_.get(), Options(), &clock_);
  recorder.Record(ReferenceTo(node, "Node", "v1"), EventType::kNormal, "MigReconfigured",
                  "all-1g.10gb applied");
  recorder.Flush();
  std::vector<Json> events = server_->List("events", "default");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["involvedObject"]["kind"], "Node");
  EXPECT_FALSE(events[0]["involvedObject"].contains("namespace"));
}

TEST_P(EventRecorderTest, LongMessagesAreTruncated) {
  EventRecorder recorder(client_.get(), Options(), &clock_);
  recorder.Record(PodRef("a"), EventType::kWarning, "FailedScheduling", std::string(5000, 'x'));
  recorder.Flush();
  std::vector<Json> events = server_->List("events", "default");
  ASSERT_EQ(events.size(), 1u);
  std::string message = events[0]["message"];
  EXPECT_EQ(message.size(), 1024u);
  EXPECT_EQ(message.substr(1021), "...");
}

TEST_P(EventRecorderTest, FullQueueDropsAndCountsInsteadOfBlocking) {
  EventRecorderOptions options = Options();
  options.max_queue = 3;
  ObjectReference pod = PodRef("a");
  server_->SetLatency(absl::Milliseconds(100));  // A slow API server backs the queue up.
  EventRecorder recorder(client_.get(), options, &clock_);
  absl::Time start = absl::Now();
  for (int i = 0; i < 20; ++i) {
    recorder.Record(pod, EventType::kWarning, "R" + std::to_string(i), "m");
  }
  // Record never waits for the API: waiting would take 100 ms for each of the >= 16 events past
  // the queue's 3 (1.6 s at least). The drop count below says the same without a clock.
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  recorder.Flush();
  server_->SetLatency(absl::ZeroDuration());
  EventRecorderStats stats = recorder.stats();
  EXPECT_GE(stats.dropped, 16);
  EXPECT_EQ(stats.created + stats.dropped, 20);
}

TEST_P(EventRecorderTest, FailedWritesAreCountedNotRetriedForever) {
  fakeapi::Fault fault;
  fault.count = -1;
  fault.status = 403;
  fault.message = "events is forbidden: User cannot create resource \"events\"";
  fault.path_prefix = "/api/v1/namespaces/default/events";
  ObjectReference pod = PodRef("a");
  server_->InjectFault(fault);
  EventRecorder recorder(client_.get(), Options(), &clock_);
  recorder.Record(pod, EventType::kWarning, "FailedScheduling", "no GPU");
  recorder.Flush();
  EXPECT_EQ(recorder.stats().failed, 1);
  EXPECT_EQ(server_->CountRequests("POST", "/api/v1/namespaces/default/events"), 1);
}

TEST_P(EventRecorderTest, StopWritesWhatIsQueuedThenDropsNewEvents) {
  ObjectReference pod = PodRef("a");
  EventRecorder recorder(client_.get(), Options(), &clock_);
  recorder.Record(pod, EventType::kNormal, "One", "m");
  recorder.Record(pod, EventType::kNormal, "Two", "m");
  recorder.Stop();
  EXPECT_EQ(server_->List("events", "default").size(), 2u);
  recorder.Record(pod, EventType::kNormal, "Three", "m");
  EXPECT_EQ(recorder.stats().dropped, 1);
}

TEST(TokenBucketTest, AllowsBurstThenRefillsAtRate) {
  FakeClock clock;
  TokenBucket bucket(/*qps=*/2, /*burst=*/3, &clock);
  EXPECT_TRUE(bucket.TryTake());
  EXPECT_TRUE(bucket.TryTake());
  EXPECT_TRUE(bucket.TryTake());
  EXPECT_FALSE(bucket.TryTake());
  clock.Advance(absl::Milliseconds(500));
  EXPECT_TRUE(bucket.TryTake());
  EXPECT_FALSE(bucket.TryTake());
  EXPECT_EQ(bucket.Reserve(), absl::Milliseconds(500));
  EXPECT_EQ(bucket.Reserve(), absl::Seconds(1));
  clock.Advance(absl::Hours(1));
  EXPECT_EQ(bucket.Reserve(), absl::ZeroDuration());
}

TEST(TokenBucketTest, ZeroQpsIsUnlimited) {
  FakeClock clock;
  TokenBucket bucket(0, 1, &clock);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(bucket.TryTake());
  EXPECT_EQ(bucket.Reserve(), absl::ZeroDuration());
}

TEST(BackoffTest, GrowsExponentiallyWithBoundedJitterUpToMax) {
  BackoffOptions options;
  options.initial = absl::Milliseconds(100);
  options.max = absl::Seconds(1);
  options.multiplier = 2;
  options.jitter = 0.5;
  Backoff backoff(options, /*seed=*/42);
  absl::Duration expected_base[] = {absl::Milliseconds(100), absl::Milliseconds(200),
                                    absl::Milliseconds(400), absl::Milliseconds(800),
                                    absl::Seconds(1),        absl::Seconds(1)};
  for (absl::Duration base : expected_base) {
    absl::Duration d = backoff.Next();
    EXPECT_GE(d, base);
    EXPECT_LT(d, base * 1.5);
  }
  backoff.Reset();
  EXPECT_LT(backoff.Next(), absl::Milliseconds(150));
}

TEST(BackoffTest, JitterSpreadsClientsApart) {
  Backoff a(BackoffOptions{}, 1);
  Backoff b(BackoffOptions{}, 2);
  EXPECT_NE(a.Next(), b.Next());
}

TEST(EventTextTest, NamesAreEscapedAndBounded) {
  EXPECT_EQ(EventName("gpu-node-1"), "gpu-node-1");
  // A forged second line, a terminal escape, quotes and non-ASCII bytes come out as \xNN.
  EXPECT_EQ(EventName("n\nWarning: x\x1b[31m\"\\\xc3\xa9"),
            "n\\x0aWarning: x\\x1b[31m\\x22\\x5c\\xc3\\xa9");
  const std::string long_name(1000, 'a');
  const std::string cut = EventName(long_name, 20);
  EXPECT_EQ(cut, std::string(17, 'a') + "...");
  // An escape is never split by the cut.
  EXPECT_EQ(EventName(std::string(15, 'a') + "\n\n", 20), std::string(15, 'a') + "...");
  EXPECT_EQ(EventName(std::string(20, 'a'), 20), std::string(20, 'a'));
}

TEST(EventTextTest, MessagesKeepUtf8AndEscapeTheRest) {
  EXPECT_EQ(EventMessage("0/3 nodes: caf\xc3\xa9", 100), "0/3 nodes: caf\xc3\xa9");
  EXPECT_EQ(EventMessage("a\r\nb\x01", 100), "a\\x0d\\x0ab\\x01");
  // Invalid UTF-8: a lone continuation byte, an overlong '/', a surrogate.
  EXPECT_EQ(EventMessage("\x80 \xc0\xaf \xed\xa0\x80", 100),
            "\\x80 \\xc0\\xaf \\xed\\xa0\\x80");
  // Cut on a character boundary: the two-byte character does not fit before the "...".
  EXPECT_EQ(EventMessage("abcdefgh\xc3\xa9xyz", 12), "abcdefgh...");
}

}  // namespace
}  // namespace prism::k8s
