// A fresh install, as a user gets it: the shipped deploy/ base read as it is (kube-scheduler's
// extender configuration, the device config ConfigMap, the scheduler Deployment's and the node
// agent DaemonSet's args, env and mounts), the real `prism scheduler` and `prism device-plugin`
// binaries started from them, a kube-scheduler stand-in calling the extender over HTTPS with the
// CA and verbs of that configuration, the admission webhook's patch applied, a fake kubelet
// speaking the device plugin and PodResources gRPC APIs, and simulated GPUs. No Prism label is put
// on the node (it carries what NVIDIA's GPU feature discovery writes, which the DaemonSet selects).
//
// The seed's example (HAMi's pod: 2 GPUs of 8000 MiB in MIG mode on an A100-PCIE-40GB) must run;
// then both binaries are SIGKILLed and restarted with a process on the pod's instances, and the
// next pod must be served without touching them. The same for a placement-mode GPU (a model with
// no knownMigGeometries), for a GPU no catalog knows (only its NVML tables: issue 17) and for a
// node the MIG manager owns (nvidia.com/mig.config). Crash tests kill the binaries at the other
// points that matter: the device plugin between a GPU instance's create and its compute
// instance's (the simulated NVML stops it there) and while the kubelet waits in PreStartContainer,
// the extender with its Binding at the API server.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "yaml-cpp/yaml.h"

#include "base/strings.h"
#include "config/annotations.h"
#include "deviceplugin/fake_driver_tree.h"
#include "deviceplugin/test_util.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/objects.h"
#include "kubelet/fake_kubelet.h"
#include "nvml/sim/sim_state_file.h"
#include "nvml/sim_nvml.h"
#include "testing/fake_apiserver/fake_apiserver.h"
#include "testing/fake_apiserver/test_pki.h"
#include "tests/e2e/harness/deploy_bundle.h"
#include "tests/e2e/harness/driver.h"

namespace prism::e2e {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;

constexpr char kNode[] = "gpu-node-1";
// A Tesla T4 for software slices (the simulator needs the memory of a model it has no MIG table for).
constexpr char kT4Gpus[] = "gpus:\n  - model: Tesla T4\n    memory_mib: 15360\n";

// The seed's pod (HAMi's example), from examples/, as JSON.
json SeedPod(const fs::path& root) {
  const YAML::Node doc = YAML::LoadFile((root / "examples/plan/seed-pod.yaml").string());
  std::stringstream s;
  s << YAML::Node(doc);
  // Through the bundle's converter: same scalar rules as the manifests.
  json pod;
  pod["apiVersion"] = "v1";
  pod["kind"] = "Pod";
  pod["metadata"]["name"] = doc["metadata"]["name"].as<std::string>();
  pod["metadata"]["namespace"] = "default";
  for (const auto& kv : doc["metadata"]["annotations"]) {
    pod["metadata"]["annotations"][kv.first.as<std::string>()] = kv.second.as<std::string>();
  }
  for (const auto& c : doc["spec"]["containers"]) {
    json container{{"name", c["name"].as<std::string>()}, {"image", c["image"].as<std::string>()}};
    for (const auto& kv : c["resources"]["limits"]) {
      container["resources"]["limits"][kv.first.as<std::string>()] = kv.second.as<std::string>();
    }
    pod["spec"]["containers"].push_back(container);
  }
  return pod;
}

json MigPod(const std::string& name, int gpus, int memory_mib) {
  return json{
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", name}, {"namespace", "default"}, {"annotations", {{"nvidia.com/vgpu-mode", "mig"}}}}},
      {"spec",
       {{"containers",
         {{{"name", "main"},
           {"image", "cuda"},
           {"resources",
            {{"limits",
              {{"nvidia.com/gpu", std::to_string(gpus)},
               {"nvidia.com/gpumem", std::to_string(memory_mib)}}}}}}}}}}};
}

struct NodeCase {
  std::string name;
  std::string gpus_yaml;                       // Simulated GPUs.
  std::map<std::string, std::string> labels;   // Beyond GPU feature discovery's.
  // Instances laid out before anything starts (a MIG manager's static layout): (profile id, start).
  std::vector<std::pair<int, int>> preexisting;
};

void PrintTo(const NodeCase& c, std::ostream* os) { *os << c.name; }

// The name gtest gives an instance: the case's.
std::string CaseName(const ::testing::TestParamInfo<NodeCase>& info) { return info.param.name; }

class DeploySeedTest : public ::testing::TestWithParam<NodeCase> {
 protected:
  void SetUp() override {
    root_ = std::getenv("PRISM_SOURCE_DIR") ? std::getenv("PRISM_SOURCE_DIR") : ".";
    dir_ = deviceplugin::testing::TestDir();
    absl::StatusOr<DeployBundle> bundle = DeployBundle::Load(root_);
    ASSERT_TRUE(bundle.ok()) << bundle.status();
    bundle_ = std::move(*bundle);
    ns_ = bundle_.namespace_name();

    fakeapi::FakeApiServerOptions api_options;
    api_options.tls = true;  // The production HTTPS client path, with a CA to verify.
    api_ = std::make_unique<fakeapi::FakeApiServer>(api_options);
    ASSERT_TRUE(api_->Start().ok());
    kubeconfig_ = deviceplugin::testing::WriteFile(dir_ / "kubeconfig", api_->KubeconfigYaml());
    // The ConfigMaps the base creates.
    for (const Object* cm : bundle_.All("ConfigMap")) ASSERT_TRUE(api_->Create("configmaps", *cm).ok());

    // The extender's certificate, as cert-manager issues it from webhook/certificates.yaml.
    std::vector<std::string> dns_names;
    for (const Object* cert : bundle_.All("Certificate")) {
      if (cert->at("spec").value("secretName", "") != "prism-scheduler-tls") continue;
      for (const json& n : cert->at("spec").at("dnsNames")) dns_names.push_back(n);
    }
    ASSERT_FALSE(dns_names.empty()) << "no Certificate for Secret prism-scheduler-tls in deploy/";
    absl::StatusOr<fakeapi::TestPki> pki =
        fakeapi::GenerateTestPki(dns_names, {"127.0.0.1"}, "kube-scheduler");
    ASSERT_TRUE(pki.ok()) << pki.status();
    tls_secret_ = {{"tls.crt", pki->server_cert_pem},
                   {"tls.key", pki->server_key_pem},
                   {"ca.crt", pki->ca_cert_pem}};
    ca_file_ = deviceplugin::testing::WriteFile(dir_ / "extender-ca.crt", pki->ca_cert_pem);
    ReadKubeSchedulerConfig();
    ASSERT_NO_FATAL_FAILURE(IssueKubeSchedulerClientCertificate());
  }

