// The RBAC shipped in deploy/ against the API requests the node components really make
// (docs/rbac.md#what-the-code-calls).
//
// The node agent (through its harness: fake kubelet, simulated GPUs) and the MIG manager
// (through its end-to-end fixture) run against the fake API server, which records every HTTP
// request; each harness's server serves that one component (the harnesses set up their state
// directly, not over HTTP). Every recorded request is turned into the attributes the API server
// authorizes (verb, API group, resource, subresource, namespace, name; the request-info rules of
// k8s.io/apiserver/pkg/endpoints/request/requestinfo.go, RequestInfoFactory.NewRequestInfo) and
// checked against the rules the component's service account is bound to in deploy/ as shipped
// (ClusterRoleBindings, RoleBindings in their namespaces, resourceNames). Then the other way: every
// verb the RBAC grants must have been used, except the few listed with the reason they are not
// reached here. deploy_test.py checks the chart grants the same rules.
//
// With --dra the node agent is also a DRA driver (docs/dra.md): its DraDriver, DraSlicePublisher
// and DraServer run beside it on the same API client, between the fake DRA kubelet and the fake API
// server, and its requests are checked against the DRA overlay (examples/dra/: deploy/ plus
// deploy/dra/) as shipped.
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "config/device_config_yaml.h"
#include "config/dra_allocation.h"
#include "config/dra_pod.h"
#include "deviceplugin/agent_harness.h"
#include "deviceplugin/dra_driver.h"
#include "deviceplugin/dra_server.h"
#include "deviceplugin/dra_slices.h"
#include "deviceplugin/test_util.h"
#include "extender/scheduler.h"
#include "extender/test_util.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "kubelet/fake_dra_kubelet.h"
#include "migmanager/manager_test_fixture.h"
#include "tests/e2e/harness/deploy_bundle.h"

namespace prism::e2e {
namespace {

using Json = nlohmann::json;

// What the API server authorizes a request as.
struct Attributes {
  std::string verb;
  std::string group;
  std::string resource;  // "pods", or "pods/status" with a subresource.
  std::string ns;        // "" for cluster-scoped requests and all-namespace lists.
  std::string name;      // "" for create, and for list/watch without a metadata.name selector.
};

std::string UrlDecode(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i] == '+' ? ' ' : s[i];
    }
  }
  return out;
}

// requestinfo.go's NewRequestInfo for the paths Prism uses: /api/v1/... and /apis/<g>/<v>/...,
// optionally namespaced, then resource[/name[/subresource]].
Attributes ToAttributes(const fakeapi::RequestRecord& r) {
  std::vector<std::string> parts = absl::StrSplit(r.path, '/', absl::SkipEmpty());
  Attributes a;
  size_t i = 0;
  if (parts.size() >= 2 && parts[0] == "api") {
    i = 2;
  } else if (parts.size() >= 3 && parts[0] == "apis") {
    a.group = parts[1];
    i = 3;
  } else {
    ADD_FAILURE() << "not a resource path: " << r.path;
    return a;
  }
  if (i + 1 < parts.size() && parts[i] == "namespaces") {
    a.ns = parts[i + 1];
    i += 2;
  }
  if (i < parts.size()) a.resource = parts[i];
  if (i + 1 < parts.size()) a.name = parts[i + 1];
  if (i + 2 < parts.size()) a.resource += "/" + parts[i + 2];
  bool watch = r.watch;
  std::string field_selector;
  for (absl::string_view kv : absl::StrSplit(r.query, '&', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.first == "fieldSelector") field_selector = UrlDecode(p.second);
  }
  if (r.method == "GET") {
    a.verb = !a.name.empty() ? "get" : watch ? "watch" : "list";
  } else if (r.method == "POST") {
    a.verb = "create";
  } else if (r.method == "PUT") {
    a.verb = "update";
  } else if (r.method == "PATCH") {
    a.verb = "patch";
  } else if (r.method == "DELETE") {
    a.verb = a.name.empty() ? "deletecollection" : "delete";
  }
  // A list or watch selecting metadata.name=<x> is authorized as that name (so resourceNames
  // rules can allow it).
  if ((a.verb == "list" || a.verb == "watch") && a.name.empty()) {
    for (absl::string_view term : absl::StrSplit(field_selector, ',', absl::SkipEmpty())) {
      std::pair<std::string, std::string> p = absl::StrSplit(term, absl::MaxSplits('=', 1));
      if (p.first == "metadata.name") a.name = p.second;
    }
  }
  return a;
}

struct Rule {
  std::set<std::string> groups, resources, verbs, names;
  std::string ns;  // "" = every namespace (a ClusterRole bound by a ClusterRoleBinding).
};

std::set<std::string> Strings(const Json& list) {
  std::set<std::string> out;
  if (list.is_array()) {
    for (const Json& v : list) out.insert(v.get<std::string>());
  }
  return out;
}

