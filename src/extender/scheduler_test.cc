#include "extender/scheduler.h"

#include <memory>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "config/annotations.h"
#include "config/device_config_yaml.h"
#include "core/topo/test_topologies.h"
#include "extender/test_util.h"
#include "k8s/objects.h"
#include "k8s/test_util.h"
#include "testing/fake_apiserver/fake_apiserver.h"

namespace prism::extender {
namespace {

using json = nlohmann::json;
using k8s::testing_util::WaitUntil;
using testing::GpuPod;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::NodeJson;
using testing::TestGpu;

std::string Args(const json& pod, const std::vector<std::string>& nodes) {
  return json{{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", nodes}}.dump();
}

fakeapi::Fault MakeFault(std::string method, std::string path, int count, int status) {
  fakeapi::Fault f;
  f.method = std::move(method);
  f.path_prefix = std::move(path);
  f.count = count;
  f.status = status;
  return f;
}

std::string BindArgs(const json& pod, const std::string& node) {
  return json{{"PodName", pod["metadata"]["name"]},
              {"PodNamespace", pod["metadata"]["namespace"]},
              {"PodUID", pod["metadata"]["uid"]},
              {"Node", node}}
      .dump();
}

class SchedulerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    api_ = std::make_unique<fakeapi::FakeApiServer>();
    ASSERT_OK(api_->Start());
    k8s::ClusterConfig config;
    config.server = api_->url();
    k8s::ClientOptions options;
    options.qps = 0;
    options.retry_backoff =
        k8s::BackoffOptions{absl::Milliseconds(5), absl::Milliseconds(50), 2, 0};
    ASSERT_OK_AND_ASSIGN(client_, k8s::Client::Create(config, options));
  }

  SchedulerOptions Options() {
    SchedulerOptions o;
    o.initial_config = config::DefaultDeviceConfig();
    o.cache.engine = DefaultEngineOptions();
    o.tick = absl::Milliseconds(20);
    o.cache.problem_grace = absl::Milliseconds(100);
    return o;
  }

  std::unique_ptr<Scheduler> Start(SchedulerOptions options) {
    auto s = std::make_unique<Scheduler>(std::move(options), client_.get());
    EXPECT_OK(s->Start());
    EXPECT_TRUE(s->WaitForSync(absl::Seconds(10)));
    started_ = s.get();
    return s;
  }

  json CreatePod(const json& pod) {
    absl::StatusOr<json> created = api_->Create("pods", pod);
    EXPECT_TRUE(created.ok()) << created.status();
    // Filter assumes only pods the informer knows: wait until the running scheduler sees it.
    if (created.ok() && started_ != nullptr) {
      const std::string ns = (*created)["metadata"]["namespace"];
      const std::string name = (*created)["metadata"]["name"];
      EXPECT_TRUE(WaitUntil([&] { return started_->InformerPod(ns, name).has_value(); }));
    }
    return *created;
  }

  void CreateNode(const json& node) { ASSERT_OK(api_->Create("nodes", node)); }

  // Filter, then bind on the assumed node; the bind reply's error ("" on success).
  std::string Schedule(Scheduler& s, const json& pod, const std::vector<std::string>& nodes) {
    HttpReply f = s.Filter(Args(pod, nodes));
    EXPECT_EQ(f.status, 200) << f.body;
    json r = json::parse(f.body);
    if (r["NodeNames"].empty()) return "no feasible node";
    HttpReply b = s.Bind(BindArgs(pod, r["NodeNames"][0]));
    return json::parse(b.body)["Error"];
  }

  std::vector<json> Events(const std::string& reason) {
    std::vector<json> out;
    for (const json& e : api_->List("events")) {
      if (e.value("reason", "") == reason) out.push_back(e);
    }
    return out;
  }

  HttpReply PreemptForHiOverLow(std::unique_ptr<Scheduler>* s, json* low, json* hi,
                                bool create_hi);

  std::unique_ptr<fakeapi::FakeApiServer> api_;
  std::unique_ptr<k8s::Client> client_;
  Scheduler* started_ = nullptr;  // The last one Start() returned (tests keep it alive).
};

TEST_F(SchedulerServiceTest, FilterPrioritizeBindAnnotatesThePod) {
  CreateNode(NodeJson("n1", {TestGpu{}, TestGpu{}}));
  CreateNode(NodeJson("n2", {TestGpu{}}));
  CreateNode(NodeJson("cpu", {}));
  auto s = Start(Options());
  json pod = CreatePod(GpuPod("p", 1, 10000, 20));
  HttpReply f = s->Filter(Args(pod, {"n1", "n2", "cpu"}));
  ASSERT_EQ(f.status, 200);
  json fr = json::parse(f.body);
  EXPECT_EQ(fr["NodeNames"], json({"n1", "n2"}));
  EXPECT_THAT(fr["FailedAndUnresolvableNodes"]["cpu"].get<std::string>(),
              HasSubstr("no GPU inventory"));
  EXPECT_EQ(fr["Error"], "");
  HttpReply p = s->Prioritize(Args(pod, {"n1", "n2"}));
  ASSERT_EQ(p.status, 200);
  json pr = json::parse(p.body);
  ASSERT_EQ(pr.size(), 2u);
  std::string best = pr[0]["Score"] >= pr[1]["Score"] ? pr[0]["Host"] : pr[1]["Host"];
  EXPECT_EQ(std::max(pr[0]["Score"].get<int>(), pr[1]["Score"].get<int>()), 10);
  HttpReply b = s->Bind(BindArgs(pod, best));
  ASSERT_EQ(b.status, 200);
  EXPECT_EQ(json::parse(b.body)["Error"], "");
  ASSERT_OK_AND_ASSIGN(json bound, api_->Get("pods", "default", "p"));
  EXPECT_EQ(bound["spec"]["nodeName"], best);
  const json& ann = bound["metadata"]["annotations"];
  ASSERT_TRUE(ann.contains(config::kPrismDecisionAnnotation));
  EXPECT_EQ(ann[config::kHamiNodeAnnotation], best);
  json decision = json::parse(ann[config::kPrismDecisionAnnotation].get<std::string>());
  EXPECT_EQ(decision["node"], best);
  EXPECT_EQ(decision["containers"][0]["devices"][0]["memoryMiB"], 10000);
  // One API write for the whole placement: the binding.
  EXPECT_EQ(api_->CountRequests("PATCH", "/api/v1/namespaces/default/pods"), 0);
  EXPECT_TRUE(WaitUntil([&] { return s->cache().EntryState("default/p") == "bound"; }));
}

// Issue 13 #4: Filter used to assume any pod it was sent, so invented pods reserved the
// cluster's GPUs for the assume TTL. Only pods the informer knows are assumed.
// docs/topology.md, "Placement": the wiring in the node agent's inventory annotation reaches the
// engine through the extender's node decoding.
TEST_F(SchedulerServiceTest, MultiGpuPodsGetWellConnectedGpusFromTheInventorysTopology) {
  auto node = [](const std::string& name, prism::topo::NodeTopology topology) {
    deviceplugin::NodeInventory inv = testing::Inventory(name, std::vector<TestGpu>(8));
    inv.topology = std::move(topology);
    json n = NodeJson(name, {});
    n["metadata"]["annotations"][deviceplugin::kInventoryAnnotation] =
        deviceplugin::EncodeInventory(inv);
    return n;
  };
  CreateNode(node("dgx", prism::topo::testing::Dgx1()));
  CreateNode(node("pcie", prism::topo::testing::Pcie8()));
  auto s = Start(Options());
  // Half of DGX quad 0-3 taken: a 4-GPU pod gets quad 4-7 (without topology: 0, 1, 4, 5).
  json pinned =
      CreatePod(GpuPod("pinned", 2, 0, 0, {{"nvidia.com/use-gpuuuid", "GPU-dgx-2,GPU-dgx-3"}}));
  ASSERT_EQ(Schedule(*s, pinned, {"dgx"}), "") << s->Filter(Args(pinned, {"dgx"})).body;
  json train = CreatePod(GpuPod("train", 4, 0));
  ASSERT_EQ(Schedule(*s, train, {"dgx"}), "");
  ASSERT_OK_AND_ASSIGN(json bound, api_->Get("pods", "default", "train"));
  json decision = json::parse(
      bound["metadata"]["annotations"][config::kPrismDecisionAnnotation].get<std::string>());
  std::set<int> gpus;
  for (const json& d : decision["containers"][0]["devices"]) gpus.insert(d["index"].get<int>());
  EXPECT_EQ(gpus, (std::set<int>{4, 5, 6, 7})) << decision.dump();
  // NVLink required: the PCIe node is refused with the reason, per GPU.
  json needs = CreatePod(GpuPod("needs-nvlink", 2, 0, 0, {{"prism.io/gpu-topology", "required"}}));
  HttpReply f = s->Filter(Args(needs, {"pcie"}));
  ASSERT_EQ(f.status, 200) << f.body;
  json fr = json::parse(f.body);
  EXPECT_TRUE(fr["NodeNames"].empty()) << f.body;
  EXPECT_THAT(fr.dump(), HasSubstr("8/8 TopologyNotFit")) << f.body;
}

TEST_F(SchedulerServiceTest, InventedPodsAreNotAssumed) {
  CreateNode(NodeJson("n1", {TestGpu{}}));
  auto s = Start(Options());
  for (int i = 0; i < 20; ++i) {
    json ghost = GpuPod(StrCat("ghost-", i), 1, 40000);
    HttpReply f = s->Filter(Args(ghost, {"n1"}));
    ASSERT_EQ(f.status, 200);
    EXPECT_EQ(json::parse(f.body)["NodeNames"], json({"n1"}));
  }
  // A known pod with a different UID is not the pod the informer knows either.
  json real = CreatePod(GpuPod("real", 1, 40000));
  ASSERT_TRUE(WaitUntil([&] { return s->InformerPod("default", "real").has_value(); }));
  json impostor = real;
  impostor["metadata"]["uid"] = "not-the-real-uid";
  s->Filter(Args(impostor, {"n1"}));
  EXPECT_EQ(s->cache().stats().pods_by_state["assumed"], 0);
  EXPECT_EQ(s->cache().EntryState("default/real"), "");
  // The real pod still finds the GPU free, and is assumed.
  json fr = json::parse(s->Filter(Args(real, {"n1"})).body);
  EXPECT_EQ(fr["NodeNames"], json({"n1"}));
  EXPECT_EQ(s->cache().EntryState("default/real"), "assumed");
  EXPECT_EQ(Schedule(*s, real, {"n1"}), "");
}

TEST_F(SchedulerServiceTest, UnschedulablePodGetsAnEventWithPerNodeReasons) {
  CreateNode(NodeJson("n1", {TestGpu{}}));
  CreateNode(NodeJson("n2", {TestGpu{"A100-SXM4-40GB", 8000}}));
  auto s = Start(Options());
  json pod = CreatePod(GpuPod("big", 1, 60000));
  json fr = json::parse(s->Filter(Args(pod, {"n1", "n2"})).body);
  EXPECT_TRUE(fr["NodeNames"].is_array());
  EXPECT_TRUE(fr["NodeNames"].empty());
  EXPECT_EQ(fr["FailedAndUnresolvableNodes"]["n1"], "1/1 CardInsufficientMemory");
  ASSERT_TRUE(WaitUntil([&] { return !Events("FilteringFailed").empty(); }));
  const std::string message = Events("FilteringFailed")[0]["message"];
  EXPECT_THAT(message, HasSubstr("0/2 nodes are available: 2 CardInsufficientMemory"));
  EXPECT_THAT(message, HasSubstr("n2: 1/1 CardInsufficientMemory"));
  EXPECT_EQ(Events("FilteringFailed")[0]["involvedObject"]["name"], "big");
}

TEST_F(SchedulerServiceTest, BadInputGetsClearErrorsAndTheSchedulerKeepsServing) {
  CreateNode(NodeJson("n1", {TestGpu{}}));
  auto s = Start(Options());
  HttpReply r = s->Filter("{oops");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(json::parse(r.body)["Error"].get<std::string>(), HasSubstr("not valid JSON"));
  r = s->Prioritize(R"({"NodeNames":["n1"]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(json::parse(r.body)["Error"].get<std::string>(), HasSubstr("Pod"));
  r = s->Bind("[]");
  EXPECT_EQ(r.status, 400);
  r = s->Bind(R"({"PodName":"ghost","PodNamespace":"default","PodUID":"x","Node":"n1"})");
  EXPECT_EQ(r.status, 200);
  EXPECT_THAT(json::parse(r.body)["Error"].get<std::string>(), HasSubstr("not found"));
  // A pod whose resources are garbage: every node fails with the reason, no crash.
  json broken = GpuPod("broken", 1, 1000);
  broken["spec"]["containers"][0]["resources"] = "all of them";
  json fr = json::parse(s->Filter(Args(broken, {"n1"})).body);
  EXPECT_THAT(fr["FailedAndUnresolvableNodes"]["n1"].get<std::string>(), HasSubstr("invalid pod"));
  json invalid = GpuPod("invalid", 1, 1000, 0, {{"nvidia.com/vgpu-mode", "mps"}});
  fr = json::parse(s->Filter(Args(invalid, {"n1"})).body);
  EXPECT_THAT(fr["FailedAndUnresolvableNodes"]["n1"].get<std::string>(), HasSubstr("vgpu-mode"));
  // Still serving.
  json pod = CreatePod(GpuPod("ok", 1, 1000));
  EXPECT_EQ(Schedule(*s, pod, {"n1"}), "");
}

// n1 with one T4 that `low` (priority 1, 30,000 MiB) holds, and the preempt verb asked for
// `hi` (priority 1000, as large) on n1 until it answers with a victim there: until the informer
// shows `low` bound, its priority is unknown and it is never a victim.
HttpReply SchedulerServiceTest::PreemptForHiOverLow(std::unique_ptr<Scheduler>* s, json* low,
                                                    json* hi, bool create_hi) {
  CreateNode(NodeJson("n1", {TestGpu{}}));
  *s = Start(Options());
  *low = GpuPod("low", 1, 30000);
  (*low)["spec"]["priority"] = 1;
  *low = CreatePod(*low);
  EXPECT_EQ(Schedule(**s, *low, {"n1"}), "");
  *hi = GpuPod("hi", 1, 30000);
  (*hi)["spec"]["priority"] = 1000;
  if (create_hi) *hi = CreatePod(*hi);
  const std::string args =
      json{{"Pod", *hi}, {"NodeNameToMetaVictims", {{"n1", {{"Pods", json::array()}}}}}}.dump();
  HttpReply r;
  EXPECT_TRUE(WaitUntil([&] {
    r = (*s)->Preempt(args);
    return r.status == 200 && json::parse(r.body)["NodeNameToMetaVictims"].contains("n1");
  })) << r.body;
  return r;
}

TEST_F(SchedulerServiceTest, PreemptVerbNamesTheVictimsByUid) {
  std::unique_ptr<Scheduler> s;
  json low, hi;
  HttpReply r = PreemptForHiOverLow(&s, &low, &hi, /*create_hi=*/false);
  EXPECT_EQ(json::parse(r.body),
            json::parse(StrCat(R"({"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":")",
                               k8s::Uid(low), R"("}],"NumPDBViolations":0}}})")));
  // Bad input: 400 with the reason, and the scheduler keeps serving.
  r = s->Preempt("{oops");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(json::parse(r.body)["Error"].get<std::string>(), HasSubstr("not valid JSON"));
  hi["spec"]["priority"] = 0;
  r = s->Preempt(json{{"Pod", hi},
                      {"NodeNameToMetaVictims",
                       {{"n1", {{"Pods", json::array({{{"UID", k8s::Uid(low)}}})}}}}}}
                     .dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(json::parse(r.body)["Error"].get<std::string>(), HasSubstr("not below"));
  EXPECT_EQ(s->cache().EntryState("default/low"), "bound");
}

