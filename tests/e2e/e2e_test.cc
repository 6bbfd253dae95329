// End-to-end tests of `prism scheduler`: the fake API server, GPU nodes with inventory
// annotations, the real extender behind its HTTP server, a kube-scheduler stand-in calling it as
// kube-scheduler does, and the node side (kubelet + node agent) simulated per
// docs/allocation-protocol.md. Every test ends with the independent validator: no GPU is ever
// overcommitted.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

#include "base/strings.h"
#include "extender/test_util.h"
#include "k8s/objects.h"
#include "k8s/test_util.h"
#include "tests/e2e/harness/cluster.h"
#include "tests/e2e/harness/driver.h"
#include "tests/e2e/harness/node_sim.h"

namespace prism::e2e {
namespace {

using json = nlohmann::json;
using extender::testing::GpuPod;
using extender::testing::PodJson;
using k8s::testing_util::WaitUntil;
using ::testing::HasSubstr;

class E2eTest : public ::testing::Test {
 protected:
  void StartCluster(ClusterOptions options = {}) {
    cluster_ = std::make_unique<E2eCluster>(options);
    ASSERT_OK(cluster_->Start());
  }

  void StartDriver(DriverOptions options = {}) {
    E2eCluster* c = cluster_.get();
    options.extender_url = [c] { return c->extender_url(); };
    driver_ = std::make_unique<SchedulerDriver>(&cluster_->client(), options);
    driver_->Start();
  }

  void StartNodes(NodeSimOptions options = {}) {
    nodes_ = std::make_unique<NodeSimulator>(&cluster_->client(), options);
    nodes_->Start();
  }

  void TearDown() override {
    if (driver_) driver_->Stop();
    if (nodes_) nodes_->Stop();
    cluster_.reset();
  }

  std::vector<std::string> Submit(const std::vector<json>& pods) {
    std::vector<std::string> keys;
    for (const json& p : pods) {
      absl::StatusOr<std::string> key = cluster_->SubmitPod(p);
      EXPECT_TRUE(key.ok()) << key.status();
      if (key.ok()) keys.push_back(*key);
    }
    return keys;
  }

  void ExpectValid() {
    ValidationReport report = cluster_->Validate();
    EXPECT_TRUE(report.ok()) << report.Summary();
    std::printf("validator: %s\n", report.Summary().c_str());
  }

