#include "k8s/informer.h"

#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "k8s/errors.h"
#include "k8s/test_util.h"

namespace prism::k8s {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using testing_util::FakeClusterTest;
using testing_util::MakePod;
using testing_util::WaitUntil;

// Mirrors an informer purely from handler calls, checking each call makes sense (no add of a
// known key, no update or delete of an unknown one).
class Mirror {
 public:
  ResourceEventHandler Handler() {
    return ResourceEventHandler{[this](const Json& obj) {
                                  absl::MutexLock lock(&mu_);
                                  std::string key = ObjectKey(obj);
                                  if (objects_.count(key) != 0) ++anomalies_;
                                  objects_[key] = ResourceVersion(obj);
                                  ++adds_;
                                  log_.push_back("add " + key);
                                },
                                [this](const Json& old_obj, const Json& new_obj) {
                                  absl::MutexLock lock(&mu_);
                                  std::string key = ObjectKey(new_obj);
                                  if (objects_.count(key) == 0 || ObjectKey(old_obj) != key)
                                    ++anomalies_;
                                  objects_[key] = ResourceVersion(new_obj);
                                  ++updates_;
                                  if (ResourceVersion(old_obj) == ResourceVersion(new_obj))
                                    ++resyncs_;
                                  log_.push_back("update " + key);
                                },
                                [this](const Json& obj) {
                                  absl::MutexLock lock(&mu_);
                                  std::string key = ObjectKey(obj);
                                  if (objects_.erase(key) == 0) ++anomalies_;
                                  ++deletes_;
                                  log_.push_back("delete " + key);
                                }};
  }