// Path A end to end through the informer: the verb's answer is remembered, kube-scheduler's
// status patch (nominatedNodeName) reserves the node, and once the victim is gone its GPU is held
// for the preemptor, not given to a lower-priority pod.
TEST_F(SchedulerServiceTest, ANominationAfterThePreemptVerbHoldsTheFreedGpu) {
  std::unique_ptr<Scheduler> s;
  json low, hi;
  PreemptForHiOverLow(&s, &low, &hi, /*create_hi=*/true);
  ASSERT_FALSE(HasFailure());
  EXPECT_FALSE(s->cache().HasReservation("default/hi", k8s::Uid(hi)));
  // kube-scheduler deletes the victim and nominates hi (handleSchedulingFailure's status patch).
  ASSERT_OK(client_->Patch(k8s::kPods, "default", "hi", k8s::PatchType::kMerge,
                          json{{"status", {{"nominatedNodeName", "n1"}}}}, "status")
                .status());
  ASSERT_TRUE(WaitUntil([&] { return s->cache().HasReservation("default/hi", k8s::Uid(hi)); }));
  ASSERT_OK(api_->Delete("pods", "default", "low"));
  ASSERT_TRUE(WaitUntil([&] { return s->cache().EntryState("default/hi") == "assumed"; }));
  json lo = GpuPod("lo", 1, 30000);
  lo["spec"]["priority"] = 500;
  lo = CreatePod(lo);
  HttpReply f = s->Filter(Args(lo, {"n1"}));
  EXPECT_TRUE(json::parse(f.body)["NodeNames"].empty()) << f.body;
  // The pod is told which GPU waits for it.
  ASSERT_TRUE(WaitUntil([&] { return !Events("Preempting").empty(); }));
  const json event = Events("Preempting")[0];
  EXPECT_EQ(event["involvedObject"].value("name", ""), "hi");
  EXPECT_THAT(event.value("message", ""), HasSubstr("on node n1 for this pod: it gets GPU-"));
  EXPECT_EQ(Schedule(*s, hi, {"n1"}), "");
  EXPECT_EQ(s->cache().reservations_nominated(), 1);
}

