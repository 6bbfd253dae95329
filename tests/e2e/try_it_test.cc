// The try-out of docs/try-it.md, as a user runs it on a two-worker kind cluster, with the try-it
// overlay (examples/try-it/deploy/) read AS RENDERED: the ConfigMaps it creates, the init container
// that seeds each node's simulated GPUs (run with /bin/sh, on a directory standing for the node's
// file system), `prism device-plugin` and `prism mig-manager` from their DaemonSets' containers
// (args, env, mounts: both on the node's one state file), `prism scheduler` from its Deployment,
// a kube-scheduler stand-in calling the extender with the shipped configuration's mutual TLS, the
// admission webhook, a fake kubelet per node and a stand-in DaemonSet controller that honours the
// device plugin's node affinity (the MIG manager pauses it through a node label).
//
// Then the walk-through's steps, asserting what the page says the user sees: every GPU marked
// simulated, the seed's pod on two 2g.10gb instances of a simulated A100, the slice pod's limits on
// the T4, and nvidia.com/mig.config=all-balanced applied by the MIG manager on the other worker
// (nvidia.com/mig.config.state=success, the new layout in the inventory), in `prism status` too.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "yaml-cpp/yaml.h"

#include "base/status_macros.h"
#include "base/strings.h"
#include "deviceplugin/test_util.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/objects.h"
#include "kubelet/fake_kubelet.h"
#include "testing/fake_apiserver/fake_apiserver.h"
#include "testing/fake_apiserver/test_pki.h"
#include "tests/e2e/harness/deploy_bundle.h"
#include "tests/e2e/harness/driver.h"

namespace prism::e2e {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;

constexpr char kOverlay[] = "examples/try-it/deploy";
// What kind names the workers of examples/try-it/kind.yaml (cluster prism-try-it).
constexpr const char* kWorkers[] = {"prism-try-it-worker", "prism-try-it-worker2"};
// The label the walk-through puts on the workers.
constexpr char kSimulatedLabel[] = "prism.io/simulated-gpus";

// Whether a workload's nodeSelector and required node affinity admit a node with `labels`.
bool RunsOn(const Object& workload, const json& labels) {
  const json& spec = workload.at("spec").at("template").at("spec");
  const json selector = spec.value("nodeSelector", json::object());
  for (const auto& [k, v] : selector.items()) {
    if (!labels.contains(k) || labels[k] != v) return false;
  }
  const json* terms = nullptr;
  if (spec.contains("affinity")) {
    terms = &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                 ["nodeSelectorTerms"];
  }
  if (terms == nullptr) return true;
  for (const json& term : *terms) {
    bool all = true;
    for (const json& e : term.value("matchExpressions", json::array())) {
      const std::string key = e.at("key");
      const std::string op = e.at("operator");
      const json values = e.value("values", json::array());
      const bool has = labels.contains(key);
      const bool in = has && std::find(values.begin(), values.end(), labels[key]) != values.end();
      if (op == "In") all = all && in;
      else if (op == "NotIn") all = all && !in;
      else if (op == "Exists") all = all && has;
      else if (op == "DoesNotExist") all = all && !has;
      else all = false;
    }
    if (all) return true;
  }
  return false;
}

// A pod from examples/, as JSON (the bundle's scalar rules), with its limits as quantities.
json ExamplePod(const fs::path& file) {
  absl::StatusOr<std::vector<Object>> docs = ParseDocuments(Slurp(file.string()), file.string());
  EXPECT_TRUE(docs.ok() && docs->size() == 1) << file;
  if (!docs.ok() || docs->empty()) return json::object();
  json pod = docs->front();
  pod["metadata"]["namespace"] = "default";
  for (json& c : pod["spec"]["containers"]) {
    for (auto& [k, v] : c["resources"]["limits"].items()) {
      if (!v.is_string()) v = v.dump();
    }
  }
  return pod;
}

class TryItTest : public ::testing::Test {
 protected:
  struct Node {
    std::string name;
    fs::path dir;   // Sockets and logs.
    fs::path host;  // The node's file system (hostPath volumes).
    std::unique_ptr<kubelet::FakeKubelet> kubelet;
    ChildProcess agent;
    ChildProcess manager;
    bool agent_pod = false;
    std::string state_file() const { return (host / "var/lib/prism/sim/gpus.yaml").string(); }
  };

