// Prism allocating its own DRA devices (dra_allocator.h, docs/dra-design.md §2.4) through the real
// scheduler service against the fake API server: the webhook's gate, the leader's allocation
// (claims' finalizer and status.allocation, then the gate removed), Filter pinning the pod to the
// allocated node, Bind, re-allocation after a deallocation behind Prism's back, deallocation when
// the pod is gone, template claims, and the refusals.
#include "extender/dra_allocator.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "base/strings.h"
#include "config/device_config_yaml.h"
#include "config/dra_names.h"
#include "config/dra_pod.h"
#include "config/dra_share.h"
#include "extender/scheduler.h"
#include "extender/status.h"
#include "extender/test_util.h"
#include "k8s/test_util.h"
#include "testing/fake_apiserver/fake_apiserver.h"

namespace prism::extender {
namespace {

using json = nlohmann::json;
using k8s::testing_util::WaitUntil;
using ::testing::HasSubstr;
using testing::NodeJson;
using testing::TestGpu;

constexpr char kNode[] = "a100-node";
constexpr char kOther[] = "t4-node";

std::string MigSelector(const std::string& profile) {
  return StrCat("device.attributes[\"gpu.prism.io\"].profile == \"", profile, "\"");
}

json ClaimSpec(const std::string& device_class, int count, const std::string& selector = "") {
  json exactly{{"deviceClassName", device_class}, {"count", count}};
  if (!selector.empty()) exactly["selectors"] = json::array({{{"cel", {{"expression", selector}}}}});
  return json{{"devices", {{"requests", json::array({{{"name", "gpus"}, {"exactly", exactly}}})}}}};
}

json Claim(const std::string& name, const json& spec) {
  return json{{"apiVersion", "resource.k8s.io/v1"},
              {"kind", "ResourceClaim"},
              {"metadata", {{"name", name}, {"namespace", "default"}}},
              {"spec", spec}};
}

// A pod using `claim` (by name) or, with `from_template`, a claim made from that template.
json DraPod(const std::string& name, const std::string& claim, bool from_template = false) {
  json ref{{"name", "gpu"}};
  ref[from_template ? "resourceClaimTemplateName" : "resourceClaimName"] = claim;
  return json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", "default"}}},
              {"spec",
               {{"resourceClaims", json::array({ref})},
                {"containers",
                 json::array({{{"name", "main"},
                               {"image", "cuda"},
                               {"resources",
                                {{"requests", {{"cpu", "1"}}},
                                 {"claims", json::array({{{"name", "gpu"}}})}}}}})}}},
              {"status", {{"phase", "Pending"}}}};
}

// Prism's node agent publishes one pool per node; the allocator needs the GPUs' minors from it,
// and whether a GPU is published as shared (with consumable capacity on, as examples/dra runs it).
json Slice(const std::string& node, const std::string& uuid, bool mig, bool shared = true) {
  json device{{"name", mig ? "gpu-0-mig-1g5gb-19-0" : "gpu-0"}};
  device["attributes"][mig ? "parentUUID" : "uuid"] = {{"string", uuid}};
  if (!mig && shared) device["allowMultipleAllocations"] = true;
  return json{{"apiVersion", "resource.k8s.io/v1"},
              {"kind", "ResourceSlice"},
              {"metadata", {{"name", StrCat(node, "-gpu.prism.io-0")}}},
              {"spec",
               {{"driver", config::kDraDriverName},
                {"nodeName", node},
                {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}},
                {"devices", json::array({device})}}}};
}

class DraAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    api_ = std::make_unique<fakeapi::FakeApiServer>();
    ASSERT_OK(api_->Start());
    k8s::ClusterConfig config;
    config.server = api_->url();
    k8s::ClientOptions options;
    options.qps = 0;
    options.retry_backoff = k8s::BackoffOptions{absl::Milliseconds(5), absl::Milliseconds(50), 2, 0};
    ASSERT_OK_AND_ASSIGN(client_, k8s::Client::Create(config, options));
    // The seed's node: an A100-PCIE-40GB in MIG mode with HAMi's geometries; and a T4.
    ASSERT_OK(api_->Create("nodes", NodeJson(kNode, {TestGpu("A100-PCIE-40GB", 40960, true)})));
    ASSERT_OK(api_->Create("nodes", NodeJson(kOther, {TestGpu("Tesla T4", 15360, false)})));
    ASSERT_OK(api_->Create("resourceslices", Slice(kNode, StrCat("GPU-", kNode, "-0"), true)));
    ASSERT_OK(api_->Create("resourceslices", Slice(kOther, StrCat("GPU-", kOther, "-0"), false)));
    SchedulerOptions o = DraOptions();
    o.tick = absl::Milliseconds(20);
    o.dra_options.retry_interval = absl::Milliseconds(50);
    scheduler_ = std::make_unique<Scheduler>(std::move(o), client_.get());
    ASSERT_OK(scheduler_->Start());
    ASSERT_TRUE(scheduler_->WaitForSync(absl::Seconds(10)));
  }

  // A scheduler with DRA on, the device config and engine as shipped.
  static SchedulerOptions DraOptions() {
    SchedulerOptions o;
    o.initial_config = config::DefaultDeviceConfig();
    o.cache.engine = DefaultEngineOptions();
    o.dra = true;
    return o;
  }

  // The mutating webhook on CREATE, its patch applied, then the pod created.
  json Submit(json pod) {
    json review{{"apiVersion", "admission.k8s.io/v1"},
                {"kind", "AdmissionReview"},
                {"request",
                 {{"uid", "r1"},
                  {"operation", "CREATE"},
                  {"namespace", "default"},
                  {"userInfo", {{"username", "alice"}}},
                  {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
                  {"object", pod}}}};
    HttpReply reply = scheduler_->Admission(review.dump(), /*mutate=*/true);
    EXPECT_EQ(reply.status, 200) << reply.body;
    const json answer = json::parse(reply.body);
    EXPECT_TRUE(answer["response"].value("allowed", false)) << reply.body;
    if (answer["response"].contains("patch")) {
      std::string patch;
      EXPECT_TRUE(absl::Base64Unescape(answer["response"]["patch"].get<std::string>(), &patch));
      pod = pod.patch(json::parse(patch));
    }
    absl::StatusOr<json> created = api_->Create("pods", pod);
    EXPECT_TRUE(created.ok()) << created.status();
    return created.ok() ? *created : json();
  }

  json Get(const std::string& resource, const std::string& name) {
    absl::StatusOr<json> got = api_->Get(resource, "default", name);
    return got.ok() ? *got : json();
  }

  bool Allocated(const std::string& claim) {
    const json c = Get("resourceclaims", claim);
    return c.is_object() && c.contains("status") && c["status"].contains("allocation");
  }

  bool Gated(const std::string& pod) { return config::HasDraSchedulingGate(Get("pods", pod)); }

  std::vector<std::string> Devices(const std::string& claim) {
    std::vector<std::string> out;
    // Held in a local: a range-for over a temporary's member would read freed memory.
    const json c = Get("resourceclaims", claim);
    for (const json& r : c["status"]["allocation"]["devices"]["results"]) out.push_back(r["device"]);
    return out;
  }

  // kube-scheduler's stand-in for one pod: Filter over both nodes, then Bind to what passed.
  std::string FilterAndBind(const std::string& pod_name) {
    const json pod = Get("pods", pod_name);
    HttpReply f = scheduler_->Filter(
        json{{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", {kNode, kOther}}}.dump());
    const json r = json::parse(f.body);
    if (r["NodeNames"].empty()) return StrCat("no node: ", r["FailedAndUnresolvableNodes"].dump());
    HttpReply b = scheduler_->Bind(json{{"PodName", pod_name},
                                        {"PodNamespace", "default"},
                                        {"PodUID", pod["metadata"]["uid"]},
                                        {"Node", r["NodeNames"][0]}}
                                       .dump());
    return json::parse(b.body).value("Error", "");
  }

  // The resourceclaim controller's syncPod for `pod`'s claim `pod_claim` from template `tmpl`:
  // the claim `name`, owned by the pod, recorded in the pod's status.resourceClaimStatuses.
  void ClaimFromTemplate(const json& pod, const std::string& pod_claim, const std::string& name,
                         const json& tmpl) {
    json claim = Claim(name, tmpl["spec"]["spec"]);
    claim["metadata"]["ownerReferences"] =
        json::array({{{"apiVersion", "v1"},
                      {"kind", "Pod"},
                      {"name", pod["metadata"]["name"]},
                      {"uid", pod["metadata"]["uid"]},
                      {"controller", true}}});
    ASSERT_OK(api_->Create("resourceclaims", claim));
    json stored = Get("pods", pod["metadata"]["name"].get<std::string>());
    stored["status"]["resourceClaimStatuses"] =
        json::array({{{"name", pod_claim}, {"resourceClaimName", name}}});
    ASSERT_OK(client_->Update(k8s::kPods, "default", stored, "status").status());
  }

  std::vector<json> Events(const std::string& reason) {
    std::vector<json> out;
    for (const json& e : api_->List("events")) {
      if (e.value("reason", "") == reason) out.push_back(e);
    }
    return out;
  }

  std::unique_ptr<fakeapi::FakeApiServer> api_;
  std::unique_ptr<k8s::Client> client_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(DraAllocatorTest, SeedExampleIsAllocatedByPrismAndTheNextPodMovesNothing) {
  ASSERT_OK(api_->Create("resourceclaims",
                         Claim("seed", ClaimSpec(config::kDraMigClass, 2, MigSelector("2g.10gb")))));
  ASSERT_TRUE(WaitUntil([&] { return scheduler_->dra()->NeedsGate(DraPod("x", "seed")); }));
  const json pod = Submit(DraPod("seed-pod", "seed"));
  EXPECT_EQ(pod["spec"]["schedulerName"], "prism-scheduler");
  ASSERT_TRUE(config::HasDraSchedulingGate(pod)) << pod.dump();

  // The leader allocates, then ungates.
  ASSERT_TRUE(WaitUntil([&] { return !Gated("seed-pod"); }, absl::Seconds(10)))
      << Get("resourceclaims", "seed").dump();
  const json claim = Get("resourceclaims", "seed");
  EXPECT_THAT(claim["metadata"]["finalizers"].dump(), HasSubstr(config::kDraAllocationFinalizer));
  const std::vector<std::string> seed_devices = Devices("seed");
  ASSERT_EQ(seed_devices.size(), 2u);
  for (const std::string& d : seed_devices) EXPECT_EQ(d.rfind("gpu-0-mig-2g10gb-", 0), 0u) << d;
  EXPECT_EQ(claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
                ["values"][0],
            kNode);
  absl::StatusOr<config::DraAllocationRecord> record = config::ReadDraAllocation(claim);
  ASSERT_OK(record.status());
  EXPECT_TRUE(record->prism_marker);
  EXPECT_EQ(record->pod_uid, pod["metadata"]["uid"]);

  // kube-scheduler: only the allocated node passes Filter; Bind binds there, no decision on it.
  EXPECT_EQ(FilterAndBind("seed-pod"), "");
  const json bound = Get("pods", "seed-pod");
  EXPECT_EQ(bound["spec"]["nodeName"], kNode);
  EXPECT_FALSE(bound["metadata"].contains("annotations") &&
               bound["metadata"]["annotations"].contains("prism.io/decision"));

  // The next pod takes the 1g.5gb the template left, beside the seed's instances.
  ASSERT_OK(api_->Create("resourceclaims",
                         Claim("next", ClaimSpec(config::kDraMigClass, 1, MigSelector("1g.5gb")))));
  ASSERT_TRUE(WaitUntil([&] { return scheduler_->dra()->NeedsGate(DraPod("x", "next")); }));
  Submit(DraPod("next-pod", "next"));
  ASSERT_TRUE(WaitUntil([&] { return !Gated("next-pod"); }, absl::Seconds(10)))
      << Get("resourceclaims", "next").dump();
  const std::vector<std::string> next_devices = Devices("next");
  ASSERT_EQ(next_devices.size(), 1u);
  EXPECT_EQ(next_devices[0].rfind("gpu-0-mig-1g5gb-", 0), 0u) << next_devices[0];
  EXPECT_EQ(Devices("seed"), seed_devices);
  // Both claims are charged in the cache: the GPU holds three assigned instances.
  auto assigned = [](Scheduler& s) {
    int n = 0;
    for (const GpuSnapshot& g : s.cache().GpuSnapshots()) {
      for (const InstanceSnapshot& i : g.instances) n += i.state == "assigned";
    }
    return n;
  };
  EXPECT_EQ(assigned(*scheduler_), 3);
  // `prism status` shows each claim's devices under "dra:<namespace>/<claim>".
  absl::StatusOr<StatusReport> report = BuildStatusReport(scheduler_->cache().Snapshot());
  ASSERT_OK(report.status());
  std::set<std::string> holders;
  for (const StatusNode& n : report->nodes) {
    for (const StatusGpu& g : n.gpus) {
      for (const StatusPodShare& p : g.pods) holders.insert(StrCat(p.pod, " ", p.mig_instance));
    }
  }
  EXPECT_EQ(holders.size(), 3u);
  for (const std::string& d : seed_devices) {  // "gpu-0-mig-2g10gb-14-<start>"
    EXPECT_EQ(holders.count(StrCat("dra:default/seed 2g.10gb@", d.substr(d.rfind('-') + 1))), 1u)
        << StrJoin(std::vector<std::string>(holders.begin(), holders.end()), "; ");
  }
  const std::string metrics = scheduler_->Metrics().body;
  EXPECT_THAT(metrics, HasSubstr("prism_dra_claims{state=\"charged\"} 2"));
  EXPECT_THAT(metrics, HasSubstr("prism_dra_allocator_events{kind=\"allocation\"} 2"));
  EXPECT_THAT(metrics, HasSubstr("prism_dra_foreign_allocations 0"));

  // A restarted scheduler rebuilds the same charges from the claims alone.
  Scheduler restarted(DraOptions(), client_.get());
  ASSERT_OK(restarted.Start());
  ASSERT_TRUE(restarted.WaitForSync(absl::Seconds(10)));
  ASSERT_TRUE(WaitUntil([&] { return assigned(restarted) == 3; })) << assigned(restarted);
  EXPECT_EQ(restarted.cache().DraClaimProblem("default", "seed"), "");
}

TEST_F(DraAllocatorTest, DeallocatedBehindPrismsBackIsAllocatedAgainAndPodEndDeallocates) {
  ASSERT_OK(api_->Create("resourceclaims", Claim("c", ClaimSpec(config::kDraWholeGpuClass, 1))));
  ASSERT_TRUE(WaitUntil([&] { return scheduler_->dra()->NeedsGate(DraPod("x", "c")); }));
  Submit(DraPod("p", "c"));
  ASSERT_TRUE(WaitUntil([&] { return !Gated("p") && Allocated("c"); }, absl::Seconds(10)));
  EXPECT_EQ(Devices("c"), std::vector<std::string>{"gpu-0"});

  // kube-scheduler's PostFilter (or an admin) clears the allocation: Prism allocates it again.
  json claim = Get("resourceclaims", "c");
  claim["status"].erase("allocation");
  ASSERT_OK(client_->Update(k8s::kResourceClaims, "default", claim, "status").status());
  ASSERT_TRUE(WaitUntil([&] { return Allocated("c"); }, absl::Seconds(10)));
  EXPECT_TRUE(config::ReadDraAllocation(Get("resourceclaims", "c"))->prism_marker);
  EXPECT_TRUE(WaitUntil([&] { return scheduler_->dra()->stats().reallocations >= 1; }));

  // The pod ends: nobody reserves the claim, Prism deallocates it and drops its finalizer.
  ASSERT_OK(api_->Delete("pods", "default", "p"));
  ASSERT_TRUE(WaitUntil(
      [&] {
        const json c = Get("resourceclaims", "c");
        return !Allocated("c") && (!c["metadata"].contains("finalizers") ||
                                   c["metadata"]["finalizers"].empty());
      },
      absl::Seconds(10)))
      << Get("resourceclaims", "c").dump();
  EXPECT_TRUE(scheduler_->cache().DraClaimProblem("default", "c").empty());
  EXPECT_TRUE(WaitUntil([&] { return scheduler_->dra()->stats().deallocations >= 1; }));
}

TEST_F(DraAllocatorTest, TemplateClaimIsAllocatedOnceTheControllerMadeIt) {
  json tmpl{{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "ResourceClaimTemplate"},
            {"metadata", {{"name", "one-gpu"}, {"namespace", "default"}}},
            {"spec", {{"spec", ClaimSpec(config::kDraWholeGpuClass, 1)}}}};
  ASSERT_OK(api_->Create("resourceclaimtemplates", tmpl));
  ASSERT_TRUE(WaitUntil([&] { return scheduler_->dra()->NeedsGate(DraPod("x", "one-gpu", true)); }));
  json pod = Submit(DraPod("t", "one-gpu", true));
  ASSERT_TRUE(config::HasDraSchedulingGate(pod));
  ASSERT_NO_FATAL_FAILURE(ClaimFromTemplate(pod, "gpu", "t-gpu-x1", tmpl));
  ASSERT_TRUE(WaitUntil([&] { return !Gated("t") && Allocated("t-gpu-x1"); }, absl::Seconds(10)));
  EXPECT_EQ(FilterAndBind("t"), "");
}

// HAMi's pod API on a DRA-only pool (dra_hami.h): the webhook turns `nvidia.com/gpu` +
// `gpumem` into a claim template, the controller makes the claim, Prism allocates the share the
// HAMi request asked (cores 0: gpucores unset reserves no compute), and the pod binds there.
TEST_F(DraAllocatorTest, AHamiPodIsServedThroughAClaimPrismAllocates) {
  scheduler_.reset();
  SchedulerOptions o = DraOptions();
  o.tick = absl::Milliseconds(20);
  o.dra_options.retry_interval = absl::Milliseconds(50);
  o.dra_hami_claims = true;
  scheduler_ = std::make_unique<Scheduler>(std::move(o), client_.get());
  ASSERT_OK(scheduler_->Start());
  ASSERT_TRUE(scheduler_->WaitForSync(absl::Seconds(10)));
  json pod = Submit(testing::PodJson("default", "h", {testing::TestContainer("main", 1, 4000)},
                                     {{"nvidia.com/vgpu-mode", "hami-core"}}));
  ASSERT_TRUE(config::HasDraSchedulingGate(pod)) << pod.dump();
  ASSERT_EQ(pod["spec"]["resourceClaims"].size(), 1u);
  const std::string template_name = pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"];
  // The webhook created the template before the pod; a second equal pod reuses it.
  const json tmpl = Get("resourceclaimtemplates", template_name);
  ASSERT_TRUE(tmpl.is_object()) << template_name;
  EXPECT_EQ(tmpl["metadata"]["labels"]["app.kubernetes.io/managed-by"], "prism-hami");
  ASSERT_NO_FATAL_FAILURE(ClaimFromTemplate(pod, "prism-gpu-0", "h-prism-gpu-0-x1", tmpl));
  ASSERT_TRUE(WaitUntil([&] { return !Gated("h") && Allocated("h-prism-gpu-0-x1"); },
                        absl::Seconds(10)))
      << Get("resourceclaims", "h-prism-gpu-0-x1").dump();
  const json allocated = Get("resourceclaims", "h-prism-gpu-0-x1");
  const json& result = allocated["status"]["allocation"]["devices"]["results"][0];
  EXPECT_EQ(result["pool"], kOther);
  EXPECT_EQ(result["device"], "gpu-0");
  EXPECT_EQ(result["consumedCapacity"],
            json::parse(R"({"memory":"4000Mi","cores":"0","slots":"1"})"));
  EXPECT_EQ(FilterAndBind("h"), "");
  Submit(testing::PodJson("default", "h2", {testing::TestContainer("main", 1, 4000)},
                          {{"nvidia.com/vgpu-mode", "hami-core"}}));
  EXPECT_EQ(Get("pods", "h2")["spec"]["resourceClaims"][0]["resourceClaimTemplateName"],
            template_name);
  // A template deleted behind Prism's back is made again for the next pod that names it (else
  // the resourceclaim controller could make no claim for that pod).
  ASSERT_OK(api_->Delete("resourceclaimtemplates", "default", template_name));
  ASSERT_TRUE(WaitUntil(
      [&] { return !scheduler_->dra()->CachedTemplate("default", template_name).has_value(); }));
  Submit(testing::PodJson("default", "h3", {testing::TestContainer("main", 1, 4000)},
                          {{"nvidia.com/vgpu-mode", "hami-core"}}));
  EXPECT_TRUE(Get("resourceclaimtemplates", template_name).is_object());
}

TEST_F(DraAllocatorTest, ASharedClaimIsAllocatedOnceAndPinsEveryPodThatUsesIt) {
  // Two requests in one claim: a 1g.5gb and a 2g.10gb, on one node.
  json spec = ClaimSpec(config::kDraMigClass, 1, MigSelector("1g.5gb"));
  spec["devices"]["requests"].push_back(
      {{"name", "more"},
       {"exactly",
        {{"deviceClassName", config::kDraMigClass},
         {"selectors", json::array({{{"cel", {{"expression", MigSelector("2g.10gb")}}}}})}}}});
  ASSERT_OK(api_->Create("resourceclaims", Claim("shared", spec)));
  ASSERT_TRUE(WaitUntil([&] { return scheduler_->dra()->NeedsGate(DraPod("x", "shared")); }));
  Submit(DraPod("first", "shared"));
  ASSERT_TRUE(WaitUntil([&] { return !Gated("first") && Allocated("shared"); }, absl::Seconds(10)));
  const std::vector<std::string> devices = Devices("shared");
  EXPECT_EQ(devices.size(), 2u);
  // The second pod finds the claim allocated: ungated without a new allocation, pinned there.
  const json second = Submit(DraPod("second", "shared"));
  ASSERT_TRUE(config::HasDraSchedulingGate(second));
  ASSERT_TRUE(WaitUntil([&] { return !Gated("second"); }, absl::Seconds(10)));
  EXPECT_EQ(Devices("shared"), devices);
  EXPECT_TRUE(WaitUntil([&] { return scheduler_->dra()->stats().allocations == 1; }));
  const json first_pod = Get("pods", "first");
  const json second_pod = Get("pods", "second");
  for (const json* pod : {&first_pod, &second_pod}) {
    std::optional<DraAllocator::PodNodeVerdict> v = scheduler_->dra()->PodNode(*pod);
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(v->node, scheduler_->dra()->PodNode(first_pod)->node);
    EXPECT_FALSE(v->node.empty());
  }
}

TEST_F(DraAllocatorTest, FirstAvailableTakesTheFirstAlternativeThatFits) {
  // A 3g.40gb (no GPU here has one: the A100 is a 40 GB one), else a 1g.5gb, else a whole GPU.
  json spec{{"devices",
             {{"requests",
               json::array({{{"name", "gpus"},
                             {"firstAvailable",
                              json::array({{{"name", "big"},
                                            {"deviceClassName", config::kDraMigClass},
                                            {"selectors", json::array({{{"cel",
                                              {{"expression", MigSelector("3g.40gb")}}}}})}},
                                           {{"name", "small"},
                                            {"deviceClassName", config::kDraMigClass},
                                            {"selectors", json::array({{{"cel",
                                              {{"expression", MigSelector("1g.5gb")}}}}})}},
                                           {{"name", "whole"},
                                            {"deviceClassName", config::kDraWholeGpuClass}}})}}})}}}};
  ASSERT_OK(api_->Create("resourceclaims", Claim("choice", spec)));
  ASSERT_TRUE(WaitUntil([&] { return scheduler_->dra()->NeedsGate(DraPod("x", "choice")); }));
  Submit(DraPod("chooser", "choice"));
  ASSERT_TRUE(WaitUntil([&] { return !Gated("chooser") && Allocated("choice"); },
                        absl::Seconds(10)));
  const json claim = Get("resourceclaims", "choice");
  const json& result = claim["status"]["allocation"]["devices"]["results"][0];
  EXPECT_EQ(result["request"], "gpus/small");  // As upstream names a subrequest's result.
  EXPECT_EQ(result["device"].get<std::string>().rfind("gpu-0-mig-1g5gb-", 0), 0u);
  // Charged as the alternative it got, by this replica and a restarted one alike.
  EXPECT_TRUE(WaitUntil([&] { return scheduler_->cache().DraClaimProblem("default", "choice").empty(); }));
  EXPECT_EQ(scheduler_->cache().stats().dra_claims_by_state["charged"], 1);
}

TEST_F(DraAllocatorTest, ALeaderStoppedBetweenFinalizerAndAllocationIsUndone) {
  // Step 1 of docs/dra-design.md §2.4 done (Prism's finalizer), step 2 never: nobody uses the claim, so
  // the next leader removes the finalizer, and the claim can be deleted.
  json claim = Claim("half", ClaimSpec(config::kDraWholeGpuClass, 1));
  claim["metadata"]["finalizers"] = json::array({config::kDraAllocationFinalizer});
  ASSERT_OK(api_->Create("resourceclaims", claim));
  ASSERT_TRUE(WaitUntil([&] {
    const json c = Get("resourceclaims", "half");
    return c.is_object() && c["metadata"].value("finalizers", json::array()).empty();
  }, absl::Seconds(10)));
  ASSERT_OK(api_->Delete("resourceclaims", "default", "half"));
  EXPECT_TRUE(absl::IsNotFound(api_->Get("resourceclaims", "default", "half").status()));
}

TEST_F(DraAllocatorTest, ForeignAllocationsAndBadClaimsAreRefusedNotAllocated) {
  // Allocated by someone else (kube-scheduler's first fit): no marker.
  json foreign = Claim("foreign", ClaimSpec(config::kDraWholeGpuClass, 1));
  ASSERT_OK(api_->Create("resourceclaims", foreign));
  foreign = Get("resourceclaims", "foreign");
  foreign["status"]["allocation"] = {
      {"devices",
       {{"results", json::array({{{"request", "gpus"},
                                  {"driver", config::kDraDriverName},
                                  {"pool", kOther},
                                  {"device", "gpu-0"}}})}}}};
  ASSERT_OK(client_->Update(k8s::kResourceClaims, "default", foreign, "status").status());
  ASSERT_TRUE(WaitUntil([&] { return scheduler_->dra()->stats().foreign_allocations == 1; }));
  std::optional<DraAllocator::PodNodeVerdict> verdict =
      scheduler_->dra()->PodNode(DraPod("x", "foreign"));
  ASSERT_TRUE(verdict.has_value());
  EXPECT_THAT(verdict->reason, HasSubstr("outside Prism"));

  // A selector Prism cannot evaluate: the pod stays gated, with an event saying why.
  ASSERT_OK(api_->Create("resourceclaims",
                         Claim("odd", ClaimSpec(config::kDraMigClass, 1,
                                                "device.attributes[\"gpu.prism.io\"].x > 3"))));
  ASSERT_TRUE(WaitUntil([&] { return scheduler_->dra()->NeedsGate(DraPod("x", "odd")); }));
  Submit(DraPod("odd-pod", "odd"));
  ASSERT_TRUE(WaitUntil([&] { return !Events("InvalidResourceClaim").empty(); }, absl::Seconds(10)));
  EXPECT_THAT(Events("InvalidResourceClaim")[0]["message"].get<std::string>(), HasSubstr("odd"));
  EXPECT_TRUE(Gated("odd-pod"));
  EXPECT_FALSE(Allocated("odd"));

  // More than the cluster has: stays gated with the engine's reasons, nothing charged.
  ASSERT_OK(api_->Create("resourceclaims", Claim("huge", ClaimSpec(config::kDraWholeGpuClass, 8))));
  ASSERT_TRUE(WaitUntil([&] { return scheduler_->dra()->NeedsGate(DraPod("x", "huge")); }));
  Submit(DraPod("huge-pod", "huge"));
  ASSERT_TRUE(WaitUntil([&] { return !Events("FailedAllocation").empty(); }, absl::Seconds(10)));
  EXPECT_TRUE(Gated("huge-pod"));
  EXPECT_FALSE(Allocated("huge"));

  // A claim of another driver's class is not Prism's: no gate.
  ASSERT_OK(api_->Create("resourceclaims", Claim("theirs", ClaimSpec("gpu.nvidia.com", 1))));
  ASSERT_TRUE(WaitUntil([&] { return !scheduler_->dra()->NeedsGate(DraPod("x", "theirs")); }));
  const json theirs = Submit(DraPod("theirs-pod", "theirs"));
  EXPECT_FALSE(config::HasDraSchedulingGate(theirs));
}

json SliceSpec(json requests) {
  json spec = ClaimSpec(config::kDraSliceClass, 1);
  spec["devices"]["requests"][0]["exactly"]["capacity"] = {{"requests", std::move(requests)}};
  return spec;
}

// Shares go only to nodes that publish shared devices: with one T4 node's API server keeping no
// DRAConsumableCapacity fields (its GPU published whole) and another's keeping them, every share
// lands on the second, never decided for the first and then refused; with none left, the Event
// says so.
TEST_F(DraAllocatorTest, SharesGoOnlyToNodesThatPublishThem) {
  constexpr char kSharing[] = "t4-sharing";
  json whole = *api_->Get("resourceslices", "", StrCat(kOther, "-gpu.prism.io-0"));
  whole["spec"]["devices"][0].erase("allowMultipleAllocations");
  ASSERT_OK(api_->Update("resourceslices", whole).status());
  ASSERT_OK(api_->Create("nodes", NodeJson(kSharing, {TestGpu("Tesla T4", 15360, false)})));
  ASSERT_OK(api_->Create("resourceslices", Slice(kSharing, StrCat("GPU-", kSharing, "-0"), false,
                                                 /*shared=*/true)));
  for (int i = 0; i < 3; ++i) {
    const std::string name = StrCat("s", i);
    ASSERT_OK(api_->Create("resourceclaims",
                           Claim(name, SliceSpec({{"memory", "2Gi"}, {"cores", "20"}}))));
    ASSERT_TRUE(WaitUntil([&] { return scheduler_->dra()->NeedsGate(DraPod("x", name)); }));
    Submit(DraPod(StrCat("p", name), name));
    ASSERT_TRUE(WaitUntil([&] { return Allocated(name); }, absl::Seconds(10)))
        << name << ": " << (Events("FailedAllocation").empty()
                                ? std::string("no event")
                                : Events("FailedAllocation").back().dump());
    EXPECT_EQ(Get("resourceclaims", name)["status"]["allocation"]["devices"]["results"][0]["pool"],
              kSharing);
  }
  json none = *api_->Get("resourceslices", "", StrCat(kSharing, "-gpu.prism.io-0"));
  none["spec"]["devices"][0].erase("allowMultipleAllocations");
  ASSERT_OK(api_->Update("resourceslices", none).status());
  ASSERT_OK(api_->Create("resourceclaims", Claim("late", SliceSpec({{"memory", "1Gi"}}))));
  ASSERT_TRUE(WaitUntil([&] { return scheduler_->dra()->NeedsGate(DraPod("x", "late")); }));
  Submit(DraPod("plate", "late"));
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const json& e : Events("FailedAllocation")) {
          if (e["involvedObject"]["name"] == "plate" &&
              e["message"].get<std::string>().find("no node publishes shared GPUs") !=
                  std::string::npos) {
            return true;
          }
        }
        return false;
      },
      absl::Seconds(10)));
  EXPECT_FALSE(Allocated("late"));
}