TEST_F(SchedulerServiceTest, ApiServerErrorOnBindReleasesTheCharge) {
  CreateNode(NodeJson("n1", {TestGpu{}}));
  auto s = Start(Options());
  json a = CreatePod(GpuPod("a", 1, 40000));
  fakeapi::Fault forbid = MakeFault("POST", "/api/v1/namespaces/default/pods/a/binding", 1, 403);
  forbid.message = "forbidden by test";
  api_->InjectFault(forbid);
  std::string error = Schedule(*s, a, {"n1"});
  EXPECT_THAT(error, HasSubstr("forbidden by test"));
  ASSERT_OK_AND_ASSIGN(json still, api_->Get("pods", "default", "a"));
  EXPECT_FALSE(still["spec"].contains("nodeName"));
  // The whole GPU is free again: another pod can have it.
  json b = CreatePod(GpuPod("b", 1, 40000));
  EXPECT_EQ(Schedule(*s, b, {"n1"}), "");
  EXPECT_TRUE(WaitUntil([&] { return !Events("BindingFailed").empty(); }));
}

TEST_F(SchedulerServiceTest, UnknownBindOutcomeKeepsTheChargeUntilSettled) {
  CreateNode(NodeJson("n1", {TestGpu{}}));
  SchedulerOptions o = Options();
  o.cache.uncertain_ttl = absl::Milliseconds(100);
  auto s = Start(o);
  json a = CreatePod(GpuPod("a", 1, 40000));
  ASSERT_TRUE(WaitUntil([&] { return s->InformerPod("default", "a").has_value(); }));
  // A gateway timeout on the binding, and the pod cannot be read back: nobody knows.
  api_->InjectFault(MakeFault("POST", "/api/v1/namespaces/default/pods/a/binding", 1, 504));
  api_->InjectFault(MakeFault("GET", "/api/v1/namespaces/default/pods/a", -1, 500));
  EXPECT_THAT(Schedule(*s, a, {"n1"}), HasSubstr("outcome unknown"));
  EXPECT_EQ(s->cache().EntryState("default/a"), "uncertain");
  json b = CreatePod(GpuPod("b", 1, 40000));
  json fr = json::parse(s->Filter(Args(b, {"n1"})).body);
  EXPECT_TRUE(fr["NodeNames"].empty());  // Still charged: it may be bound.
  api_->ClearFaults();
  // The tick reads the pod, sees it unbound and frees the GPU.
  ASSERT_TRUE(WaitUntil([&] { return s->cache().EntryState("default/a").empty(); }));
  EXPECT_EQ(Schedule(*s, b, {"n1"}), "");
}

