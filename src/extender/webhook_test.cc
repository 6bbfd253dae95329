#include "extender/webhook.h"

#include <functional>
#include <set>

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
  // An UPDATE is judged only on Prism's own annotations, not on the GPU request.
  const json pod = GpuPod("p", 1, 1000, 0, {{"nvidia.com/vgpu-mode", "mps"}});
  json review = Review(pod, "UPDATE");
  review["request"]["oldObject"] = pod;
  EXPECT_TRUE(HandleAdmissionReview(review, true, options_, config_)["response"]["allowed"]);
  for (const char* operation : {"DELETE", "CONNECT"}) {
    EXPECT_TRUE(HandleAdmissionReview(Review(pod, operation), true, options_,
                                      config_)["response"]["allowed"]);
  }
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


// --- Prism's own annotations (docs/security.md) ------------------------------------------------

constexpr char kScheduler[] = "system:serviceaccount:prism-system:prism-scheduler";
constexpr char kAgent[] = "system:serviceaccount:prism-system:prism-device-plugin";
constexpr char kTenant[] = "system:serviceaccount:team:ci";

json ReviewAs(const json& pod, const std::string& operation, const std::string& user,
              const json* old_pod = nullptr) {
  json review = Review(pod, operation);
  review["request"]["userInfo"] = {{"username", user}, {"groups", json::array()}};
  if (old_pod != nullptr) review["request"]["oldObject"] = *old_pod;
  return review;
}

class OwnedAnnotationsTest : public WebhookTest {
 protected:
  OwnedAnnotationsTest() { options_.trusted_users = {kScheduler, kAgent}; }
  // The annotations a scheduled 12000 MiB slice pod carries, as a tenant would copy them.
  std::map<std::string, std::string> Copied() const {
    return {{"prism.io/decision",
             R"({"node":"node-1","containers":[{"name":"main","devices":[{"uuid":"GPU-t4-0",)"
             R"("mode":"hami-core","memoryMiB":12000,"cores":0}]}]})"},
            {"prism.io/allocation-status", R"({"containers":{}})"},
            {"hami.io/vgpu-devices-allocated", "GPU-t4-0,NVIDIA,12000,0:;"}};
  }
};

TEST_F(OwnedAnnotationsTest, CreateStripsThemForTenantsEvenOnPodsWithoutGpus) {
  // Case 1 of issue 38: no GPU asked, the node preset, a scheduled pod's annotations copied.
  json pod = testing::PodJson("team", "evil", {{"main", 0}}, Copied());
  pod["spec"]["nodeName"] = "node-1";
  json out = HandleAdmissionReview(ReviewAs(pod, "CREATE", kTenant), true, options_, config_);
  ASSERT_TRUE(out["response"]["allowed"]) << out.dump();
  json patch = Patch(out);
  std::set<std::string> removed;
  for (const json& op : patch) {
    EXPECT_EQ(op["op"], "remove");
    removed.insert(op["path"].get<std::string>());
  }
  EXPECT_EQ(removed, (std::set<std::string>{"/metadata/annotations/prism.io~1decision",
                                            "/metadata/annotations/prism.io~1allocation-status",
                                            "/metadata/annotations/hami.io~1vgpu-devices-allocated"}));
  ASSERT_EQ(out["response"]["warnings"].size(), 1u);
  EXPECT_THAT(out["response"]["warnings"][0].get<std::string>(), HasSubstr("prism.io/decision"));
  // The validating webhook, which sees the pod after every mutation, refuses what is left.
  out = HandleAdmissionReview(ReviewAs(pod, "CREATE", kTenant), false, options_, config_);
  EXPECT_FALSE(out["response"]["allowed"]);
  const std::string message = out["response"]["status"]["message"];
  EXPECT_THAT(message, HasSubstr("pod team/evil"));
  EXPECT_THAT(message, HasSubstr("prism.io/decision"));
  EXPECT_THAT(message, HasSubstr(kTenant));
  EXPECT_THAT(message, HasSubstr(kScheduler));
}