  void SetUp() override {
    root_ = std::getenv("PRISM_SOURCE_DIR") ? std::getenv("PRISM_SOURCE_DIR") : ".";
    dir_ = deviceplugin::testing::TestDir();
    absl::StatusOr<DeployBundle> bundle = DeployBundle::LoadKustomization(root_, kOverlay);
    ASSERT_TRUE(bundle.ok()) << bundle.status();
    bundle_ = std::move(*bundle);
    ns_ = bundle_.namespace_name();
    agent_ds_ = bundle_.Find("DaemonSet", "prism-device-plugin");
    manager_ds_ = bundle_.Find("DaemonSet", "prism-mig-manager");
    ASSERT_TRUE(agent_ds_ != nullptr && manager_ds_ != nullptr);

    fakeapi::FakeApiServerOptions api_options;
    api_options.tls = true;
    api_ = std::make_unique<fakeapi::FakeApiServer>(api_options);
    ASSERT_TRUE(api_->Start().ok());
    kubeconfig_ = deviceplugin::testing::WriteFile(dir_ / "kubeconfig", api_->KubeconfigYaml());
    for (const Object* cm : bundle_.All("ConfigMap")) {
      ASSERT_TRUE(api_->Create("configmaps", *cm).ok());
    }
    ASSERT_NO_FATAL_FAILURE(IssueCertificates());
  }

  void TearDown() override {
    if (driver_) driver_->Stop();
    scheduler_.Kill();
    for (Node& n : nodes_) {
      n.agent.Kill();
      n.manager.Kill();
      if (n.kubelet) n.kubelet->Stop();
    }
  }

  // What cert-manager issues from the overlay's Certificates: the extender's serving certificate
  // (Secret prism-scheduler-tls) and kube-scheduler's client certificate, whose CA the scheduler
  // mounts at --client-ca-file.
  void IssueCertificates() {
    std::vector<std::string> dns_names;
    for (const Object* cert : bundle_.All("Certificate")) {
      if (cert->at("spec").value("secretName", "") != "prism-scheduler-tls") continue;
      for (const json& n : cert->at("spec").at("dnsNames")) dns_names.push_back(n);
    }
    ASSERT_FALSE(dns_names.empty());
    const Object* cm = bundle_.Find("ConfigMap", "prism-kube-scheduler-config");
    ASSERT_NE(cm, nullptr);
    const YAML::Node config =
        YAML::Load(cm->at("data").at("kube-scheduler-config.yaml").get<std::string>());
    scheduler_name_ = config["profiles"][0]["schedulerName"].as<std::string>();
    weight_ = config["extenders"][0]["weight"].as<int64_t>();
    const std::string cert_dir =
        fs::path(config["extenders"][0]["tlsConfig"]["certFile"].as<std::string>())
            .parent_path()
            .string();
    absl::StatusOr<fakeapi::TestPki> pki =
        fakeapi::GenerateTestPki(dns_names, {"127.0.0.1"}, "kube-scheduler");
    ASSERT_TRUE(pki.ok()) << pki.status();
    secrets_["prism-scheduler-tls"] = {{"tls.crt", pki->server_cert_pem},
                                       {"tls.key", pki->server_key_pem},
                                       {"ca.crt", pki->ca_cert_pem}};
    ca_file_ = deviceplugin::testing::WriteFile(dir_ / "extender-ca.crt", pki->ca_cert_pem);
    // The client certificate's chain, followed through the rendering.
    const Object* kube_scheduler = bundle_.Find("Deployment", "prism-kube-scheduler");
    ASSERT_NE(kube_scheduler, nullptr);
    const std::string client_secret = MountedSecret(*kube_scheduler, cert_dir);
    std::string issuer, common_name, client_ca_secret;
    for (const Object* cert : bundle_.All("Certificate")) {
      if (cert->at("spec").value("secretName", "") != client_secret) continue;
      issuer = cert->at("spec").at("issuerRef").value("name", "");
      common_name = cert->at("spec").value("commonName", "");
    }
    for (const Object* i : bundle_.All("Issuer")) {
      if (i->at("metadata").value("name", "") == issuer) {
        client_ca_secret = i->at("spec").at("ca").value("secretName", "");
      }
    }
    ASSERT_FALSE(client_ca_secret.empty()) << "no CA Issuer for kube-scheduler's certificate";
    absl::StatusOr<fakeapi::TestPki> client =
        fakeapi::GenerateTestPki({"unused.invalid"}, {}, common_name);
    ASSERT_TRUE(client.ok()) << client.status();
    secrets_[client_ca_secret] = {{"ca.crt", client->ca_cert_pem}};
    client_cert_file_ =
        deviceplugin::testing::WriteFile(dir_ / "client.crt", client->client_cert_pem);
    client_key_file_ =
        deviceplugin::testing::WriteFile(dir_ / "client.key", client->client_key_pem);
  }