TEST_F(SchedulerServiceTest, SecondBindOfABoundPodIsRefused) {
  CreateNode(NodeJson("n1", {TestGpu{}}));
  auto s = Start(Options());
  json a = CreatePod(GpuPod("a", 1, 1000));
  ASSERT_EQ(Schedule(*s, a, {"n1"}), "");
  // Refused at once (the pod's Filter result was used up by the bind, or the informer has the
  // pod bound already), and after a new Filter (a retry racing the informer) too.
  std::string again = json::parse(s->Bind(BindArgs(a, "n1")).body)["Error"];
  EXPECT_THAT(again, ::testing::AnyOf(HasSubstr("not one this scheduler's Filter passed"),
                                      HasSubstr("already")));
  ASSERT_TRUE(WaitUntil([&] {
    std::optional<json> seen = s->InformerPod("default", "a");
    return seen.has_value() && (*seen)["spec"].contains("nodeName");
  }));
  s->Filter(Args(a, {"n1"}));
  again = json::parse(s->Bind(BindArgs(a, "n1")).body)["Error"];
  EXPECT_THAT(again, HasSubstr("already"));
}

// Issue 39 #1: /bind uses the scheduler's cluster-wide pods/binding right, so it binds only
// Prism's pods (schedulerName), only to a node Prism's own Filter passed for that pod, and posts no
// event on a pod it refuses.
TEST_F(SchedulerServiceTest, BindRefusesForeignPodsAndNodesFilterDidNotPass) {
  CreateNode(NodeJson("n1", {TestGpu{}}));
  CreateNode(NodeJson("n2", {TestGpu{}}));
  auto s = Start(Options());
  json victim = GpuPod("secret-holder", 0, 0);
  victim["metadata"]["namespace"] = "victim";
  victim["metadata"]["uid"] = "uid-victim";
  victim["spec"]["schedulerName"] = "default-scheduler";
  victim = CreatePod(victim);
  std::string error =
      json::parse(s->Bind(BindArgs(victim, "attacker-node")).body)["Error"].get<std::string>();
  EXPECT_THAT(error, HasSubstr("schedulerName is default-scheduler"));
  // Even after a Filter that passed the node (a Filter of a foreign pod changes nothing).
  s->Filter(Args(victim, {"n1"}));
  error = json::parse(s->Bind(BindArgs(victim, "n1")).body)["Error"].get<std::string>();
  EXPECT_THAT(error, HasSubstr("schedulerName"));
  ASSERT_OK_AND_ASSIGN(json still, api_->Get("pods", "victim", "secret-holder"));
  EXPECT_FALSE(still["spec"].contains("nodeName"));

  // Prism's own pod: never filtered, then filtered onto n1 only.
  json pod = CreatePod(GpuPod("p", 1, 1000));
  error = json::parse(s->Bind(BindArgs(pod, "n1")).body)["Error"].get<std::string>();
  EXPECT_THAT(error, HasSubstr("not one this scheduler's Filter passed"));
  json fr = json::parse(s->Filter(Args(pod, {"n1"})).body);
  ASSERT_EQ(fr["NodeNames"], json({"n1"}));
  error = json::parse(s->Bind(BindArgs(pod, "n2")).body)["Error"].get<std::string>();
  EXPECT_THAT(error, HasSubstr("not one this scheduler's Filter passed"));
  EXPECT_EQ(json::parse(s->Bind(BindArgs(pod, "n1")).body)["Error"], "");
  // Forgotten once bound.
  EXPECT_FALSE(s->filter_memory().Passed(pod["metadata"]["uid"].get<std::string>(), "n1",
                                         absl::Now()));
  EXPECT_TRUE(Events("BindingFailed").empty());
}