  // kube-scheduler's client certificate for the extender's mutual TLS, followed through deploy/
  // as shipped: the extender's tlsConfig certFile -> the kube-scheduler Deployment's Secret
  // mounted there -> the Certificate that fills it -> its Issuer's CA Secret, which the scheduler
  // Deployment must mount at its --client-ca-file. A link missing anywhere fails here.
  void IssueKubeSchedulerClientCertificate() {
    const std::string cert_dir = fs::path(client_cert_path_).parent_path().string();
    ASSERT_EQ(fs::path(client_key_path_).parent_path().string(), cert_dir);
    const Object* kube_scheduler = bundle_.Find("Deployment", "prism-kube-scheduler");
    ASSERT_NE(kube_scheduler, nullptr);
    const std::string client_secret = MountedSecret(*kube_scheduler, cert_dir);
    ASSERT_FALSE(client_secret.empty()) << "prism-kube-scheduler mounts no Secret at " << cert_dir;
    std::string issuer, common_name;
    for (const Object* cert : bundle_.All("Certificate")) {
      if (cert->at("spec").value("secretName", "") != client_secret) continue;
      issuer = cert->at("spec").at("issuerRef").value("name", "");
      common_name = cert->at("spec").value("commonName", "");
      json usages = cert->at("spec").value("usages", json::array());
      EXPECT_NE(std::find(usages.begin(), usages.end(), "client auth"), usages.end());
    }
    ASSERT_FALSE(issuer.empty()) << "no Certificate fills Secret " << client_secret;
    std::string client_ca_secret;
    for (const Object* i : bundle_.All("Issuer")) {
      if (i->at("metadata").value("name", "") != issuer) continue;
      client_ca_secret = i->at("spec").at("ca").value("secretName", "");
    }
    ASSERT_FALSE(client_ca_secret.empty()) << "Issuer " << issuer << " is no CA issuer";
    EXPECT_NE(client_ca_secret, "prism-ca") << "the client CA must be a root of its own";
    const Object* scheduler = bundle_.Find("Deployment", "prism-scheduler");
    ASSERT_NE(scheduler, nullptr);
    std::string client_ca_file;
    for (const json& arg : scheduler->at("spec")["template"]["spec"]["containers"][0]["args"]) {
      const std::string a = arg;
      if (a.rfind("--client-ca-file=", 0) == 0) client_ca_file = a.substr(a.find('=') + 1);
    }
    ASSERT_FALSE(client_ca_file.empty()) << "prism-scheduler has no --client-ca-file";
    EXPECT_EQ(MountedSecret(*scheduler, fs::path(client_ca_file).parent_path().string()),
              client_ca_secret);

    absl::StatusOr<fakeapi::TestPki> client_pki =
        fakeapi::GenerateTestPki({"unused.invalid"}, {}, common_name);
    ASSERT_TRUE(client_pki.ok()) << client_pki.status();
    client_ca_secret_name_ = client_ca_secret;
    client_ca_secret_ = {{"ca.crt", client_pki->ca_cert_pem}};
    client_cert_file_ =
        deviceplugin::testing::WriteFile(dir_ / "kube-scheduler-client.crt", client_pki->client_cert_pem);
    client_key_file_ =
        deviceplugin::testing::WriteFile(dir_ / "kube-scheduler-client.key", client_pki->client_key_pem);
  }

  void TearDown() override {
    if (driver_) driver_->Stop();
    scheduler_.Kill();
    agent_.Kill();
    if (kubelet_) kubelet_->Stop();
  }