// The rules service account `sa` of the bundle's namespace is bound to in `bundle`.
std::vector<Rule> RulesOf(const DeployBundle& bundle, const std::string& sa) {
  const std::string& home = bundle.namespace_name();
  std::vector<Rule> out;
  for (const char* kind : {"ClusterRoleBinding", "RoleBinding"}) {
    for (const Object* b : bundle.All(kind)) {
      bool bound = false;
      for (const Json& s : b->value("subjects", Json::array())) {
        bound |= s.value("kind", "") == "ServiceAccount" && s.value("name", "") == sa &&
                 s.value("namespace", home) == home;
      }
      if (!bound) continue;
      const std::string role_kind = (*b)["roleRef"]["kind"];
      const std::string role_name = (*b)["roleRef"]["name"];
      const std::string scope = std::string(kind) == "RoleBinding"
                                    ? b->value("/metadata/namespace"_json_pointer, home)
                                    : "";
      const Object* role = nullptr;
      for (const Object* r : bundle.All(role_kind)) {
        if ((*r)["metadata"]["name"] == role_name &&
            (role_kind == "ClusterRole" ||
             r->value("/metadata/namespace"_json_pointer, home) == scope)) {
          role = r;
        }
      }
      EXPECT_NE(role, nullptr) << kind << " " << (*b)["metadata"]["name"] << " -> " << role_kind
                               << " " << role_name << ": not shipped";
      if (role == nullptr) continue;
      for (const Json& rule : role->value("rules", Json::array())) {
        out.push_back({Strings(rule["apiGroups"]), Strings(rule["resources"]),
                       Strings(rule["verbs"]), Strings(rule.value("resourceNames", Json())),
                       scope});
      }
    }
  }
  return out;
}

bool Allows(const Rule& rule, const Attributes& a) {
  auto has = [](const std::set<std::string>& s, const std::string& v) {
    return s.count("*") != 0 || s.count(v) != 0;
  };
  if (!rule.ns.empty() && rule.ns != a.ns) return false;
  if (!has(rule.groups, a.group) || !has(rule.resources, a.resource) || !has(rule.verbs, a.verb)) {
    return false;
  }
  return rule.names.empty() || (!a.name.empty() && rule.names.count(a.name) != 0);
}

std::string Describe(const Attributes& a) {
  return absl::StrCat(a.verb, " ", a.group.empty() ? "" : a.group + "/", a.resource,
                      a.ns.empty() ? "" : " in " + a.ns, a.name.empty() ? "" : " named " + a.name);
}

// Every request is allowed by `sa`'s rules as the kustomization `dir` ships them, and every
// (group, resource, verb) the rules grant was used, except those in `not_exercised`
// ("resource verb": why).
void ExpectRbacMatches(const std::vector<fakeapi::RequestRecord>& requests, const std::string& sa,
                       const std::map<std::string, std::string>& not_exercised,
                       const std::string& dir = "deploy") {
  absl::StatusOr<DeployBundle> bundle = DeployBundle::LoadKustomization(PRISM_SOURCE_DIR, dir);
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  const std::vector<Rule> rules = RulesOf(*bundle, sa);
  ASSERT_FALSE(rules.empty()) << sa;
  std::set<std::string> used;
  for (const fakeapi::RequestRecord& r : requests) {
    const Attributes a = ToAttributes(r);
    used.insert(absl::StrCat(a.group.empty() ? "" : a.group + "/", a.resource, " ", a.verb));
    bool allowed = false;
    for (const Rule& rule : rules) allowed |= Allows(rule, a);
    EXPECT_TRUE(allowed) << sa << " may not " << Describe(a) << " (" << r.method << " " << r.path
                         << "?" << r.query << ")";
  }
  std::printf("%s used:", sa.c_str());
  for (const std::string& u : used) std::printf(" [%s]", u.c_str());
  std::printf("\n");
  for (const Rule& rule : rules) {
    for (const std::string& g : rule.groups) {
      for (const std::string& res : rule.resources) {
        for (const std::string& v : rule.verbs) {
          const std::string key = absl::StrCat(g.empty() ? "" : g + "/", res, " ", v);
          EXPECT_TRUE(used.count(key) != 0 || not_exercised.count(key) != 0)
              << sa << " is granted " << key << ", which it never used";
          EXPECT_FALSE(used.count(key) != 0 && not_exercised.count(key) != 0)
              << key << " is used: take it off the not-exercised list";
        }
      }
    }
  }
}

// --- the node agent --------------------------------------------------------------------------

constexpr char kNode[] = R"(gpus:
  - model: A100-SXM4-40GB
    mig: {enabled: true, pending: true}
  - model: A100-SXM4-40GB
)";