// Events carry caller-chosen text only as bounded, escaped names, and only about the pod the
// informer has: a request cannot pick the object or write the text.
TEST_F(SchedulerServiceTest, FilterEventsNameOnlyKnownPodsAndEscapeNodeNames) {
  CreateNode(NodeJson("n1", {TestGpu{}}));
  auto s = Start(Options());
  json invented = GpuPod("invented", 1, 60000);
  invented["metadata"]["namespace"] = "victim";
  s->Filter(Args(invented, {"n1"}));
  json big = CreatePod(GpuPod("big", 1, 60000));
  const std::string forged = "n\nWarning: pwned " + std::string(200, 'x');
  HttpReply fr = s->Filter(Args(big, {"n1", forged}));
  EXPECT_EQ(json::parse(fr.body)["NodeNames"], json::array()) << fr.body;
  ASSERT_TRUE(WaitUntil([&] { return !Events("FilteringFailed").empty(); }));
  absl::SleepFor(absl::Milliseconds(100));
  std::vector<json> events = Events("FilteringFailed");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["involvedObject"]["name"], "big");
  const std::string message = events[0]["message"];
  EXPECT_EQ(message.find('\n'), std::string::npos);
  EXPECT_THAT(message, HasSubstr("n\\x0aWarning: pwned xxx"));
  EXPECT_EQ(message.find(std::string(100, 'x')), std::string::npos);
}