  // kube-scheduler's view: the profile's scheduler name and the extender entry, which the
  // stand-in follows (and checks against what it implements).
  void ReadKubeSchedulerConfig() {
    const Object* cm = bundle_.Find("ConfigMap", "prism-kube-scheduler-config");
    ASSERT_NE(cm, nullptr);
    const YAML::Node config =
        YAML::Load(cm->at("data").at("kube-scheduler-config.yaml").get<std::string>());
    scheduler_name_ = config["profiles"][0]["schedulerName"].as<std::string>();
    const YAML::Node extender = config["extenders"][0];
    EXPECT_EQ(extender["filterVerb"].as<std::string>(), "filter");
    EXPECT_EQ(extender["prioritizeVerb"].as<std::string>(), "prioritize");
    EXPECT_EQ(extender["bindVerb"].as<std::string>(), "bind");
    EXPECT_TRUE(extender["nodeCacheCapable"].as<bool>());
    EXPECT_TRUE(extender["enableHTTPS"].as<bool>());
    weight_ = extender["weight"].as<int64_t>();
    const std::string server_name = extender["tlsConfig"]["serverName"].as<std::string>();
    ASSERT_TRUE(extender["tlsConfig"]["certFile"] && extender["tlsConfig"]["keyFile"])
        << "kube-scheduler presents no client certificate to the extender";
    client_cert_path_ = extender["tlsConfig"]["certFile"].as<std::string>();
    client_key_path_ = extender["tlsConfig"]["keyFile"].as<std::string>();
    EXPECT_NE(tls_secret_["tls.crt"], "");
    // The name kube-scheduler verifies must be one the certificate carries.
    bool named = false;
    for (const Object* cert : bundle_.All("Certificate")) {
      for (const json& n : cert->at("spec").value("dnsNames", json::array())) {
        named = named || n == server_name;
      }
    }
    EXPECT_TRUE(named) << server_name << " is not in any Certificate's dnsNames";
    std::set<std::string> managed;
    for (const auto& r : extender["managedResources"]) managed.insert(r["name"].as<std::string>());
    EXPECT_TRUE(managed.count("nvidia.com/gpu") && managed.count("nvidia.com/gpumem"));
  }

  void CreateNode(const NodeCase& c) {
    // What the DaemonSet selects must be on the node: the test adds GPU feature discovery's
    // labels, never Prism's.
    const Object* ds = bundle_.Find("DaemonSet", "prism-device-plugin");
    ASSERT_NE(ds, nullptr);
    json labels = {{"kubernetes.io/hostname", kNode}};
    const json selector =
        ds->at("spec").at("template").at("spec").value("nodeSelector", json::object());
    for (const auto& [k, v] : selector.items()) {
      ASSERT_EQ(k.rfind("prism.io/", 0), std::string::npos) << "the DaemonSet needs a Prism label";
      labels[k] = v;
    }
    for (const auto& [k, v] : c.labels) labels[k] = v;
    json node{{"apiVersion", "v1"},
              {"kind", "Node"},
              {"metadata", {{"name", kNode}, {"labels", labels}}},
              {"status",
               {{"allocatable", {{"cpu", "32"}, {"memory", "128Gi"}, {"pods", "110"}}},
                {"capacity", {{"cpu", "32"}, {"memory", "128Gi"}, {"pods", "110"}}}}}};
    ASSERT_TRUE(api_->Create("nodes", node).ok());
  }

