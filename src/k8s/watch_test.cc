#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "k8s/client.h"
#include "k8s/errors.h"
#include "k8s/test_util.h"

namespace prism::k8s {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_util::FakeClusterTest;
using testing_util::MakePod;
using testing_util::WaitUntil;

// Runs one Watch call on a thread and records what it delivers.
class WatchRecorder {
 public:
  WatchRecorder(Client* client, const Resource& resource, std::string ns, WatchOptions options)
      : thread_([this, client, resource, ns = std::move(ns), options] {
          absl::Status status = client->Watch(
              resource, ns, options,
              [this](const WatchEvent& event) {
                absl::MutexLock lock(&mu_);
                events_.push_back(event);
                return true;
              },
              &canceller_);
          absl::MutexLock lock(&mu_);
          status_ = status;
          done_ = true;
        }) {}

  ~WatchRecorder() { Stop(); }

  void Stop() {
    canceller_.Cancel();
    if (thread_.joinable()) thread_.join();
  }

  bool WaitForEvents(size_t n, absl::Duration timeout = absl::Seconds(10)) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return events_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

  bool WaitForEnd(absl::Duration timeout = absl::Seconds(10)) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&done_), timeout);
  }

  std::vector<WatchEvent> events() {
    absl::MutexLock lock(&mu_);
    return events_;
  }

  // "TYPE name" per event, bookmarks as "BOOKMARK".
  std::vector<std::string> Summary() {
    std::vector<std::string> out;
    for (const WatchEvent& e : events()) {
      std::string line(WatchEventTypeName(e.type));
      if (e.type != WatchEventType::kBookmark) line += " " + Name(e.object);
      out.push_back(line);
    }
    return out;
  }

  absl::Status status() {
    absl::MutexLock lock(&mu_);
    return status_;
  }

 private:
  StreamCanceller canceller_;
  absl::Mutex mu_;
  std::vector<WatchEvent> events_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

class WatchTest : public FakeClusterTest {
 protected:
  WatchOptions From(std::string rv) {
    WatchOptions options;
    options.resource_version = std::move(rv);
    return options;
  }
};

INSTANTIATE_TEST_SUITE_P(Transports, WatchTest, ::testing::Bool(), testing_util::TransportName);

TEST_P(WatchTest, DeliversChangesAfterResourceVersionInOrder) {
  ASSERT_OK(server_->Create("pods", MakePod("default", "before")).status());
  std::string rv = std::to_string(server_->resource_version());
  WatchRecorder watch(client_.get(), kPods, "default", From(rv));
  ASSERT_OK(client_->Create(kPods, "default", MakePod("default", "p1")).status());
  ASSERT_OK(client_
                ->Patch(kPods, "default", "p1", PatchType::kMerge,
                        {{"metadata", {{"labels", {{"a", "b"}}}}}})
                .status());
  ASSERT_OK(client_->Delete(kPods, "default", "p1"));
  ASSERT_TRUE(watch.WaitForEvents(3));
  EXPECT_THAT(watch.Summary(), ElementsAre("ADDED p1", "MODIFIED p1", "DELETED p1"));
  std::vector<WatchEvent> events = watch.events();
  EXPECT_EQ(Labels(events[1].object).at("a"), "b");
  // Versions increase, and the DELETED event carries the deletion's version.
  EXPECT_LT(std::stoll(ResourceVersion(events[0].object)),
            std::stoll(ResourceVersion(events[1].object)));
  EXPECT_LT(std::stoll(ResourceVersion(events[1].object)),
            std::stoll(ResourceVersion(events[2].object)));
  EXPECT_EQ(ResourceVersion(events[2].object), std::to_string(server_->resource_version()));
}

TEST_P(WatchTest, WithoutVersionStartsWithCurrentObjects) {
  ASSERT_OK(server_->Create("pods", MakePod("default", "a")).status());
  ASSERT_OK(server_->Create("pods", MakePod("default", "b")).status());
  ASSERT_OK(server_->Create("pods", MakePod("elsewhere", "c")).status());
  WatchRecorder watch(client_.get(), kPods, "default", From(""));
  ASSERT_TRUE(watch.WaitForEvents(2));
  ASSERT_OK(server_->Create("pods", MakePod("default", "d")).status());
  ASSERT_TRUE(watch.WaitForEvents(3));
  EXPECT_THAT(watch.Summary(), ElementsAre("ADDED a", "ADDED b", "ADDED d"));
}