// The node agent in its harness (simulated GPUs, a fake kubelet), through its own traffic: a pod
// Prism scheduled (allocation status), one it places itself (its own decision), and one whose
// decision is unreadable (a failure Event).
class RbacCallsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sched::DeviceConfig config = config::DefaultDeviceConfig();
    config.mig_strategy = sched::MigStrategy::kPlacement;
    h_ = std::make_unique<deviceplugin::testing::AgentHarness>(
        deviceplugin::testing::TestDir("-rbac"), kNode, config);
    ASSERT_TRUE(h_->StartCluster().ok());
    ASSERT_TRUE(h_->StartAgent().ok());
    ASSERT_TRUE(h_->InitScheduler().ok());
    ASSERT_NO_FATAL_FAILURE(RunAgentPods(*h_));
  }

  static void RunAgentPods(deviceplugin::testing::AgentHarness& h);

  std::unique_ptr<deviceplugin::testing::AgentHarness> h_;
};

void RbacCallsTest::RunAgentPods(deviceplugin::testing::AgentHarness& h) {
  namespace dp = deviceplugin::testing;
  auto run = [&h](const dp::PodSpec& pod, bool decide) {
    absl::StatusOr<std::string> uid = h.SubmitPod(pod, decide);
    ASSERT_TRUE(uid.ok()) << uid.status();
    ASSERT_TRUE(h.Admit(*uid).ok());
    ASSERT_TRUE(h.CreateContainer(*uid, "main").ok());
  };
  run({"decided", {{"main", 1, 4000}}, {{"nvidia.com/vgpu-mode", "mig"}}}, true);
  run({"undecided", {{"main", 1, 4000, 30}}, {{"nvidia.com/vgpu-mode", "hami-core"}}}, false);
  run({"broken",
       {{"main", 1, 4000, 30}},
       {{"nvidia.com/vgpu-mode", "hami-core"}, {"prism.io/decision", "{\"node\": 1}"}}},
      false);
  ASSERT_TRUE(dp::Eventually([&] { return !h.Events("PrismAllocationFailed").empty(); }));
  ASSERT_TRUE(h.agent().WaitIdle(absl::Seconds(10)));

  // A pod the kubelet admits before the agent's informer shows it (NodeAgent::LookupPod reads it
  // from the API): the pod watch is cut and its re-watch held until the pod has been read.
  fakeapi::Fault hold_watch;
  hold_watch.method = "GET";
  hold_watch.path_prefix = "/api/v1/pods";
  hold_watch.query_contains = "watch";
  hold_watch.count = -1;
  hold_watch.status = 0;
  hold_watch.delay = absl::Seconds(2);
  h.api().InjectFault(hold_watch);
  h.api().DropWatches();
  run({"unseen", {{"main", 1, 4000}}, {{"nvidia.com/vgpu-mode", "mig"}}}, true);
  EXPECT_TRUE(dp::Eventually([&] {
    return h.api().CountRequests("GET", absl::StrCat("/api/v1/namespaces/", dp::kNamespace,
                                                     "/pods/unseen")) > 0;
  }));
  h.api().ClearFaults();
  ASSERT_TRUE(h.agent().WaitIdle(absl::Seconds(10)));
}

// The node agent's rights these tests do not reach, and why.
std::map<std::string, std::string> AgentNotExercised() {
  return {{"events patch", "repeats of one Event (event_recorder_test.cc)"}};
}

TEST_F(RbacCallsTest, NodeAgentUsesExactlyItsShippedRights) {
  ExpectRbacMatches(h_->api().Requests(), "prism-device-plugin", AgentNotExercised());
}

// The DRA half of `prism device-plugin --dra=true` (device_plugin_command.cc wires the same three
// objects), on the agent's API client.
class DraAgent {
 public:
  DraAgent(const std::filesystem::path& dir, k8s::Client* client,
           std::vector<deviceplugin::DraGpu> gpus)
      : gpus_(std::move(gpus)) {
    deviceplugin::DraDriverOptions options;
    options.node_name = deviceplugin::testing::kNode;
    options.cdi_dir = (dir / "cdi").string();
    options.state_dir = (dir / "state").string();
    options.device_nodes.enabled = false;
    options.gpus = [this]() -> absl::StatusOr<std::vector<deviceplugin::DraGpu>> {
      return gpus_;
    };
    driver_ = std::make_unique<deviceplugin::DraDriver>(options, client);
    publisher_ = std::make_unique<deviceplugin::DraSlicePublisher>(
        deviceplugin::kDraDriverName, deviceplugin::testing::kNode, client);
    deviceplugin::DraServerOptions server_options;
    server_options.registry_dir = (dir / "plugins_registry").string();
    server_options.plugin_dir = (dir / "plugins" / deviceplugin::kDraDriverName).string();
    server_options.on_registered = [this]() { return publisher_->Publish(gpus_).status(); };
    server_ = std::make_unique<deviceplugin::DraServer>(driver_.get(), server_options);
  }
  ~DraAgent() { server_->Stop(); }

  absl::Status Start() {
    if (absl::Status s = driver_->Start(); !s.ok()) return s;
    return server_->Start();
  }