TEST_F(OwnedAnnotationsTest, StrippingComesBeforeTheGpuPatches) {
  json pod = GpuPod("p", 0, 3000, 0, Copied());
  pod["spec"].erase("schedulerName");
  json out = HandleAdmissionReview(ReviewAs(pod, "CREATE", kTenant), true, options_, config_);
  ASSERT_TRUE(out["response"]["allowed"]) << out.dump();
  json patch = Patch(out);
  ASSERT_EQ(patch.size(), 5u) << patch.dump();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(patch[i]["op"], "remove");
  EXPECT_EQ(patch[3]["path"], "/spec/schedulerName");
  EXPECT_THAT(patch[4]["path"].get<std::string>(), HasSubstr("nvidia.com~1gpu"));
}

TEST_F(OwnedAnnotationsTest, TrustedUsersAndCleanPodsPassUnchanged) {
  json pod = testing::PodJson("team", "p", {{"main", 0}}, Copied());
  for (bool mutate : {true, false}) {
    json out = HandleAdmissionReview(ReviewAs(pod, "CREATE", kAgent), mutate, options_, config_);
    EXPECT_TRUE(out["response"]["allowed"]);
    EXPECT_FALSE(out["response"].contains("patch"));
    json clean = testing::PodJson("team", "p", {{"main", 0}}, {{"team.io/owner", "x"}});
    out = HandleAdmissionReview(ReviewAs(clean, "CREATE", kTenant), mutate, options_, config_);
    EXPECT_TRUE(out["response"]["allowed"]);
    EXPECT_FALSE(out["response"].contains("patch"));
    EXPECT_FALSE(out["response"].contains("warnings"));
  }
}

TEST_F(OwnedAnnotationsTest, UpdatesThatTouchThemAreRefusedForTenants) {
  const json old_pod = GpuPod("p", 1, 1000, 0, Copied());
  struct Case {
    std::string what;
    std::function<void(json&)> edit;
  };
  for (const Case& c : std::vector<Case>{
           {"changed prism.io/decision",
            [](json& p) { p["metadata"]["annotations"]["prism.io/decision"] = "{}"; }},
           {"removed prism.io/allocation-status",
            [](json& p) { p["metadata"]["annotations"].erase("prism.io/allocation-status"); }},
           {"set hami.io/vgpu-node",
            [](json& p) { p["metadata"]["annotations"]["hami.io/vgpu-node"] = "node-2"; }},
           {"removed prism.io/decision", [](json& p) { p["metadata"].erase("annotations"); }},
       }) {
    json pod = old_pod;
    c.edit(pod);
    for (bool mutate : {true, false}) {
      json out = HandleAdmissionReview(ReviewAs(pod, "UPDATE", kTenant, &old_pod), mutate,
                                       options_, config_);
      EXPECT_FALSE(out["response"]["allowed"]) << c.what;
      EXPECT_THAT(out["response"]["status"]["message"].get<std::string>(), HasSubstr(c.what));
      // Prism's own service accounts may.
      out = HandleAdmissionReview(ReviewAs(pod, "UPDATE", kAgent, &old_pod), mutate, options_,
                                  config_);
      EXPECT_TRUE(out["response"]["allowed"]) << c.what;
    }
  }
  // Any other change is not Prism's business, whoever makes it.
  json pod = old_pod;
  pod["metadata"]["annotations"]["team.io/owner"] = "x";
  pod["metadata"]["labels"] = {{"app", "y"}};
  json out = HandleAdmissionReview(ReviewAs(pod, "UPDATE", kTenant, &old_pod), false, options_,
                                   config_);
  EXPECT_TRUE(out["response"]["allowed"]);
}

