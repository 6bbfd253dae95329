// Path B end to end in one process (docs/preemption.md §2): the cache, the runner and a fake API
// server that serves pods/eviction (and refuses as a PodDisruptionBudget does, by fault).
#include "extender/preemptor.h"

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "config/device_config_yaml.h"
#include "config/pod_json.h"
#include "extender/test_util.h"
#include "k8s/config.h"
#include "testing/fake_apiserver/fake_apiserver.h"

namespace prism::extender {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;
using testing::GpuPod;
using testing::NodeJson;
using testing::TestGpu;
using testing::Views;

class PreemptorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_.Start().ok());
    auto cluster = k8s::ParseKubeconfig(api_.KubeconfigYaml());
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    auto client = k8s::Client::Create(*cluster);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    CacheOptions options;
    options.engine = DefaultEngineOptions();
    cache_ = std::make_unique<SchedulerCache>(config::DefaultDeviceConfig(), options);
    cache_->UpsertNode(NodeJson("n1", {TestGpu{"T4", 15360}, TestGpu{"T4", 15360}}));
    // GPU 0: a 8 GiB + b 6 GiB; GPU 1: c 10 GiB + d 4 GiB; all priority 0.
    Run("a", 8192, 0);
    Run("b", 6144, 0);
    Run("c", 10240, 1);
    Run("d", 4096, 1);
    runner_ = std::make_unique<PreemptionRunner>(
        PreemptionOptions{}, "prism-scheduler", cache_.get(), client_.get(), &metrics_,
        [this](const json& object, k8s::EventType, std::string_view reason,
               std::string_view message) {
          events_.push_back(StrCat(object["metadata"].value("name", ""), " ", reason, ": ", message));
        });
  }
  // Created in the API server, then placed and seen bound by the cache with its real UID.
  void Run(const std::string& name, int64_t mib, int gpu) {
    json pod = GpuPod(name, 1, mib, 10, {{"nvidia.com/use-gpuuuid", StrCat("GPU-n1-", gpu)}});
    pod["spec"]["priority"] = 0;
    pod["metadata"].erase("uid");
    auto created = api_.Create("pods", pod);
    ASSERT_TRUE(created.ok()) << created.status();
    pod["metadata"]["uid"] = (*created)["metadata"]["uid"];
    auto m = config::PodManifestFromJson(pod);
    ASSERT_TRUE(m.ok());
    FilterOutcome f = cache_->Filter(*m, Views({"n1"}));
    ASSERT_EQ(f.assumed_node, "n1");
    auto t = cache_->BeginBind(*m, "n1");
    ASSERT_TRUE(t.ok()) << t.status();
    cache_->FinishBind(*t, BindOutcome::kBound);
    pod["spec"]["nodeName"] = "n1";
    for (const auto& [k, v] : t->annotations) pod["metadata"]["annotations"][k] = v;
    cache_->UpsertPod(pod);
  }
  static json Hi(int32_t priority = 100) {
    json pod = GpuPod("hi", 1, 10240, 10);
    pod["spec"]["priority"] = priority;
    return pod;
  }
  bool Exists(const std::string& name) { return api_.Get("pods", "default", name).ok(); }

  fakeapi::FakeApiServer api_;
  std::unique_ptr<k8s::Client> client_;
  std::unique_ptr<SchedulerCache> cache_;
  SchedulerMetrics metrics_;
  std::vector<std::string> events_;
  std::unique_ptr<PreemptionRunner> runner_;
};

TEST_F(PreemptorTest, EvictsTheOneVictimOnTheRightGpuAndReservesItsRoom) {
  EXPECT_EQ(runner_->Run(Hi(), {"n1"}), PreemptionResult::kSucceeded);
  EXPECT_FALSE(Exists("c"));  // Evicted: GPU 1 then has room for 10 GiB.
  for (const char* kept : {"a", "b", "d"}) EXPECT_TRUE(Exists(kept)) << kept;
  EXPECT_TRUE(cache_->HasReservation("default/hi", "uid-default-hi"));
  // Dry run, DisruptionTarget, eviction: in that order.
  std::vector<std::string> calls;
  for (const auto& r : api_.Requests()) {
    if (r.path.find("/pods/c/") == std::string::npos) continue;
    calls.push_back(StrCat(r.method, " ", r.path.substr(r.path.rfind('/') + 1), " ",
                           r.body.find("\"All\"") != std::string::npos ? "dry-run" : ""));
    if (r.method == "PATCH") {
      EXPECT_THAT(r.body, HasSubstr("DisruptionTarget"));
      EXPECT_THAT(r.body, HasSubstr("PreemptionByScheduler"));
    }
  }
  EXPECT_THAT(calls, ::testing::ElementsAre("POST eviction dry-run", "PATCH status ",
                                            "POST eviction "));
  ASSERT_FALSE(events_.empty());
  EXPECT_THAT(events_.back(), HasSubstr("hi Preempting: evicting default/c (priority 0) on node n1"));
  EXPECT_THAT(events_.back(), HasSubstr("GPU-n1-1"));
  // A second attempt for the same pod does nothing: it holds a reservation.
  EXPECT_FALSE(runner_->Enqueue(Hi(), {"n1"}));
  EXPECT_THAT(metrics_.Render(*cache_), HasSubstr("prism_scheduler_preemption_victims_total 1"));
}

TEST_F(PreemptorTest, APdbRefusalAbortsAndNothingIsLost) {
  fakeapi::Fault pdb;
  pdb.method = "POST";
  pdb.path_prefix = "/api/v1/namespaces/default/pods/c/eviction";
  pdb.count = -1;
  pdb.status = 429;
  pdb.message = "Cannot evict pod as it would violate the pod's disruption budget.";
  api_.InjectFault(pdb);
  EXPECT_EQ(runner_->Run(Hi(), {"n1"}), PreemptionResult::kAborted);
  for (const char* kept : {"a", "b", "c", "d"}) EXPECT_TRUE(Exists(kept)) << kept;
  EXPECT_FALSE(cache_->HasReservation("default/hi", "uid-default-hi"));
  EXPECT_EQ(api_.CountRequests("PATCH", "/api/v1/namespaces/default/pods/c/status"), 0);
  ASSERT_FALSE(events_.empty());
  EXPECT_THAT(events_.back(), HasSubstr("PreemptionAborted"));
  EXPECT_THAT(events_.back(), HasSubstr("disruption budget"));
  EXPECT_THAT(events_.back(), HasSubstr("nothing was evicted"));
  EXPECT_THAT(metrics_.Render(*cache_),
              HasSubstr("prism_scheduler_preemptions_total{result=\"aborted\"} 1"));
}

TEST_F(PreemptorTest, NeverAndEqualPriorityPreemptNothing) {
  json never = Hi();
  never["spec"]["preemptionPolicy"] = "Never";
  EXPECT_EQ(runner_->Run(never, {"n1"}), PreemptionResult::kNoCandidate);
  EXPECT_EQ(runner_->Run(Hi(0), {"n1"}), PreemptionResult::kNoCandidate);
  for (const char* kept : {"a", "b", "c", "d"}) EXPECT_TRUE(Exists(kept)) << kept;
  EXPECT_EQ(api_.CountRequests("POST", "/api/v1/namespaces/default/pods/c/eviction"), 0);
}

}  // namespace
}  // namespace prism::extender
