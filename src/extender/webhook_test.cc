#include "extender/webhook.h"

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "base/strings.h"
#include "config/device_config_yaml.h"
#include "config/pod_json.h"
#include "extender/test_util.h"

namespace prism::extender {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;
using testing::GpuPod;

json Review(const json& pod, const std::string& operation = "CREATE") {
  return json{{"apiVersion", "admission.k8s.io/v1"},
              {"kind", "AdmissionReview"},
              {"request",
               {{"uid", "req-1"},
                {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
                {"resource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
                {"namespace", "team"},
                {"operation", operation},
                {"object", pod}}}};
}

json Patch(const json& response) {
  std::string decoded;
  EXPECT_TRUE(absl::Base64Unescape(response["response"]["patch"].get<std::string>(), &decoded));
  return json::parse(decoded);
}

class WebhookTest : public ::testing::Test {
 protected:
  sched::DeviceConfig config_ = config::DefaultDeviceConfig();
  WebhookOptions options_;
};

TEST_F(WebhookTest, SetsSchedulerNameOnGpuPods) {
  json pod = GpuPod("p", 1, 1000);
  pod["spec"].erase("schedulerName");
  json out = HandleAdmissionReview(Review(pod), true, options_, config_);
  EXPECT_EQ(out["kind"], "AdmissionReview");
  EXPECT_EQ(out["response"]["uid"], "req-1");
  EXPECT_TRUE(out["response"]["allowed"]);
  EXPECT_EQ(out["response"]["patchType"], "JSONPatch");
  EXPECT_EQ(Patch(out), json::parse(R"([{"op":"add","path":"/spec/schedulerName",
                                         "value":"prism-scheduler"}])"));
}

TEST_F(WebhookTest, OverwritesTheDefaultSchedulerButNotOthers) {
  json pod = GpuPod("p", 1, 1000);
  pod["spec"]["schedulerName"] = "default-scheduler";
  json out = HandleAdmissionReview(Review(pod), true, options_, config_);
  EXPECT_EQ(Patch(out)[0]["value"], "prism-scheduler");
  pod["spec"]["schedulerName"] = "volcano";
  out = HandleAdmissionReview(Review(pod), true, options_, config_);
  EXPECT_TRUE(out["response"]["allowed"]);
  EXPECT_FALSE(out["response"].contains("patch"));
}

TEST_F(WebhookTest, LeavesPodsWithoutGpusAlone) {
  json pod = testing::PodJson("team", "web", {{"main", 0}});
  pod["spec"].erase("schedulerName");
  json out = HandleAdmissionReview(Review(pod), true, options_, config_);
  EXPECT_TRUE(out["response"]["allowed"]);
  EXPECT_FALSE(out["response"].contains("patch"));
}

TEST_F(WebhookTest, AddsTheGpuCountWhenOnlyMemoryOrCoresAreAsked) {
  json pod = testing::PodJson("team", "p", {{"a", 0, 3000, 0}, {"b", 0, 0, 30}, {"c", 2, 1000}});
  pod["spec"]["containers"][1].erase("resources");
  pod["spec"]["containers"][1]["resources"] = {{"requests", {{"nvidia.com/gpucores", "30"}}}};
  json out = HandleAdmissionReview(Review(pod), true, options_, config_);
  ASSERT_TRUE(out["response"]["allowed"]) << out.dump();
  json patch = Patch(out);
  EXPECT_THAT(
      patch.dump(),
      HasSubstr(R"("path":"/spec/containers/0/resources/limits/nvidia.com~1gpu","value":"1")"));
  EXPECT_THAT(
      patch.dump(),
      HasSubstr(R"("path":"/spec/containers/1/resources/limits","value":{"nvidia.com/gpu":"1"})"));
  EXPECT_THAT(patch.dump(), ::testing::Not(HasSubstr("/spec/containers/2/")));
}

TEST_F(WebhookTest, RejectsWhatTheSchedulerCouldNeverPlace) {
  struct Case {
    json pod;
    std::string want;
  };
  json pct = testing::PodJson("team", "p", {{"main", 1}});
  pct["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"] = "150";
  json mode = GpuPod("p", 1, 1000, 0, {{"nvidia.com/vgpu-mode", "mps"}});
  json bad_qty = GpuPod("p", 1, 1000);
  bad_qty["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "lots";
  json node_name = GpuPod("p", 1, 1000);
  node_name["spec"]["nodeName"] = "n1";
  json privileged = GpuPod("p", 1, 1000);
  privileged["spec"]["containers"][0]["securityContext"] = {{"privileged", true}};
  json policy = GpuPod("p", 1, 1000, 0, {{"hami.io/node-scheduler-policy", "chaos"}});
  for (const Case& c : std::vector<Case>{{pct, "gpumem-percentage"},
                                         {mode, "vgpu-mode"},
                                         {bad_qty, "nvidia.com/gpumem"},
                                         {node_name, "spec.nodeName"},
                                         {privileged, "privileged"},
                                         {policy, "chaos"}}) {
    json out = HandleAdmissionReview(Review(c.pod), true, options_, config_);
    EXPECT_FALSE(out["response"]["allowed"]) << c.want;
    EXPECT_EQ(out["response"]["status"]["code"], 400);
    EXPECT_THAT(out["response"]["status"]["message"].get<std::string>(), HasSubstr(c.want));
  }
}

TEST_F(WebhookTest, ValidateChecksWithoutMutating) {
  json pod = GpuPod("p", 1, 1000);
  pod["spec"].erase("schedulerName");
  json out = HandleAdmissionReview(Review(pod), false, options_, config_);
  EXPECT_TRUE(out["response"]["allowed"]);
  EXPECT_FALSE(out["response"].contains("patch"));
  json mode = GpuPod("p", 1, 1000, 0, {{"nvidia.com/vgpu-mode", "bogus"}});
  EXPECT_FALSE(
      HandleAdmissionReview(Review(mode), false, options_, config_)["response"]["allowed"]);
}

TEST_F(WebhookTest, GeneratedNamesAndRequestNamespaceAreUsed) {
  json pod = GpuPod("x", 1, 1000, 0, {{"nvidia.com/vgpu-mode", "mps"}});
  pod["metadata"].erase("name");
  pod["metadata"].erase("namespace");
  pod["metadata"]["generateName"] = "job-";
  json out = HandleAdmissionReview(Review(pod), true, options_, config_);
  EXPECT_FALSE(out["response"]["allowed"]);
  EXPECT_THAT(out["response"]["status"]["message"].get<std::string>(), HasSubstr("team/job-*"));
}

// The strict pod reader's bounds are for pods Prism schedules: a pod that asks for no GPU is
// admitted whatever the reader would say of it, and a GPU pod is still read strictly.
TEST_F(WebhookTest, PodsWithoutGpusAreAdmittedBeyondTheReadersBounds) {
  json plain = testing::PodJson("team", "x", {testing::TestContainer("main", 0)});
  plain["metadata"].erase("name");
  plain["metadata"]["generateName"] = std::string(253, 'g');
  json env = json::array();
  for (int i = 0; i <= 10000; ++i) env.push_back({{"name", StrCat("V", i)}, {"value", "x"}});
  plain["spec"]["containers"][0]["env"] = env;
  json labels = json::object();
  for (int i = 0; i < 5000; ++i) labels[StrCat("label-", i)] = std::string(60, 'v');
  plain["metadata"]["labels"] = labels;
  ASSERT_FALSE(config::PodManifestFromJson(plain).ok());  // The reader's bounds do refuse it.
  for (bool mutate : {false, true}) {
    const json out = HandleAdmissionReview(Review(plain), mutate, options_, config_);
    EXPECT_TRUE(out["response"]["allowed"]) << out.dump().substr(0, 500);
    EXPECT_FALSE(out["response"].contains("patch"));
  }

  json gpu = GpuPod("x", 1, 1000);
  gpu["metadata"].erase("name");
  gpu["metadata"]["generateName"] = std::string(253, 'g');
  gpu["spec"].erase("schedulerName");
  json out = HandleAdmissionReview(Review(gpu), true, options_, config_);
  EXPECT_TRUE(out["response"]["allowed"]) << out.dump();
  EXPECT_EQ(Patch(out)[0]["value"], "prism-scheduler");

  gpu["spec"]["containers"][0]["env"] = env;
  out = HandleAdmissionReview(Review(gpu), true, options_, config_);
  EXPECT_FALSE(out["response"]["allowed"]);
  EXPECT_THAT(out["response"]["status"]["message"].get<std::string>(),
              HasSubstr("spec.containers[0].env"));

  // A resources shape the lenient scan cannot follow goes to the strict reader, which names it.
  json odd = testing::PodJson("team", "odd", {testing::TestContainer("main", 0)});
  odd["spec"]["containers"][0]["resources"] = "lots";
  out = HandleAdmissionReview(Review(odd), false, options_, config_);
  EXPECT_FALSE(out["response"]["allowed"]);
  EXPECT_THAT(out["response"]["status"]["message"].get<std::string>(), HasSubstr("resources"));
}

TEST_F(WebhookTest, MalformedReviewsAreDeniedWithAReason) {
  json out = HandleAdmissionReview(json{{"kind", "AdmissionReview"}}, true, options_, config_);
  EXPECT_FALSE(out["response"]["allowed"]);
  EXPECT_THAT(out["response"]["status"]["message"].get<std::string>(), HasSubstr("request"));
  json no_uid = Review(GpuPod("p", 1, 1000));
  no_uid["request"].erase("uid");
  EXPECT_FALSE(HandleAdmissionReview(no_uid, true, options_, config_)["response"]["allowed"]);
  json not_pod = Review(GpuPod("p", 1, 1000));
  not_pod["request"]["object"] = "nope";
  EXPECT_FALSE(HandleAdmissionReview(not_pod, true, options_, config_)["response"]["allowed"]);
}

TEST_F(WebhookTest, OtherKindsAndOperationsPass) {
  json review = Review(GpuPod("p", 1, 1000, 0, {{"nvidia.com/vgpu-mode", "mps"}}), "UPDATE");
  EXPECT_TRUE(HandleAdmissionReview(review, true, options_, config_)["response"]["allowed"]);
  review = Review(json::object());
  review["request"]["kind"]["kind"] = "Deployment";
  EXPECT_TRUE(HandleAdmissionReview(review, true, options_, config_)["response"]["allowed"]);
}

// Issue 13 #5: request fields of the wrong type used to throw (nlohmann's value()) out of the
// handler; they are denials naming the field.
TEST_F(WebhookTest, RequestFieldsOfTheWrongTypeAreDenialsNamingTheField) {
  struct Case {
    std::string field;
    json value;
    std::string error;
    bool uid_echoed;
  };
  for (const Case& c : std::vector<Case>{
           {"uid", 42, "AdmissionReview.request.uid: expected a string, got number", false},
           {"uid", json::array(), "AdmissionReview.request.uid: expected a string", false},
           {"operation", 1, "AdmissionReview.request.operation: expected a string, got number",
            true},
           {"namespace", json::object(), "AdmissionReview.request.namespace: expected a string",
            true},
           {"kind", "Pod", "AdmissionReview.request.kind: expected an object, got string", true},
       }) {
    json review = Review(GpuPod("p", 1, 1000));
    review["request"][c.field] = c.value;
    for (bool mutate : {true, false}) {
      json out;
      ASSERT_NO_THROW(out = HandleAdmissionReview(review, mutate, options_, config_)) << c.field;
      EXPECT_FALSE(out["response"]["allowed"].get<bool>()) << c.field;
      EXPECT_THAT(out["response"]["status"]["message"].get<std::string>(), HasSubstr(c.error));
      EXPECT_EQ(out["response"]["uid"], c.uid_echoed ? "req-1" : "") << c.field;
    }
  }
  json review = Review(GpuPod("p", 1, 1000));
  review["request"]["kind"]["kind"] = 7;
  json out;
  ASSERT_NO_THROW(out = HandleAdmissionReview(review, true, options_, config_));
  EXPECT_THAT(out["response"]["status"]["message"].get<std::string>(),
              HasSubstr("AdmissionReview.request.kind.kind: expected a string"));
  // A privileged container whose name is not a string is still named, not thrown on.
  json pod = GpuPod("p", 1, 1000);
  pod["spec"]["containers"][0]["securityContext"] = {{"privileged", true}};
  pod["spec"]["containers"][0]["name"] = "main";
  pod["spec"]["initContainers"] =
      json::array({json{{"name", 5}, {"securityContext", {{"privileged", true}}}}});
  ASSERT_NO_THROW(out = HandleAdmissionReview(Review(pod), true, options_, config_));
  EXPECT_FALSE(out["response"]["allowed"].get<bool>());
}

}  // namespace
}  // namespace prism::extender