TEST_F(OwnedAnnotationsTest, BadInputIsRefusedNotThrownOn) {
  const json pod = GpuPod("p", 1, 1000, 0, Copied());
  json out;
  // An UPDATE without its old object.
  ASSERT_NO_THROW(out = HandleAdmissionReview(ReviewAs(pod, "UPDATE", kTenant), false, options_,
                                              config_));
  EXPECT_FALSE(out["response"]["allowed"]);
  EXPECT_THAT(out["response"]["status"]["message"].get<std::string>(), HasSubstr("oldObject"));
  // Annotations that are not an object of strings, in either object.
  for (const json& bad : {json("x"), json::array({1}), json{{"prism.io/decision", 5}}}) {
    json odd = pod;
    odd["metadata"]["annotations"] = bad;
    for (const char* op : {"CREATE", "UPDATE"}) {
      ASSERT_NO_THROW(out = HandleAdmissionReview(ReviewAs(odd, op, kTenant, &pod), true,
                                                  options_, config_));
      EXPECT_FALSE(out["response"]["allowed"]) << bad.dump();
      EXPECT_THAT(out["response"]["status"]["message"].get<std::string>(),
                  HasSubstr("metadata.annotations"));
      ASSERT_NO_THROW(out = HandleAdmissionReview(ReviewAs(pod, "UPDATE", kTenant, &odd), true,
                                                  options_, config_));
      EXPECT_FALSE(out["response"]["allowed"]);
    }
  }
  // userInfo of the wrong shape.
  json review = ReviewAs(pod, "CREATE", kTenant);
  review["request"]["userInfo"] = "root";
  ASSERT_NO_THROW(out = HandleAdmissionReview(review, true, options_, config_));
  EXPECT_FALSE(out["response"]["allowed"]);
  EXPECT_THAT(out["response"]["status"]["message"].get<std::string>(), HasSubstr("userInfo"));
  // No userInfo at all: nobody trusted.
  review["request"].erase("userInfo");
  ASSERT_NO_THROW(out = HandleAdmissionReview(review, false, options_, config_));
  EXPECT_FALSE(out["response"]["allowed"]);
  // Annotations of every size: the message names keys and users, never values.
  for (size_t size : {size_t{0}, size_t{1}, size_t{4096}, size_t{256} << 10}) {
    json big = pod;
    big["metadata"]["annotations"]["prism.io/decision"] = std::string(size, 'x');
    ASSERT_NO_THROW(out = HandleAdmissionReview(ReviewAs(big, "UPDATE", kTenant, &pod), false,
                                                options_, config_));
    EXPECT_FALSE(out["response"]["allowed"]);
    EXPECT_LT(out["response"]["status"]["message"].get<std::string>().size(), 600u);
  }
  // A user that only looks like Prism's service account is not it.
  for (const char* user : {"system:serviceaccount:prism-system:prism-scheduler ",
                           "system:serviceaccount:prism-system:prism-schedulerx",
                           "prism-scheduler", ""}) {
    json changed = pod;
    changed["metadata"]["annotations"]["prism.io/decision"] = "{}";
    out = HandleAdmissionReview(ReviewAs(changed, "UPDATE", user, &pod), false, options_, config_);
    EXPECT_FALSE(out["response"]["allowed"]) << user;
  }
}

TEST_F(OwnedAnnotationsTest, NoTrustedUsersMeansNobody) {
  options_.trusted_users.clear();
  json pod = testing::PodJson("team", "p", {{"main", 0}}, Copied());
  json out = HandleAdmissionReview(ReviewAs(pod, "CREATE", kScheduler), false, options_, config_);
  EXPECT_FALSE(out["response"]["allowed"]);
  EXPECT_THAT(out["response"]["status"]["message"].get<std::string>(),
              HasSubstr("none configured"));
}

TEST(ServiceAccountUsersTest, ParsesTheFlag) {
  auto users = ServiceAccountUsers(" prism-system:prism-scheduler, prism-system:prism-device-plugin ");
  ASSERT_TRUE(users.ok()) << users.status();
  EXPECT_EQ(*users, (std::vector<std::string>{
                        "system:serviceaccount:prism-system:prism-scheduler",
                        "system:serviceaccount:prism-system:prism-device-plugin"}));
  EXPECT_TRUE(ServiceAccountUsers("").ok());
  for (const char* bad : {"prism-scheduler", "a:b:c", ":x", "x:", "Prism:x", "a:b c",
                          "system:serviceaccount:a:b"}) {
    EXPECT_FALSE(ServiceAccountUsers(bad).ok()) << bad;
  }
}

