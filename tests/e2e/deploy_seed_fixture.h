// tests/e2e/deploy_seed_fixture.h: a fresh install of deploy/ as shipped, on this machine (tests
// only). The scheduler and the node agent run from their Deployment's and DaemonSet's args, env
// and mounts, against a fake API server over HTTPS, with kube-scheduler's stand-in presenting the
// client certificate the shipped chain names, a fake kubelet and simulated GPUs. Used by
// deploy_seed_test.cc (the seed's pod, crashes) and security_e2e_test.cc (issues 38 and 39).
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
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

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;

inline constexpr char kNode[] = "gpu-node-1";
// A Tesla T4 for software slices (the simulator needs the memory of a model it has no MIG table for).
inline constexpr char kT4Gpus[] = "gpus:\n  - model: Tesla T4\n    memory_mib: 15360\n";

// The seed's pod (HAMi's example), from examples/, as JSON.
inline json SeedPod(const fs::path& root) {
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

// A pod asking `gpus` GPUs of `memory_mib` each, with `annotations`.
inline json GpuPod(const std::string& name, int gpus, int memory_mib, json annotations = json::object()) {
  json pod{{"apiVersion", "v1"},
           {"kind", "Pod"},
           {"metadata", {{"name", name}, {"namespace", "default"}}},
           {"spec",
            {{"containers",
              {{{"name", "main"},
                {"image", "cuda"},
                {"resources",
                 {{"limits",
                   {{"nvidia.com/gpu", std::to_string(gpus)},
                    {"nvidia.com/gpumem", std::to_string(memory_mib)}}}}}}}}}}};
  if (!annotations.empty()) pod["metadata"]["annotations"] = std::move(annotations);
  return pod;
}

inline json MigPod(const std::string& name, int gpus, int memory_mib) {
  return GpuPod(name, gpus, memory_mib, {{"nvidia.com/vgpu-mode", "mig"}});
}

// A software slice of one GPU (`gpu_uuid`: pinned there with nvidia.com/use-gpuuuid).
inline json SlicePod(const std::string& name, int memory_mib, const std::string& gpu_uuid = "") {
  return GpuPod(name, 1, memory_mib,
                gpu_uuid.empty() ? json::object() : json{{"nvidia.com/use-gpuuuid", gpu_uuid}});
}

struct NodeCase {
  std::string name;
  std::string gpus_yaml;                       // Simulated GPUs.
  std::map<std::string, std::string> labels;   // Beyond GPU feature discovery's.
  // Instances laid out before anything starts (a MIG manager's static layout): (profile id, start).
  std::vector<std::pair<int, int>> preexisting;
};

inline void PrintTo(const NodeCase& c, std::ostream* os) { *os << c.name; }

// The name gtest gives an instance: the case's.
inline std::string CaseName(const ::testing::TestParamInfo<NodeCase>& info) { return info.param.name; }

class DeploySeedTest : public ::testing::TestWithParam<NodeCase> {
 protected:
  // A node beside the first (kNode, whose side is dir_, state_file_, kubelet_ and agent_):
  // StartExtraNode.
  struct ExtraNode {
    std::string name;
    fs::path dir;
    std::string state_file;
    std::unique_ptr<kubelet::FakeKubelet> kubelet;
    ChildProcess agent;
  };

  void SetUp() override {
    root_ = std::getenv("PRISM_SOURCE_DIR") ? std::getenv("PRISM_SOURCE_DIR") : ".";
    dir_ = deviceplugin::testing::TestDir();
    absl::StatusOr<DeployBundle> bundle = bundle_dir_.empty()
                                              ? DeployBundle::Load(root_)
                                              : DeployBundle::LoadKustomization(root_, bundle_dir_);
    ASSERT_TRUE(bundle.ok()) << bundle.status();
    bundle_ = std::move(*bundle);
    ns_ = bundle_.namespace_name();
    if (!device_config_addition_.empty()) {
      // A setting a user adds to the shipped device config, before anything reads it.
      Object* cm = bundle_.Find("ConfigMap", "prism-device-config");
      ASSERT_NE(cm, nullptr);
      std::string& text = (*cm)["data"]["device-config.yaml"].get_ref<std::string&>();
      text += device_config_addition_;
    }

    fakeapi::FakeApiServerOptions api_options;
    api_options.tls = true;  // The production HTTPS client path, with a CA to verify.
    api_ = std::make_unique<fakeapi::FakeApiServer>(api_options);
    ASSERT_TRUE(api_->Start().ok());
    kubeconfig_ = deviceplugin::testing::WriteFile(dir_ / "kubeconfig", api_->KubeconfigYaml());
    // The ConfigMaps the base creates.
    for (const Object* cm : bundle_.All("ConfigMap")) ASSERT_TRUE(api_->Create("configmaps", *cm).ok());
    for (const Object* dc : bundle_.All("DeviceClass")) {
      ASSERT_TRUE(api_->Create("deviceclasses", *dc).ok());
    }

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
    for (const std::unique_ptr<ExtraNode>& n : extra_nodes_) {
      n->agent.Kill();
      if (n->kubelet) n->kubelet->Stop();
    }
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
    // The stand-in implements preemption through the extender's preempt verb (path A) only for
    // the verb Prism serves.
    preempt_verb_ = extender["preemptVerb"] ? extender["preemptVerb"].as<std::string>() : "";
    if (!preempt_verb_.empty()) {
      EXPECT_EQ(preempt_verb_, "preempt");
    }
    extender_ignorable_ = extender["ignorable"] && extender["ignorable"].as<bool>();
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
    if (extender["managedResources"]) {
      EXPECT_TRUE(managed.count("nvidia.com/gpu") && managed.count("nvidia.com/gpumem"));
    } else {
      // The DRA variant: the extender sees every pod of the profile (the stand-in calls it for
      // every pod), and NodeResourcesFit ignores the GPU resources instead.
      EXPECT_EQ(config["profiles"][0]["pluginConfig"][0]["name"].as<std::string>(),
                "NodeResourcesFit");
    }
  }

  void CreateNode(const NodeCase& c, const std::string& name = kNode) {
    // What the DaemonSet selects must be on the node: the test adds GPU feature discovery's
    // labels, never Prism's.
    const Object* ds = bundle_.Find("DaemonSet", "prism-device-plugin");
    ASSERT_NE(ds, nullptr);
    json labels = {{"kubernetes.io/hostname", name}};
    const json selector =
        ds->at("spec").at("template").at("spec").value("nodeSelector", json::object());
    for (const auto& [k, v] : selector.items()) {
      ASSERT_EQ(k.rfind("prism.io/", 0), std::string::npos) << "the DaemonSet needs a Prism label";
      labels[k] = v;
    }
    for (const auto& [k, v] : c.labels) labels[k] = v;
    json node{{"apiVersion", "v1"},
              {"kind", "Node"},
              {"metadata", {{"name", name}, {"labels", labels}}},
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
    for (const auto& [flag, value] : scheduler_flags_) p->SetFlag(flag, value);
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

  void StartAgent() { StartAgent(kNode, dir_, state_file_, *kubelet_, agent_); }

  // The shipped DaemonSet's node agent on node `node`, its host directories under `dir`.
  void StartAgent(const std::string& node, const fs::path& dir, const std::string& state_file,
                  kubelet::FakeKubelet& kubelet, ChildProcess& agent) {
    const Object* ds = bundle_.Find("DaemonSet", "prism-device-plugin");
    ASSERT_NE(ds, nullptr);
    LocalProcessOptions o;
    o.dir = dir;
    o.field_refs = {{"spec.nodeName", node},
                    {"metadata.name", StrCat("prism-device-plugin-", node)},
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
    p->SetFlag("--nvml", "sim:" + state_file);
    p->SetFlag("--device-plugin-path", (dir / "dp").string() + "/");
    p->SetFlag("--pod-resources-socket", (dir / "pr" / "kubelet.sock").string());
    p->SetFlag("--cdi-dir", (dir / "cdi").string());
    p->SetFlag("--state-dir", (dir / "state").string());
    p->SetFlag("--vgpu-dir", (dir / "vgpu").string());
    p->SetFlag("--metrics-address", "127.0.0.1:0");
    // The host's /dev and /proc (the DaemonSet is privileged): a fake driver tree, so that the
    // CDI specs' device nodes are really looked up.
    p->SetFlag("--dev-root", (dir / "host").string());
    p->SetFlag("--proc-root", (dir / "host" / "proc").string());
    if (p->Flag("--dra").has_value()) {
      // The kubelet's plugin directories (hostPath mounts at their host paths) are the test's.
      p->SetFlag("--dra-registry-dir", (dir / "plugins_registry").string());
      p->SetFlag("--dra-plugin-dir", (dir / "plugins" / "gpu.prism.io").string());
    }
    agent.log = (dir / "agent.log").string();
    const size_t log_before = Slurp(agent.log).size();
    agent.pid = SpawnProcess(PRISM_BINARY, *p, agent.log);
    ASSERT_GT(agent.pid, 0);
    ASSERT_TRUE(kubelet.WaitForPlugin("nvidia.com/gpu", absl::Seconds(30))) << Slurp(agent.log);
    // Ready (registered and not failing closed), on the port this run logged.
    int port = 0;
    for (int i = 0; i < 3000 && port == 0; ++i) {
      const std::string text = Slurp(agent.log).substr(log_before);
      const size_t at = text.find("metrics on 127.0.0.1:");
      if (at != std::string::npos) {
        port = std::stoi(text.substr(at + std::string("metrics on 127.0.0.1:").size()));
      } else {
        absl::SleepFor(absl::Milliseconds(10));
      }
    }
    ASSERT_GT(port, 0) << Slurp(agent.log);
    httplib::Client http("127.0.0.1", port);
    bool ready = false;
    for (int i = 0; i < 3000 && !ready; ++i) {
      auto res = http.Get("/readyz");
      ready = res && res->status == 200;
      if (!ready) absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(ready) << Slurp(agent.log);
  }

  void StartNodeSide(const NodeCase& c) {
    ASSERT_NO_FATAL_FAILURE(StartNodeSide(c, kNode, dir_, &state_file_, &kubelet_, agent_));
  }

  // Node `node`'s simulated GPUs, fake kubelet and node agent, under `dir`.
  void StartNodeSide(const NodeCase& c, const std::string& node, const fs::path& dir,
                     std::string* state_file, std::unique_ptr<kubelet::FakeKubelet>* kubelet_out,
                     ChildProcess& agent) {
    *state_file = deviceplugin::testing::WriteFile(dir / "gpus.yaml", c.gpus_yaml);
    deviceplugin::testing::WriteFakeDriverTree(dir / "host", 1);
    if (!c.preexisting.empty()) {
      nvml::SimNvml direct(*state_file);
      for (const auto& [profile, start] : c.preexisting) {
        auto gi = direct.CreateGpuInstance(0, profile, start);
        ASSERT_TRUE(gi.ok()) << gi.status();
        const int slices = 1;  // Tests lay out 1-slice compute instances.
        ASSERT_TRUE(direct.CreateComputeInstance(0, gi->id, slices).ok());
      }
    }
    kubelet::FakeKubeletOptions k{(dir / "dp").string(), (dir / "pr" / "kubelet.sock").string(),
                                  (dir / "cdi").string()};
    auto kubelet = kubelet::FakeKubelet::Start(k);
    ASSERT_TRUE(kubelet.ok()) << kubelet.status();
    *kubelet_out = std::move(*kubelet);
    ASSERT_NO_FATAL_FAILURE(StartAgent(node, dir, *state_file, **kubelet_out, agent));
  }

  // A second node in the same cluster (another kind of GPU): its Node object, simulated GPUs,
  // fake kubelet and node agent, under dir_/`name`. Run() starts pods bound there on its kubelet.
  ExtraNode* StartExtraNode(const std::string& name, const NodeCase& c) {
    auto node = std::make_unique<ExtraNode>();
    node->name = name;
    node->dir = dir_ / name;
    fs::create_directories(node->dir);
    ExtraNode* out = node.get();
    extra_nodes_.push_back(std::move(node));
    CreateNode(c, name);
    StartNodeSide(c, name, out->dir, &out->state_file, &out->kubelet, out->agent);
    return HasFatalFailure() ? nullptr : out;
  }

  // The fake kubelet of node `node` (nullptr for a node the test did not start).
  kubelet::FakeKubelet* KubeletOf(const std::string& node) {
    if (node == kNode) return kubelet_.get();
    for (const std::unique_ptr<ExtraNode>& n : extra_nodes_) {
      if (n->name == node) return n->kubelet.get();
    }
    return nullptr;
  }

  // A client of the fake API server over its kubeconfig (HTTPS, its CA), without rate limit.
  void NewClient(std::unique_ptr<k8s::Client>* out) {
    absl::StatusOr<k8s::ClusterConfig> cluster = k8s::ParseKubeconfig(api_->KubeconfigYaml());
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    k8s::ClientOptions client_options;
    client_options.qps = 0;
    absl::StatusOr<std::unique_ptr<k8s::Client>> client =
        k8s::Client::Create(*cluster, client_options);
    ASSERT_TRUE(client.ok()) << client.status();
    *out = std::move(*client);
  }

  void StartDriver() {
    ASSERT_NO_FATAL_FAILURE(NewClient(&client_));
    DriverOptions o;
    o.scheduler_name = scheduler_name_;
    o.weight = weight_;
    o.preempt_verb = preempt_verb_;
    o.extender_ignorable = extender_ignorable_;
    o.ca_file = ca_file_;
    o.client_cert_file = client_cert_file_;
    o.client_key_file = client_key_file_;
    const std::string url = StrCat("https://127.0.0.1:", port_);
    o.extender_url = [url] { return url; };
    driver_ = std::make_unique<SchedulerDriver>(client_.get(), o);
    driver_->Start();
  }

  // The admission webhook (path from the shipped MutatingWebhookConfiguration), then create.
  // `scheduler`: the schedulerName the pod must end with (default: Prism's).
  std::string Submit(json pod, std::string scheduler = "") {
    if (scheduler.empty()) scheduler = scheduler_name_;
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
    EXPECT_EQ(pod["spec"].value("schedulerName", ""), scheduler)
        << "the webhook did not hand the pod to " << scheduler;
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
    kubelet::FakeKubelet* kubelet = KubeletOf(bound["spec"].value("nodeName", ""));
    if (kubelet == nullptr) {
      return absl::InternalError(StrCat(name, " bound to ", bound["spec"].dump()));
    }
    kubelet::FakePod fake{uid, "default", name, {}};
    int gpus = 0;
    const json& c = bound["spec"]["containers"][0];
    gpus = std::stoi(c["resources"]["limits"]["nvidia.com/gpu"].get<std::string>());
    fake.containers.push_back({c["name"], false, false, gpus});
    absl::Status admitted = kubelet->AdmitPod(fake, "nvidia.com/gpu");
    if (!admitted.ok()) return admitted;
    absl::StatusOr<kubelet::CreatedContainer> created;
    for (int i = 0; i < 5000; ++i) {
      created = kubelet->CreateContainer(uid, c["name"]);
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
  // A kustomization directory under root_ to install instead of deploy/ (an overlay).
  std::string bundle_dir_;
  // YAML appended to the shipped device-config.yaml (set in a test's constructor).
  std::string device_config_addition_;
  // Flags set on the scheduler beyond the Deployment's (a test's setting: --flag=value).
  std::map<std::string, std::string> scheduler_flags_;
  DeployBundle bundle_;
  std::string ns_;
  std::unique_ptr<fakeapi::FakeApiServer> api_;
  std::string kubeconfig_;
  std::map<std::string, std::string> tls_secret_;
  std::string ca_file_;
  std::string scheduler_name_;
  int64_t weight_ = 1;
  std::string preempt_verb_;
  bool extender_ignorable_ = false;
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
  ChildProcess agent_;  // The first node's (kNode); other nodes' are in extra_nodes_.
  std::vector<std::unique_ptr<ExtraNode>> extra_nodes_;
};

}  // namespace prism::e2e