TEST_F(SchedulerServiceTest, RecreatedPodIsNotBoundWithTheOldUid) {
  CreateNode(NodeJson("n1", {TestGpu{}}));
  auto s = Start(Options());
  json old_pod = CreatePod(GpuPod("p", 1, 1000));
  ASSERT_OK(api_->Delete("pods", "default", "p"));
  json fresh = CreatePod(GpuPod("p", 1, 1000));
  ASSERT_NE(fresh["metadata"]["uid"], old_pod["metadata"]["uid"]);
  ASSERT_TRUE(WaitUntil([&] {
    std::optional<json> seen = s->InformerPod("default", "p");
    return seen.has_value() && (*seen)["metadata"]["uid"] == fresh["metadata"]["uid"];
  }));
  std::string error = json::parse(s->Bind(BindArgs(old_pod, "n1")).body)["Error"];
  EXPECT_THAT(error, HasSubstr("recreated"));
}

TEST_F(SchedulerServiceTest, RestartedSchedulerRebuildsFromAnnotations) {
  for (int i = 0; i < 3; ++i) CreateNode(NodeJson(StrCat("n", i), {TestGpu{}, TestGpu{}}));
  const std::vector<std::string> nodes{"n0", "n1", "n2"};
  auto a = Start(Options());
  for (int i = 0; i < 12; ++i) {
    json pod = CreatePod(GpuPod(StrCat("p", i), 1, 20000));
    ASSERT_EQ(Schedule(*a, pod, nodes), "") << i;
  }
  ASSERT_TRUE(WaitUntil([&] { return a->cache().stats().pods_by_state["bound"] == 12; }));
  std::vector<GpuSnapshot> before = a->cache().GpuSnapshots();
  a->Stop();
  a.reset();
  auto b = Start(Options());
  std::vector<GpuSnapshot> after = b->cache().GpuSnapshots();
  ASSERT_EQ(before.size(), after.size());
  for (size_t g = 0; g < before.size(); ++g) {
    EXPECT_EQ(before[g].memory_used_mib, after[g].memory_used_mib) << before[g].uuid;
  }
  // Full: 6 GPUs x 2 pods of 20000 MiB.
  json extra = CreatePod(GpuPod("extra", 1, 20000));
  EXPECT_EQ(Schedule(*b, extra, nodes), "no feasible node");
}

TEST_F(SchedulerServiceTest, OnlyTheLeaderServesTheVerbs) {
  CreateNode(NodeJson("n1", {TestGpu{}}));
  SchedulerOptions o = Options();
  o.leader_elect = true;
  o.lease_namespace = "default";
  o.lease_duration = absl::Milliseconds(800);
  o.renew_deadline = absl::Milliseconds(500);
  o.retry_period = absl::Milliseconds(50);
  o.identity = "one";
  auto one = Start(o);
  ASSERT_TRUE(WaitUntil([&] { return one->IsLeader(); }));
  o.identity = "two";
  auto two = Start(o);
  json pod = CreatePod(GpuPod("p", 1, 1000));
  HttpReply r = two->Filter(Args(pod, {"n1"}));
  EXPECT_EQ(r.status, 503);
  EXPECT_THAT(json::parse(r.body)["Error"].get<std::string>(), HasSubstr("not the leader"));
  EXPECT_EQ(two->Readyz().status, 503);
  EXPECT_EQ(one->Readyz().status, 200);
  // The webhook is served by every replica.
  EXPECT_EQ(two->Admission(R"({"request":{"uid":"u","kind":{"kind":"Pod"},"operation":"CREATE",
                                "object":{"metadata":{"name":"x"},"spec":{"containers":[]}}}})",
                           true)
                .status,
            200);
  one->Stop();  // Releases the lease.
  ASSERT_TRUE(WaitUntil([&] { return two->IsLeader(); }, absl::Seconds(5)));
  EXPECT_EQ(Schedule(*two, pod, {"n1"}), "");
}