TEST_F(WebhookTest, PresetNodeNeedsATrustedScheduler) {
  json pod = GpuPod("p", 1, 1000);
  pod["spec"]["nodeName"] = "node-1";
  for (const char* scheduler : {"", "default-scheduler", "prism-scheduler", "volcano"}) {
    if (*scheduler == '\0') {
      pod["spec"].erase("schedulerName");
    } else {
      pod["spec"]["schedulerName"] = scheduler;
    }
    json out = HandleAdmissionReview(Review(pod), true, options_, config_);
    EXPECT_FALSE(out["response"]["allowed"]) << scheduler;
    EXPECT_THAT(out["response"]["status"]["message"].get<std::string>(),
                HasSubstr("spec.nodeName"));
  }
  options_.trusted_schedulers = {"volcano"};
  json out = HandleAdmissionReview(Review(pod), true, options_, config_);
  EXPECT_TRUE(out["response"]["allowed"]) << out.dump();
  // Pods without GPUs are not Prism's to place.
  json plain = testing::PodJson("team", "web", {{"main", 0}});
  plain["spec"]["nodeName"] = "node-1";
  out = HandleAdmissionReview(Review(plain), false, WebhookOptions(), config_);
  EXPECT_TRUE(out["response"]["allowed"]);
}

// --- Device env (issue 39 #2, docs/scheduler.md#device-env)
// ----------------------------------------

json Env(const std::map<std::string, std::string>& vars) {
  json env = json::array();
  for (const auto& [k, v] : vars) env.push_back({{"name", k}, {"value", v}});
  return env;
}

std::set<std::string> EnvNames(const json& container) {
  std::set<std::string> names;
  for (const json& e : container.value("env", json::array())) names.insert(e["name"]);
  return names;
}

class DeviceEnvTest : public OwnedAnnotationsTest {
 protected:
  json Admit(const json& pod, bool mutate, const std::string& user = kTenant) {
    return HandleAdmissionReview(ReviewAs(pod, "CREATE", user), mutate, options_,
                                 config_)["response"];
  }
  std::string Message(const json& response) { return response["status"].value("message", ""); }
};

TEST_F(DeviceEnvTest, APodWithoutGpusCannotAskTheRuntimeForThemByEnv) {
  json pod = testing::PodJson("team", "plain", {{"main", 0}});
  pod["spec"]["containers"][0]["env"] = Env({{"A", "1"},
                                             {"NVIDIA_DRIVER_CAPABILITIES", "all"},
                                             {"NVIDIA_VISIBLE_DEVICES", "all"},
                                             {"Z", "2"}});
  json out = Admit(pod, true);
  ASSERT_TRUE(out["allowed"]) << out.dump();
  json patch = Patch(json{{"response", out}});
  // Highest index first, so that each path names the entry it removes.
  EXPECT_EQ(patch, json::parse(R"([{"op":"remove","path":"/spec/containers/0/env/2"},
                                   {"op":"remove","path":"/spec/containers/0/env/1"}])"));
  EXPECT_EQ(EnvNames(pod.patch(patch)["spec"]["containers"][0]), (std::set<std::string>{"A", "Z"}));
  ASSERT_EQ(out["warnings"].size(), 1u);
  EXPECT_THAT(
      out["warnings"][0].get<std::string>(),
      HasSubstr("container main: removed NVIDIA_DRIVER_CAPABILITIES, NVIDIA_VISIBLE_DEVICES"));
  // The validating webhook refuses the pod as sent, naming the container, the variable and who.
  out = Admit(pod, false);
  EXPECT_FALSE(out["allowed"]);
  EXPECT_THAT(Message(out),
              HasSubstr("pod team/plain: container main sets NVIDIA_DRIVER_CAPABILITIES"));
  EXPECT_THAT(Message(out), HasSubstr("GPUs Prism did not grant"));
  EXPECT_THAT(Message(out), HasSubstr(kTenant));
  // Every variable the toolkit reads to add devices, and from valueFrom too (a ConfigMap's value
  // is not the webhook's to see).
  for (std::string_view name : kDeviceEnv) {
    json one = testing::PodJson("team", "plain", {{"main", 0}});
    one["spec"]["containers"][0]["env"] = json::array(
        {{{"name", name}, {"valueFrom", {{"configMapKeyRef", {{"name", "c"}, {"key", "k"}}}}}}});
    EXPECT_FALSE(Admit(one, false)["allowed"]) << name;
    EXPECT_EQ(Patch(json{{"response", Admit(one, true)}}).size(), 1u) << name;
  }
}