  std::unique_ptr<E2eCluster> cluster_;
  std::unique_ptr<SchedulerDriver> driver_;
  std::unique_ptr<NodeSimulator> nodes_;
};

json MigPod(const std::string& name, int64_t gpumem) {
  return GpuPod(name, 1, gpumem, 0, {{"nvidia.com/vgpu-mode", "mig"}});
}

TEST_F(E2eTest, PodsAreBoundAnnotatedAndAllocated) {
  StartCluster();
  ASSERT_OK(cluster_->AddNode("slices-0", {TestGpu{}, TestGpu{}}));
  ASSERT_OK(cluster_->AddNode("slices-1", {TestGpu{}, TestGpu{}}));
  ASSERT_OK(cluster_->AddNode("mig-h100", {TestGpu{"H100-SXM5-80GB", 81920, true},
                                           TestGpu{"H100-SXM5-80GB", 81920, true}}));
  ASSERT_OK(cluster_->AddNode("mig-a100", {TestGpu{"A100-SXM4-40GB", 40960, true}}));
  ASSERT_OK(cluster_->AddNode("cpu-only", {}));
  ASSERT_OK(cluster_->StartExtender());
  StartNodes();
  StartDriver();
  std::vector<json> pods;
  for (int i = 0; i < 12; ++i) pods.push_back(GpuPod(StrCat("slice-", i), 1, 6000, 15));
  for (int i = 0; i < 8; ++i) pods.push_back(MigPod(StrCat("mig-", i), i % 2 ? 9000 : 18000));
  pods.push_back(GpuPod("two-gpus", 2, 8000, 20));
  pods.push_back(
      PodJson("default", "with-init",
              {TestContainer("setup", 1, 4000, 10, true), TestContainer("main", 1, 6000, 20)}));
  pods.push_back(PodJson("default", "no-gpu", {TestContainer("web", 0)}));
  const std::vector<std::string> keys = Submit(pods);
  ASSERT_TRUE(driver_->WaitBound(keys, absl::Seconds(60)));
  ASSERT_TRUE(nodes_->WaitAdmitted(keys, absl::Seconds(60)));
  for (const json& pod : cluster_->Pods()) {
    const std::string key = k8s::ObjectKey(pod);
    const std::string node = k8s::PodNodeName(pod);
    if (key == "default/no-gpu") {
      EXPECT_FALSE(k8s::Annotation(pod, "prism.io/decision").has_value());
      continue;
    }
    EXPECT_NE(node, "cpu-only") << key;
    ASSERT_TRUE(k8s::Annotation(pod, "prism.io/decision").has_value()) << key;
    EXPECT_EQ(k8s::Annotation(pod, "hami.io/vgpu-node"), node) << key;
    EXPECT_TRUE(k8s::Annotation(pod, "hami.io/vgpu-devices-allocated").has_value()) << key;
    json decision = json::parse(*k8s::Annotation(pod, "prism.io/decision"));
    const std::string mode = key.find("mig-") != std::string::npos ? "mig" : "hami-core";
    for (const json& c : decision["containers"]) {
      for (const json& d : c["devices"]) EXPECT_EQ(d["mode"], mode) << key;
    }
    EXPECT_EQ(k8s::PodPhase(pod), "Running") << key;
    EXPECT_TRUE(k8s::Annotation(pod, "prism.io/allocation-status").has_value()) << key;
  }
  // One binding per pod and no retries: every bind landed where Filter assumed the pod.
  EXPECT_EQ(driver_->stats().bind_failures, 0);
  EXPECT_EQ(cluster_->api().CountRequests("PATCH", "/api/v1/nodes"), 0);
  EXPECT_TRUE(nodes_->Problems().empty());
  ExpectValid();
}

// The burst HAMi's node lock serializes (one pod per node between bind and Allocate, HAMi
// #1367): 40 identical pods onto one node that has room for exactly 40. Admission is held until
// every pod is bound, so no bind can have waited for an Allocate; the kubelet then admits them in
// reverse order.
TEST_F(E2eTest, FortyIdenticalPodsOnOneNodeBindWithoutWaitingForEachOther) {
  ClusterOptions options;
  // Every API request costs a round trip, longer than a scheduling cycle: binds that did not wait
  // for each other overlap, whatever the machine's speed.
  options.api_latency = absl::Milliseconds(100);
  StartCluster(options);
  ASSERT_OK(cluster_->AddNode("burst", {TestGpu{}, TestGpu{}, TestGpu{}, TestGpu{}}));
  ASSERT_OK(cluster_->StartExtender());
  NodeSimOptions node_options;
  node_options.order = AdmissionOrder::kReverse;
  StartNodes(node_options);
  nodes_->Hold();
  std::vector<json> pods;
  for (int i = 0; i < 40; ++i) pods.push_back(GpuPod(StrCat("burst-", i), 1, 4096, 10));
  const std::vector<std::string> keys = Submit(pods);
  const absl::Time start = absl::Now();
  DriverOptions driver_options;
  driver_options.bind_threads = 16;
  StartDriver(driver_options);
  ASSERT_TRUE(driver_->WaitBound(keys, absl::Seconds(60)));
  const double all_bound_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  // Every pod is bound while the kubelet has admitted none of them (its informer may be a moment
  // behind the binds).
  ASSERT_TRUE(WaitUntil([&] { return nodes_->queued() == 40; }));
  EXPECT_TRUE(nodes_->Admissions().empty());
  nodes_->Release();
  ASSERT_TRUE(nodes_->WaitAdmitted(keys, absl::Seconds(60)));

  const std::map<std::string, PodTimeline> timelines = driver_->Timelines();
  double first_bind = 1e18;
  double last_bind_end = 0;
  double bind_sum = 0;
  for (const std::string& k : keys) {
    const PodTimeline& t = timelines.at(k);
    first_bind = std::min(first_bind, t.bind_start);
    last_bind_end = std::max(last_bind_end, t.bind_end);
    bind_sum += t.bind_end - t.bind_start;
  }
  const DriverStats stats = driver_->stats();
  std::printf("%s", driver_->TimelineTable(keys).c_str());
  std::printf(
      "40 pods bound in %.1f ms (binds from %.1f to %.1f ms: %.1f ms wall for %.1f ms of bind "
      "calls, at most %d in flight; bind failures %lld); the kubelet admitted none before all "
      "were bound, then all 40 in reverse order\n",
      all_bound_ms, first_bind, last_bind_end, last_bind_end - first_bind, bind_sum,
      stats.max_binds_in_flight, static_cast<long long>(stats.bind_failures));
  EXPECT_GE(stats.max_binds_in_flight, 2);
  // Serialized binds would take their sum; concurrent ones overlap.
  EXPECT_LT(last_bind_end - first_bind, bind_sum / 2);
  EXPECT_EQ(stats.bind_failures, 0);
  // Exactly 10 per GPU (memory 10 x 4096 MiB, cores 10 x 10 %, split count 10).
  std::map<std::string, int> per_gpu;
  for (const json& pod : cluster_->Pods()) {
    json d = json::parse(*k8s::Annotation(pod, "prism.io/decision"));
    ++per_gpu[d["containers"][0]["devices"][0]["uuid"]];
    // What the node reported is what the pod's own decision names.
    json status = json::parse(*k8s::Annotation(pod, "prism.io/allocation-status"));
    EXPECT_EQ(status["containers"]["main"]["devices"], d["containers"][0]["devices"]);
  }
  ASSERT_EQ(per_gpu.size(), 4u);
  for (const auto& [uuid, n] : per_gpu) EXPECT_EQ(n, 10) << uuid;
  ExpectValid();
}

// Exactly as many pods as fit; the extender is killed with binds in flight and a new one starts
// from nothing but the API server. Had it forgotten any bound pod it would double-book a GPU
// (caught by the validator).
TEST_F(E2eTest, SchedulerRestartedMidStreamRebuildsFromAnnotations) {
  StartCluster();
  for (int n = 0; n < 10; ++n) {
    ASSERT_OK(cluster_->AddNode(StrCat("node-", n), {TestGpu{}, TestGpu{}, TestGpu{}, TestGpu{}}));
  }
  ASSERT_OK(cluster_->StartExtender());
  StartNodes();
  std::vector<json> pods;
  for (int i = 0; i < 160; ++i) pods.push_back(GpuPod(StrCat("p-", i), 1, 10240, 25));
  const std::vector<std::string> keys = Submit(pods);
  StartDriver();
  ASSERT_TRUE(WaitUntil([&] {
    int bound = 0;
    for (const json& p : cluster_->Pods()) bound += !k8s::PodNodeName(p).empty();
    return bound >= 60;
  }));
  cluster_->StopExtender();
  const int64_t errors_before = driver_->stats().call_errors;
  ASSERT_TRUE(WaitUntil([&] { return driver_->stats().call_errors > errors_before; }));
  ASSERT_OK(cluster_->StartExtender());
  ASSERT_TRUE(driver_->WaitBound(keys, absl::Seconds(60)));
  ASSERT_TRUE(nodes_->WaitAdmitted(keys, absl::Seconds(60)));
  ASSERT_TRUE(WaitUntil(
      [&] { return cluster_->scheduler()->cache().stats().pods_by_state["bound"] == 160; }));
  // Full: nothing else fits anywhere.
  const std::vector<std::string> extra = Submit({GpuPod("extra", 1, 10240, 25)});
  ASSERT_TRUE(WaitUntil([&] { return driver_->Timelines()["default/extra"].unschedulable > 0; }));
  std::printf("restart: %lld failed extender calls while it was down, %lld bind failures\n",
              static_cast<long long>(driver_->stats().call_errors),
              static_cast<long long>(driver_->stats().bind_failures));
  ExpectValid();
}

// Watches drop and the history is compacted (410 Gone) while pods are deleted: the extender must
// relist and notice the deletes, or the new pods (which need exactly the freed room) cannot fit;
// and it must not lose the pods that stay, or the validator sees a GPU twice booked.
TEST_F(E2eTest, DroppedWatchesAndCompactedHistoryAreRecovered) {
  StartCluster();
  for (int n = 0; n < 8; ++n) ASSERT_OK(cluster_->AddNode(StrCat("n", n), {TestGpu{}, TestGpu{}}));
  ASSERT_OK(cluster_->StartExtender());
  StartNodes();
  StartDriver();
  std::vector<json> first;
  for (int i = 0; i < 32; ++i) first.push_back(GpuPod(StrCat("first-", i), 1, 20480, 50));
  std::vector<std::string> keys = Submit(first);
  ASSERT_TRUE(driver_->WaitBound(keys, absl::Seconds(60)));
  ASSERT_TRUE(nodes_->WaitAdmitted(keys, absl::Seconds(60)));
  // Plain drop: re-watch from the last resourceVersion.
  cluster_->api().DropWatches();
  ASSERT_OK(cluster_->api().Delete("pods", "default", "first-0"));
  // Drop with compaction: the re-watch gets 410 and the informer relists.
  cluster_->api().CompactHistory();
  cluster_->api().DropWatches();
  for (int i = 1; i < 16; ++i) {
    ASSERT_OK(cluster_->api().Delete("pods", "default", StrCat("first-", i)));
  }
  std::vector<json> second;
  for (int i = 0; i < 16; ++i) second.push_back(GpuPod(StrCat("second-", i), 1, 20480, 50));
  const std::vector<std::string> second_keys = Submit(second);
  driver_->Flush();
  ASSERT_TRUE(driver_->WaitBound(second_keys, absl::Seconds(60)))
      << driver_->Timelines()["default/second-0"].last_error;
  ASSERT_TRUE(nodes_->WaitAdmitted(second_keys, absl::Seconds(60)));
  ExpectValid();
  EXPECT_EQ(cluster_->scheduler()->cache().stats().pods_by_state["bound"], 32);
}

// Malformed node annotations, API server errors during binds and malformed extender requests:
// clear errors, nothing corrupted, scheduling goes on.
TEST_F(E2eTest, BadInputNeitherCorruptsNorStopsScheduling) {
  StartCluster();
  for (int n = 0; n < 3; ++n)
    ASSERT_OK(cluster_->AddNode(StrCat("good-", n), {TestGpu{}, TestGpu{}}));
  ASSERT_OK(cluster_->AddNode("broken", {TestGpu{}}));
  ASSERT_OK(cluster_->api().MergePatch(
      "nodes", "", "broken",
      json{{"metadata",
            {{"annotations", {{"prism.io/gpu-inventory", "{\"version\":1,\"gpus\":7}"}}}}}}));
  ASSERT_OK(cluster_->StartExtender());
  StartNodes();
  // The first six binding POSTs fail with 500s; the API server recovers.
  fakeapi::Fault fault;
  fault.method = "POST";
  fault.path_prefix = "/api/v1/namespaces/default/pods/";
  fault.count = 6;
  fault.status = 500;
  fault.message = "etcdserver: request timed out";
  cluster_->api().InjectFault(fault);
  StartDriver();
  std::vector<json> pods;
  for (int i = 0; i < 24; ++i) pods.push_back(GpuPod(StrCat("p-", i), 1, 8192, 20));
  const std::vector<std::string> keys = Submit(pods);
  // Garbage from a misbehaving client while the real traffic goes on.
  httplib::Client raw(cluster_->extender_url());
  for (const char* body : {"{", "[]", "{\"Pod\":7}", "null"}) {
    auto res = raw.Post("/filter", body, "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << body;
    res = raw.Post("/bind", body, "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << body;
  }
  auto res = raw.Post(
      "/bind",
      json{{"PodName", "nobody"}, {"PodNamespace", "default"}, {"PodUID", "x"}, {"Node", "good-0"}}
          .dump(),
      "application/json");
  ASSERT_TRUE(res);
  EXPECT_THAT(json::parse(res->body)["Error"].get<std::string>(), HasSubstr("not found"));
  ASSERT_TRUE(driver_->WaitBound(keys, absl::Seconds(60)));
  ASSERT_TRUE(nodes_->WaitAdmitted(keys, absl::Seconds(60)));
  for (const json& p : cluster_->Pods()) EXPECT_NE(k8s::PodNodeName(p), "broken");
  EXPECT_GE(driver_->stats().bind_failures, 6);
  const std::string metrics = cluster_->scheduler()->Metrics().body;
  EXPECT_THAT(metrics, HasSubstr("prism_scheduler_nodes{state=\"invalid\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("prism_scheduler_bind_failures_total{reason=\"api-error\"}"));
  ExpectValid();
}

// The node agent fails a pod's allocation: the extender drops that pod's charge (it holds no
// device), so the GPU goes to the next pod.
TEST_F(E2eTest, FailedAllocationGivesTheGpuBack) {
  StartCluster();
  ASSERT_OK(cluster_->AddNode("n1", {TestGpu{}}));
  ASSERT_OK(cluster_->StartExtender());
  NodeSimOptions o;
  o.fail_allocation = [](const json& pod) { return k8s::Name(pod) == "doomed"; };
  StartNodes(o);
  StartDriver();
  const std::vector<std::string> doomed = Submit({GpuPod("doomed", 1, 40960)});
  ASSERT_TRUE(driver_->WaitBound(doomed, absl::Seconds(30)));
  ASSERT_TRUE(nodes_->WaitAdmitted(doomed, absl::Seconds(30)));
  const std::vector<std::string> next = Submit({GpuPod("next", 1, 40960)});
  ASSERT_TRUE(driver_->WaitBound(next, absl::Seconds(30)));
  EXPECT_EQ(cluster_->scheduler()->cache().EntryState("default/doomed"), "allocation-failed");
  ExpectValid();
}

}  // namespace
}  // namespace prism::e2e