  std::map<std::string, std::string> objects() {
    absl::MutexLock lock(&mu_);
    return objects_;
  }
  std::vector<std::string> log() {
    absl::MutexLock lock(&mu_);
    return log_;
  }
  int adds() {
    absl::MutexLock lock(&mu_);
    return adds_;
  }
  int resyncs() {
    absl::MutexLock lock(&mu_);
    return resyncs_;
  }
  int anomalies() {
    absl::MutexLock lock(&mu_);
    return anomalies_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> objects_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
  int adds_ ABSL_GUARDED_BY(mu_) = 0;
  int updates_ ABSL_GUARDED_BY(mu_) = 0;
  int deletes_ ABSL_GUARDED_BY(mu_) = 0;
  int resyncs_ ABSL_GUARDED_BY(mu_) = 0;
  int anomalies_ ABSL_GUARDED_BY(mu_) = 0;
};

// key -> resourceVersion of what the server holds.
std::map<std::string, std::string> ServerState(const fakeapi::FakeApiServer& server,
                                               std::string_view resource,
                                               std::string_view ns = "") {
  std::map<std::string, std::string> out;
  for (const Json& obj : server.List(resource, ns)) out[ObjectKey(obj)] = ResourceVersion(obj);
  return out;
}

std::map<std::string, std::string> InformerState(const Informer& informer) {
  std::map<std::string, std::string> out;
  for (const Json& obj : informer.List()) out[ObjectKey(obj)] = ResourceVersion(obj);
  return out;
}

class InformerTest : public FakeClusterTest {
 protected:
  InformerOptions Fast() {
    InformerOptions options;
    options.backoff.initial = absl::Milliseconds(10);
    options.backoff.max = absl::Milliseconds(100);
    return options;
  }
};

INSTANTIATE_TEST_SUITE_P(Transports, InformerTest, ::testing::Bool(), testing_util::TransportName);

TEST_P(InformerTest, SyncsExistingObjectsThenFollowsChanges) {
  ASSERT_OK(server_->Create("pods", MakePod("default", "a")).status());
  ASSERT_OK(server_->Create("pods", MakePod("team", "b")).status());
  Informer informer(client_.get(), kPods, Fast());
  Mirror mirror;
  informer.AddHandler(mirror.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  EXPECT_EQ(informer.Size(), 2u);
  ASSERT_TRUE(informer.Get("team/b").has_value());
  EXPECT_EQ(Name(*informer.Get("default", "a")), "a");

  ASSERT_OK(client_->Create(kPods, "default", MakePod("default", "c")).status());
  ASSERT_OK(client_->Bind("default", "a", "", "node-1"));
  ASSERT_OK(client_->Delete(kPods, "team", "b"));
  ASSERT_TRUE(WaitUntil([&] { return ServerState(*server_, "pods") == InformerState(informer); }));
  EXPECT_EQ(PodNodeName(*informer.Get("default/a")), "node-1");
  EXPECT_FALSE(informer.Get("team/b").has_value());
  EXPECT_EQ(informer.LastResourceVersion(), std::to_string(server_->resource_version()));
  ASSERT_TRUE(WaitUntil([&] { return mirror.log().size() == 5; }));
  EXPECT_THAT(mirror.log(), ElementsAre("add default/a", "add team/b", "add default/c",
                                        "update default/a", "delete team/b"));
  EXPECT_EQ(mirror.anomalies(), 0);
  EXPECT_EQ(informer.stats().lists, 1);
}

TEST_P(InformerTest, ClusterScopedKeysAreNames) {
  ASSERT_OK(server_->Create("nodes", {{"metadata", {{"name", "gpu-1"}}}}).status());
  Informer informer(client_.get(), kNodes, Fast());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  EXPECT_TRUE(informer.Get("gpu-1").has_value());
  EXPECT_TRUE(informer.Get("ignored-namespace", "gpu-1").has_value());
}

TEST_P(InformerTest, SelectorsLimitTheCache) {
  ASSERT_OK(server_->Create("pods", MakePod("default", "a")).status());
  ASSERT_OK(server_->Create("pods", MakePod("default", "b")).status());
  ASSERT_OK(client_->Bind("default", "a", "", "node-1"));
  InformerOptions options = Fast();
  options.field_selector = "spec.nodeName=node-1";
  Informer informer(client_.get(), kPods, options);
  Mirror mirror;
  informer.AddHandler(mirror.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  EXPECT_EQ(informer.Size(), 1u);
  ASSERT_OK(client_->Bind("default", "b", "", "node-1"));
  ASSERT_TRUE(WaitUntil([&] { return informer.Size() == 2; }));
  EXPECT_THAT(mirror.log(), ElementsAre("add default/a", "add default/b"));
  for (const fakeapi::RequestRecord& request : server_->Requests()) {
    if (request.method == "GET") {
      EXPECT_THAT(request.query, ::testing::HasSubstr("fieldSelector=spec.nodeName"));
    }
  }
}

TEST_P(InformerTest, ResumesDroppedWatchesWithoutRelistingOrLosingEvents) {
  Informer informer(client_.get(), kPods, Fast());
  Mirror mirror;
  informer.AddHandler(mirror.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));

  constexpr int kPods = 200;
  std::atomic<bool> writing{true};
  std::thread writer([&] {
    for (int i = 0; i < kPods; ++i) {
      EXPECT_OK(
          client_->Create(k8s::kPods, "default", MakePod("default", "p" + std::to_string(i))));
    }
    writing = false;
  });
  int drops = 0;
  while (writing) {
    server_->DropWatches();
    ++drops;
    absl::SleepFor(absl::Milliseconds(3));
  }
  writer.join();
  ASSERT_TRUE(WaitUntil([&] { return ServerState(*server_, "pods") == InformerState(informer); }));
  EXPECT_GT(drops, 1);
  EXPECT_GT(informer.stats().watches, 1);
  EXPECT_EQ(informer.stats().lists, 1);  // Resumed from the last version every time.
  ASSERT_TRUE(WaitUntil([&] { return mirror.adds() == kPods; }));
  EXPECT_EQ(mirror.anomalies(), 0);  // Each pod added exactly once.
}

TEST_P(InformerTest, RelistsAfterGoneAndReportsDeletesMissedMeanwhile) {
  ASSERT_OK(server_->Create("pods", MakePod("default", "stays")).status());
  ASSERT_OK(server_->Create("pods", MakePod("default", "goes")).status());
  Informer informer(client_.get(), kPods, Fast());
  Mirror mirror;
  informer.AddHandler(mirror.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  ASSERT_TRUE(WaitUntil([&] { return server_->active_watches() == 1; }));

  // Keep the informer away while the cluster changes and history is compacted.
  fakeapi::Fault refuse;
  refuse.query_contains = "watch=1";
  refuse.count = -1;
  refuse.status = 503;
  server_->InjectFault(refuse);
  server_->DropWatches();
  ASSERT_TRUE(WaitUntil([&] { return informer.stats().errors >= 1; }));
  ASSERT_OK(server_->Delete("pods", "default", "goes"));
  ASSERT_OK(server_->Create("pods", MakePod("default", "new")).status());
  ASSERT_OK(
      server_->MergePatch("pods", "default", "stays", {{"metadata", {{"labels", {{"v", "2"}}}}}})
          .status());
  server_->CompactHistory();
  server_->ClearFaults();

  ASSERT_TRUE(WaitUntil([&] { return ServerState(*server_, "pods") == InformerState(informer); }));
  EXPECT_GE(informer.stats().relists_after_gone, 1);
  EXPECT_EQ(informer.stats().lists, 2);
  ASSERT_TRUE(WaitUntil([&] { return mirror.log().size() == 5; }));
  std::vector<std::string> log = mirror.log();
  EXPECT_THAT(log, Contains("delete default/goes"));
  EXPECT_THAT(log, Contains("add default/new"));
  EXPECT_THAT(log, Contains("update default/stays"));
  EXPECT_EQ(mirror.anomalies(), 0);
}

TEST_P(InformerTest, StaysConsistentUnderConcurrentWriters) {
  Informer informer(client_.get(), kPods, Fast());
  Mirror mirror;
  informer.AddHandler(mirror.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));

  constexpr int kWriters = 4;
  constexpr int kOpsPerWriter = 60;
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      std::mt19937 rng(w);
      for (int op = 0; op < kOpsPerWriter; ++op) {
        std::string name = "w" + std::to_string(w) + "-" + std::to_string(rng() % 10);
        switch (rng() % 3) {
          case 0:
            (void)client_->Create(kPods, "default", MakePod("default", name));
            break;
          case 1:
            (void)client_->MutateWithRetry(kPods, "default", name, [&](Json& pod) {
              pod["metadata"]["labels"]["op"] = std::to_string(op);
              return absl::OkStatus();
            });
            break;
          default:
            (void)client_->Delete(kPods, "default", name);
        }
        if (op % 20 == 0 && w == 0) server_->DropWatches();
      }
    });
  }
  for (auto& t : writers) t.join();
  ASSERT_TRUE(WaitUntil([&] {
    return ServerState(*server_, "pods") == InformerState(informer) &&
           mirror.objects() == InformerState(informer);
  }));
  EXPECT_EQ(mirror.anomalies(), 0);
}