  // Step 1 of the walk-through: the workers, labelled prism.io/simulated-gpus=true.
  void CreateWorkers() {
    for (int i = 0; i < 2; ++i) {
      Node& n = nodes_[i];
      n.name = kWorkers[i];
      n.dir = dir_ / StrCat("w", i);
      n.host = n.dir / "host";
      fs::create_directories(n.host);
      json labels = {{"kubernetes.io/hostname", n.name}, {kSimulatedLabel, "true"}};
      json node{{"apiVersion", "v1"},
                {"kind", "Node"},
                {"metadata", {{"name", n.name}, {"labels", labels}}},
                {"status",
                 {{"allocatable", {{"cpu", "8"}, {"memory", "16Gi"}, {"pods", "110"}}},
                  {"capacity", {{"cpu", "8"}, {"memory", "16Gi"}, {"pods", "110"}}}}}};
      ASSERT_TRUE(api_->Create("nodes", node).ok());
      // Both node DaemonSets run on a labelled worker, and on no node without the label (the
      // control plane, a real GPU node).
      EXPECT_TRUE(RunsOn(*agent_ds_, labels));
      EXPECT_TRUE(RunsOn(*manager_ds_, labels));
      json unlabelled = labels;
      unlabelled.erase(kSimulatedLabel);
      unlabelled["nvidia.com/gpu.present"] = "true";
      EXPECT_FALSE(RunsOn(*agent_ds_, unlabelled));
      EXPECT_FALSE(RunsOn(*manager_ds_, unlabelled));
    }
  }

  LocalProcessOptions NodeOptions(const Node& n, const std::string& pod) {
    LocalProcessOptions o;
    o.dir = n.dir / pod;
    o.field_refs = {{"spec.nodeName", n.name}, {"metadata.name", pod}, {"metadata.namespace", ns_}};
    o.host_root = n.host;
    return o;
  }