TEST_F(SchedulerServiceTest, DeviceConfigHotReloadsFromItsConfigMap) {
  CreateNode(NodeJson("n1", {TestGpu{}}));
  std::string yaml(config::DefaultDeviceConfigYaml());
  json cm{{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", "prism-device-config"}, {"namespace", "kube-system"}}},
          {"data", {{"device-config.yaml", yaml}}}};
  ASSERT_OK(api_->Create("configmaps", cm));
  SchedulerOptions o = Options();
  o.config_map_name = "prism-device-config";
  auto s = Start(o);
  EXPECT_EQ(s->cache().device_config().device_split_count, 10);
  const size_t at = yaml.find("deviceSplitCount: 10");
  ASSERT_NE(at, std::string::npos);
  std::string one = yaml;
  one.replace(at, 20, "deviceSplitCount: 1");
  ASSERT_OK(api_->MergePatch("configmaps", "kube-system", "prism-device-config",
                             json{{"data", {{"device-config.yaml", one}}}}));
  ASSERT_TRUE(WaitUntil([&] { return s->cache().device_config().device_split_count == 1; }));
  json a = CreatePod(GpuPod("a", 1, 1000));
  EXPECT_EQ(Schedule(*s, a, {"n1"}), "");
  json b = CreatePod(GpuPod("b", 1, 1000));
  EXPECT_EQ(Schedule(*s, b, {"n1"}), "no feasible node");
  // An invalid config is refused; the last good one stays.
  ASSERT_OK(api_->MergePatch("configmaps", "kube-system", "prism-device-config",
                             json{{"data", {{"device-config.yaml", "nvidia: [broken"}}}}));
  ASSERT_TRUE(WaitUntil([&] { return !Events("InvalidDeviceConfig").empty(); }));
  EXPECT_EQ(s->cache().device_config().device_split_count, 1);
  EXPECT_THAT(s->Metrics().body,
              HasSubstr(R"(prism_scheduler_config_reloads_total{result="invalid"} 1)"));
}

TEST_F(SchedulerServiceTest, PodWhoseDecisionNoLongerHoldsIsRequeued) {
  CreateNode(NodeJson("n1", {TestGpu{}}));
  auto s = Start(Options());
  json owned = GpuPod("owned", 1, 1000);
  owned["metadata"]["ownerReferences"] = json::array({{{"apiVersion", "apps/v1"},
                                                       {"kind", "ReplicaSet"},
                                                       {"name", "rs"},
                                                       {"uid", "rs-1"},
                                                       {"controller", true}}});
  owned = CreatePod(owned);
  json bare = CreatePod(GpuPod("bare", 1, 1000));
  ASSERT_EQ(Schedule(*s, owned, {"n1"}), "");
  ASSERT_EQ(Schedule(*s, bare, {"n1"}), "");
  // The GPU the decisions name is gone before the pods started.
  json node = NodeJson("n1", {TestGpu{}});
  json inv =
      json::parse(node["metadata"]["annotations"]["prism.io/gpu-inventory"].get<std::string>());
  inv["gpus"][0]["uuid"] = "GPU-new";
  ASSERT_OK(api_->MergePatch(
      "nodes", "", "n1",
      json{{"metadata", {{"annotations", {{"prism.io/gpu-inventory", inv.dump()}}}}}}));
  ASSERT_TRUE(WaitUntil([&] { return !api_->Get("pods", "default", "owned").ok(); }));
  ASSERT_TRUE(WaitUntil([&] { return !Events("DecisionInvalid").empty(); }));
  EXPECT_TRUE(api_->Get("pods", "default", "bare").ok());  // No controller: reported, kept.
  EXPECT_TRUE(WaitUntil([&] { return !Events("Requeued").empty(); }));
  EXPECT_THAT(s->Metrics().body,
              HasSubstr(R"(prism_scheduler_requeues_total{action="deleted"} 1)"));
}

TEST_F(SchedulerServiceTest, MetricsCoverAllocationLatencyAndFailures) {
  CreateNode(NodeJson("n1", {TestGpu{}}));
  auto s = Start(Options());
  json pod = CreatePod(GpuPod("p", 1, 10240, 25));
  ASSERT_EQ(Schedule(*s, pod, {"n1"}), "");
  json big = CreatePod(GpuPod("big", 1, 50000));
  Schedule(*s, big, {"n1"});
  const std::string m = s->Metrics().body;
  EXPECT_THAT(
      m, HasSubstr("prism_gpu_memory_allocated_bytes{device_index=\"0\",device_type=\"A100-SXM4-"
                   "40GB\",device_uuid=\"GPU-n1-0\",mode=\"hami-core\",node=\"n1\"} 10737418240"));
  EXPECT_THAT(m, HasSubstr("prism_gpu_core_allocated_ratio{"));
  EXPECT_THAT(m, HasSubstr("prism_scheduler_request_duration_seconds_bucket{verb=\"filter\""));
  EXPECT_THAT(m, HasSubstr("prism_scheduler_request_duration_seconds_count{verb=\"bind\"} 1"));
  EXPECT_THAT(
      m, HasSubstr("prism_scheduler_filter_rejections_total{reason=\"CardInsufficientMemory\"} 1"));
  EXPECT_THAT(
      m, HasSubstr("prism_scheduler_requests_total{result=\"unschedulable\",verb=\"filter\"} 1"));
  EXPECT_THAT(m, HasSubstr("prism_scheduler_leader 1"));
  EXPECT_THAT(m, HasSubstr("prism_scheduler_nodes{state=\"gpus\"} 1"));
}

// The value of the sample `name` (e.g. "x_count") in a Prometheus text exposition, or -1.
double Sample(const std::string& text, const std::string& name) {
  const std::string prefix = name + " ";
  for (size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at + 1)) {
    if (at == 0 || text[at - 1] == '\n') return std::stod(text.substr(at + prefix.size()));
  }
  return -1;
}

