// HAMi pods on a DRA-only pool (dra_hami.h): the webhook turns their extended-resource GPU
// requests into ResourceClaims from templates, and the claims ask the engine exactly what the
// HAMi request asked.
#include "extender/dra_hami.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "config/device_config_yaml.h"
#include "config/dra_allocation.h"
#include "config/pod_json.h"
#include "config/pod_request.h"
#include "extender/test_util.h"
#include "extender/webhook.h"

namespace prism::extender {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;
using testing::PodJson;
using testing::TestContainer;

json Review(const json& pod, bool dry_run = false) {
  return json{{"apiVersion", "admission.k8s.io/v1"},
              {"kind", "AdmissionReview"},
              {"request",
               {{"uid", "req-1"},
                {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
                {"namespace", "team"},
                {"operation", "CREATE"},
                {"dryRun", dry_run},
                {"object", pod}}}};
}

class DraHamiTest : public ::testing::Test {
 protected:
  DraHamiTest() {
    options_.dra_hami_claims = true;
    options_.dra_gate = [](const json&) { return false; };
    options_.ensure_claim_templates = [this](const std::vector<json>& templates) {
      for (const json& t : templates) created_.push_back(t);
      return ensure_result_;
    };
  }

  // The pod as the API server stores it after the webhook's patch.
  json Admit(const json& pod, bool dry_run = false) {
    const json out = HandleAdmissionReview(Review(pod, dry_run), true, options_, config_);
    response_ = out["response"];
    if (!response_.value("allowed", false) || !response_.contains("patch")) return pod;
    std::string decoded;
    EXPECT_TRUE(absl::Base64Unescape(response_["patch"].get<std::string>(), &decoded));
    return pod.patch(json::parse(decoded));
  }

  // What the engine is asked for the original HAMi pod and for its claims: equal per container.
  void ExpectSameRequest(const json& hami_pod, const json& claim_template, size_t container) {
    auto manifest = config::PodManifestFromJson(hami_pod);
    ASSERT_TRUE(manifest.ok()) << manifest.status();
    auto hami = config::BuildPodRequest(*manifest, config_);
    ASSERT_TRUE(hami.ok()) << hami.status();
    auto spec = config::ParseDraClaimSpec(claim_template["spec"]["spec"], "spec.spec");
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec->prism = true;
    auto pod = config::BuildDraPodRequest({}, config::DraChoose({*spec}, 0));
    ASSERT_TRUE(pod.ok()) << pod.status();
    ASSERT_EQ(pod->request.containers.size(), 1u);
    EXPECT_EQ(pod->request.containers[0].gpu, hami->containers[container].gpu)
        << claim_template.dump();
  }

  sched::DeviceConfig config_ = config::DefaultDeviceConfig();
  WebhookOptions options_;
  std::vector<json> created_;
  absl::Status ensure_result_;
  json response_;
};

TEST_F(DraHamiTest, ASlicePodBecomesAClaimAskingTheSameShare) {
  const json hami = PodJson("team", "p", {TestContainer("main", 1, 4000, 30)},
                            {{"nvidia.com/vgpu-mode", "hami-core"}});
  const json stored = Admit(hami);
  ASSERT_TRUE(response_["allowed"]) << response_.dump();
  const json& c = stored["spec"]["containers"][0];
  // The limits held only HAMi's resources: none is left.
  EXPECT_FALSE(c["resources"].contains("limits")) << c.dump();
  EXPECT_EQ(c["resources"]["requests"], json::parse(R"({"cpu":"1"})"));  // The rest stays.
  EXPECT_EQ(c["resources"]["claims"], json::parse(R"([{"name":"prism-gpu-0"}])"));
  ASSERT_EQ(created_.size(), 1u);
  const json& t = created_[0];
  EXPECT_EQ(t["kind"], "ResourceClaimTemplate");
  EXPECT_EQ(t["metadata"]["namespace"], "team");
  EXPECT_EQ(stored["spec"]["resourceClaims"],
            json::array({{{"name", "prism-gpu-0"},
                          {"resourceClaimTemplateName", t["metadata"]["name"]}}}));
  EXPECT_EQ(t["spec"]["spec"]["devices"]["requests"][0]["exactly"],
            json::parse(R"({"deviceClassName":"slice.gpu.prism.io","allocationMode":"ExactCount",
              "count":1,"capacity":{"requests":{"memory":"4000Mi","cores":"30"}}})"));
  ExpectSameRequest(hami, t, 0);
  // Behind Prism's gate, on Prism's scheduler, as any pod with Prism claims.
  EXPECT_EQ(stored["spec"]["schedulingGates"], json::parse(R"([{"name":"prism.io/allocate"}])"));
  EXPECT_EQ(stored["spec"]["schedulerName"], "prism-scheduler");
}

TEST_F(DraHamiTest, WithoutAModeEitherKindServesAndUnsetCoresReserveNone) {
  // Two GPU containers and an init container; cores unset is HAMi's best effort: cores "0".
  const json hami = PodJson("team", "p",
                            {TestContainer("setup", 1, 2048, 0, /*init=*/true),
                             TestContainer("a", 2, 8192), TestContainer("b", 0, 0)});
  const json stored = Admit(hami);
  ASSERT_TRUE(response_["allowed"]) << response_.dump();
  ASSERT_EQ(created_.size(), 2u);
  const json& init_request = created_[0]["spec"]["spec"]["devices"]["requests"][0];
  ASSERT_EQ(init_request["firstAvailable"].size(), 2u);
  EXPECT_EQ(init_request["firstAvailable"][0]["name"], "slice");
  EXPECT_EQ(init_request["firstAvailable"][0]["capacity"]["requests"]["cores"], "0");
  EXPECT_EQ(init_request["firstAvailable"][1]["deviceClassName"], "mig.gpu.prism.io");
  EXPECT_THAT(init_request["firstAvailable"][1]["selectors"][0]["cel"]["expression"].get<std::string>(),
              HasSubstr("quantity(\"2048Mi\")"));
  ExpectSameRequest(hami, created_[0], 0);
  ExpectSameRequest(hami, created_[1], 1);
  EXPECT_EQ(stored["spec"]["initContainers"][0]["resources"]["claims"][0]["name"], "prism-gpu-0");
  EXPECT_EQ(stored["spec"]["containers"][0]["resources"]["claims"][0]["name"], "prism-gpu-1");
  EXPECT_FALSE(stored["spec"]["containers"][1]["resources"].contains("claims"));
  EXPECT_EQ(stored["spec"]["resourceClaims"].size(), 2u);
  // An equal pod names the same templates (one per distinct request and namespace).
  created_.clear();
  const json again = Admit(hami);
  ASSERT_EQ(created_.size(), 2u);
  EXPECT_EQ(again["spec"]["resourceClaims"], stored["spec"]["resourceClaims"]);
}

TEST_F(DraHamiTest, MigOnlyAsksAPartitionBigEnough) {
  const json hami = PodJson("team", "p", {TestContainer("main", 2, 10000)},
                            {{"nvidia.com/vgpu-mode", "mig"}});
  Admit(hami);
  ASSERT_TRUE(response_["allowed"]) << response_.dump();
  ASSERT_EQ(created_.size(), 1u);
  const json& exactly = created_[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"];
  EXPECT_EQ(exactly["deviceClassName"], "mig.gpu.prism.io");
  EXPECT_EQ(exactly["count"], 2);
  auto spec = config::ParseDraClaimSpec(created_[0]["spec"]["spec"], "spec.spec");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->requests[0].min_memory_mib, 10000);
}

// gpucores with MIG: the claim asks a partition covering memory and compute (its published
// computePercent), as the device-plugin path gives the smallest profile covering both.
TEST_F(DraHamiTest, MigCarriesGpucoresAsAComputeShareSelector) {
  const json hami = PodJson("team", "p", {TestContainer("main", 1, 5000, 50)},
                            {{"nvidia.com/vgpu-mode", "mig"}});
  Admit(hami);
  ASSERT_TRUE(response_["allowed"]) << response_.dump();
  ASSERT_EQ(created_.size(), 1u);
  const json& exactly = created_[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"];
  ASSERT_EQ(exactly["selectors"].size(), 2u);
  EXPECT_EQ(exactly["selectors"][1]["cel"]["expression"],
            "device.attributes[\"gpu.prism.io\"].computePercent >= 50");
  ExpectSameRequest(hami, created_[0], 0);
  // Without gpucores (HAMi's best effort) no compute is asked.
  created_.clear();
  Admit(PodJson("team", "q", {TestContainer("main", 1, 5000)}, {{"nvidia.com/vgpu-mode", "mig"}}));
  ASSERT_EQ(created_.size(), 1u);
  EXPECT_EQ(created_[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"].size(),
            1u);
}

TEST_F(DraHamiTest, WhatAClaimCannotSayIsRefusedByName) {
  json percent = PodJson("team", "p", {TestContainer("main", 1, 0)});
  percent["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"] = "50";
  Admit(percent);
  EXPECT_FALSE(response_["allowed"]);
  EXPECT_THAT(response_["status"]["message"].get<std::string>(),
              HasSubstr("nvidia.com/gpumem-percentage 50 cannot be a ResourceClaim"));
  Admit(PodJson("team", "p", {TestContainer("main", 1, 0)}, {{"nvidia.com/vgpu-mode", "mig"}}));
  EXPECT_FALSE(response_["allowed"]);
  EXPECT_THAT(response_["status"]["message"].get<std::string>(),
              HasSubstr("a MIG partition needs its memory in MiB"));
  // More devices than a claim's allocation results hold (AllocationResultsMaxSize, 32).
  Admit(PodJson("team", "p", {TestContainer("main", 33, 1000)},
                {{"nvidia.com/vgpu-mode", "hami-core"}}));
  EXPECT_FALSE(response_["allowed"]);
  EXPECT_THAT(response_["status"]["message"].get<std::string>(),
              HasSubstr("container main: its GPUs cannot be one ResourceClaim"));
  json taken = PodJson("team", "p", {TestContainer("main", 1, 1000)});
  taken["spec"]["resourceClaims"] = {{{"name", "prism-gpu-0"}, {"resourceClaimName", "x"}}};
  Admit(taken);
  EXPECT_FALSE(response_["allowed"]);
  EXPECT_THAT(response_["status"]["message"].get<std::string>(),
              HasSubstr("already names a claim 'prism-gpu-0'"));
  EXPECT_TRUE(created_.empty());
}

TEST_F(DraHamiTest, ClaimsThePodHasAlreadyStayBesideTheNewOnes) {
  // The pod already has a claim of its own (used by the container), asks gpumem in requests only
  // (the webhook adds HAMi's default count first), and has a container without resources.
  json hami = PodJson("team", "p", {TestContainer("main", 0, 0), TestContainer("side", 0, 0)});
  json& main = hami["spec"]["containers"][0];
  main["resources"] = {{"requests", {{"nvidia.com/gpumem", "3000"}}},
                       {"claims", {{{"name", "scratch"}}}}};
  hami["spec"]["containers"][1].erase("resources");
  hami["spec"]["resourceClaims"] = {{{"name", "scratch"}, {"resourceClaimName", "mine"}}};
  const json stored = Admit(hami);
  ASSERT_TRUE(response_["allowed"]) << response_.dump();
  const json& c = stored["spec"]["containers"][0];
  EXPECT_EQ(c["resources"], json::parse(
                                R"({"claims":[{"name":"scratch"},{"name":"prism-gpu-0"}]})"))
      << c.dump();
  EXPECT_FALSE(stored["spec"]["containers"][1].contains("resources"));
  ASSERT_EQ(created_.size(), 1u);
  EXPECT_EQ(stored["spec"]["resourceClaims"],
            json::array({{{"name", "scratch"}, {"resourceClaimName", "mine"}},
                         {{"name", "prism-gpu-0"},
                          {"resourceClaimTemplateName", created_[0]["metadata"]["name"]}}}));
  ExpectSameRequest(hami, created_[0], 0);
}

TEST_F(DraHamiTest, MemoryFactorScalesTheClaimsMemory) {
  // HAMi's memoryFactor: gpumem counts in units of that many MiB, in the claim as in the engine.
  config_.memory_factor = 4;
  const json hami = PodJson("team", "p", {TestContainer("main", 1, 1500, 20)},
                            {{"nvidia.com/vgpu-mode", "hami-core"}});
  Admit(hami);
  ASSERT_TRUE(response_["allowed"]) << response_.dump();
  ASSERT_EQ(created_.size(), 1u);
  EXPECT_EQ(created_[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]
                    ["requests"]["memory"],
            "6000Mi");
  ExpectSameRequest(hami, created_[0], 0);
}

TEST_F(DraHamiTest, APodSetOnANodeIsRefused) {
  // Its claims need Prism's gate, which the API server refuses beside spec.nodeName; the
  // device-plugin path lets a trusted scheduler's pod through.
  options_.trusted_schedulers = {"prism-scheduler"};
  json hami = PodJson("team", "p", {TestContainer("main", 1, 1000)});
  hami["spec"]["nodeName"] = "node-a";
  Admit(hami);
  EXPECT_FALSE(response_["allowed"]);
  EXPECT_THAT(response_["status"]["message"].get<std::string>(),
              HasSubstr("sets spec.nodeName; on this cluster its GPUs become ResourceClaims"));
  EXPECT_TRUE(created_.empty());
  options_.dra_hami_claims = false;
  Admit(hami);
  EXPECT_TRUE(response_["allowed"]) << response_.dump();
}

TEST_F(DraHamiTest, DryRunCreatesNothingAndAFailedCreateRefusesThePod) {
  const json hami = PodJson("team", "p", {TestContainer("main", 1, 1000)});
  const json stored = Admit(hami, /*dry_run=*/true);
  ASSERT_TRUE(response_["allowed"]);
  EXPECT_TRUE(stored["spec"].contains("resourceClaims"));
  EXPECT_TRUE(created_.empty());
  ensure_result_ = absl::PermissionDeniedError("resourceclaimtemplates is forbidden");
  Admit(hami);
  EXPECT_FALSE(response_["allowed"]);
  EXPECT_THAT(response_["status"]["message"].get<std::string>(),
              HasSubstr("cannot create the pod's ResourceClaimTemplates: resourceclaimtemplates "
                        "is forbidden"));
  // Off: the pod keeps its extended resources (the device-plugin path).
  options_.dra_hami_claims = false;
  ensure_result_ = absl::OkStatus();
  const json plain = Admit(hami);
  EXPECT_TRUE(plain["spec"]["containers"][0]["resources"]["limits"].contains("nvidia.com/gpu"));
  EXPECT_FALSE(plain["spec"].contains("resourceClaims"));
}

// KEP-5004's implicit extended resource of Prism's classes would be allocated by kube-scheduler,
// first fit, and never prepared: refused by name where DRA is on, with what to ask instead.
TEST_F(DraHamiTest, TheImplicitResourceOfPrismsClassesIsRefused) {
  const std::string implicit = "deviceclass.resource.kubernetes.io/mig.gpu.prism.io";
  json pod = PodJson("team", "p", {TestContainer("main", 0, 0)});
  pod["spec"]["containers"][0]["resources"]["limits"][implicit] = "1";
  Admit(pod);
  EXPECT_FALSE(response_["allowed"]);
  EXPECT_THAT(response_["status"]["message"].get<std::string>(),
              HasSubstr("asks for deviceclass.resource.kubernetes.io/mig.gpu.prism.io, which "
                        "kube-scheduler would allocate itself"));
  EXPECT_EQ(ImplicitPrismClassResource(pod), implicit);
  // Another driver's class is not Prism's business; nor is anything without DRA on.
  json other = PodJson("team", "p", {TestContainer("main", 0, 0)});
  other["spec"]["containers"][0]["resources"]["limits"]
       ["deviceclass.resource.kubernetes.io/gpu.nvidia.com"] = "1";
  Admit(other);
  EXPECT_TRUE(response_["allowed"]);
  EXPECT_EQ(ImplicitPrismClassResource(other), "");
  options_.dra_gate = nullptr;
  Admit(pod);
  EXPECT_TRUE(response_["allowed"]);
  EXPECT_EQ(ImplicitPrismClassResource(json("not a pod")), "");
}

}  // namespace
}  // namespace prism::extender
