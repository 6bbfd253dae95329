// Issue 38, the node agent's half: a tenant cannot forge the agent's state. The real
// `prism device-plugin` binary runs from the shipped DaemonSet's args (deploy/ as a user gets
// it), against a fake API server over HTTPS, a fake kubelet speaking the device plugin and
// PodResources gRPC APIs, and simulated GPUs. Admission is bypassed, as a cluster without the
// webhook (or a tenant with spec.nodeName) allows: pods are created bound to the node, with the
// annotations the tenant chooses.
//   - Pods whose prism.io/allocation-status names allocations the agent never made (no decision,
//     a copied decision, a campaign of mutations of a real status) must not make the restarted
//     agent fail closed: it stays ready, every GPU healthy, and it allocates.
//   - An Allocate or PreStartContainer call with a 64 KiB device ID is answered with a short
//     error.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"

#include "base/strings.h"
#include "deviceplugin/fake_driver_tree.h"
#include "deviceplugin/inventory.h"
#include "deviceplugin/test_util.h"
#include "k8s/objects.h"
#include "kubelet/deviceplugin/v1beta1/api.grpc.pb.h"
#include "kubelet/fake_kubelet.h"
#include "kubelet/kubelet_client.h"
#include "testing/fake_apiserver/fake_apiserver.h"
#include "tests/e2e/harness/deploy_bundle.h"

