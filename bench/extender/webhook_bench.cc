// What the admission webhook adds to a pod UPDATE that does not touch Prism's annotations
// (issue 38): the shipped webhook configurations' matchConditions keep such an update away from
// the webhook entirely, so this is the cost where they cannot (a cluster before 1.28, or an
// UPDATE that does change one of them), set against what the webhook cannot avoid for any
// review: decoding the AdmissionReview JSON. Pods of realistic size: a GPU pod as a Deployment's
// ReplicaSet makes it (managedFields, owner references, two containers, a dozen labels and
// annotations) and the same pod carrying 64 KiB of annotations (a Helm release's config, say).
//
//   build/dev/bench/extender/webhook_bench --benchmark_counters_tabular=true
#include <string>

#include "benchmark/benchmark.h"
#include "nlohmann/json.hpp"

#include "config/device_config_yaml.h"
#include "extender/webhook.h"

namespace prism::extender {
namespace {

using json = nlohmann::json;

json RealisticPod(size_t extra_annotation_bytes) {
  json labels = json::object();
  for (int i = 0; i < 12; ++i) labels["app.example.com/label-" + std::to_string(i)] = "value";
  json annotations{
      {"prism.io/decision",
       R"({"node":"gpu-node-7","containers":[{"name":"main","devices":[{"uuid":"GPU-3c4d5e6f-0000-1111-2222-333344445555","index":1,"mode":"hami-core","memoryMiB":12000,"cores":30}]}]})"},
      {"prism.io/allocation-status",
       R"({"v":1,"containers":{"main":{"allocations":["a1b2c3-17"],"deviceIds":["GPU-3c4d5e6f-0000-1111-2222-333344445555::3"]}}})"},
      {"kubectl.kubernetes.io/restartedAt", "2026-12-01T10:00:00Z"}};
  for (size_t i = 0; extra_annotation_bytes > 0 && i * 1024 < extra_annotation_bytes; ++i) {
    annotations["example.com/config-" + std::to_string(i)] = std::string(1000, 'x');
  }
  json container{{"name", "main"},
                 {"image", "registry.example.com/team/trainer:1.2.3"},
                 {"command", {"python", "train.py", "--epochs", "30"}},
                 {"env", json::array()},
                 {"resources",
                  {{"limits", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "12000"},
                               {"cpu", "4"}, {"memory", "16Gi"}}},
                   {"requests", {{"cpu", "2"}, {"memory", "8Gi"}}}}},
                 {"volumeMounts", {{{"name", "data"}, {"mountPath", "/data"}}}}};
  for (int i = 0; i < 10; ++i) {
    container["env"].push_back({{"name", "VAR_" + std::to_string(i)}, {"value", "some-value"}});
  }
  json sidecar{{"name", "log-shipper"}, {"image", "registry.example.com/infra/shipper:4.5"}};
  json managed = json::array();
  for (int i = 0; i < 4; ++i) {
    managed.push_back({{"manager", "kube-controller-manager"},
                       {"operation", "Update"},
                       {"apiVersion", "v1"},
                       {"fieldsType", "FieldsV1"},
                       {"fieldsV1", {{"f:metadata", {{"f:labels", labels}}}}}});
  }
  return json{
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", "trainer-7d9f8b6c5-x2x7q"},
        {"namespace", "team-a"},
        {"uid", "0b7c2a6e-4f1d-4b8e-9f3a-1c2d3e4f5a6b"},
        {"labels", labels},
        {"annotations", annotations},
        {"ownerReferences",
         {{{"apiVersion", "apps/v1"}, {"kind", "ReplicaSet"}, {"name", "trainer-7d9f8b6c5"},
           {"uid", "5a6b7c8d-0000-4b8e-9f3a-1c2d3e4f5a6b"}, {"controller", true}}}},
        {"managedFields", managed}}},
      {"spec",
       {{"schedulerName", "prism-scheduler"},
        {"nodeName", "gpu-node-7"},
        {"containers", {container, sidecar}},
        {"volumes", {{{"name", "data"}, {"emptyDir", json::object()}}}}}},
      {"status", {{"phase", "Running"}}}};
}

// An UPDATE review as the API server sends it: a label changed, Prism's annotations untouched.
std::string UpdateReview(size_t extra_annotation_bytes) {
  const json old_pod = RealisticPod(extra_annotation_bytes);
  json pod = old_pod;
  pod["metadata"]["labels"]["app.example.com/label-0"] = "changed";
  return json{{"apiVersion", "admission.k8s.io/v1"},
              {"kind", "AdmissionReview"},
              {"request",
               {{"uid", "705ab4f5-6393-11e8-b7cc-42010a800002"},
                {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
                {"resource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
                {"namespace", "team-a"},
                {"operation", "UPDATE"},
                {"userInfo", {{"username", "system:serviceaccount:team-a:deployer"}}},
                {"object", pod},
                {"oldObject", old_pod}}}}
      .dump();
}

WebhookOptions Options() {
  WebhookOptions o;
  o.trusted_users = {"system:serviceaccount:prism-system:prism-device-plugin"};
  return o;
}

// The floor: decoding the review, which any answer needs.
void BM_DecodeReview(benchmark::State& state) {
  const std::string body = UpdateReview(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    json review = json::parse(body);
    benchmark::DoNotOptimize(review);
  }
  state.counters["body_bytes"] = static_cast<double>(body.size());
}

// Decoding plus the whole webhook answer (HandleAdmissionReview, the validating path).
void BM_UpdateReview(benchmark::State& state) {
  const std::string body = UpdateReview(static_cast<size_t>(state.range(0)));
  const WebhookOptions options = Options();
  const sched::DeviceConfig config = config::DefaultDeviceConfig();
  for (auto _ : state) {
    json review = json::parse(body);
    json answer = HandleAdmissionReview(review, /*mutate=*/false, options, config);
    if (!answer["response"].value("allowed", false)) state.SkipWithError("update refused");
    benchmark::DoNotOptimize(answer);
  }
  state.counters["body_bytes"] = static_cast<double>(body.size());
}

// The update check alone, on an already decoded review.
void BM_UpdateCheckOnly(benchmark::State& state) {
  const json review = json::parse(UpdateReview(static_cast<size_t>(state.range(0))));
  const WebhookOptions options = Options();
  const json& request = review["request"];
  const std::string user = request["userInfo"]["username"];
  for (auto _ : state) {
    PodReview r = ReviewPodUpdate(request["object"], &request["oldObject"], "team-a", user, options);
    if (!r.allowed) state.SkipWithError("update refused");
    benchmark::DoNotOptimize(r);
  }
}

BENCHMARK(BM_DecodeReview)->Arg(0)->Arg(64 << 10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_UpdateReview)->Arg(0)->Arg(64 << 10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_UpdateCheckOnly)->Arg(0)->Arg(64 << 10)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace prism::extender

BENCHMARK_MAIN();