TEST_F(DeviceEnvTest, EveryContainerListIsCoveredAndGpuContainersKeepTheirCapabilities) {
  json pod = GpuPod("p", 1, 3000);
  pod["spec"].erase("schedulerName");
  json& gpu = pod["spec"]["containers"][0];
  gpu["env"] = Env({{"NVIDIA_VISIBLE_DEVICES", "all"},
                    {"NVIDIA_DRIVER_CAPABILITIES", "compute,video"},
                    {"CUDA_VERSION", "12.4.1"}});
  pod["spec"]["containers"].push_back(
      {{"name", "sidecar"}, {"image", "cuda"}, {"env", Env({{"NVIDIA_VISIBLE_DEVICES", "all"}})}});
  pod["spec"]["initContainers"] = json::array(
      {{{"name", "setup"}, {"image", "cuda"}, {"env", Env({{"NVIDIA_IMEX_CHANNELS", "all"}})}}});
  json out = Admit(pod, true);
  ASSERT_TRUE(out["allowed"]) << out.dump();
  const json patched = pod.patch(Patch(json{{"response", out}}));
  EXPECT_EQ(patched["spec"]["schedulerName"], "prism-scheduler");  // The GPU review still ran.
  // The GPU container keeps what chooses libraries for its own devices; its devices are Prism's.
  EXPECT_EQ(EnvNames(patched["spec"]["containers"][0]),
            (std::set<std::string>{"CUDA_VERSION", "NVIDIA_DRIVER_CAPABILITIES"}));
  EXPECT_EQ(EnvNames(patched["spec"]["containers"][1]), std::set<std::string>{});
  EXPECT_EQ(EnvNames(patched["spec"]["initContainers"][0]), std::set<std::string>{});
  EXPECT_EQ(out["warnings"].size(), 3u) << out.dump();
  EXPECT_TRUE(Admit(patched, false)["allowed"]) << Admit(patched, false).dump();
  for (const char* container : {"container main", "container sidecar", "init container setup"}) {
    json one = pod;
    if (std::string_view(container) != "container main") {
      one["spec"]["containers"][0]["env"] = json::array();
    }
    if (std::string_view(container) != "container sidecar") one["spec"]["containers"].erase(1);
    if (std::string_view(container) != "init container setup") one["spec"].erase("initContainers");
    EXPECT_THAT(Message(Admit(one, false)), HasSubstr(container));
  }
}

