// Issues 38 and 39 end to end, on deploy/ as shipped (deploy_seed_fixture.h): forged Prism
// annotations stripped, refused and never charged; device env stripped and refused; the
// extender's verbs only for kube-scheduler's client certificate.
#include <string>

#include "absl/strings/escaping.h"
#include "tests/e2e/deploy_seed_fixture.h"

namespace prism::e2e {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;

// Issue 38, cases 1 and 3, on the shipped configuration (a T4 for slices): a tenant copies a
// scheduled pod's annotations onto a pod that asks for no GPU and presets its node. Through the
// shipped webhooks the annotations are stripped (mutating) and refused (validating); with
// admission bypassed the scheduler charges the forged pod nothing, so the next legitimate pod of
// the same size still starts; a tenant's later UPDATE of Prism's annotations is refused while the
// node agent's account may make it.
class ForgedAnnotationsTest : public DeploySeedTest {
 protected:
  // One AdmissionReview to the path the shipped configuration of `kind` names, as `user`; `entry`
  // picks a webhook of that configuration by name (default: its first).
  json Admit(const std::string& kind, const std::string& operation, const std::string& user,
             const json& pod, const json* old_pod = nullptr, const std::string& entry = "") {
    std::string path;
    for (const Object* w : bundle_.All(kind)) {
      for (const json& hook : w->at("webhooks")) {
        if (!entry.empty() && hook.value("name", "") != entry) continue;
        path = hook["clientConfig"]["service"].value("path", "");
        break;
      }
    }
    EXPECT_FALSE(path.empty()) << "no " << kind << " " << entry << " in deploy/";
    json request{{"uid", "review-forged"},
                 {"operation", operation},
                 {"namespace", "default"},
                 {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
                 {"userInfo", {{"username", user}, {"groups", {"system:authenticated"}}}},
                 {"object", pod}};
    if (old_pod != nullptr) request["oldObject"] = *old_pod;
    json review{{"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"},
                {"request", request}};
    httplib::Client https(StrCat("https://127.0.0.1:", webhook_port_));
    https.set_ca_cert_path(ca_file_.c_str());
    auto res = https.Post(path, review.dump(), "application/json");
    EXPECT_TRUE(res) << (res ? "" : httplib::to_string(res.error()));
    if (!res) return json::object();
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body, nullptr, false)["response"];
  }