 private:
  const std::vector<deviceplugin::DraGpu> gpus_;
  std::unique_ptr<deviceplugin::DraDriver> driver_;
  std::unique_ptr<deviceplugin::DraSlicePublisher> publisher_;
  std::unique_ptr<deviceplugin::DraServer> server_;
};

deviceplugin::DraGpu WholeGpu(uint32_t minor) {
  deviceplugin::DraGpu gpu;
  gpu.minor = minor;
  gpu.index = static_cast<int>(minor);
  gpu.uuid = absl::StrCat("GPU-dra-", minor);
  gpu.memory_mib = 40960;
  gpu.product_name = "NVIDIA A100-SXM4-40GB";
  return gpu;
}

TEST_F(RbacCallsTest, NodeAgentWithDraUsesExactlyTheDraOverlaysRights) {
  namespace dp = deviceplugin::testing;
  dp::AgentHarness& h = *h_;

  const std::filesystem::path dir = h.dir() / "dra";
  auto slices = [&h] { return h.api().List("resourceslices").size(); };
  auto dra = std::make_unique<DraAgent>(dir, &h.client(),
                                        std::vector<deviceplugin::DraGpu>{WholeGpu(0), WholeGpu(1)});
  ASSERT_TRUE(dra->Start().ok());
  // The kubelet reads no claim here (no API client): every recorded request is the agent's.
  kubelet::FakeDraKubeletOptions kubelet_options;
  kubelet_options.registry_dir = (dir / "plugins_registry").string();
  kubelet_options.cdi_dir = (dir / "cdi").string();
  auto kubelet = kubelet::FakeDraKubelet::Start(kubelet_options);
  ASSERT_TRUE(kubelet.ok()) << kubelet.status();
  ASSERT_TRUE((*kubelet)->WaitForPlugin(deviceplugin::kDraDriverName, absl::Seconds(10)));
  // Registered: the node's two GPUs published (list, create).
  ASSERT_TRUE(dp::Eventually([&] { return slices() == 2; }));

  // A claim allocated GPU 0, prepared and unprepared (get).
  Json claim{{"apiVersion", "resource.k8s.io/v1"},
             {"kind", "ResourceClaim"},
             {"metadata", {{"name", "c"}, {"namespace", "default"}}},
             {"spec", {{"devices", {{"requests", Json::array()}}}}},
             {"status",
              {{"allocation",
                {{"devices",
                  {{"results", Json::array({{{"request", "gpu"},
                                             {"driver", deviceplugin::kDraDriverName},
                                             {"pool", dp::kNode},
                                             {"device", "gpu-0"}}})},
                   {"config", Json::array({config::DraAllocationMarker("pod-1", dp::kNode)})}}}}},
               {"reservedFor",
                Json::array({{{"resource", "pods"}, {"name", "p"}, {"uid", "pod-1"}}})}}}};
  absl::StatusOr<Json> created = h.api().Create("resourceclaims", claim);
  ASSERT_TRUE(created.ok()) << created.status();
  const kubelet::FakeDraClaim ref{"default", "c", (*created)["metadata"]["uid"]};
  auto prepared = (*kubelet)->NodePrepareResources(deviceplugin::kDraDriverName, {ref});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_EQ(prepared->claims().at(ref.uid).error(), "");
  auto unprepared = (*kubelet)->NodeUnprepareResources(deviceplugin::kDraDriverName, {ref});
  ASSERT_TRUE(unprepared.ok()) << unprepared.status();

  // The agent restarts after GPU 1 left (or went into MIG mode): it registers again and
  // republishes the pool, GPU 0's slice updated, GPU 1's deleted.
  dra.reset();
  dra = std::make_unique<DraAgent>(dir, &h.client(),
                                   std::vector<deviceplugin::DraGpu>{WholeGpu(0)});
  ASSERT_TRUE(dra->Start().ok());
  ASSERT_TRUE(dp::Eventually([&] { return slices() == 1; }));
  dra.reset();
  (*kubelet)->Stop();
  ExpectRbacMatches(h.api().Requests(), "prism-device-plugin", AgentNotExercised(),
                    "examples/dra");
}

// --- the MIG manager -------------------------------------------------------------------------

class RbacMigManagerTest : public migmanager::test_fixture::MigManagerTest {};