  // Each DaemonSet's init container, run as written with /bin/sh.
  void Seed(const Node& n, const Object& ds) {
    const std::string pod = ds.at("metadata").value("name", "") + "-init";
    absl::StatusOr<LocalProcess> p = LocalProcessFor(bundle_, ds, "seed-simulated-gpus",
                                                     NodeOptions(n, pod));
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_FALSE(p->command.empty());
    ASSERT_EQ(p->command[0], "sh");
    LocalProcess sh = *p;
    sh.args.assign(p->command.begin() + 1, p->command.end());
    sh.args.insert(sh.args.end(), p->args.begin(), p->args.end());
    const std::string log = (n.dir / "seed.log").string();
    const pid_t pid = SpawnProcess("/bin/sh", sh, log);
    ASSERT_GT(pid, 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << Slurp(log);
    EXPECT_THAT(Slurp(log), HasSubstr(StrCat("SIMULATED GPUs on node ", n.name)));
  }

  absl::Status StartAgent(Node& n) {
    absl::StatusOr<LocalProcess> p =
        LocalProcessFor(bundle_, *agent_ds_, "device-plugin", NodeOptions(n, "agent"));
    if (!p.ok()) return p.status();
    if (p->Flag("--nvml") != "sim:" + n.state_file()) {
      return absl::InternalError(StrCat("--nvml is ", p->Flag("--nvml").value_or("unset"),
                                        ", not the seeded state file"));
    }
    // What differs from the pod: the API server, and the kubelet's sockets (short paths: a unix
    // socket's path is at most 107 bytes). /dev and /proc stay the real ones: with
    // --device-nodes=false the agent must not need a driver's.
    p->SetFlag("--kubeconfig", kubeconfig_);
    p->SetFlag("--device-plugin-path", (n.dir / "dp").string() + "/");
    p->SetFlag("--pod-resources-socket", (n.dir / "pr" / "kubelet.sock").string());
    p->SetFlag("--cdi-dir", (n.host / "var/run/cdi").string());
    p->SetFlag("--state-dir", (n.host / "var/lib/prism/device-plugin").string());
    p->SetFlag("--vgpu-dir", (n.host / "var/lib/prism/vgpu").string());
    p->SetFlag("--metrics-address", "127.0.0.1:0");
    n.agent.log = (n.dir / "agent.log").string();
    const size_t log_before = Slurp(n.agent.log).size();
    n.agent.pid = SpawnProcess(PRISM_BINARY, *p, n.agent.log);
    if (n.agent.pid <= 0) return absl::InternalError("cannot start the agent");
    if (!n.kubelet->WaitForPlugin("nvidia.com/gpu", absl::Seconds(30))) {
      return absl::DeadlineExceededError(StrCat("no registration: ", Slurp(n.agent.log)));
    }
    int port = 0;
    const std::string marker = "metrics on 127.0.0.1:";
    for (int i = 0; i < 3000 && port == 0; ++i) {
      const std::string text = Slurp(n.agent.log).substr(log_before);
      const size_t at = text.find(marker);
      if (at != std::string::npos) port = std::stoi(text.substr(at + marker.size()));
      else absl::SleepFor(absl::Milliseconds(10));
    }
    httplib::Client http("127.0.0.1", port);
    for (int i = 0; i < 3000; ++i) {
      auto res = http.Get("/readyz");
      if (res && res->status == 200) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    // The DaemonSet's pod, which the MIG manager waits for to leave during a change.
    json pod{{"apiVersion", "v1"},
             {"kind", "Pod"},
             {"metadata",
              {{"name", "prism-device-plugin-" + n.name},
               {"namespace", ns_},
               {"labels", agent_ds_->at("spec").at("template").at("metadata").at("labels")}}},
             {"spec", {{"nodeName", n.name}, {"containers", {{{"name", "device-plugin"}}}}}},
             {"status", {{"phase", "Running"}}}};
    if (auto created = api_->Create("pods", pod); !created.ok()) return created.status();
    n.agent_pod = true;
    return absl::OkStatus();
  }

  void StartManager(Node& n) {
    absl::StatusOr<LocalProcess> p =
        LocalProcessFor(bundle_, *manager_ds_, "mig-manager", NodeOptions(n, "manager"));
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_EQ(p->Flag("--nvml"), "sim:" + n.state_file()) << "not the agent's state file";
    p->SetFlag("--kubeconfig", kubeconfig_);
    // Faster retries than a cluster's; nothing else differs.
    p->SetFlag("--retry-min", "100ms");
    n.manager.log = (n.dir / "manager.log").string();
    n.manager.pid = SpawnProcess(PRISM_BINARY, *p, n.manager.log);
    ASSERT_GT(n.manager.pid, 0);
  }

  // The DaemonSet controller's part for the agent: its pod leaves a node its affinity no longer
  // admits (the MIG manager's pause label) and comes back when it does.
  void ReconcileAgents() {
    for (Node& n : nodes_) {
      absl::StatusOr<json> node = api_->Get("nodes", "", n.name);
      ASSERT_TRUE(node.ok());
      const bool runs = RunsOn(*agent_ds_, (*node)["metadata"].value("labels", json::object()));
      if (!runs && n.agent_pod) {
        n.agent.Kill();
        ASSERT_TRUE(api_->Delete("pods", ns_, "prism-device-plugin-" + n.name).ok());
        n.agent_pod = false;
      } else if (runs && !n.agent_pod) {
        absl::Status started = StartAgent(n);
        ASSERT_TRUE(started.ok()) << started;
      }
    }
  }

  void StartScheduler() {
    const Object* deploy = bundle_.Find("Deployment", "prism-scheduler");
    ASSERT_NE(deploy, nullptr);
    LocalProcessOptions o;
    o.dir = dir_ / "scheduler";
    o.field_refs = {{"metadata.name", "prism-scheduler-0"}, {"metadata.namespace", ns_}};
    o.secrets = secrets_;
    absl::StatusOr<LocalProcess> p = LocalProcessFor(bundle_, *deploy, "scheduler", o);
    ASSERT_TRUE(p.ok()) << p.status();
    // Three distinct ports (a port just closed may be handed out again).
    port_ = FreeLoopbackPort();
    do webhook_port_ = FreeLoopbackPort(); while (webhook_port_ == port_);
    int probe_port = 0;
    do probe_port = FreeLoopbackPort(); while (probe_port == port_ || probe_port == webhook_port_);
    p->SetFlag("--kubeconfig", kubeconfig_);
    p->SetFlag("--port", std::to_string(port_));
    p->SetFlag("--webhook-port", std::to_string(webhook_port_));
    p->SetFlag("--probe-port", std::to_string(probe_port));
    p->SetFlag("--bind-address", "127.0.0.1");
    scheduler_.log = (dir_ / "scheduler.log").string();
    scheduler_.pid = SpawnProcess(PRISM_BINARY, *p, scheduler_.log);
    ASSERT_GT(scheduler_.pid, 0);
    httplib::Client probe("127.0.0.1", probe_port);
    bool ready = false;
    for (int i = 0; i < 3000 && !ready; ++i) {
      auto res = probe.Get("/readyz");
      ready = res && res->status == 200;
      if (!ready) absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(ready) << Slurp(scheduler_.log);

    absl::StatusOr<k8s::ClusterConfig> cluster = k8s::ParseKubeconfig(api_->KubeconfigYaml());
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    k8s::ClientOptions client_options;
    client_options.qps = 0;
    absl::StatusOr<std::unique_ptr<k8s::Client>> client =
        k8s::Client::Create(*cluster, client_options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    DriverOptions d;
    d.scheduler_name = scheduler_name_;
    d.weight = weight_;
    d.ca_file = ca_file_;
    d.client_cert_file = client_cert_file_;
    d.client_key_file = client_key_file_;
    const std::string url = StrCat("https://127.0.0.1:", port_);
    d.extender_url = [url] { return url; };
    driver_ = std::make_unique<SchedulerDriver>(client_.get(), d);
    driver_->Start();
  }

  // `kubectl apply -k examples/try-it/deploy/` on the labelled workers.
  void Install() {
    ASSERT_NO_FATAL_FAILURE(CreateWorkers());
    for (Node& n : nodes_) {
      ASSERT_NO_FATAL_FAILURE(Seed(n, *manager_ds_));
      ASSERT_NO_FATAL_FAILURE(Seed(n, *agent_ds_));  // Finds the file seeded: leaves it.
      const Object* seeds = bundle_.Find("ConfigMap", "prism-simulated-gpus");
      ASSERT_NE(seeds, nullptr);
      EXPECT_EQ(Slurp(n.state_file()), StrCat("uuid_seed: ", n.name, "\n",
                                              seeds->at("data").at("default").get<std::string>()));
      kubelet::FakeKubeletOptions k{(n.dir / "dp").string(),
                                    (n.dir / "pr" / "kubelet.sock").string(),
                                    (n.host / "var/run/cdi").string()};
      auto kubelet = kubelet::FakeKubelet::Start(k);
      ASSERT_TRUE(kubelet.ok()) << kubelet.status();
      n.kubelet = std::move(*kubelet);
      absl::Status started = StartAgent(n);
      ASSERT_TRUE(started.ok()) << started;
      ASSERT_NO_FATAL_FAILURE(StartManager(n));
    }
    ASSERT_NO_FATAL_FAILURE(StartScheduler());
  }

  // The node's inventory once it lists `gpus` GPUs and `pred` holds.
  json WaitInventory(const Node& n, const std::function<bool(const json&)>& pred) {
    json inventory;
    for (int i = 0; i < 1500; ++i) {
      absl::StatusOr<json> node = api_->Get("nodes", "", n.name);
      const json annotations = (*node)["metadata"].value("annotations", json::object());
      if (annotations.contains("prism.io/gpu-inventory")) {
        inventory = json::parse(annotations["prism.io/gpu-inventory"].get<std::string>(), nullptr,
                                false);
        if (pred(inventory)) return inventory;
      }
      ReconcileAgents();
      absl::SleepFor(absl::Milliseconds(20));
    }
    ADD_FAILURE() << n.name << ": inventory " << inventory.dump() << "\n" << Slurp(n.agent.log);
    return inventory;
  }

  // The admission webhook (its path from the rendered configuration), then the API server.
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
    EXPECT_TRUE(res && res->status == 200);
    if (!res) return "";
    const json answer = json::parse(res->body, nullptr, false);
    if (answer["response"].contains("patch")) {
      std::string patch;
      EXPECT_TRUE(absl::Base64Unescape(answer["response"]["patch"].get<std::string>(), &patch));
      pod = pod.patch(json::parse(patch));
    }
    auto created = api_->Create("pods", pod);
    EXPECT_TRUE(created.ok()) << created.status();
    return created.ok() ? k8s::Uid(*created) : "";
  }

  // Bound through the extender, then admitted and started by its node's kubelet.
  absl::StatusOr<kubelet::CreatedContainer> Run(const json& pod, const std::string& uid,
                                                Node** on) {
    const std::string name = pod["metadata"]["name"];
    if (!driver_->WaitBound({"default/" + name}, absl::Seconds(30))) {
      return absl::DeadlineExceededError(StrCat(name, " was not bound: ", Slurp(scheduler_.log)));
    }
    const json bound = *api_->Get("pods", "default", name);
    *on = nullptr;
    for (Node& n : nodes_) {
      if (n.name == bound["spec"].value("nodeName", "")) *on = &n;
    }
    if (*on == nullptr) return absl::InternalError(StrCat(name, " bound to ", bound.dump()));
    const json& c = bound["spec"]["containers"][0];
    kubelet::FakePod fake{uid, "default", name, {}};
    fake.containers.push_back(
        {c["name"], false, false, std::stoi(c["resources"]["limits"]["nvidia.com/gpu"].get<std::string>())});
    RETURN_IF_ERROR((*on)->kubelet->AdmitPod(fake, "nvidia.com/gpu"));
    absl::StatusOr<kubelet::CreatedContainer> created;
    for (int i = 0; i < 5000; ++i) {
      created = (*on)->kubelet->CreateContainer(uid, c["name"]);
      if (created.ok() || created.status().code() != absl::StatusCode::kNotFound) break;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return created;
  }

  // `prism status`, as the walk-through runs it (in the scheduler's pod: here with the test's
  // kubeconfig).
  std::string Status() {
    const std::string out = (dir_ / "status.txt").string();
    const std::string command = StrCat("'", PRISM_BINARY, "' status --kubeconfig '", kubeconfig_,
                                       "' >'", out, "' 2>&1");
    EXPECT_EQ(std::system(command.c_str()), 0) << Slurp(out);
    return Slurp(out);
  }

  static json Annotation(const json& object, const std::string& key) {
    const json annotations = object["metadata"].value("annotations", json::object());
    if (!annotations.contains(key)) return nullptr;
    return json::parse(annotations[key].get<std::string>(), nullptr, false);
  }

  fs::path root_;
  fs::path dir_;
  DeployBundle bundle_;
  std::string ns_;
  const Object* agent_ds_ = nullptr;
  const Object* manager_ds_ = nullptr;
  std::unique_ptr<fakeapi::FakeApiServer> api_;
  std::string kubeconfig_;
  std::map<std::string, std::map<std::string, std::string>> secrets_;
  std::string ca_file_;
  std::string client_cert_file_;
  std::string client_key_file_;
  std::string scheduler_name_;
  int64_t weight_ = 1;
  int port_ = 0;
  int webhook_port_ = 0;
  ChildProcess scheduler_;
  std::unique_ptr<k8s::Client> client_;
  std::unique_ptr<SchedulerDriver> driver_;
  Node nodes_[2];
};

TEST_F(TryItTest, TheWalkThroughShowsWhatTheDocSays) {
  ASSERT_NO_FATAL_FAILURE(Install());

  // Step: the workers' simulated GPUs, announced by the node agents.
  for (Node& n : nodes_) {
    const json inventory =
        WaitInventory(n, [](const json& inv) { return inv.value("gpus", json::array()).size() == 3; });
    ASSERT_EQ(inventory["gpus"].size(), 3u);
    EXPECT_EQ(inventory["gpus"][0]["model"], "A100-PCIE-40GB");
    EXPECT_EQ(inventory["gpus"][0]["mode"], "mig");
    EXPECT_EQ(inventory["gpus"][1]["model"], "H100-SXM5-80GB");
    EXPECT_EQ(inventory["gpus"][1]["mode"], "hami-core");
    EXPECT_EQ(inventory["gpus"][2]["model"], "Tesla T4");
    // Labelled as simulation in the inventory and the agent's log.
    EXPECT_EQ(inventory.value("simulated", false), true);
    EXPECT_THAT(Slurp(n.agent.log), HasSubstr("SIMULATED GPUs (--nvml sim:)"));
    EXPECT_THAT(Slurp(n.manager.log), HasSubstr("SIMULATED GPUs (--nvml sim:)"));
    EXPECT_THAT(Slurp(n.agent.log), HasSubstr("serving nvidia.com/gpu"));
  }
  std::string status = Status();
  for (const char* worker : kWorkers) {
    EXPECT_THAT(status, HasSubstr(StrCat("node ", worker, " (SIMULATED GPUs")));
  }
  EXPECT_THAT(status, HasSubstr("SIMULATED: 2 of these nodes"));
  EXPECT_THAT(status, HasSubstr("A100-PCIE-40GB"));

  // Step: the seed's pod, from examples/plan/seed-pod.yaml: two 2g.10gb instances made on a
  // simulated A100 for it.
  json seed = ExamplePod(root_ / "examples/plan/seed-pod.yaml");
  const std::string seed_uid = Submit(seed);
  ASSERT_FALSE(seed_uid.empty());
  Node* seed_node = nullptr;
  absl::StatusOr<kubelet::CreatedContainer> seed_container = Run(seed, seed_uid, &seed_node);
  ASSERT_TRUE(seed_container.ok()) << seed_container.status();
  const std::string visible = seed_container->env["NVIDIA_VISIBLE_DEVICES"];
  EXPECT_EQ(std::count(visible.begin(), visible.end(), ','), 1) << visible;
  EXPECT_EQ(visible.rfind("MIG-", 0), 0u) << visible;
  EXPECT_TRUE(seed_container->device_nodes.empty()) << "no device nodes in a simulation";
  // The pod's annotations: the scheduler's decision, then the node agent's allocation status.
  json placed = *api_->Get("pods", "default", "gpu-pod1");
  const json decision = Annotation(placed, "prism.io/decision");
  ASSERT_TRUE(decision.is_object()) << placed.dump();
  std::vector<std::string> profiles;
  for (const json& d : decision["containers"][0]["devices"]) profiles.push_back(d.value("profile", ""));
  EXPECT_EQ(profiles, (std::vector<std::string>{"2g.10gb", "2g.10gb"})) << decision.dump();
  json allocation;
  // Up to 30 s: the agent's patch thread writes it, slowly under a sanitizer on a busy machine.
  for (int i = 0; i < 3000 && !allocation.is_object(); ++i) {
    allocation = Annotation(*api_->Get("pods", "default", "gpu-pod1"), "prism.io/allocation-status");
    if (!allocation.is_object()) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(allocation.is_object()) << Slurp(seed_node->agent.log);
  EXPECT_EQ(allocation["containers"]["ubuntu-container1"]["devices"].size(), 2u)
      << allocation.dump();
  const YAML::Node seed_state = YAML::LoadFile(seed_node->state_file());
  EXPECT_EQ(seed_state["gpus"][0]["gpu_instances"].size(), 4u)
      << "HAMi's geometry {1g.5gb: 1, 2g.10gb: 3}";

  // Step: the slice pod, on the T4, with its limits.
  json slice = ExamplePod(root_ / "examples/try-it/slice-pod.yaml");
  const std::string slice_uid = Submit(slice);
  ASSERT_FALSE(slice_uid.empty());
  Node* slice_node = nullptr;
  absl::StatusOr<kubelet::CreatedContainer> slice_container = Run(slice, slice_uid, &slice_node);
  ASSERT_TRUE(slice_container.ok()) << slice_container.status();
  const json slice_inventory = WaitInventory(*slice_node, [](const json&) { return true; });
  EXPECT_EQ(slice_container->env["NVIDIA_VISIBLE_DEVICES"], slice_inventory["gpus"][2]["uuid"]);
  EXPECT_EQ(slice_container->env["CUDA_DEVICE_MEMORY_LIMIT_0"], "4000m");
  EXPECT_EQ(slice_container->env["CUDA_DEVICE_SM_LIMIT"], "30");

  status = Status();
  EXPECT_THAT(status, HasSubstr("default/gpu-pod1"));
  EXPECT_THAT(status, HasSubstr("default/slice-pod"));

  // Step: a static layout on the other worker, through the node label.
  Node& other = seed_node == &nodes_[0] ? nodes_[1] : nodes_[0];
  ASSERT_TRUE(api_->MergePatch("nodes", "", other.name,
                               json{{"metadata", {{"labels", {{"nvidia.com/mig.config",
                                                                "all-balanced"}}}}}})
                  .ok());
  std::string state;
  for (int i = 0; i < 1500 && state != "success" && state != "failed"; ++i) {
    ReconcileAgents();
    const json node = *api_->Get("nodes", "", other.name);
    state = node["metadata"]["labels"].value("nvidia.com/mig.config.state", "");
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(state, "success") << Slurp(other.manager.log);
  const json labels = (*api_->Get("nodes", "", other.name))["metadata"]["labels"];
  EXPECT_EQ(labels.value("nvidia.com/mig-1g.10gb.count", ""), "2") << labels.dump();
  const json layout = WaitInventory(other, [](const json& inv) {
    return inv["gpus"].size() == 3 && inv["gpus"][1]["mode"] == "mig" &&
           inv["gpus"][1]["mig"].value("instances", json::array()).size() == 4;
  });
  std::multiset<std::string> a100, h100;
  for (const json& gi : layout["gpus"][0]["mig"].value("instances", json::array())) {
    a100.insert(gi.value("profile", ""));
  }
  for (const json& gi : layout["gpus"][1]["mig"].value("instances", json::array())) {
    h100.insert(gi.value("profile", ""));
  }
  EXPECT_EQ(a100, (std::multiset<std::string>{"1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"}));
  EXPECT_EQ(h100, (std::multiset<std::string>{"1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"}));
  EXPECT_FALSE(layout["gpus"][1]["mig"].value("dynamic", true)) << "a static layout";
  EXPECT_EQ(layout["gpus"][2]["mode"], "hami-core") << "the T4 is left as it was";
  EXPECT_THAT(Slurp(other.manager.log), HasSubstr("MIG configuration applied successfully"));
  status = Status();
  EXPECT_THAT(status, HasSubstr("3g.40gb"));
}

}  // namespace
}  // namespace prism::e2e