  void StartScheduler() {
    const Object* deploy = bundle_.Find("Deployment", "prism-scheduler");
    ASSERT_NE(deploy, nullptr);
    LocalProcessOptions o;
    o.dir = dir_;
    o.field_refs = {{"metadata.name", "prism-scheduler-0"}, {"metadata.namespace", ns_}};
    o.secrets = {{"prism-scheduler-tls", tls_secret_}, {client_ca_secret_name_, client_ca_secret_}};
    absl::StatusOr<LocalProcess> p = LocalProcessFor(bundle_, *deploy, "scheduler", o);
    ASSERT_TRUE(p.ok()) << p.status();
    if (port_ == 0) {
      port_ = FreeLoopbackPort();
      webhook_port_ = FreeLoopbackPort();
      probe_port_ = FreeLoopbackPort();
    }
    // What differs from a pod: the API server's address and free ports on this machine.
    p->SetFlag("--kubeconfig", kubeconfig_);
    p->SetFlag("--port", std::to_string(port_));
    p->SetFlag("--webhook-port", std::to_string(webhook_port_));
    p->SetFlag("--probe-port", std::to_string(probe_port_));
    p->SetFlag("--bind-address", "127.0.0.1");
    scheduler_.log = (dir_ / "scheduler.log").string();
    scheduler_.pid = SpawnProcess(PRISM_BINARY, *p, scheduler_.log);
    ASSERT_GT(scheduler_.pid, 0);
    httplib::Client probe("127.0.0.1", probe_port_);
    bool ready = false;
    for (int i = 0; i < 3000 && !ready; ++i) {
      auto res = probe.Get("/readyz");
      ready = res && res->status == 200;
      if (!ready) absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(ready) << Slurp(scheduler_.log);
  }

  void StartAgent() {
    const Object* ds = bundle_.Find("DaemonSet", "prism-device-plugin");
    ASSERT_NE(ds, nullptr);
    LocalProcessOptions o;
    o.dir = dir_;
    o.field_refs = {{"spec.nodeName", kNode}, {"metadata.name", "prism-device-plugin-x"},
                    {"metadata.namespace", ns_}};
    absl::StatusOr<LocalProcess> p = LocalProcessFor(bundle_, *ds, "device-plugin", o);
    ASSERT_TRUE(p.ok()) << p.status();
    // The host directories the agent uses by default must be the DaemonSet's hostPath mounts.
    for (const char* path : {"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources",
                             "/var/run/cdi", "/var/lib/prism"}) {
      bool mounted = false;
      for (const std::string& m : p->host_paths) mounted = mounted || m == path;
      EXPECT_TRUE(mounted) << "the DaemonSet does not mount " << path;
    }
    // Here those host directories are the test's, the GPUs simulated, the API server local.
    p->SetFlag("--kubeconfig", kubeconfig_);
    p->SetFlag("--nvml", "sim:" + state_file_);
    p->SetFlag("--device-plugin-path", (dir_ / "dp").string() + "/");
    p->SetFlag("--pod-resources-socket", (dir_ / "pr" / "kubelet.sock").string());
    p->SetFlag("--cdi-dir", (dir_ / "cdi").string());
    p->SetFlag("--state-dir", (dir_ / "state").string());
    p->SetFlag("--vgpu-dir", (dir_ / "vgpu").string());
    p->SetFlag("--metrics-address", "127.0.0.1:0");
    // The host's /dev and /proc (the DaemonSet is privileged): a fake driver tree, so that the
    // CDI specs' device nodes are really looked up.
    p->SetFlag("--dev-root", (dir_ / "host").string());
    p->SetFlag("--proc-root", (dir_ / "host" / "proc").string());
    agent_.log = (dir_ / "agent.log").string();
    const size_t log_before = Slurp(agent_.log).size();
    agent_.pid = SpawnProcess(PRISM_BINARY, *p, agent_.log);
    ASSERT_GT(agent_.pid, 0);
    ASSERT_TRUE(kubelet_->WaitForPlugin("nvidia.com/gpu", absl::Seconds(30))) << Slurp(agent_.log);
    // Ready (registered and not failing closed), on the port this run logged.
    int port = 0;
    for (int i = 0; i < 3000 && port == 0; ++i) {
      const std::string text = Slurp(agent_.log).substr(log_before);
      const size_t at = text.find("metrics on 127.0.0.1:");
      if (at != std::string::npos) {
        port = std::stoi(text.substr(at + std::string("metrics on 127.0.0.1:").size()));
      } else {
        absl::SleepFor(absl::Milliseconds(10));
      }
    }
    ASSERT_GT(port, 0) << Slurp(agent_.log);
    httplib::Client http("127.0.0.1", port);
    bool ready = false;
    for (int i = 0; i < 3000 && !ready; ++i) {
      auto res = http.Get("/readyz");
      ready = res && res->status == 200;
      if (!ready) absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(ready) << Slurp(agent_.log);
  }

  void StartNodeSide(const NodeCase& c) {
    state_file_ = deviceplugin::testing::WriteFile(dir_ / "gpus.yaml", c.gpus_yaml);
    deviceplugin::testing::WriteFakeDriverTree(dir_ / "host", 1);
    if (!c.preexisting.empty()) {
      nvml::SimNvml direct(state_file_);
      for (const auto& [profile, start] : c.preexisting) {
        auto gi = direct.CreateGpuInstance(0, profile, start);
        ASSERT_TRUE(gi.ok()) << gi.status();
        const int slices = 1;  // Tests lay out 1-slice compute instances.
        ASSERT_TRUE(direct.CreateComputeInstance(0, gi->id, slices).ok());
      }
    }
    kubelet::FakeKubeletOptions k{(dir_ / "dp").string(), (dir_ / "pr" / "kubelet.sock").string(),
                                  (dir_ / "cdi").string()};
    auto kubelet = kubelet::FakeKubelet::Start(k);
    ASSERT_TRUE(kubelet.ok()) << kubelet.status();
    kubelet_ = std::move(*kubelet);
    ASSERT_NO_FATAL_FAILURE(StartAgent());
  }

  void StartDriver() {
    absl::StatusOr<k8s::ClusterConfig> cluster = k8s::ParseKubeconfig(api_->KubeconfigYaml());
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    k8s::ClientOptions client_options;
    client_options.qps = 0;
    absl::StatusOr<std::unique_ptr<k8s::Client>> client =
        k8s::Client::Create(*cluster, client_options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    DriverOptions o;
    o.scheduler_name = scheduler_name_;
    o.weight = weight_;
    o.ca_file = ca_file_;
    o.client_cert_file = client_cert_file_;
    o.client_key_file = client_key_file_;
    const std::string url = StrCat("https://127.0.0.1:", port_);
    o.extender_url = [url] { return url; };
    driver_ = std::make_unique<SchedulerDriver>(client_.get(), o);
    driver_->Start();
  }

  // The admission webhook (path from the shipped MutatingWebhookConfiguration), then create.
  std::string Submit(json pod) {
    std::string path = "/mutate";
    for (const Object* w : bundle_.All("MutatingWebhookConfiguration")) {
      path = w->at("webhooks")[0]["clientConfig"]["service"].value("path", path);
    }
    json review{{"apiVersion", "admission.k8s.io/v1"},
                {"kind", "AdmissionReview"},
                {"request",
                 {{"uid", "review-1"},
                  {"operation", "CREATE"},
                  {"namespace", "default"},
                  {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
                  {"object", pod}}}};
    httplib::Client https(StrCat("https://127.0.0.1:", webhook_port_));
    https.set_ca_cert_path(ca_file_.c_str());
    auto res = https.Post(path, review.dump(), "application/json");
    EXPECT_TRUE(res) << (res ? "" : httplib::to_string(res.error()));
    if (!res) return "";
    EXPECT_EQ(res->status, 200) << res->body;
    const json answer = json::parse(res->body, nullptr, false);
    EXPECT_TRUE(answer["response"].value("allowed", false)) << res->body;
    if (answer["response"].contains("patch")) {
      std::string patch;
      EXPECT_TRUE(absl::Base64Unescape(answer["response"]["patch"].get<std::string>(), &patch));
      pod = pod.patch(json::parse(patch));
    }
    EXPECT_EQ(pod["spec"].value("schedulerName", ""), scheduler_name_)
        << "the webhook did not hand the pod to " << scheduler_name_;
    auto created = api_->Create("pods", pod);
    EXPECT_TRUE(created.ok()) << created.status();
    return created.ok() ? k8s::Uid(*created) : "";
  }

  json Pod(const std::string& name) { return *api_->Get("pods", "default", name); }

  // Bound by the driver through the extender's bind, then admitted and started by the kubelet.
  absl::StatusOr<kubelet::CreatedContainer> Run(const json& pod, const std::string& uid) {
    const std::string name = pod["metadata"]["name"];
    if (!driver_->WaitBound({"default/" + name}, absl::Seconds(30))) {
      return absl::DeadlineExceededError(StrCat(name, " was not bound: ", Slurp(scheduler_.log)));
    }
    const json bound = Pod(name);
    if (bound["spec"].value("nodeName", "") != kNode) {
      return absl::InternalError(StrCat(name, " bound to ", bound["spec"].dump()));
    }
    kubelet::FakePod fake{uid, "default", name, {}};
    int gpus = 0;
    const json& c = bound["spec"]["containers"][0];
    gpus = std::stoi(c["resources"]["limits"]["nvidia.com/gpu"].get<std::string>());
    fake.containers.push_back({c["name"], false, false, gpus});
    absl::Status admitted = kubelet_->AdmitPod(fake, "nvidia.com/gpu");
    if (!admitted.ok()) return admitted;
    absl::StatusOr<kubelet::CreatedContainer> created;
    for (int i = 0; i < 5000; ++i) {
      created = kubelet_->CreateContainer(uid, c["name"]);
      if (created.ok() || created.status().code() != absl::StatusCode::kNotFound) break;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return created;
  }

  // MIG device UUIDs on GPU 0 of the simulated state, by GPU instance start.
  std::map<int, std::string> Instances() {
    std::map<int, std::string> out;
    const nvml::sim::SimState state = deviceplugin::testing::ReadState(state_file_);
    for (const auto& gi : state.gpus[0].gpu_instances) {
      out[gi.start] = gi.compute_instances.empty() ? "" : gi.compute_instances[0].uuid;
    }
    return out;
  }

  void PutProcessesOn(const std::string& visible_devices) {
    const nvml::sim::SimState state = deviceplugin::testing::ReadState(state_file_);
    uint32_t pid = 5000;
    for (const auto& gi : state.gpus[0].gpu_instances) {
      for (const auto& ci : gi.compute_instances) {
        if (visible_devices.find(ci.uuid) != std::string::npos) {
          deviceplugin::testing::AddProcess(state_file_, 0, pid++, gi.id, ci.id);
        }
      }
    }
  }

  // The node, the node agent, the extender and the kube-scheduler stand-in, as installed.
  void StartInstall(const NodeCase& c) {
    ASSERT_NO_FATAL_FAILURE(CreateNode(c));
    ASSERT_NO_FATAL_FAILURE(StartNodeSide(c));
    ASSERT_NO_FATAL_FAILURE(StartScheduler());
    ASSERT_NO_FATAL_FAILURE(StartDriver());
  }

  // A next MIG pod is scheduled and started on an instance that is none of `devices`.
  void ServeNextPodBeside(const std::vector<std::string>& devices) {
    json next = MigPod("next", 1, 4000);
    const std::string next_uid = Submit(next);
    ASSERT_FALSE(next_uid.empty());
    absl::StatusOr<kubelet::CreatedContainer> next_container = Run(next, next_uid);
    ASSERT_TRUE(next_container.ok()) << next_container.status() << Slurp(agent_.log);
    const std::string next_visible = next_container->env["NVIDIA_VISIBLE_DEVICES"];
    EXPECT_EQ(next_visible.rfind("MIG-", 0), 0u) << next_visible << Slurp(agent_.log);
    for (const std::string& d : devices) EXPECT_EQ(next_visible.find(d), std::string::npos);
  }

  // Waits for the agent to stop by itself (a kill fault of the simulated NVML) and reaps it.
  void WaitAgentKilled() {
    for (int i = 0; i < 3000; ++i) {
      int status = 0;
      const pid_t r = waitpid(agent_.pid, &status, WNOHANG);
      if (r == agent_.pid) {
        agent_.pid = -1;
        ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
            << "the agent ended with status " << status << "\n"
            << Slurp(agent_.log);
        return;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    FAIL() << "the agent never reached its kill point\n" << Slurp(agent_.log);
  }

  // Waits until the agent's call to `call` is stopped: a GPU instance without a compute instance
  // is on GPU 0 (the point between the two creates).
  bool HalfMadeInstance() {
    // Held in a local: a range-for over a temporary's member would read freed memory.
    const nvml::sim::SimState state = deviceplugin::testing::ReadState(state_file_);
    for (const auto& gi : state.gpus[0].gpu_instances) {
      if (gi.compute_instances.empty()) return true;
    }
    return false;
  }

  // The kubelet starting `pod`'s first container, retried as its pod workers retry a failed
  // start (CreateContainerConfigError, the plugin not registered yet), up to 60 s.
  absl::StatusOr<kubelet::CreatedContainer> StartWithRetries(const std::string& uid,
                                                             const std::string& container) {
    absl::StatusOr<kubelet::CreatedContainer> created;
    for (int i = 0; i < 600; ++i) {
      created = kubelet_->CreateContainer(uid, container);
      if (created.ok()) break;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return created;
  }

  // After a crash: every GPU instance on GPU 0 has its compute instance (none is left half
  // made).
  void ExpectNothingHalfMade() {
    const nvml::sim::SimState state = deviceplugin::testing::ReadState(state_file_);
    for (const auto& gi : state.gpus[0].gpu_instances) {
      EXPECT_FALSE(gi.compute_instances.empty())
          << "GPU instance " << gi.id << " was left without a compute instance\n"
          << Slurp(agent_.log);
    }
  }

  fs::path root_;
  fs::path dir_;
  DeployBundle bundle_;
  std::string ns_;
  std::unique_ptr<fakeapi::FakeApiServer> api_;
  std::string kubeconfig_;
  std::map<std::string, std::string> tls_secret_;
  std::string ca_file_;
  std::string scheduler_name_;
  int64_t weight_ = 1;
  int port_ = 0;          // Extender verbs (mutual TLS).
  int webhook_port_ = 0;  // The admission webhook (server TLS).
  int probe_port_ = 0;
  // kube-scheduler's client certificate: where the shipped config reads it, and this test's copy.
  std::string client_cert_path_;
  std::string client_key_path_;
  std::string client_cert_file_;
  std::string client_key_file_;
  std::string client_ca_secret_name_;
  std::map<std::string, std::string> client_ca_secret_;
  std::string state_file_;
  std::unique_ptr<kubelet::FakeKubelet> kubelet_;
  std::unique_ptr<k8s::Client> client_;
  std::unique_ptr<SchedulerDriver> driver_;
  ChildProcess scheduler_;
  ChildProcess agent_;
};

std::vector<std::string> Split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream s(list);
  for (std::string item; std::getline(s, item, ',');) out.push_back(item);
  return out;
}

TEST_P(DeploySeedTest, ThePodRunsAndSurvivesRestartsOfBothBinaries) {
  const NodeCase& c = GetParam();
  ASSERT_NO_FATAL_FAILURE(StartInstall(c));
  const bool is_static = !c.preexisting.empty();
  const std::map<int, std::string> before = Instances();

  // 1. The first pod: the seed's own on the template node; one that fits the layout elsewhere.
  json first = c.name == "template" ? SeedPod(root_) : MigPod("first", 1, 4000);
  const std::string uid = Submit(first);
  ASSERT_FALSE(uid.empty());
  absl::StatusOr<kubelet::CreatedContainer> container = Run(first, uid);
  ASSERT_TRUE(container.ok()) << container.status() << Slurp(agent_.log);
  const std::string visible = container->env["NVIDIA_VISIBLE_DEVICES"];
  const std::vector<std::string> devices = Split(visible);
  ASSERT_EQ(devices.size(), c.name == "template" ? 2u : 1u) << visible << "\n" << Slurp(agent_.log);
  for (const std::string& d : devices) EXPECT_EQ(d.rfind("MIG-", 0), 0u) << visible;
  EXPECT_EQ(container->env.count("PRISM_ALLOCATION_ERROR"), 0u)
      << container->env["PRISM_ALLOCATION_ERROR"];
  // The CDI spec gives the container the driver's nodes and, per MIG device, its two caps.
  std::set<std::string> nodes;
  for (const kubelet::CdiDeviceNode& n : container->device_nodes) nodes.insert(n.path);
  EXPECT_TRUE(nodes.count("/dev/nvidiactl") && nodes.count("/dev/nvidia-uvm") &&
              nodes.count("/dev/nvidia0"));
  size_t caps = 0;
  for (const std::string& n : nodes) caps += n.rfind("/dev/nvidia-caps/nvidia-cap", 0) == 0;
  EXPECT_EQ(caps, 2 * devices.size());
  if (c.name == "template") {
    // HAMi's geometry 1 of the A100-PCIE-40GB: {1g.5gb: 1, 2g.10gb: 3}.
    EXPECT_EQ(Instances().size(), 4u);
  }
  if (is_static) {
    EXPECT_EQ(Instances(), before) << "a static layout was changed";
  }

  // 2. The pod's processes run; both binaries die without warning and come back.
  PutProcessesOn(visible);
  const std::map<int, std::string> running = Instances();
  agent_.Kill();
  scheduler_.Kill();
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  ASSERT_NO_FATAL_FAILURE(StartScheduler());
  EXPECT_EQ(Instances(), running) << Slurp(agent_.log);
  absl::StatusOr<kubelet::CreatedContainer> again = kubelet_->CreateContainer(uid, first["spec"]["containers"][0]["name"]);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->env["NVIDIA_VISIBLE_DEVICES"], visible);

  // 3. The next pod is served, beside the running one, which keeps its instances.
  ASSERT_NO_FATAL_FAILURE(ServeNextPodBeside(devices));
  const std::map<int, std::string> after = Instances();
  for (const auto& [start, uuid] : running) {
    if (visible.find(uuid) != std::string::npos) {
      EXPECT_EQ(after.at(start), uuid);
    }
  }
  if (is_static) {
    EXPECT_EQ(after, before) << "a static layout was changed";
  }
}

// The device plugin SIGKILLed between the two NVML calls that make a MIG device (its GPU
// instance made, the compute instance not yet), and the extender killed while the allocation is
// half made: after both restart, the pod's container starts on whole instances, nothing is left
// half made, and the next pod is served.
TEST_P(DeploySeedTest, KilledBetweenGpuAndComputeInstanceCreateTheNextStartFinishesIt) {
  const NodeCase& c = GetParam();
  if (!c.preexisting.empty()) GTEST_SKIP() << "a static layout is never created or changed";
  ASSERT_NO_FATAL_FAILURE(StartInstall(c));
  // Template mode lays out HAMi's whole geometry first: stop inside it, at its second instance.
  deviceplugin::testing::InjectStop(state_file_, "CreateGpuInstance", "kill",
                                    c.name == "template" ? 1 : 0);
  json first = c.name == "template" ? SeedPod(root_) : MigPod("first", 1, 4000);
  const std::string name = first["metadata"]["name"];
  const std::string container = first["spec"]["containers"][0]["name"];
  const std::string uid = Submit(first);
  ASSERT_FALSE(uid.empty());
  ASSERT_TRUE(driver_->WaitBound({"default/" + name}, absl::Seconds(30))) << Slurp(scheduler_.log);
  kubelet::FakePod fake{uid, "default", name, {}};
  const int gpus = c.name == "template" ? 2 : 1;
  fake.containers.push_back({container, false, false, gpus});
  // Allocate answers before the instances are made (they are made once the pod is in
  // PodResources); if the agent died first, the kubelet admits the pod again after the restart.
  const absl::Status admitted = kubelet_->AdmitPod(fake, "nvidia.com/gpu");
  ASSERT_NO_FATAL_FAILURE(WaitAgentKilled());
  ASSERT_TRUE(HalfMadeInstance()) << "the kill did not land between the two creates";
  scheduler_.Kill();
  ASSERT_NO_FATAL_FAILURE(StartScheduler());
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  if (!admitted.ok()) {
    // The agent may realize the decision as soon as it sees the bound pod, so the kill can land
    // before the Allocate: the kubelet fails that admission, and the pod's replacement is
    // admitted once the plugin is back (modelled as admitting the same pod again).
    absl::Status again = kubelet_->AdmitPod(fake, "nvidia.com/gpu");
    for (int i = 0; i < 300 && !again.ok(); ++i) {
      absl::SleepFor(absl::Milliseconds(100));
      again = kubelet_->AdmitPod(fake, "nvidia.com/gpu");
    }
    ASSERT_TRUE(again.ok()) << "first admission: " << admitted << "; again: " << again << "\n"
                            << Slurp(agent_.log);
  }

  absl::StatusOr<kubelet::CreatedContainer> started = StartWithRetries(uid, container);
  ASSERT_TRUE(started.ok()) << started.status() << Slurp(agent_.log);
  const std::string visible = started->env["NVIDIA_VISIBLE_DEVICES"];
  const std::vector<std::string> devices = Split(visible);
  ASSERT_EQ(devices.size(), static_cast<size_t>(gpus)) << visible << Slurp(agent_.log);
  for (const std::string& d : devices) EXPECT_EQ(d.rfind("MIG-", 0), 0u) << visible;
  ExpectNothingHalfMade();
  if (c.name == "template") {
    EXPECT_EQ(Instances().size(), 4u) << "HAMi's geometry 1, whole";
  }

  PutProcessesOn(visible);
  ASSERT_NO_FATAL_FAILURE(ServeNextPodBeside(devices));
  ExpectNothingHalfMade();
}

// The device plugin SIGKILLed while the kubelet waits in PreStartContainer for the pod's spec
// (the agent stopped after a GPU instance create): the kubelet's start fails, and its retry
// after the restart starts the container on whole instances.
TEST_P(DeploySeedTest, KilledDuringThePreStartWaitTheRetriedStartSucceeds) {
  const NodeCase& c = GetParam();
  if (!c.preexisting.empty()) GTEST_SKIP() << "a static layout is never created or changed";
  ASSERT_NO_FATAL_FAILURE(StartInstall(c));
  ASSERT_TRUE(kubelet_->PluginOptions("nvidia.com/gpu").pre_start_required())
      << "the shipped DaemonSet turns PreStartContainer off";
  deviceplugin::testing::InjectStop(state_file_, "CreateGpuInstance", "hang");
  json pod = MigPod("waiting", 1, 4000);
  const std::string uid = Submit(pod);
  ASSERT_FALSE(uid.empty());
  ASSERT_TRUE(driver_->WaitBound({"default/waiting"}, absl::Seconds(30))) << Slurp(scheduler_.log);
  kubelet::FakePod fake{uid, "default", "waiting", {{"main", false, false, 1}}};
  ASSERT_TRUE(kubelet_->AdmitPod(fake, "nvidia.com/gpu").ok());
  const int prestarts = kubelet_->prestart_calls();
  std::thread start([&] {
    absl::StatusOr<kubelet::CreatedContainer> r = kubelet_->CreateContainer(uid, "main");
    EXPECT_FALSE(r.ok()) << "the container started while its plugin hung";
  });
  bool waiting = false;
  for (int i = 0; i < 3000 && !waiting; ++i) {
    waiting = kubelet_->prestart_calls() > prestarts && HalfMadeInstance();
    if (!waiting) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(waiting) << "PreStartContainer and the hung create never met\n" << Slurp(agent_.log);
  agent_.Kill();
  start.join();
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  absl::StatusOr<kubelet::CreatedContainer> started = StartWithRetries(uid, "main");
  ASSERT_TRUE(started.ok()) << started.status() << Slurp(agent_.log);
  const std::string visible = started->env["NVIDIA_VISIBLE_DEVICES"];
  EXPECT_EQ(visible.rfind("MIG-", 0), 0u) << visible << Slurp(agent_.log);
  EXPECT_EQ(Split(visible).size(), 1u) << visible;
  ExpectNothingHalfMade();
}

// The extender SIGKILLed while its Binding is at the API server. The decision travels in the
// Binding (its annotations), so there is no moment with a decision on an unbound pod; the API
// server either commits the Binding after the client is gone or refuses it. In both cases the
// restarted extender and kube-scheduler's retry leave the pod bound once, with one decision, and
// its container starts on its own instance.
TEST_P(DeploySeedTest, KilledWithABindingInFlightThePodIsBoundOnceAndRuns) {
  const NodeCase& c = GetParam();
  ASSERT_NO_FATAL_FAILURE(StartInstall(c));
  const std::map<int, std::string> before = Instances();
  std::set<std::string> held;
  for (const int refused_status : {0, 503}) {  // Committed after the kill; refused.
    const std::string name = refused_status == 0 ? "committed" : "refused";
    fakeapi::Fault slow;
    slow.method = "POST";
    slow.path_prefix = "/api/v1/namespaces/default/pods/" + name + "/binding";
    slow.delay = absl::Seconds(2);
    slow.status = refused_status;
    const int fired = api_->faults_fired();
    api_->InjectFault(slow);
    json pod = MigPod(name, 1, 4000);
    const std::string uid = Submit(pod);
    ASSERT_FALSE(uid.empty());
    bool in_flight = false;
    for (int i = 0; i < 3000 && !in_flight; ++i) {
      in_flight = api_->faults_fired() > fired;
      if (!in_flight) absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(in_flight) << "no Binding reached the API server\n" << Slurp(scheduler_.log);
    scheduler_.Kill();
    ASSERT_NO_FATAL_FAILURE(StartScheduler());
    absl::StatusOr<kubelet::CreatedContainer> started = Run(pod, uid);
    ASSERT_TRUE(started.ok()) << started.status() << Slurp(agent_.log) << Slurp(scheduler_.log);
    const std::string visible = started->env["NVIDIA_VISIBLE_DEVICES"];
    EXPECT_EQ(visible.rfind("MIG-", 0), 0u) << visible << Slurp(agent_.log);
    EXPECT_EQ(started->env.count("PRISM_ALLOCATION_ERROR"), 0u)
        << started->env["PRISM_ALLOCATION_ERROR"];
    EXPECT_TRUE(held.insert(visible).second) << name << " got an instance another pod holds";
    PutProcessesOn(visible);
    // Bound once: a second Binding would have been refused (409); the pod has one decision.
    const json bound = Pod(name);
    EXPECT_EQ(bound["spec"].value("nodeName", ""), kNode);
    EXPECT_TRUE(bound["metadata"]["annotations"].contains(config::kPrismDecisionAnnotation))
        << bound.dump();
  }
  if (!c.preexisting.empty()) {
    EXPECT_EQ(Instances(), before) << "a static layout was changed";
  }
  ExpectNothingHalfMade();
}

INSTANTIATE_TEST_SUITE_P(
    FreshInstall, DeploySeedTest,
    ::testing::Values(
        // HAMi's default geometries name the A100: template mode.
        NodeCase{
            "template", "gpus:\n  - model: A100-PCIE-40GB\n    mig: {enabled: true}\n", {}, {}},
        // No knownMigGeometries entry names the H100 96GB: placement mode.
        NodeCase{
            "placement", "gpus:\n  - model: H100-SXM5-96GB\n    mig: {enabled: true}\n", {}, {}},
        // Issue 17: a GPU Prism's catalog has never seen, known to the simulated NVML by its
        // tables alone; the extender builds its model from the node's inventory facts.
        NodeCase{"neverseen",
                 "models:\n"
                 "  - name: X300-200GB\n"
                 "    product: NVIDIA X300\n"
                 "    pci_device_id: 0x40AA10DE\n"
                 "    memory_mib: 204800\n"
                 "    architecture: blackwell\n"
                 "    profiles:\n"
                 "      - {index: 0, id: 19, slices: 1, placements: \"{0,1,2,3,4,5,6}:1\", "
                 "memory_mib: 25088, multiprocessors: 20, max: 7}\n"
                 "      - {index: 1, id: 14, slices: 2, placements: \"{0,2,4}:2\", "
                 "memory_mib: 50176, multiprocessors: 40, max: 3}\n"
                 "      - {index: 4, id: 0, slices: 7, placements: \"{0}:8\", "
                 "memory_mib: 202752, multiprocessors: 140, max: 1}\n"
                 "gpus:\n  - model: X300-200GB\n    mig: {enabled: true}\n",
                 {},
                 {}},
        // The MIG manager's node: its layout (7 x 1g.5gb) is handed out as it is.
        NodeCase{"static",
                 "gpus:\n  - model: A100-PCIE-40GB\n    mig: {enabled: true}\n",
                 {{"nvidia.com/mig.config", "all-1g.5gb"}},
                 {{19, 0}, {19, 1}, {19, 2}, {19, 3}, {19, 4}, {19, 5}, {19, 6}}}), CaseName);

// A slice pod: one GPU with `memory_mib` of its memory.
json SlicePod(const std::string& name, int memory_mib) {
  return json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", "default"}}},
              {"spec",
               {{"containers",
                 {{{"name", "main"},
                   {"image", "cuda"},
                   {"resources",
                    {{"limits",
                      {{"nvidia.com/gpu", "1"},
                       {"nvidia.com/gpumem", std::to_string(memory_mib)}}}}}}}}}}};
}

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