TEST_F(RbacMigManagerTest, MigManagerUsesExactlyItsShippedRights) {
  using namespace migmanager;  // NOLINT: the fixture's names.
  using namespace migmanager::test_fixture;  // NOLINT
  absl::StatusOr<DeployBundle> bundle = DeployBundle::Load(PRISM_SOURCE_DIR);
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  const std::string ns = bundle->namespace_name();
  SetGpus(kH100);
  CreateNode({{kConfigLabel, "all-1g.10gb"}, {kDevicePluginLabel, "true"}});
  // The shipped mig-parted ConfigMap, where the shipped DaemonSet points the manager.
  const Object* cm = bundle->Find("ConfigMap", "prism-mig-parted-config");
  ASSERT_NE(cm, nullptr);
  ASSERT_TRUE(server_->Create("configmaps", *cm).ok());
  // An operand paused during the change, and the GPU Operator's validator, restarted after it.
  daemonsets_->Add({"nvidia-device-plugin-daemonset",
                    {{kDevicePluginLabel, "true"}},
                    {{"app", "nvidia-device-plugin-daemonset"}}});
  daemonsets_->Add({"nvidia-operator-validator", {}, {{"app", "nvidia-operator-validator"}}});
  daemonsets_->Sync();
  daemonsets_->Start();
  ManagerOptions options = Options();
  options.reconciler.config = {ns, "prism-mig-parted-config", "config.yaml", ""};
  StartManager(options);
  ReconcileResult r = Attempt(1);
  ASSERT_EQ(r.outcome, Outcome::kSuccess) << r.reason << ": " << r.message;
  SetLabel(kConfigLabel, "no-such-config");  // A failure: the reason annotation and a Warning.
  r = Attempt(2);
  ASSERT_EQ(r.outcome, Outcome::kFailed);
  ASSERT_TRUE(Eventually([&] { return EventReasons().size() >= 2; }));
  manager_->Stop();
  ExpectRbacMatches(server_->Requests(), "prism-mig-manager",
                    {{"events patch", "repeats of one Event (event_recorder_test.cc)"}});
}

// --- the scheduler ---------------------------------------------------------------------------

// The scheduler as the bundle's Deployment runs it (extender::Scheduler as `prism scheduler`
// wires its --leader-elect, --config-map, --scheduler-name, --dra and --dra-hami-claims), in the
// bundle's namespace `ns`, with ticks and retries short enough for a test.
extender::SchedulerOptions ShippedSchedulerOptions(const std::string& ns, const Object& deployment) {
  extender::SchedulerOptions options;
  options.initial_config = config::DefaultDeviceConfig();
  options.cache.engine = extender::DefaultEngineOptions();
  options.tick = absl::Milliseconds(20);
  options.cache.problem_grace = absl::Milliseconds(100);
  options.dra_options.retry_interval = absl::Milliseconds(50);
  options.config_namespace = options.lease_namespace = ns;
  options.identity = "prism-scheduler-0";
  for (const Json& arg : deployment["spec"]["template"]["spec"]["containers"][0]["args"]) {
    const std::string a = arg;
    if (a == "--leader-elect") options.leader_elect = true;
    if (a == "--dra") options.dra = true;
    if (a == "--dra-hami-claims") options.dra_hami_claims = true;
    if (a.rfind("--config-map=", 0) == 0) options.config_map_name = a.substr(a.find('=') + 1);
    if (a.rfind("--scheduler-name=", 0) == 0) options.scheduler_name = a.substr(a.find('=') + 1);
  }
  return options;
}