// A GPU node its agent serves through the device-plugin API alone (prism.io/gpu-api:
// device-plugin) publishes no ResourceSlices: DRA claims never go there, with or without a
// node restriction on the pod, whatever the engine would prefer ("t4-dp" sorts first).
TEST_F(DraAllocatorTest, ClaimsGoOnlyToNodesThatPublishPrismsDevices) {
  constexpr char kDevicePluginOnly[] = "t4-dp";
  json node = NodeJson(kDevicePluginOnly, {TestGpu("Tesla T4", 15360, false)});
  node["metadata"]["labels"] = {{"kubernetes.io/hostname", kDevicePluginOnly},
                                {"prism.io/gpu-api", "device-plugin"}};
  ASSERT_OK(api_->Create("nodes", node));
  ASSERT_OK(api_->Create("resourceclaims", Claim("w1", ClaimSpec(config::kDraWholeGpuClass, 1))));
  ASSERT_TRUE(WaitUntil([&] { return scheduler_->dra()->NeedsGate(DraPod("x", "w1")); }));
  Submit(DraPod("pw1", "w1"));
  ASSERT_TRUE(WaitUntil([&] { return Allocated("w1"); }, absl::Seconds(10)))
      << (Events("FailedAllocation").empty() ? std::string("no event")
                                             : Events("FailedAllocation").back().dump());
  EXPECT_EQ(Get("resourceclaims", "w1")["status"]["allocation"]["devices"]["results"][0]["pool"],
            kOther);
  // Pinned to the node by a nodeSelector: refused with the reason.
  ASSERT_OK(api_->Create("resourceclaims", Claim("w2", ClaimSpec(config::kDraWholeGpuClass, 1))));
  ASSERT_TRUE(WaitUntil([&] { return scheduler_->dra()->NeedsGate(DraPod("x", "w2")); }));
  json pinned = DraPod("pw2", "w2");
  pinned["spec"]["nodeSelector"] = {{"kubernetes.io/hostname", kDevicePluginOnly}};
  Submit(pinned);
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const json& e : Events("FailedAllocation")) {
          if (e["involvedObject"]["name"] == "pw2" &&
              e["message"].get<std::string>().find(
                  "no node the pod may use publishes Prism's DRA devices") != std::string::npos) {
            return true;
          }
        }
        return false;
      },
      absl::Seconds(10)));
  EXPECT_FALSE(Allocated("w2"));
}