  // The account the shipped scheduler trusts with Prism's annotations (its flag, as deployed).
  std::string TrustedUser() {
    const Object* deploy = bundle_.Find("Deployment", "prism-scheduler");
    std::string value;
    for (const json& arg : deploy->at("spec")["template"]["spec"]["containers"][0]["args"]) {
      const std::string a = arg;
      if (a.rfind("--trusted-service-accounts=", 0) == 0) value = a.substr(a.find('=') + 1);
    }
    EXPECT_FALSE(value.empty());
    return "system:serviceaccount:" + value.substr(0, value.find(','));
  }
};

TEST_P(ForgedAnnotationsTest, ACopiedDecisionIsStrippedRefusedAndNeverCharged) {
  ASSERT_NO_FATAL_FAILURE(StartInstall(GetParam()));
  const std::string tenant = "system:serviceaccount:default:ci";

  // A legitimate 12000 MiB slice runs; its annotations are copied, then it is deleted.
  json first = SlicePod("first", 12000);
  const std::string uid = Submit(first);
  ASSERT_FALSE(uid.empty());
  absl::StatusOr<kubelet::CreatedContainer> started = Run(first, uid);
  ASSERT_TRUE(started.ok()) << started.status() << Slurp(agent_.log);
  json copied = Pod("first")["metadata"]["annotations"];
  ASSERT_TRUE(copied.contains("prism.io/decision")) << copied.dump();
  ASSERT_TRUE(api_->Delete("pods", "default", "first").ok());
  kubelet_->RemovePod(uid);

  // The forged pod: no GPU asked, the node preset, the copied annotations.
  json evil{{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", "evil"}, {"namespace", "default"}, {"annotations", copied}}},
            {"spec",
             {{"nodeName", kNode}, {"containers", {{{"name", "main"}, {"image", "cuda"}}}}}}};
  // 1. Through admission: the mutating webhook strips every Prism annotation (and says so)...
  json mutated = Admit("MutatingWebhookConfiguration", "CREATE", tenant, evil);
  ASSERT_TRUE(mutated.value("allowed", false)) << mutated.dump();
  std::string patch;
  ASSERT_TRUE(absl::Base64Unescape(mutated.value("patch", ""), &patch));
  const json stripped = evil.patch(json::parse(patch));
  for (const char* key : {"prism.io/decision", "prism.io/allocation-status",
                          "hami.io/vgpu-devices-allocated", "hami.io/vgpu-node"}) {
    EXPECT_FALSE(stripped["metadata"]["annotations"].contains(key)) << key;
  }
  EXPECT_THAT(mutated["warnings"].dump(), HasSubstr("prism.io/decision"));
  // ...and the validating webhook refuses the pod as it was sent, naming the annotation.
  json validated = Admit("ValidatingWebhookConfiguration", "CREATE", tenant, evil);
  EXPECT_FALSE(validated.value("allowed", true));
  EXPECT_THAT(validated["status"].value("message", ""), HasSubstr("prism.io/decision"));

  // 2. Admission bypassed: the forged pod is stored as it is, and the scheduler charges nothing.
  ASSERT_TRUE(api_->Create("pods", evil).ok());
  // The scheduler has seen it (its decision is counted as one that does not decode against the
  // pod's request) before the next pod asks for the same memory.
  bool seen = false;
  for (int i = 0; i < 1000 && !seen; ++i) {
    httplib::Client probe("127.0.0.1", probe_port_);
    auto res = probe.Get("/metrics");
    const std::string text = res ? res->body : "";
    const std::string name = "\nprism_scheduler_decision_decode_failures ";
    const size_t at = text.find(name);
    seen = at != std::string::npos && std::stod(text.substr(at + name.size())) >= 1;
    if (!seen) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(seen) << Slurp(scheduler_.log);
  json second = SlicePod("second", 12000);
  const std::string second_uid = Submit(second);
  ASSERT_FALSE(second_uid.empty());
  started = Run(second, second_uid);
  ASSERT_TRUE(started.ok()) << started.status() << Slurp(scheduler_.log);
  EXPECT_EQ(started->env.count("PRISM_ALLOCATION_ERROR"), 0u)
      << started->env["PRISM_ALLOCATION_ERROR"];

  // 3. A tenant's later UPDATE of the running pod's decision is refused; the node agent's
  //    account (the one the shipped scheduler trusts) may write it.
  const json running = Pod("second");
  json edited = running;
  edited["metadata"]["annotations"]["prism.io/decision"] =
      copied["prism.io/decision"].get<std::string>() + " ";
  json refused = Admit("ValidatingWebhookConfiguration", "UPDATE", tenant, edited, &running);
  EXPECT_FALSE(refused.value("allowed", true));
  EXPECT_THAT(refused["status"].value("message", ""), HasSubstr("changed prism.io/decision"));
  json removed = running;
  removed["metadata"]["annotations"].erase("prism.io/decision");
  refused = Admit("ValidatingWebhookConfiguration", "UPDATE", tenant, removed, &running);
  EXPECT_FALSE(refused.value("allowed", true));
  json allowed = Admit("ValidatingWebhookConfiguration", "UPDATE", TrustedUser(), edited, &running);
  EXPECT_TRUE(allowed.value("allowed", false)) << allowed.dump();
}

INSTANTIATE_TEST_SUITE_P(Issue38, ForgedAnnotationsTest,
                         ::testing::Values(NodeCase{"t4", kT4Gpus, {}, {}}), CaseName);

// Issue 39, finding 2, on the shipped configuration: a pod that asks for no GPU cannot take the
// node's GPUs by setting the NVIDIA runtime's env. The mutating webhook strips it (saying so), the
// validating webhook refuses the pod as sent; a GPU pod's own variable is stripped too and its
// container gets exactly its GPU from the CDI spec. In a namespace the slice-limits entry selects,
// CUDA_DISABLE_CONTROL=true is refused.
class DeviceEnvAdmissionTest : public ForgedAnnotationsTest {};

TEST_P(DeviceEnvAdmissionTest, AGpuLessPodCannotTakeGpusByEnv) {
  ASSERT_NO_FATAL_FAILURE(StartInstall(GetParam()));
  const std::string tenant = "system:serviceaccount:default:ci";
  const json nvidia_all{{"name", "NVIDIA_VISIBLE_DEVICES"}, {"value", "all"}};
  json evil{{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", "env-evil"}, {"namespace", "default"}}},
            {"spec",
             {{"initContainers",
               {{{"name", "setup"}, {"image", "cuda"}, {"env", json::array({nvidia_all})}}}},
              {"containers",
               {{{"name", "main"},
                 {"image", "cuda"},
                 {"env", json::array({{{"name", "HOME"}, {"value", "/root"}},
                                      nvidia_all,
                                      {{"name", "NVIDIA_DRIVER_CAPABILITIES"},
                                       {"value", "all"}}})}}}}}}};

  // 1. Mutating: every NVIDIA variable is removed, the rest kept, one warning per container.
  json mutated = Admit("MutatingWebhookConfiguration", "CREATE", tenant, evil);
  ASSERT_TRUE(mutated.value("allowed", false)) << mutated.dump();
  std::string patch;
  ASSERT_TRUE(absl::Base64Unescape(mutated.value("patch", ""), &patch));
  const json stripped = evil.patch(json::parse(patch));
  EXPECT_EQ(stripped["spec"]["initContainers"][0]["env"], json::array());
  EXPECT_EQ(stripped["spec"]["containers"][0]["env"],
            json::array({{{"name", "HOME"}, {"value", "/root"}}}));
  EXPECT_EQ(mutated["warnings"].size(), 2u) << mutated.dump();
  EXPECT_THAT(mutated["warnings"].dump(), HasSubstr("NVIDIA_VISIBLE_DEVICES"));

  // 2. Validating: the pod as sent is refused, naming container and variable; as stripped, it
  //    passes.
  json validated = Admit("ValidatingWebhookConfiguration", "CREATE", tenant, evil);
  EXPECT_FALSE(validated.value("allowed", true));
  EXPECT_THAT(validated["status"].value("message", ""),
              HasSubstr("init container setup sets NVIDIA_VISIBLE_DEVICES"));
  validated = Admit("ValidatingWebhookConfiguration", "CREATE", tenant, stripped);
  EXPECT_TRUE(validated.value("allowed", false)) << validated.dump();

  // 3. A GPU pod through the whole path (Submit applies the mutating patch): its container asked
  //    the runtime for every GPU and gets exactly its one, from Prism's CDI spec.
  json sliced = SlicePod("sliced", 12000);
  sliced["spec"]["containers"][0]["env"] = json::array({nvidia_all});
  const std::string uid = Submit(sliced);
  ASSERT_FALSE(uid.empty());
  EXPECT_EQ(Pod("sliced")["spec"]["containers"][0].value("env", json::array()), json::array());
  absl::StatusOr<kubelet::CreatedContainer> started = Run(sliced, uid);
  ASSERT_TRUE(started.ok()) << started.status() << Slurp(agent_.log);
  const std::string visible = started->env["NVIDIA_VISIBLE_DEVICES"];
  EXPECT_EQ(visible.rfind("GPU-", 0), 0u) << visible;
  EXPECT_EQ(visible.find(','), std::string::npos) << visible;

  // 4. The slice-limits entry (namespaces labelled prism.io/enforce-slice-limits=true) refuses
  //    the switch that turns the limiter off; the main validating entry lets it pass.
  json off = SlicePod("off", 12000);
  off["spec"]["containers"][0]["env"] =
      json::array({{{"name", "CUDA_DISABLE_CONTROL"}, {"value", "true"}}});
  json enforced = Admit("ValidatingWebhookConfiguration", "CREATE", tenant, off, nullptr,
                        "slice-limits.pods.prism.io");
  EXPECT_FALSE(enforced.value("allowed", true)) << enforced.dump();
  EXPECT_THAT(enforced["status"].value("message", ""), HasSubstr("CUDA_DISABLE_CONTROL"));
  json plain = Admit("ValidatingWebhookConfiguration", "CREATE", tenant, off);
  EXPECT_TRUE(plain.value("allowed", false)) << plain.dump();
}

INSTANTIATE_TEST_SUITE_P(Issue39, DeviceEnvAdmissionTest,
                         ::testing::Values(NodeCase{"t4", kT4Gpus, {}, {}}), CaseName);

// Issue 39, finding 1, on the shipped configuration: the extender's verbs answer only
// kube-scheduler. A caller without its client certificate (or with the scheduler's own serving
// certificate, which a pod of the scheduler holds) is refused at the TLS handshake; with it,
// /bind of a pod that is not Prism's (another namespace, the default scheduler, no GPU) is
// refused and the pod stays unbound.
class ExtenderCallerTest : public DeploySeedTest {};

TEST_P(ExtenderCallerTest, OnlyKubeSchedulersCertificateReachesTheVerbsAndBindTakesOnlyPrismsPods) {
  ASSERT_NO_FATAL_FAILURE(StartInstall(GetParam()));
  json victim{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "secret-holder"}, {"namespace", "victim"}}},
              {"spec",
               {{"schedulerName", "default-scheduler"},
                {"containers", {{{"name", "main"}, {"image", "app"}}}}}}};
  absl::StatusOr<json> created = api_->Create("pods", victim);
  ASSERT_TRUE(created.ok()) << created.status();
  const json bind{{"PodName", "secret-holder"},
                  {"PodNamespace", "victim"},
                  {"PodUID", k8s::Uid(*created)},
                  {"Node", kNode}};
  const std::string url = StrCat("https://127.0.0.1:", port_);

  {  // No client certificate: the handshake fails, no verb runs.
    httplib::Client anonymous(url);
    anonymous.set_ca_cert_path(ca_file_.c_str());
    auto res = anonymous.Post("/bind", bind.dump(), "application/json");
    EXPECT_FALSE(res) << "answered " << res->status << ": " << res->body;
  }
  {  // The serving certificate (another root) is no client certificate here either.
    const std::string cert = deviceplugin::testing::WriteFile(dir_ / "serving.crt", tls_secret_["tls.crt"]);
    const std::string key = deviceplugin::testing::WriteFile(dir_ / "serving.key", tls_secret_["tls.key"]);
    httplib::Client impostor(url, cert, key);
    impostor.set_ca_cert_path(ca_file_.c_str());
    auto res = impostor.Post("/bind", bind.dump(), "application/json");
    EXPECT_FALSE(res) << "answered " << res->status << ": " << res->body;
  }
  {  // kube-scheduler's certificate: the verb runs and refuses a pod that is not Prism's.
    httplib::Client kube_scheduler(url, client_cert_file_, client_key_file_);
    kube_scheduler.set_ca_cert_path(ca_file_.c_str());
    auto res = kube_scheduler.Post("/bind", bind.dump(), "application/json");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    const json answer = json::parse(res->body, nullptr, false);
    EXPECT_FALSE(answer.value("Error", "").empty()) << res->body;
  }
  const absl::StatusOr<json> after = api_->Get("pods", "victim", "secret-holder");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ((*after)["spec"].value("nodeName", ""), "");
  // The webhook port still takes the API server, which sends no client certificate.
  EXPECT_FALSE(Submit(SlicePod("after-refusals", 4000)).empty());
}

INSTANTIATE_TEST_SUITE_P(Issue39, ExtenderCallerTest,
                         ::testing::Values(NodeCase{"t4", kT4Gpus, {}, {}}), CaseName);

}  // namespace
}  // namespace prism::e2e