// The scheduler (extender::Scheduler, as `prism scheduler` wires it, with the shipped Deployment's
// --leader-elect and --config-map, in the bundle's namespace) alone on a fake API server whose
// state the test sets up directly (unrecorded), driven through its verbs as kube-scheduler calls
// them: low-priority slices filtered and bound, a high-priority one that fits only by preemption
// (dry-run eviction, DisruptionTarget status patch, eviction, Events), then bound; a pod no node
// can hold, twice (a repeated FilteringFailed Event).
TEST(RbacSchedulerTest, SchedulerUsesExactlyItsShippedRights) {
  namespace ext = extender;
  absl::StatusOr<DeployBundle> bundle = DeployBundle::Load(PRISM_SOURCE_DIR);
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  const std::string ns = bundle->namespace_name();
  const Object* deployment = bundle->Find("Deployment", "prism-scheduler");
  ASSERT_NE(deployment, nullptr);
  ext::SchedulerOptions options = ShippedSchedulerOptions(ns, *deployment);
  ASSERT_TRUE(options.leader_elect) << "the shipped scheduler runs without leader election";
  ASSERT_FALSE(options.config_map_name.empty());

  fakeapi::FakeApiServer api;
  ASSERT_TRUE(api.Start().ok());
  const Object* cm = bundle->Find("ConfigMap", options.config_map_name);
  ASSERT_NE(cm, nullptr) << options.config_map_name << " is not shipped";
  ASSERT_TRUE(api.Create("configmaps", *cm).ok());
  ASSERT_TRUE(
      api.Create("nodes", ext::testing::NodeJson("n1", {ext::testing::TestGpu{"T4", 15360},
                                                        ext::testing::TestGpu{"T4", 15360}}))
          .ok());
  absl::StatusOr<k8s::ClusterConfig> cluster = k8s::ParseKubeconfig(api.KubeconfigYaml());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  absl::StatusOr<std::unique_ptr<k8s::Client>> client = k8s::Client::Create(*cluster);
  ASSERT_TRUE(client.ok()) << client.status();
  ext::Scheduler scheduler(options, client->get());
  ASSERT_TRUE(scheduler.Start().ok());
  ASSERT_TRUE(scheduler.WaitForSync(absl::Seconds(10)));
  ASSERT_TRUE(deviceplugin::testing::Eventually([&] { return scheduler.IsLeader(); }));

  // A pod created (unrecorded) and seen by the scheduler's informer.
  auto create = [&](Json pod, int32_t priority) {
    pod["metadata"].erase("uid");
    pod["spec"]["priority"] = priority;
    pod["spec"]["schedulerName"] = options.scheduler_name;
    absl::StatusOr<Json> created = api.Create("pods", pod);
    EXPECT_TRUE(created.ok()) << created.status();
    EXPECT_TRUE(deviceplugin::testing::Eventually(
        [&] { return scheduler.InformerPod("default", k8s::Name(pod)).has_value(); }));
    return created.ok() ? *created : pod;
  };
  auto filter = [&](const Json& pod) {
    const Json args{{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", {"n1"}}};
    const Json reply = Json::parse(scheduler.Filter(args.dump()).body);
    return reply.value("NodeNames", Json::array());
  };
  auto bind = [&](const Json& pod) {
    const Json args{{"PodName", k8s::Name(pod)},
                    {"PodNamespace", "default"},
                    {"PodUID", k8s::Uid(pod)},
                    {"Node", "n1"}};
    return Json::parse(scheduler.Bind(args.dump()).body).value("Error", "");
  };
  // GPU 0: a 8 GiB + b 6 GiB; GPU 1: c 10 GiB + d 4 GiB (priority 0).
  for (const auto& [name, mib, gpu] : std::vector<std::tuple<std::string, int, int>>{
           {"a", 8192, 0}, {"b", 6144, 0}, {"c", 10240, 1}, {"d", 4096, 1}}) {
    const Json pod =
        create(ext::testing::GpuPod(name, 1, mib, 10,
                                    {{"nvidia.com/use-gpuuuid", absl::StrCat("GPU-n1-", gpu)}}),
               0);
    ASSERT_EQ(filter(pod), Json::array({"n1"})) << name;
    ASSERT_EQ(bind(pod), "") << name;
  }
  ASSERT_TRUE(deviceplugin::testing::Eventually([&] {
    auto c = scheduler.InformerPod("default", "c");
    return c.has_value() && !k8s::PodNodeName(*c).empty();
  }));
  // The high-priority slice: no node now; the leader preempts c; then it is bound.
  const Json hi = create(ext::testing::GpuPod("hi", 1, 10240, 10), 100);
  EXPECT_EQ(filter(hi), Json::array());
  ASSERT_TRUE(
      deviceplugin::testing::Eventually([&] { return !api.Get("pods", "default", "c").ok(); }));
  ASSERT_TRUE(scheduler.preemptor()->WaitIdle(absl::Seconds(10)));
  ASSERT_TRUE(deviceplugin::testing::Eventually([&] { return filter(hi) == Json::array({"n1"}); }));
  EXPECT_EQ(bind(hi), "");
  // A Bind for a pod the informer does not know: read from the API server (pods get).
  EXPECT_NE(bind(Json{{"metadata", {{"name", "unknown"}, {"uid", "uid-unknown"}}}}), "");
  // A pending pod of a controller whose decision no longer holds (its GPU left the node's
  // inventory): deleted so that its controller recreates it (pods delete).
  Json owned = ext::testing::GpuPod("owned", 1, 512, 10, {{"nvidia.com/use-gpuuuid", "GPU-n1-1"}});
  owned["metadata"]["ownerReferences"] = Json::array({{{"apiVersion", "apps/v1"},
                                                       {"kind", "ReplicaSet"},
                                                       {"name", "rs"},
                                                       {"uid", "rs-1"},
                                                       {"controller", true}}});
  owned = create(owned, 0);
  ASSERT_EQ(filter(owned), Json::array({"n1"}));
  ASSERT_EQ(bind(owned), "");
  ASSERT_TRUE(deviceplugin::testing::Eventually([&] {
    auto o = scheduler.InformerPod("default", "owned");
    return o.has_value() && !k8s::PodNodeName(*o).empty();
  }));
  ASSERT_TRUE(
      api.Update("nodes", ext::testing::NodeJson("n1", {ext::testing::TestGpu{"T4", 15360}})).ok());
  EXPECT_TRUE(deviceplugin::testing::Eventually(
      [&] { return !api.Get("pods", "default", "owned").ok(); }, absl::Seconds(20)));
  // A pod no GPU can hold, twice: the second FilteringFailed Event is the first one patched.
  const Json huge = create(ext::testing::GpuPod("huge", 1, 40960, 10), 0);
  EXPECT_EQ(filter(huge), Json::array());
  EXPECT_EQ(filter(huge), Json::array());
  absl::SleepFor(absl::Milliseconds(500));  // The recorder's writes, then the ticks'.
  scheduler.Stop();
  ExpectRbacMatches(api.Requests(), "prism-scheduler", {});  // Every right is used.
}

// The scheduler as examples/dra-hami runs it (`--dra --dra-hami-claims`, the rights of deploy/,
// deploy/dra and examples/dra-hami together): a HAMi slice pod admitted through the webhook (its
// ResourceClaimTemplate looked up and created), its claim made from the template as the
// resourceclaim controller would (unrecorded), the leader allocating it (claim finalizer and
// status, the gate removed, Events), Filter and Bind, then the pod deleted and the claim's
// allocation released. Every call must be allowed; the base role's rights this path does not use
// are listed, each covered by SchedulerUsesExactlyItsShippedRights.
TEST(RbacSchedulerTest, SchedulerWithDraHamiClaimsUsesOnlyItsShippedRights) {
  namespace ext = extender;
  const std::string dir = "examples/dra-hami";
  absl::StatusOr<DeployBundle> bundle = DeployBundle::LoadKustomization(PRISM_SOURCE_DIR, dir);
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  const std::string ns = bundle->namespace_name();
  const Object* deployment = bundle->Find("Deployment", "prism-scheduler");
  ASSERT_NE(deployment, nullptr);
  ext::SchedulerOptions options = ShippedSchedulerOptions(ns, *deployment);
  ASSERT_TRUE(options.dra && options.dra_hami_claims) << dir << " does not run them";

  fakeapi::FakeApiServer api;
  ASSERT_TRUE(api.Start().ok());
  const Object* cm = bundle->Find("ConfigMap", options.config_map_name);
  ASSERT_NE(cm, nullptr) << options.config_map_name << " is not shipped";
  ASSERT_TRUE(api.Create("configmaps", *cm).ok());
  for (const Object* c : bundle->All("DeviceClass")) ASSERT_TRUE(api.Create("deviceclasses", *c).ok());
  ASSERT_TRUE(
      api.Create("nodes", ext::testing::NodeJson("n1", {ext::testing::TestGpu{"T4", 15360}})).ok());
  // The node agent's pool: the T4 published whole and shared (consumable capacity).
  ASSERT_TRUE(api.Create("resourceslices",
                         Json{{"apiVersion", "resource.k8s.io/v1"},
                              {"kind", "ResourceSlice"},
                              {"metadata", {{"name", "n1-gpu.prism.io-0"}}},
                              {"spec",
                               {{"driver", config::kDraDriverName},
                                {"nodeName", "n1"},
                                {"pool", {{"name", "n1"}, {"generation", 1}, {"resourceSliceCount", 1}}},
                                {"devices",
                                 Json::array({{{"name", "gpu-0"},
                                               {"allowMultipleAllocations", true},
                                               {"attributes", {{"uuid", {{"string", "GPU-n1-0"}}}}}}})}}}})
                  .ok());
  absl::StatusOr<k8s::ClusterConfig> cluster = k8s::ParseKubeconfig(api.KubeconfigYaml());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  absl::StatusOr<std::unique_ptr<k8s::Client>> client = k8s::Client::Create(*cluster);
  ASSERT_TRUE(client.ok()) << client.status();
  ext::Scheduler scheduler(options, client->get());
  ASSERT_TRUE(scheduler.Start().ok());
  ASSERT_TRUE(scheduler.WaitForSync(absl::Seconds(10)));
  ASSERT_TRUE(deviceplugin::testing::Eventually([&] { return scheduler.IsLeader(); }));

  // The webhook: the HAMi request becomes a claim template (created now) and a gated pod.
  Json pod = ext::testing::GpuPod("hami", 1, 4000, 30);
  pod["metadata"].erase("uid");
  const Json review{{"apiVersion", "admission.k8s.io/v1"},
                    {"kind", "AdmissionReview"},
                    {"request",
                     {{"uid", "r1"},
                      {"operation", "CREATE"},
                      {"namespace", "default"},
                      {"userInfo", {{"username", "alice"}}},
                      {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
                      {"object", pod}}}};
  const ext::HttpReply admitted = scheduler.Admission(review.dump(), /*mutate=*/true);
  ASSERT_EQ(admitted.status, 200) << admitted.body;
  const Json answer = Json::parse(admitted.body)["response"];
  ASSERT_TRUE(answer.value("allowed", false)) << admitted.body;
  std::string patch;
  ASSERT_TRUE(absl::Base64Unescape(answer.value("patch", ""), &patch)) << admitted.body;
  pod = pod.patch(Json::parse(patch));
  ASSERT_EQ(pod["spec"]["resourceClaims"].size(), 1u) << pod.dump();
  const std::string pod_claim = pod["spec"]["resourceClaims"][0]["name"];
  const std::string template_name = pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"];
  // The resourceclaim controller's work, unrecorded: the pod's status names its claim (set at
  // creation here, which the test's direct writes allow) and the claim, owned by the pod.
  pod["status"]["resourceClaimStatuses"] =
      Json::array({{{"name", pod_claim}, {"resourceClaimName", "hami-gpu"}}});
  absl::StatusOr<Json> created = api.Create("pods", pod);
  ASSERT_TRUE(created.ok()) << created.status();
  absl::StatusOr<Json> tmpl = api.Get("resourceclaimtemplates", "default", template_name);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  const Json claim{{"apiVersion", "resource.k8s.io/v1"},
                   {"kind", "ResourceClaim"},
                   {"metadata",
                    {{"name", "hami-gpu"},
                     {"namespace", "default"},
                     {"ownerReferences",
                      Json::array({{{"apiVersion", "v1"},
                                    {"kind", "Pod"},
                                    {"name", "hami"},
                                    {"uid", (*created)["metadata"]["uid"]},
                                    {"controller", true}}})}}},
                   {"spec", (*tmpl)["spec"]["spec"]}};
  ASSERT_TRUE(api.Create("resourceclaims", claim).ok());
  // The leader allocates the claim and removes the gate.
  ASSERT_TRUE(deviceplugin::testing::Eventually(
      [&] {
        absl::StatusOr<Json> p = api.Get("pods", "default", "hami");
        return p.ok() && !config::HasDraSchedulingGate(*p);
      },
      absl::Seconds(20)))
      << api.Get("resourceclaims", "default", "hami-gpu")->dump() << "\n"
      << api.Get("pods", "default", "hami")->dump();
  // kube-scheduler: Filter, then the extender's Bind.
  ASSERT_TRUE(deviceplugin::testing::Eventually([&] {
    auto p = scheduler.InformerPod("default", "hami");
    return p.has_value() && !config::HasDraSchedulingGate(*p);
  }));
  const Json bound_pod = *api.Get("pods", "default", "hami");
  const Json filtered = Json::parse(
      scheduler.Filter(Json{{"Pod", bound_pod}, {"Nodes", nullptr}, {"NodeNames", {"n1"}}}.dump())
          .body);
  ASSERT_EQ(filtered.value("NodeNames", Json::array()), Json::array({"n1"})) << filtered.dump();
  const Json bind{{"PodName", "hami"},
                  {"PodNamespace", "default"},
                  {"PodUID", bound_pod["metadata"]["uid"]},
                  {"Node", "n1"}};
  EXPECT_EQ(Json::parse(scheduler.Bind(bind.dump()).body).value("Error", ""), "");
  // The pod goes: the allocation is released (claim status and finalizer).
  ASSERT_TRUE(api.Delete("pods", "default", "hami").ok());
  EXPECT_TRUE(deviceplugin::testing::Eventually(
      [&] {
        absl::StatusOr<Json> c = api.Get("resourceclaims", "default", "hami-gpu");
        return c.ok() && !c->value("status", Json::object()).contains("allocation");
      },
      absl::Seconds(20)))
      << api.Get("resourceclaims", "default", "hami-gpu")->dump();
  // Another request's template name taken by someone else's template (unrecorded): the webhook
  // creates, finds the name taken, reads it (get) and refuses the pod. The name comes from a dry
  // run, which creates nothing.
  Json other = ext::testing::GpuPod("other", 1, 2000, 20);
  other["metadata"].erase("uid");
  auto admit = [&](const Json& p, bool dry_run) {
    Json r = review;
    r["request"]["object"] = p;
    r["request"]["dryRun"] = dry_run;
    return Json::parse(scheduler.Admission(r.dump(), /*mutate=*/true).body)["response"];
  };
  const Json dry = admit(other, true);
  std::string dry_patch;
  ASSERT_TRUE(absl::Base64Unescape(dry.value("patch", ""), &dry_patch)) << dry.dump();
  const std::string taken =
      other.patch(Json::parse(dry_patch))["spec"]["resourceClaims"][0]["resourceClaimTemplateName"];
  Json squatter = *tmpl;
  squatter["metadata"] = {{"name", taken}, {"namespace", "default"}};
  ASSERT_TRUE(api.Create("resourceclaimtemplates", squatter).ok());
  const Json refused = admit(other, false);
  EXPECT_FALSE(refused.value("allowed", true)) << refused.dump();
  EXPECT_THAT(refused.dump(), ::testing::HasSubstr("another spec"));
  absl::SleepFor(absl::Milliseconds(300));  // The recorder's writes.
  scheduler.Stop();
  ExpectRbacMatches(
      api.Requests(), "prism-scheduler",
      {{"pods delete", "a decision that no longer holds (SchedulerUsesExactlyItsShippedRights)"},
       {"pods get", "a Bind for a pod the informer does not know (the same)"},
       {"pods/status patch", "a preemption victim's DisruptionTarget (the same)"},
       {"pods/eviction create", "a preemption victim's eviction (the same)"},
       {"events patch", "repeats of one Event (the same)"}},
      dir);
}

}  // namespace
}  // namespace prism::e2e