TEST_F(DeviceEnvTest, VoidIsAllowedAndALegacyCudaVersionGetsIt) {
  json pod = testing::PodJson("team", "build", {{"main", 0}});
  pod["spec"]["containers"][0]["env"] = Env({{"NVIDIA_VISIBLE_DEVICES", " void "}});
  for (bool mutate : {true, false}) {
    json out = Admit(pod, mutate);
    EXPECT_TRUE(out["allowed"]);
    EXPECT_FALSE(out.contains("patch"));
  }
  // CUDA_VERSION without NVIDIA_REQUIRE_CUDA makes the runtime give every GPU: the mutating
  // webhook sets NVIDIA_VISIBLE_DEVICES=void beside it, the validating one asks for that.
  pod["spec"]["containers"][0]["env"] =
      Env({{"CUDA_VERSION", "12.4.1"}, {"NVIDIA_VISIBLE_DEVICES", "all"}});
  json out = Admit(pod, true);
  ASSERT_TRUE(out["allowed"]) << out.dump();
  json patch = Patch(json{{"response", out}});
  EXPECT_EQ(patch, json::parse(R"([{"op":"remove","path":"/spec/containers/0/env/1"},
      {"op":"add","path":"/spec/containers/0/env/-",
       "value":{"name":"NVIDIA_VISIBLE_DEVICES","value":"void"}}])"));
  EXPECT_THAT(out["warnings"][0].get<std::string>(), HasSubstr("NVIDIA_VISIBLE_DEVICES=void"));
  const json patched = pod.patch(patch);
  EXPECT_TRUE(Admit(patched, false)["allowed"]);
  pod["spec"]["containers"][0]["env"] = Env({{"CUDA_VERSION", "12.4.1"}});
  EXPECT_THAT(Message(Admit(pod, false)), HasSubstr("add NVIDIA_VISIBLE_DEVICES=void"));
  // NVIDIA_REQUIRE_* and NVIDIA_DISABLE_REQUIRE only narrow what a container accepts.
  pod["spec"]["containers"][0]["env"] =
      Env({{"NVIDIA_REQUIRE_CUDA", "cuda>=12"}, {"NVIDIA_DISABLE_REQUIRE", "true"}});
  EXPECT_TRUE(Admit(pod, false)["allowed"]);
  // A container asking for 0 GPUs gets none: it is held to the rules of one without GPUs.
  json zero = GpuPod("p", 1, 0);
  zero["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "0";
  zero["spec"]["containers"][0]["env"] = Env({{"NVIDIA_DRIVER_CAPABILITIES", "all"}});
  EXPECT_FALSE(Admit(zero, false)["allowed"]);
}

TEST_F(DeviceEnvTest, TrustedUsersAreExempt) {
  json pod = testing::PodJson("team", "p", {{"main", 0}});
  pod["spec"]["containers"][0]["env"] = Env({{"NVIDIA_VISIBLE_DEVICES", "all"}});
  for (bool mutate : {true, false}) {
    json out = Admit(pod, mutate, kAgent);
    EXPECT_TRUE(out["allowed"]);
    EXPECT_FALSE(out.contains("patch"));
  }
}

TEST_F(DeviceEnvTest, AnEphemeralContainerCannotBeAddedWithDeviceEnv) {
  json old = testing::PodJson("team", "p", {{"main", 0}});
  json debug{
      {"name", "debug"}, {"image", "busybox"}, {"env", Env({{"NVIDIA_VISIBLE_DEVICES", "all"}})}};
  json now = old;
  now["spec"]["ephemeralContainers"] = json::array({debug});
  json out =
      HandleAdmissionReview(ReviewAs(now, "UPDATE", kTenant, &old), false, options_, config_);
  EXPECT_FALSE(out["response"]["allowed"]);
  EXPECT_THAT(out["response"]["status"]["message"].get<std::string>(),
              HasSubstr("ephemeral container debug sets NVIDIA_VISIBLE_DEVICES"));
  // One already there was judged when it was added; the node agent's account is trusted.
  out = HandleAdmissionReview(ReviewAs(now, "UPDATE", kTenant, &now), false, options_, config_);
  EXPECT_TRUE(out["response"]["allowed"]);
  out = HandleAdmissionReview(ReviewAs(now, "UPDATE", kAgent, &old), false, options_, config_);
  EXPECT_TRUE(out["response"]["allowed"]);
  now["spec"]["ephemeralContainers"][0]["env"] = Env({{"NVIDIA_VISIBLE_DEVICES", "void"}});
  out = HandleAdmissionReview(ReviewAs(now, "UPDATE", kTenant, &old), false, options_, config_);
  EXPECT_TRUE(out["response"]["allowed"]);
}

TEST_F(DeviceEnvTest, SliceLimitSwitchesAreRefusedWhereEnforced) {
  json pod = GpuPod("p", 1, 3000);
  auto with = [&pod](const json& env) {
    json out = pod;
    out["spec"]["containers"][0]["env"] = env;
    return out;
  };
  const json off = with(Env({{"CUDA_DISABLE_CONTROL", "true"}}));
  EXPECT_TRUE(Admit(off, false)["allowed"]);  // Not enforced: HAMi's debugging switch.
  options_.enforce_slice_limits = true;
  for (const char* value : {"true", "1", " YES ", "on", "maybe"}) {
    json out = Admit(with(Env({{"CUDA_DISABLE_CONTROL", value}})), false);
    EXPECT_FALSE(out["allowed"]) << value;
    EXPECT_THAT(Message(out), HasSubstr("container main sets CUDA_DISABLE_CONTROL="));
  }
  for (const char* value : {"false", "0", "", "Off"}) {
    EXPECT_TRUE(Admit(with(Env({{"CUDA_DISABLE_CONTROL", value}})), false)["allowed"]) << value;
  }
  EXPECT_FALSE(Admit(with(Env({{"GPU_CORE_UTILIZATION_POLICY", "Disable"}})), false)["allowed"]);
  EXPECT_TRUE(Admit(with(Env({{"GPU_CORE_UTILIZATION_POLICY", "force"}})), false)["allowed"]);
  json from =
      with(json::array({{{"name", "CUDA_DISABLE_CONTROL"},
                         {"valueFrom", {{"secretKeyRef", {{"name", "s"}, {"key", "k"}}}}}}}));
  EXPECT_THAT(Message(Admit(from, false)), HasSubstr("valueFrom"));
  EXPECT_TRUE(Admit(off, false, kAgent)["allowed"]);
  // An ephemeral container added later is held to the same rule.
  json old = GpuPod("p", 1, 3000);
  json now = old;
  now["spec"]["ephemeralContainers"] = json::array(
      {{{"name", "debug"}, {"image", "busybox"}, {"env", Env({{"CUDA_DISABLE_CONTROL", "1"}})}}});
  json out =
      HandleAdmissionReview(ReviewAs(now, "UPDATE", kTenant, &old), false, options_, config_);
  EXPECT_FALSE(out["response"]["allowed"]);
}

TEST_F(DeviceEnvTest, EnvShapesTheApiServerNeverSendsAreRefusedNamingTheField) {
  json pod = testing::PodJson("team", "p", {{"main", 0}});
  for (const auto& [env, field] : std::vector<std::pair<json, std::string>>{
           {json("x"), "spec.containers[0].env: expected a list"},
           {json::array({7}), "spec.containers[0].env[0]: expected an object"},
           {json::array({{{"name", 7}}}), "spec.containers[0].env[0].name: expected a string"},
           {json::array({{{"name", "NVIDIA_VISIBLE_DEVICES"}, {"value", 1}}}),
            "spec.containers[0].env[0].value: expected a string"}}) {
    pod["spec"]["containers"][0]["env"] = env;
    for (bool mutate : {true, false}) {
      json out = Admit(pod, mutate);
      EXPECT_FALSE(out["allowed"]) << env.dump();
      EXPECT_THAT(Message(out), HasSubstr(field));
    }
  }
  // A hostile container name is bounded and escaped in messages.
  json named = testing::PodJson("team", "p", {{"main", 0}});
  named["spec"]["containers"][0]["name"] = std::string("x\033[2J") + std::string(500, 'n');
  named["spec"]["containers"][0]["env"] = Env({{"NVIDIA_VISIBLE_DEVICES", "all"}});
  const std::string message = Message(Admit(named, false));
  EXPECT_THAT(message, HasSubstr("container x\\x1b[2J"));
  EXPECT_LT(message.size(), 600u);
}

TEST_F(DeviceEnvTest, AGuardedEntryDeepInALongEnvIsFound) {
  json pod = testing::PodJson("team", "p", {{"main", 0}});
  json env = json::array();
  for (int i = 0; i < 10000; ++i) env.push_back({{"name", StrCat("V", i)}, {"value", "x"}});
  env.push_back({{"name", "NVIDIA_VISIBLE_DEVICES"}, {"value", "all"}});
  pod["spec"]["containers"][0]["env"] = env;
  json out = Admit(pod, true);
  ASSERT_TRUE(out["allowed"]);
  EXPECT_EQ(Patch(json{{"response", out}}),
            json::parse(R"([{"op":"remove","path":"/spec/containers/0/env/10000"}])"));
}

}  // namespace
}  // namespace prism::extender