// Issue 16: creation -> bind and creation -> devices ready, on the injected clock.
TEST_F(SchedulerServiceTest, CreationToBindAndToDevicesReadyAreTimedOnce) {
  constexpr char kBind[] = "prism_scheduler_pod_creation_to_bind_seconds";
  constexpr char kReady[] = "prism_scheduler_pod_creation_to_devices_ready_seconds";
  k8s::FakeClock clock;
  SchedulerOptions options = Options();
  options.cache.clock = &clock;
  CreateNode(NodeJson("n1", {TestGpu{}, TestGpu{}}));
  auto s = Start(options);
  // Before any pod: rendered, empty (a dashboard finds the family from the start).
  EXPECT_EQ(Sample(s->Metrics().body, StrCat(kBind, "_count")), 0);
  json pod = CreatePod(GpuPod("p", 1, 8000));
  ASSERT_OK_AND_ASSIGN(
      const absl::Time created,
      k8s::ParseTimestamp(pod["metadata"]["creationTimestamp"].get<std::string>()));
  clock.Set(created + absl::Seconds(3));
  ASSERT_EQ(Schedule(*s, pod, {"n1"}), "");
  std::string m = s->Metrics().body;
  EXPECT_EQ(Sample(m, StrCat(kBind, "_count")), 1);
  EXPECT_DOUBLE_EQ(Sample(m, StrCat(kBind, "_sum")), 3);
  EXPECT_EQ(Sample(m, StrCat(kReady, "_count")), 0);
  // The informer stores an event's object before it runs the handlers (which observe the
  // histogram), and handles events one at a time: once a later change to the pod is in the
  // store, every handler of the earlier one has run.
  int barriers = 0;
  auto handled = [&] {
    const std::string mark = std::to_string(++barriers);
    ASSERT_OK(api_->MergePatch("pods", "default", "p",
                               {{"metadata", {{"annotations", {{"test/barrier", mark}}}}}}));
    ASSERT_TRUE(WaitUntil([&] {
      std::optional<json> seen = s->InformerPod("default", "p");
      return seen.has_value() && k8s::Annotation(*seen, "test/barrier") == mark;
    }));
  };
  // The node agent's status, first without devices (still pending), then with them.
  auto set_status = [&](const json& status) {
    ASSERT_OK(api_->MergePatch(
        "pods", "default", "p",
        {{"metadata", {{"annotations", {{"prism.io/allocation-status", status.dump()}}}}}}));
    handled();
  };
  clock.Set(created + absl::Seconds(5));
  set_status({{"node", "n1"}, {"containers", {{"main", {{"allocations", {"a-1"}}}}}}});
  EXPECT_EQ(Sample(s->Metrics().body, StrCat(kReady, "_count")), 0);
  const json devices = {{{"index", 0},
                         {"uuid", "GPU-n1-0"},
                         {"mode", "hami-core"},
                         {"memoryMiB", 8000},
                         {"cores", 0}}};
  // Review: a status the agent's decoder rejects (here a forged allocation ID; the pod's owner
  // can write the annotation) was read as devices ready by a second, lax reader. It is not
  // progress, and the cache counts it as a decode failure, once.
  const double decode_failures_before =
      Sample(s->Metrics().body, "prism_scheduler_decision_decode_failures");
  clock.Set(created + absl::Seconds(6));
  set_status({{"node", "n1"},
              {"containers", {{"main", {{"allocations", {"../x"}}, {"devices", devices}}}}}});
  m = s->Metrics().body;
  EXPECT_EQ(Sample(m, StrCat(kReady, "_count")), 0) << "a malformed status read as devices ready";
  EXPECT_EQ(Sample(m, "prism_scheduler_decision_decode_failures"), decode_failures_before + 1);
  clock.Set(created + absl::Seconds(8));
  const json ready{{"node", "n1"},
                   {"containers", {{"main", {{"allocations", {"a-1"}}, {"devices", devices}}}}}};
  set_status(ready);
  m = s->Metrics().body;
  EXPECT_EQ(Sample(m, StrCat(kReady, "_count")), 1);
  EXPECT_DOUBLE_EQ(Sample(m, StrCat(kReady, "_sum")), 8);
  // Seen again (the agent rewrites its status, a relist): not observed twice.
  clock.Set(created + absl::Seconds(20));
  json again = ready;
  again["containers"]["main"]["allocations"].push_back("a-2");
  set_status(again);
  EXPECT_EQ(Sample(s->Metrics().body, StrCat(kReady, "_count")), 1);
  // A failed allocation is not "ready", ever.
  json failed_pod = CreatePod(GpuPod("q", 1, 8000));
  ASSERT_EQ(Schedule(*s, failed_pod, {"n1"}), "");
  EXPECT_EQ(Sample(s->Metrics().body, StrCat(kBind, "_count")), 2);
  ASSERT_OK(api_->MergePatch(
      "pods", "default", "q",
      {{"metadata",
        {{"annotations",
          {{"prism.io/allocation-status",
            json{{"node", "n1"}, {"containers", {{"main", {{"error", "no such GPU"}}}}}}.dump()}}}}}}));
  ASSERT_TRUE(WaitUntil([&] {
    std::optional<json> seen = s->InformerPod("default", "q");
    return seen.has_value() && k8s::Annotation(*seen, "prism.io/allocation-status").has_value();
  }));
  handled();  // One informer, one event at a time: q's handlers ran before this change of p.
  EXPECT_EQ(Sample(s->Metrics().body, StrCat(kReady, "_count")), 1);
}

TEST_F(SchedulerServiceTest, NotReadyUntilSynced) {
  Scheduler s(Options(), client_.get());
  EXPECT_EQ(s.Readyz().status, 503);
  EXPECT_EQ(s.Filter(Args(GpuPod("p", 1, 1), {"n1"})).status, 503);
  EXPECT_EQ(s.Healthz().status, 200);
}

}  // namespace
}  // namespace prism::extender