TEST_P(WatchTest, SendInitialEventsEndsWithMarkedBookmark) {
  ASSERT_OK(server_->Create("pods", MakePod("default", "a")).status());
  WatchOptions options;
  options.send_initial_events = true;
  WatchRecorder watch(client_.get(), kPods, "default", options);
  ASSERT_TRUE(watch.WaitForEvents(2));
  std::vector<WatchEvent> events = watch.events();
  EXPECT_EQ(events[0].type, WatchEventType::kAdded);
  ASSERT_EQ(events[1].type, WatchEventType::kBookmark);
  EXPECT_EQ(Annotation(events[1].object, "k8s.io/initial-events-end"), "true");
}

TEST_P(WatchTest, BookmarksCarryTheCurrentVersion) {
  WatchRecorder watch(client_.get(), kPods, "default",
                      From(std::to_string(server_->resource_version())));
  // Changes to other namespaces still move the version a bookmark reports.
  ASSERT_OK(server_->Create("pods", MakePod("elsewhere", "x")).status());
  ASSERT_TRUE(WaitUntil([&] { return server_->active_watches() == 1; }));
  server_->SendBookmarks();
  ASSERT_TRUE(watch.WaitForEvents(1));
  WatchEvent bookmark = watch.events()[0];
  EXPECT_EQ(bookmark.type, WatchEventType::kBookmark);
  EXPECT_EQ(ResourceVersion(bookmark.object), std::to_string(server_->resource_version()));
  EXPECT_EQ(GetString(bookmark.object, {"kind"}), "Pod");
}

TEST_P(WatchTest, NoBookmarksUnlessAllowed) {
  WatchOptions options = From(std::to_string(server_->resource_version()));
  options.allow_bookmarks = false;
  WatchRecorder watch(client_.get(), kPods, "default", options);
  ASSERT_TRUE(WaitUntil([&] { return server_->active_watches() == 1; }));
  server_->SendBookmarks();
  ASSERT_OK(server_->Create("pods", MakePod("default", "a")).status());
  ASSERT_TRUE(watch.WaitForEvents(1));
  EXPECT_THAT(watch.Summary(), ElementsAre("ADDED a"));
}

TEST_P(WatchTest, WatchFromCompactedVersionIsGone) {
  ASSERT_OK(server_->Create("pods", MakePod("default", "a")).status());
  std::string old_rv = std::to_string(server_->resource_version());
  ASSERT_OK(server_->Create("pods", MakePod("default", "b")).status());
  server_->CompactHistory();
  WatchRecorder watch(client_.get(), kPods, "default", From(old_rv));
  ASSERT_TRUE(watch.WaitForEnd());
  absl::Status status = watch.status();
  EXPECT_TRUE(IsGone(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("too old resource version"));
  EXPECT_TRUE(watch.events().empty());
}

class GoneAsHttpTest : public WatchTest {
  void ModifyServerOptions(fakeapi::FakeApiServerOptions* options) override {
    options->gone_as_http_status = true;
  }
};
INSTANTIATE_TEST_SUITE_P(Transports, GoneAsHttpTest, ::testing::Bool(),
                         testing_util::TransportName);

TEST_P(GoneAsHttpTest, HttpGoneOnWatchRequestIsGone) {
  ASSERT_OK(server_->Create("pods", MakePod("default", "a")).status());
  ASSERT_OK(server_->Create("pods", MakePod("default", "b")).status());
  server_->CompactHistory();
  absl::Status status =
      client_->Watch(kPods, "default", From("1"), [](const WatchEvent&) { return true; });
  EXPECT_TRUE(IsGone(status)) << status;
  EXPECT_EQ(HttpStatusOf(status), 410);
  EXPECT_TRUE(absl::IsOutOfRange(status));
}

TEST_P(WatchTest, ServerTimeoutEndsWatchCleanly) {
  WatchOptions options = From(std::to_string(server_->resource_version()));
  options.timeout = absl::Seconds(1);
  absl::Time start = absl::Now();
  absl::Status status = client_->Watch(kPods, "", options, [](const WatchEvent&) { return true; });
  EXPECT_OK(status);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(900));
  EXPECT_THAT(server_->Requests().back().query, HasSubstr("timeoutSeconds=1"));
}

TEST_P(WatchTest, HandlerReturningFalseEndsWatch) {
  ASSERT_OK(server_->Create("pods", MakePod("default", "a")).status());
  ASSERT_OK(server_->Create("pods", MakePod("default", "b")).status());
  int seen = 0;
  absl::Status status = client_->Watch(kPods, "default", From(""), [&](const WatchEvent&) {
    ++seen;
    return false;
  });
  EXPECT_OK(status);
  EXPECT_EQ(seen, 1);
}