TEST_P(InformerTest, ResyncRedeliversStoredObjects) {
  ASSERT_OK(server_->Create("pods", MakePod("default", "a")).status());
  InformerOptions options = Fast();
  options.resync_period = absl::Milliseconds(50);
  Informer informer(client_.get(), kPods, options);
  Mirror mirror;
  informer.AddHandler(mirror.Handler());
  informer.Start();
  ASSERT_TRUE(WaitUntil([&] { return mirror.resyncs() >= 2; }));
  EXPECT_EQ(mirror.anomalies(), 0);
}

TEST_P(InformerTest, LateHandlerFirstSeesExistingObjects) {
  ASSERT_OK(server_->Create("pods", MakePod("default", "a")).status());
  ASSERT_OK(server_->Create("pods", MakePod("default", "b")).status());
  Informer informer(client_.get(), kPods, Fast());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  Mirror mirror;
  informer.AddHandler(mirror.Handler());
  EXPECT_THAT(mirror.log(), ElementsAre("add default/a", "add default/b"));
  ASSERT_OK(client_->Create(kPods, "default", MakePod("default", "c")).status());
  ASSERT_TRUE(WaitUntil([&] { return mirror.adds() == 3; }));
  EXPECT_EQ(mirror.anomalies(), 0);
}

TEST_P(InformerTest, StopEndsAnOpenWatchPromptly) {
  Informer informer(client_.get(), kPods, Fast());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  ASSERT_TRUE(WaitUntil([&] { return server_->active_watches() == 1; }));
  absl::Time start = absl::Now();
  informer.Stop();
  // Not stopped, the watch would last its 5-minute server timeout; 1 s leaves room for a loaded
  // machine (the case runs alone: `realtime` label) and still fails a Stop that polls slowly.
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  informer.Stop();  // Idempotent.
}

TEST_P(InformerTest, KeepsRetryingWhileTheServerFailsAndRecovers) {
  fakeapi::Fault fault;
  fault.count = 3;
  fault.status = 500;
  fault.path_prefix = "/api/v1/pods";
  server_->InjectFault(fault);
  ClientOptions options = FastRetries();
  options.max_attempts = 1;  // Let the informer's own backoff do the retrying.
  auto client = NewClient(options);
  Informer informer(client.get(), kPods, Fast());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  EXPECT_EQ(informer.stats().errors, 3);
  EXPECT_TRUE(absl::IsUnavailable(informer.LastError()));
}

TEST_P(InformerTest, BookmarksAdvanceTheResumeVersion) {
  Informer informer(client_.get(), kPods, Fast());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  ASSERT_TRUE(WaitUntil([&] { return server_->active_watches() == 1; }));
  // Changes elsewhere move the global version; only a bookmark tells this informer about them.
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK(
        server_
            ->Create("configmaps",
                     {{"metadata", {{"name", "c" + std::to_string(i)}, {"namespace", "default"}}}})
            .status());
  }
  server_->SendBookmarks();
  ASSERT_TRUE(WaitUntil([&] {
    return informer.LastResourceVersion() == std::to_string(server_->resource_version());
  }));
  EXPECT_GE(informer.stats().bookmarks, 1);
  // Compacting now no longer forces a relist: the informer resumes from the bookmark.
  server_->CompactHistory();
  server_->DropWatches();
  ASSERT_OK(server_->Create("pods", MakePod("default", "after")).status());
  ASSERT_TRUE(WaitUntil([&] { return informer.Size() == 1; }));
  EXPECT_EQ(informer.stats().lists, 1);
}

}  // namespace
}  // namespace prism::k8s