TEST_F(DraAllocatorTest, SharesOfAGpuArePlacedChargedAndRefusedWhenTheyCannotFit) {
  // 60 % and 4 GiB of the T4 (the only GPU not in MIG mode).
  ASSERT_OK(
      api_->Create("resourceclaims", Claim("a", SliceSpec({{"memory", "4Gi"}, {"cores", "60"}}))));
  ASSERT_TRUE(WaitUntil([&] { return scheduler_->dra()->NeedsGate(DraPod("x", "a")); }));
  Submit(DraPod("pa", "a"));
  ASSERT_TRUE(WaitUntil([&] { return !Gated("pa"); }, absl::Seconds(10)))
      << Get("resourceclaims", "a").dump();
  const json claim = Get("resourceclaims", "a");
  const json& result = claim["status"]["allocation"]["devices"]["results"][0];
  EXPECT_EQ(result["device"], "gpu-0");
  EXPECT_EQ(result["pool"], kOther);
  EXPECT_EQ(result["shareID"],
            config::DraShareId(claim["metadata"]["uid"].get<std::string>(), "gpus", 0));
  EXPECT_EQ(result["consumedCapacity"],
            json::parse(R"({"memory":"4096Mi","cores":"60","slots":"1"})"));
  EXPECT_EQ(FilterAndBind("pa"), "");

  // 50 % more does not fit next to it (charged): the pod stays gated with the engine's reason.
  ASSERT_OK(api_->Create("resourceclaims", Claim("b", SliceSpec({{"cores", "50"}}))));
  ASSERT_TRUE(WaitUntil([&] { return scheduler_->dra()->NeedsGate(DraPod("x", "b")); }));
  Submit(DraPod("pb", "b"));
  ASSERT_TRUE(WaitUntil([&] { return !Events("FailedAllocation").empty(); }, absl::Seconds(10)));
  EXPECT_TRUE(Gated("pb"));
  // More memory than any GPU has, and an impossible shape: events, never a crash.
  ASSERT_OK(api_->Create("resourceclaims", Claim("big", SliceSpec({{"memory", "64Gi"}}))));
  ASSERT_OK(api_->Create("resourceclaims", Claim("odd", SliceSpec({{"cores", "150"}}))));
  ASSERT_TRUE(WaitUntil([&] { return scheduler_->dra()->NeedsGate(DraPod("x", "odd")); }));
  Submit(DraPod("pbig", "big"));
  Submit(DraPod("podd", "odd"));
  ASSERT_TRUE(
      WaitUntil([&] { return !Events("InvalidResourceClaim").empty(); }, absl::Seconds(10)));
  EXPECT_THAT(Events("InvalidResourceClaim")[0]["message"].get<std::string>(),
              HasSubstr("capacity.requests"));
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const json& e : Events("FailedAllocation")) {
          if (e["involvedObject"]["name"] == "pbig") return true;
        }
        return false;
      },
      absl::Seconds(10)));
  EXPECT_TRUE(Gated("pbig") && Gated("podd"));

  // A node whose API server dropped the shares' fields (DRAConsumableCapacity off) publishes its
  // GPU whole (dra_slices.h): no share of it is allocated, and the Event says why.
  const std::string slice_name = StrCat(kOther, "-gpu.prism.io-0");
  auto set_shared = [&](bool shared) {
    json slice = *api_->Get("resourceslices", "", slice_name);
    if (shared) {
      slice["spec"]["devices"][0]["allowMultipleAllocations"] = true;
    } else {
      slice["spec"]["devices"][0].erase("allowMultipleAllocations");
    }
    ASSERT_OK(api_->Update("resourceslices", slice).status());
  };
  ASSERT_NO_FATAL_FAILURE(set_shared(false));
  ASSERT_OK(
      api_->Create("resourceclaims", Claim("c", SliceSpec({{"memory", "1Gi"}, {"cores", "10"}}))));
  ASSERT_TRUE(WaitUntil([&] { return scheduler_->dra()->NeedsGate(DraPod("x", "c")); }));
  Submit(DraPod("pc", "c"));
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const json& e : Events("FailedAllocation")) {
          if (e["involvedObject"]["name"] == "pc" &&
              e["message"].get<std::string>().find("DRAConsumableCapacity") != std::string::npos) {
            return true;
          }
        }
        return false;
      },
      absl::Seconds(10)));
  EXPECT_FALSE(Allocated("c"));
  EXPECT_TRUE(Gated("pc"));
  ASSERT_OK(api_->Delete("pods", "default", "pc"));
  ASSERT_OK(api_->Delete("resourceclaims", "default", "c"));
  ASSERT_NO_FATAL_FAILURE(set_shared(true));

  // A restarted scheduler charges the share from the claim alone.
  Scheduler restarted(DraOptions(), client_.get());
  ASSERT_OK(restarted.Start());
  ASSERT_TRUE(restarted.WaitForSync(absl::Seconds(10)));
  ASSERT_TRUE(WaitUntil([&] {
    for (const GpuSnapshot& g : restarted.cache().GpuSnapshots()) {
      if (g.cores_used_permille == 600) return true;
    }
    return false;
  }));
  EXPECT_EQ(restarted.cache().DraClaimProblem("default", "a"), "");

  // The first pod ends: its share is deallocated and the waiting one fits.
  ASSERT_OK(api_->Delete("pods", "default", "pa"));
  ASSERT_TRUE(WaitUntil([&] { return !Gated("pb") && Allocated("b"); }, absl::Seconds(15)))
      << Get("resourceclaims", "b").dump();
  EXPECT_FALSE(Allocated("big"));
}

}  // namespace
}  // namespace prism::extender