namespace prism::e2e {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;

constexpr char kNode[] = "gpu-node-1";
constexpr char kResource[] = "nvidia.com/gpu";
constexpr char kStatus[] = "prism.io/allocation-status";
// Two whole GPUs (MIG off): software slices.
constexpr char kGpus[] = "gpus:\n  - model: A100-PCIE-40GB\n  - model: A100-PCIE-40GB\n";

// A pod bound to the node by its creator (no scheduler), one container asking for a slice.
json BoundPod(const std::string& name, const std::map<std::string, std::string>& annotations) {
  json pod{{"apiVersion", "v1"},
           {"kind", "Pod"},
           {"metadata", {{"name", name}, {"namespace", "default"}}},
           {"spec",
            {{"nodeName", kNode},
             {"containers",
              {{{"name", "main"},
                {"image", "cuda"},
                {"resources",
                 {{"limits", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4000"}}}}}}}}}},
           {"status", {{"phase", "Pending"}}}};
  for (const auto& [k, v] : annotations) pod["metadata"]["annotations"][k] = v;
  return pod;
}

class ForgedStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path root = std::getenv("PRISM_SOURCE_DIR") ? std::getenv("PRISM_SOURCE_DIR") : ".";
    dir_ = deviceplugin::testing::TestDir();
    absl::StatusOr<DeployBundle> bundle = DeployBundle::Load(root);
    ASSERT_TRUE(bundle.ok()) << bundle.status();
    bundle_ = std::move(*bundle);
    fakeapi::FakeApiServerOptions api_options;
    api_options.tls = true;
    api_ = std::make_unique<fakeapi::FakeApiServer>(api_options);
    ASSERT_TRUE(api_->Start().ok());
    kubeconfig_ = deviceplugin::testing::WriteFile(dir_ / "kubeconfig", api_->KubeconfigYaml());
    for (const Object* cm : bundle_.All("ConfigMap")) ASSERT_TRUE(api_->Create("configmaps", *cm).ok());
    // The node, with the labels the DaemonSet selects (GPU feature discovery's).
    const Object* ds = bundle_.Find("DaemonSet", "prism-device-plugin");
    ASSERT_NE(ds, nullptr);
    json labels = {{"kubernetes.io/hostname", kNode}};
    const json selector =
        ds->at("spec").at("template").at("spec").value("nodeSelector", json::object());
    for (const auto& [k, v] : selector.items()) labels[k] = v;
    json node{{"apiVersion", "v1"},
              {"kind", "Node"},
              {"metadata", {{"name", kNode}, {"labels", labels}}},
              {"status", {{"allocatable", {{"cpu", "32"}, {"memory", "128Gi"}, {"pods", "110"}}}}}};
    ASSERT_TRUE(api_->Create("nodes", node).ok());
    state_file_ = deviceplugin::testing::WriteFile(dir_ / "gpus.yaml", kGpus);
    deviceplugin::testing::WriteFakeDriverTree(dir_ / "host", 2);
    kubelet::FakeKubeletOptions k{(dir_ / "dp").string(), (dir_ / "pr" / "kubelet.sock").string(),
                                  (dir_ / "cdi").string()};
    auto kubelet = kubelet::FakeKubelet::Start(k);
    ASSERT_TRUE(kubelet.ok()) << kubelet.status();
    kubelet_ = std::move(*kubelet);
  }

  void TearDown() override {
    KillAgent();
    if (kubelet_) kubelet_->Stop();
  }

  void KillAgent() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  // `prism device-plugin` as the DaemonSet runs it; returns once the kubelet has its devices and
  // the metrics port is known. Readiness is the test's to check.
  void StartAgent() {
    const Object* ds = bundle_.Find("DaemonSet", "prism-device-plugin");
    ASSERT_NE(ds, nullptr);
    LocalProcessOptions o;
    o.dir = dir_;
    o.field_refs = {{"spec.nodeName", kNode}, {"metadata.name", "prism-device-plugin-x"},
                    {"metadata.namespace", bundle_.namespace_name()}};
    absl::StatusOr<LocalProcess> p = LocalProcessFor(bundle_, *ds, "device-plugin", o);
    ASSERT_TRUE(p.ok()) << p.status();
    p->SetFlag("--kubeconfig", kubeconfig_);
    p->SetFlag("--nvml", "sim:" + state_file_);
    p->SetFlag("--device-plugin-path", (dir_ / "dp").string() + "/");
    p->SetFlag("--pod-resources-socket", (dir_ / "pr" / "kubelet.sock").string());
    p->SetFlag("--cdi-dir", (dir_ / "cdi").string());
    p->SetFlag("--state-dir", (dir_ / "state").string());
    p->SetFlag("--vgpu-dir", (dir_ / "vgpu").string());
    p->SetFlag("--metrics-address", "127.0.0.1:0");
    p->SetFlag("--dev-root", (dir_ / "host").string());
    p->SetFlag("--proc-root", (dir_ / "host" / "proc").string());
    log_ = (dir_ / "agent.log").string();
    const size_t log_before = Slurp(log_).size();
    const int registrations = kubelet_->registrations();
    pid_ = SpawnProcess(PRISM_BINARY, *p, log_);
    ASSERT_GT(pid_, 0);
    bool registered = false;
    for (int i = 0; i < 3000 && !registered; ++i) {
      registered = kubelet_->registrations() > registrations;
      if (!registered) absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(registered) << Slurp(log_);
    ASSERT_TRUE(kubelet_->WaitForPlugin(kResource, absl::Seconds(30))) << Slurp(log_);
    port_ = 0;
    for (int i = 0; i < 3000 && port_ == 0; ++i) {
      const std::string text = Slurp(log_).substr(log_before);
      const size_t at = text.find("metrics on 127.0.0.1:");
      if (at != std::string::npos) {
        port_ = std::stoi(text.substr(at + std::string("metrics on 127.0.0.1:").size()));
      } else {
        absl::SleepFor(absl::Milliseconds(10));
      }
    }
    ASSERT_GT(port_, 0) << Slurp(log_);
  }

  // /readyz's status once it is 200, or the last one after `timeout`.
  int WaitReady(absl::Duration timeout) {
    httplib::Client http("127.0.0.1", port_);
    int status = 0;
    const absl::Time deadline = absl::Now() + timeout;
    do {
      auto res = http.Get("/readyz");
      status = res ? res->status : 0;
      if (status == 200) break;
      absl::SleepFor(absl::Milliseconds(20));
    } while (absl::Now() < deadline);
    return status;
  }

  std::string Metrics() {
    httplib::Client http("127.0.0.1", port_);
    auto res = http.Get("/metrics");
    return res ? res->body : "";
  }

  std::string Create(const json& pod) {
    absl::StatusOr<json> created = api_->Create("pods", pod);
    EXPECT_TRUE(created.ok()) << created.status();
    return created.ok() ? k8s::Uid(*created) : "";
  }

  // The kubelet admits the pod and starts its container (retried while its spec is not
  // written, as the kubelet's pod workers retry).
  absl::StatusOr<kubelet::CreatedContainer> Run(const std::string& uid, const std::string& name) {
    kubelet::FakePod fake{uid, "default", name, {{"main", false, false, 1}}};
    if (absl::Status admitted = kubelet_->AdmitPod(fake, kResource); !admitted.ok()) {
      return admitted;
    }
    absl::StatusOr<kubelet::CreatedContainer> created;
    for (int i = 0; i < 5000; ++i) {
      created = kubelet_->CreateContainer(uid, "main");
      if (created.ok() || created.status().code() != absl::StatusCode::kNotFound) break;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return created;
  }

  json Pod(const std::string& name) { return *api_->Get("pods", "default", name); }

  // The plugin's gRPC endpoint, dialled as the kubelet does (or anyone who reaches the socket).
  std::unique_ptr<v1beta1::DevicePlugin::Stub> Dial() {
    const std::string endpoint = kubelet_->LastRegisterRequest(kResource).endpoint();
    auto channel = grpc::CreateChannel(kubelet::UnixTarget((dir_ / "dp" / endpoint).string()),
                                       grpc::InsecureChannelCredentials());
    return v1beta1::DevicePlugin::NewStub(channel);
  }

  fs::path dir_;
  DeployBundle bundle_;
  std::unique_ptr<fakeapi::FakeApiServer> api_;
  std::string kubeconfig_;
  std::string state_file_;
  std::unique_ptr<kubelet::FakeKubelet> kubelet_;
  pid_t pid_ = -1;
  std::string log_;
  int port_ = 0;
};

// Case 2 of issue 38: pods bound with spec.nodeName whose allocation-status names allocations
// the agent never made used to make the restarted agent "recover" them, find no decision and
// fail the whole node closed (/readyz 503, every GPU unhealthy to the kubelet and the
// scheduler) until they were deleted.
TEST_F(ForgedStateTest, AnAgentRestartedBesideForgedPodsStaysReadyAndAllocates) {
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  ASSERT_EQ(WaitReady(absl::Seconds(30)), 200) << Slurp(log_);
  // A genuine pod (placed by the agent: it has no scheduler's decision) gives the forgeries a
  // real status to start from.
  const std::string real_uid = Create(BoundPod("real", {}));
  absl::StatusOr<kubelet::CreatedContainer> real = Run(real_uid, "real");
  ASSERT_TRUE(real.ok()) << real.status() << Slurp(log_);
  ASSERT_EQ(real->env.count("PRISM_ALLOCATION_ERROR"), 0u) << Slurp(log_);
  std::string real_status_text;
  for (int i = 0; i < 500 && real_status_text.empty(); ++i) {
    real_status_text = k8s::Annotation(Pod("real"), kStatus).value_or("");
    const json s = json::parse(real_status_text.empty() ? "{}" : real_status_text);
    if (!s.contains("containers") || !s["containers"]["main"].contains("devices")) {
      real_status_text.clear();
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  ASSERT_FALSE(real_status_text.empty()) << Slurp(log_);
  const json real_status = json::parse(real_status_text);
  const std::map<std::string, std::string> real_annotations = k8s::Annotations(Pod("real"));

  // The forgeries, none admitted by the kubelet.
  std::vector<std::string> forged_ids;
  auto forge = [&](const std::string& name, json status, bool with_decision) {
    std::map<std::string, std::string> annotations;
    if (with_decision) annotations = real_annotations;
    annotations[kStatus] = status.dump();
    ASSERT_FALSE(Create(BoundPod(name, annotations)).empty());
    for (const auto& [c, cs] : status["containers"].items()) {
      for (const json& id : cs.value("allocations", json::array())) forged_ids.push_back(id);
    }
  };
  {
    // An allocation the agent never made, no decision (the pod).
    json s = real_status;
    s["containers"]["main"]["allocations"] = {"forged-1"};
    ASSERT_NO_FATAL_FAILURE(forge("never-made", s, false));
    // The real pod's decision and status copied, under a new allocation ID (a twin).
    s["containers"]["main"]["allocations"] = {"forged-2"};
    ASSERT_NO_FATAL_FAILURE(forge("twin", s, true));
  }
  // A fresh-seed campaign of mutated statuses (fixed seed: reproducible).
  std::mt19937 rng(38);
  const std::vector<std::string> device_ids = kubelet_->AllocatedDevices(real_uid, "main");
  ASSERT_FALSE(device_ids.empty());
  for (int n = 0; n < 12; ++n) {
    json s = real_status;
    json& c = s["containers"]["main"];
    c["allocations"] = {StrCat("m", rng() % 100000, "-", rng() % 1000)};
    switch (rng() % 5) {
      case 0:  // Other device IDs of this node.
        c["deviceIds"] = {StrCat(device_ids[0].substr(0, device_ids[0].rfind("::")), "::",
                                 rng() % 10)};
        break;
      case 1:  // Another container name.
        s["containers"]["side"] = c;
        s["containers"].erase("main");
        break;
      case 2:  // Unsettled.
        c.erase("devices");
        break;
      case 3:  // Several allocations.
        c["allocations"].push_back(StrCat("n", rng() % 1000, "-", rng() % 1000));
        break;
      default:  // Settled with an error.
        c.erase("devices");
        c["error"] = "forged";
        break;
    }
    ASSERT_NO_FATAL_FAILURE(forge(StrCat("mutant-", n), s, rng() % 2 == 0));
  }

  // The agent restarts (a rollout, a crash); its ledger is even lost (a new node disk), so the
  // real pod's allocation must come back from its annotation, confirmed by the kubelet.
  KillAgent();
  fs::remove_all(dir_ / "state");
  fs::remove_all(dir_ / "cdi");
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  EXPECT_EQ(WaitReady(absl::Seconds(10)), 200) << Slurp(log_);
  EXPECT_THAT(Slurp(log_), ::testing::Not(HasSubstr("fail closed"))) << Slurp(log_);
  // Every GPU healthy to the kubelet and to the scheduler.
  EXPECT_TRUE(kubelet_->WaitForHealthyDevices(kResource, 20, absl::Seconds(10)));
  bool inventory_clean = false;
  std::string inventory_text;
  for (int i = 0; i < 500 && !inventory_clean; ++i) {
    inventory_text = k8s::Annotation(*api_->Get("nodes", "", kNode), "prism.io/gpu-inventory")
                         .value_or("{}");
    absl::StatusOr<deviceplugin::NodeInventory> inv = deviceplugin::DecodeInventory(inventory_text);
    inventory_clean = inv.ok() && inv->fault.empty() && inv->gpus.size() == 2 &&
                      inv->gpus[0].healthy && inv->gpus[1].healthy;
    if (!inventory_clean) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(inventory_clean) << inventory_text;
  // No forged allocation got a CDI spec.
  for (const std::string& id : forged_ids) {
    for (const auto& entry : fs::directory_iterator(dir_ / "cdi")) {
      EXPECT_EQ(entry.path().filename().string().find(id), std::string::npos)
          << id << " got a CDI spec: " << entry.path();
    }
  }
  // The real pod's container starts again with its devices, and the next pod is served.
  absl::StatusOr<kubelet::CreatedContainer> again = kubelet_->CreateContainer(real_uid, "main");
  ASSERT_TRUE(again.ok()) << again.status() << Slurp(log_);
  EXPECT_EQ(again->env["PRISM_ALLOCATION_ID"], real->env["PRISM_ALLOCATION_ID"]);
  EXPECT_EQ(again->env.count("PRISM_ALLOCATION_ERROR"), 0u);
  const std::string next_uid = Create(BoundPod("next", {}));
  absl::StatusOr<kubelet::CreatedContainer> next = Run(next_uid, "next");
  ASSERT_TRUE(next.ok()) << next.status() << Slurp(log_);
  EXPECT_EQ(next->env.count("PRISM_ALLOCATION_ERROR"), 0u)
      << next->env["PRISM_ALLOCATION_ERROR"] << Slurp(log_);
  EXPECT_THAT(next->env["NVIDIA_VISIBLE_DEVICES"], ::testing::StartsWith("GPU-"));
  // The ignored claims are counted.
  EXPECT_THAT(Metrics(), HasSubstr("prism_device_plugin_recoveries_ignored_total{"));
}

// Case 4 of issue 38: error texts that quote what a client sent stay short.
TEST_F(ForgedStateTest, A64KiBDeviceIdGetsAShortError) {
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  ASSERT_EQ(WaitReady(absl::Seconds(30)), 200) << Slurp(log_);
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub = Dial();
  const std::string huge = std::string(64 * 1024 - 3, 'x') + "::0";
  const std::string unknown_gpu = "GPU-" + std::string(64 * 1024, 'f') + "::1";
  for (const std::string& id : {huge, unknown_gpu}) {
    {
      v1beta1::AllocateRequest request;
      request.add_container_requests()->add_devices_ids(id);
      v1beta1::AllocateResponse response;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      const grpc::Status s = stub->Allocate(&context, request, &response);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message().size();
      EXPECT_LT(s.error_message().size(), 512u) << s.error_message().substr(0, 600);
      EXPECT_THAT(s.error_message(), HasSubstr(StrCat("(", id.size(), " bytes)")));
    }
    {
      v1beta1::PreStartContainerRequest request;
      request.add_devices_ids(id);
      v1beta1::PreStartContainerResponse response;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      const grpc::Status s = stub->PreStartContainer(&context, request, &response);
      EXPECT_FALSE(s.ok());
      EXPECT_LT(s.error_message().size(), 512u) << s.error_message().substr(0, 600);
      EXPECT_THAT(s.error_message(), HasSubstr(StrCat("(", id.size(), " bytes)")));
    }
  }
  // The agent's log does not carry them whole either.
  EXPECT_LT(Slurp(log_).size(), size_t{32 * 1024});
  // And it still serves the kubelet.
  EXPECT_EQ(WaitReady(absl::Seconds(5)), 200);
  const std::string uid = Create(BoundPod("after", {}));
  absl::StatusOr<kubelet::CreatedContainer> c = Run(uid, "after");
  ASSERT_TRUE(c.ok()) << c.status() << Slurp(log_);
  EXPECT_EQ(c->env.count("PRISM_ALLOCATION_ERROR"), 0u);
}

}  // namespace
}  // namespace prism::e2e