TEST_P(WatchTest, DroppedConnectionIsUnavailable) {
  WatchRecorder watch(client_.get(), kPods, "default",
                      From(std::to_string(server_->resource_version())));
  ASSERT_TRUE(WaitUntil([&] { return server_->active_watches() == 1; }));
  server_->DropWatches();
  ASSERT_TRUE(watch.WaitForEnd());
  EXPECT_TRUE(absl::IsUnavailable(watch.status())) << watch.status();
}

TEST_P(WatchTest, CancelEndsWatchAtOnce) {
  auto watch = std::make_unique<WatchRecorder>(client_.get(), kPods, "default",
                                               From(std::to_string(server_->resource_version())));
  ASSERT_TRUE(WaitUntil([&] { return server_->active_watches() == 1; }));
  absl::Time start = absl::Now();
  watch->Stop();
  // Not stopped, the watch would last its 5-minute server timeout; 1 s leaves room for a loaded
  // machine (the case runs alone: `realtime` label) and still fails a Stop that polls slowly.
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_TRUE(absl::IsCancelled(watch->status())) << watch->status();
  // The server notices the closed connection and frees the watch.
  EXPECT_TRUE(WaitUntil([&] { return server_->active_watches() == 0; }, absl::Seconds(5)));
}

TEST_P(WatchTest, MalformedEventLineIsInternalErrorNotACrash) {
  fakeapi::Fault fault;
  fault.query_contains = "watch=1";
  fault.status = 200;
  fault.body =
      "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"ok\"}}}\nnot json at all\n";
  server_->InjectFault(fault);
  std::vector<std::string> names;
  absl::Status status = client_->Watch(kPods, "default", From("1"), [&](const WatchEvent& e) {
    names.push_back(Name(e.object));
    return true;
  });
  EXPECT_TRUE(absl::IsInternal(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("malformed JSON"));
  EXPECT_THAT(names, ElementsAre("ok"));

  for (std::string body : {"{\"type\":\"ADDED\"}\n", "{\"type\":\"RENAMED\",\"object\":{}}\n",
                           "[1,2,3]\n", "{\"type\":\"ERROR\",\"object\":{\"code\":\"x\"}}\n"}) {
    SCOPED_TRACE(body);
    fault.body = body;
    server_->InjectFault(fault);
    absl::Status bad =
        client_->Watch(kPods, "default", From("1"), [](const WatchEvent&) { return true; });
    EXPECT_FALSE(bad.ok());
  }
}

TEST_P(WatchTest, LabelSelectorTurnsLeavingAndEnteringIntoDeletedAndAdded) {
  ASSERT_OK(server_->Create("pods", MakePod("default", "p", {{"gpu", "yes"}})).status());
  WatchOptions options = From(std::to_string(server_->resource_version()));
  options.label_selector = "gpu=yes";
  WatchRecorder watch(client_.get(), kPods, "default", options);
  ASSERT_TRUE(WaitUntil([&] { return server_->active_watches() == 1; }));
  ASSERT_OK(
      server_->MergePatch("pods", "default", "p", {{"metadata", {{"labels", {{"gpu", "no"}}}}}})
          .status());
  ASSERT_OK(
      server_->MergePatch("pods", "default", "p", {{"metadata", {{"annotations", {{"x", "1"}}}}}})
          .status());
  ASSERT_OK(
      server_->MergePatch("pods", "default", "p", {{"metadata", {{"labels", {{"gpu", "yes"}}}}}})
          .status());
  ASSERT_TRUE(watch.WaitForEvents(2));
  EXPECT_THAT(watch.Summary(), ElementsAre("DELETED p", "ADDED p"));
}

TEST_P(WatchTest, FieldSelectorFollowsBinding) {
  ASSERT_OK(server_->Create("pods", MakePod("default", "p")).status());
  WatchOptions options = From(std::to_string(server_->resource_version()));
  options.field_selector = "spec.nodeName=gpu-node-1";
  WatchRecorder watch(client_.get(), kPods, "", options);
  ASSERT_TRUE(WaitUntil([&] { return server_->active_watches() == 1; }));
  ASSERT_OK(client_->Bind("default", "p", "", "gpu-node-1"));
  ASSERT_TRUE(watch.WaitForEvents(1));
  EXPECT_THAT(watch.Summary(), ElementsAre("ADDED p"));
  EXPECT_EQ(PodNodeName(watch.events()[0].object), "gpu-node-1");
}

}  // namespace
}  // namespace prism::k8s
