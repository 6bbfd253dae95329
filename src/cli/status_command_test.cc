// Runs the real `prism status` against an in-process fake API server seeded with a cluster that
// a `prism plan --cluster` file also describes, and the real `prism plan` on that file: the two
// must give the same answers (issue 16: "prism status and --what-if agree with prism plan on the
// same state"). Also: status writes nothing, and fails clearly on a bad node, an unreachable
// server and a bad --what-if file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

#include "base/strings.h"
#include "config/annotations.h"
#include "config/cluster_yaml.h"
#include "config/device_config_yaml.h"
#include "config/dra_allocation.h"
#include "config/pod_request.h"
#include "config/pod_yaml.h"
#include "core/sched/engine.h"
#include "extender/test_util.h"
#include "testing/fake_apiserver/fake_apiserver.h"

namespace prism::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;
using json = nlohmann::json;
using extender::testing::TestGpu;

struct Result {
  int exit_code;
  std::string out;
  std::string err;
};

struct TestNode {
  std::string name;
  std::string cpu;
  std::string memory;
  std::vector<TestGpu> gpus;  // UUIDs: GPU-<node>-<index> (as extender::testing::Inventory).
};

// The nodes as a `prism plan` cluster file (docs/scheduling.md), with `running` pods (v1.Pod
// JSON, which is YAML too). Instances the node agent reports in use because a running pod's
// processes use them are idle here: in the file, the pods' annotations say who holds them.
std::string ClusterYaml(const std::vector<TestNode>& nodes, const std::vector<json>& running,
                        const std::set<std::pair<std::string, int>>& held) {
  std::string y = "nodes:\n";
  for (const TestNode& n : nodes) {
    StrAppend(&y, "  - name: ", n.name, "\n    cpu: \"", n.cpu, "\"\n    memory: ", n.memory,
              "\n    gpus:\n");
    for (size_t i = 0; i < n.gpus.size(); ++i) {
      const TestGpu& g = n.gpus[i];
      const std::string uuid = StrCat("GPU-", n.name, "-", i);
      StrAppend(&y, "      - model: ", g.model, "\n        uuid: ", uuid,
                "\n        memoryMiB: ", g.memory_mib,
                "\n        mode: ", g.mig ? "mig" : "hami-core", "\n");
      if (g.instances.empty()) continue;
      StrAppend(&y, "        instances:\n");
      for (const auto& inst : g.instances) {
        const bool in_use = inst.in_use && !held.count({uuid, inst.start});
        StrAppend(&y, "          - {profile: ", inst.profile, ", start: ", inst.start,
                  ", inUse: ", in_use ? "true" : "false", "}\n");
      }
    }
  }
  if (!running.empty()) {
    y += "pods:\n";
    for (const json& p : running) StrAppend(&y, "  - ", p.dump(), "\n");
  }
  return y;
}

std::string ReadText(const std::string& path) {
  std::stringstream s;
  s << std::ifstream(path).rdbuf();
  return s.str();
}

class StatusCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "prism-status-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
    const char* src = std::getenv("PRISM_SOURCE_DIR");
    examples_ = std::string(src ? src : ".") + "/examples/plan";
    ASSERT_TRUE(api_.Start().ok());
    kubeconfig_ = Write("kubeconfig", api_.KubeconfigYaml());
  }
  void TearDown() override {
    api_.Stop();
    fs::remove_all(dir_);
  }

  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
    return dir_ + "/" + name;
  }
  Result Run(const std::string& command, const std::string& args) {
    const std::string cmd =
        StrCat(PRISM_BINARY, " ", command, " ", args, " >", dir_, "/out 2>", dir_, "/err");
    const int status = std::system(cmd.c_str());
    return Result{WEXITSTATUS(status), ReadText(dir_ + "/out"), ReadText(dir_ + "/err")};
  }
  Result Status(const std::string& args) {
    return Run("status", StrCat("--kubeconfig ", kubeconfig_, " ", args));
  }
  json StatusJson(const std::string& args) {
    Result r = Status(StrCat("--format json ", args));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    json j = json::parse(r.out, nullptr, false);
    EXPECT_TRUE(j.is_object()) << r.out;
    return j;
  }
  std::string Example(const std::string& name) { return examples_ + "/" + name; }

  // Seeds the API server with `nodes` (the node agent's inventory annotation) and `running`
  // pods, each bound to its node with the decision the engine makes for it there, as the
  // extender's Binding would have left it; the MIG instances those decisions create appear in
  // the inventory, in use, as the node agent reports them once the pods run. Returns the cluster
  // file `prism plan` reads for the same state.
  std::string SeedCluster(std::vector<TestNode> nodes, std::vector<json> running,
                          const std::string& device_config_yaml) {
    absl::StatusOr<config::ParsedDeviceConfig> dc =
        config::ParseDeviceConfigYaml(device_config_yaml);
    if (!dc.ok()) {
      ADD_FAILURE() << dc.status();
      return "";
    }
    absl::StatusOr<config::ClusterFile> bare = config::ParseClusterYaml(ClusterYaml(nodes, {}, {}));
    if (!bare.ok()) {
      ADD_FAILURE() << bare.status();
      return "";
    }
    absl::StatusOr<sched::ClusterState> state = sched::ClusterState::Build(bare->nodes, dc->config);
    if (!state.ok()) {
      ADD_FAILURE() << state.status();
      return "";
    }
    sched::Engine engine(std::move(*state), dc->config);
    std::set<std::pair<std::string, int>> held;  // (GPU UUID, start) of running pods' instances.
    for (json& pod : running) {
      absl::StatusOr<std::vector<config::PodManifest>> m =
          config::ParsePodYaml(pod.dump(), "running pod");
      if (!m.ok()) {
        ADD_FAILURE() << m.status();
        return "";
      }
      absl::StatusOr<sched::PodRequest> req = config::BuildPodRequest((*m)[0], dc->config);
      if (!req.ok()) {
        ADD_FAILURE() << req.status();
        return "";
      }
      const int node = engine.cluster().FindNode(pod["spec"]["nodeName"].get<std::string>());
      absl::StatusOr<sched::Decision> d = engine.Decide(*req, node);
      if (!d.ok()) {
        ADD_FAILURE() << d.status() << " " << pod.dump();
        return "";
      }
      EXPECT_TRUE(engine.Apply(req->Key(), *d).ok());
      for (const auto& [k, v] : config::EncodeDecisionAnnotations(*d, engine.cluster())) {
        pod["metadata"]["annotations"][k] = v;
      }
      for (const sched::ContainerAssignment& c : d->containers) {
        for (const sched::DeviceAssignment& dev : c.devices) {
          if (dev.IsMig()) held.insert({dev.uuid, dev.start});
        }
      }
    }
    // The instances the decisions created, as the node agent then reports them.
    for (TestNode& n : nodes) {
      const int id = engine.cluster().FindNode(n.name);
      for (size_t i = 0; i < n.gpus.size(); ++i) {
        const int g = engine.cluster().node(id).first_gpu + static_cast<int>(i);
        const sched::GpuInfo& gi = engine.cluster().gpu(g);
        const sched::GpuUsage& u = engine.cluster().gpu_usage(g);
        if (gi.mig_model == nullptr || gi.mode != sched::GpuMode::kMig) continue;
        n.gpus[i].instances.clear();
        for (int k = 0; k < u.instance_count; ++k) {
          n.gpus[i].instances.push_back({gi.mig_model->profiles[u.instances[k].profile].Name(),
                                         u.instances[k].start,
                                         u.instances[k].state != sched::InstanceState::kIdle});
        }
      }
      EXPECT_TRUE(
          api_.Create("nodes", extender::testing::NodeJson(n.name, n.gpus, n.cpu, n.memory)).ok());
    }
    for (json pod : running) {
      pod["status"] = {{"phase", "Running"}};
      EXPECT_TRUE(api_.Create("pods", pod).ok());
    }
    return Write("cluster.yaml", ClusterYaml(nodes, running, held));
  }

  // Copies of the pod in `file` named <name>-0, <name>-1, ... in one multi-document file.
  std::string Copies(const std::string& pod_yaml, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) {
      std::string doc = pod_yaml;
      const size_t at = doc.find("name: what-if");
      EXPECT_NE(at, std::string::npos);
      doc.replace(at, 13, StrCat("name: what-if-", i));
      StrAppend(&out, "---\n", doc);
    }
    return Write(StrCat("copies-", n, ".yaml"), out);
  }

  std::string dir_;
  std::string examples_;
  std::string kubeconfig_;
  fakeapi::FakeApiServer api_;
};

json GpuPodJson(const std::string& name, const std::string& node,
                const std::map<std::string, std::string>& limits,
                const std::map<std::string, std::string>& annotations = {}) {
  json pod{{"apiVersion", "v1"},
           {"kind", "Pod"},
           {"metadata", {{"name", name}, {"namespace", "team-a"}, {"uid", StrCat("uid-", name)}}},
           {"spec",
            {{"nodeName", node},
             {"containers",
              {{{"name", "main"},
                {"resources", {{"requests", {{"cpu", "2"}}}, {"limits", limits}}}}}}}}};
  pod["metadata"]["annotations"] = annotations;
  return pod;
}

// The cluster of examples/plan/cluster.yaml (with its device config), live: an A100 in template
// mode, a node of sliced GPUs, and an H100 node in placement mode with an instance in use by
// something Prism does not track; three pods run, one on each.
class StatusAgreesWithPlanTest : public StatusCommandTest {
 protected:
  void SetUp() override {
    StatusCommandTest::SetUp();
    device_config_ = Example("device-config.yaml");
    TestGpu h100_busy{"H100-SXM5-80GB", 81920, true};
    h100_busy.instances.push_back({"3g.40gb", 4, /*in_use=*/true});
    cluster_file_ = SeedCluster(
        {{"node-a", "32", "128Gi", {TestGpu{"A100-PCIE-40GB", 40960, true}}},
         {"node-b", "64", "256Gi", {TestGpu{"T4", 15360, false}, TestGpu{"T4", 15360, false}}},
         {"node-c", "96", "512Gi", {h100_busy, TestGpu{"H100-SXM5-80GB", 81920, true}}}},
        {GpuPodJson("notebook", "node-b",
                    {{"nvidia.com/gpu", "1"},
                     {"nvidia.com/gpumem", "6000"},
                     {"nvidia.com/gpucores", "30"}}),
         GpuPodJson("train", "node-a", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "8000"}},
                    {{"nvidia.com/vgpu-mode", "mig"}}),
         GpuPodJson("infer", "node-c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "15000"}},
                    {{"nvidia.com/vgpu-mode", "mig"}})},
        ReadText(device_config_));
  }

  // `prism status --what-if` and `prism plan --workload=running` on the same pod: the same
  // count, the same nodes, the same first decision.
  void ExpectAgreement(const std::string& pod_yaml) {
    const std::string what_if = Write("what-if.yaml", pod_yaml);
    const json status =
        StatusJson(StrCat("--device-config ", device_config_, " --what-if ", what_if));
    ASSERT_TRUE(status.contains("whatIf")) << status.dump(2);
    const json& w = status["whatIf"][0];
    ASSERT_FALSE(w.contains("error")) << w.dump(2);
    const int fits = w["fits"];
    // Enough copies to reach the end, few enough that the test means something.
    ASSERT_GT(fits, 1) << w.dump(2);
    ASSERT_LT(fits, w["maxCopies"].get<int>());
    ASSERT_TRUE(w.contains("unschedulable"));
    std::cout << "status --what-if: " << fits << " copies fit " << w["nodes"].dump() << "; then "
              << w["unschedulable"].get<std::string>() << "\n";
    // The same pod, fits + 1 times, through `prism plan` on the cluster file.
    Result r = Run("plan", StrCat("--cluster ", cluster_file_, " --device-config ", device_config_,
                                  " --workload=running ", Copies(pod_yaml, fits + 1)));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json plan = json::parse(r.out);
    ASSERT_EQ(plan.size(), static_cast<size_t>(fits + 1));
    std::map<std::string, int> plan_nodes;
    for (int i = 0; i < fits; ++i) {
      ASSERT_TRUE(plan[i].contains("node"))
          << "plan could not place copy " << i << ": " << plan[i].dump();
      ++plan_nodes[plan[i]["node"].get<std::string>()];
    }
    EXPECT_TRUE(plan[fits].value("unschedulable", false)) << plan[fits].dump();
    EXPECT_EQ(plan[fits]["reason"], w["unschedulable"]);
    EXPECT_EQ(json(plan_nodes), w["nodes"]);
    const json& first = w["firstDecision"];
    EXPECT_EQ(plan[0]["node"], first["node"]);
    EXPECT_EQ(plan[0]["containers"], first["containers"]);
    EXPECT_EQ(plan[0].value("migChanges", json()), first.value("migChanges", json()));
    EXPECT_EQ(plan[0]["annotations"], first["annotations"]);
  }

  std::string device_config_;
  std::string cluster_file_;
};

constexpr char kSlicePod[] = R"(apiVersion: v1
kind: Pod
metadata:
  name: what-if
spec:
  containers:
    - name: server
      resources:
        requests: {cpu: "1"}
        limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 3000, nvidia.com/gpucores: 20}
)";

constexpr char kMigPod[] = R"(apiVersion: v1
kind: Pod
metadata:
  name: what-if
  annotations: {nvidia.com/vgpu-mode: mig}
spec:
  containers:
    - name: server
      resources:
        limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 9000}
)";

TEST_F(StatusAgreesWithPlanTest, SlicePodWhatIfAgreesWithPlan) { ExpectAgreement(kSlicePod); }

TEST_F(StatusAgreesWithPlanTest, MigPodWhatIfAgreesWithPlan) { ExpectAgreement(kMigPod); }

TEST_F(StatusAgreesWithPlanTest, ReportsWhatTheRunningPodsTakeAndWritesNothing) {
  api_.ClearRequests();
  const json status = StatusJson(
      StrCat("--device-config ", device_config_, " --what-if ", Write("slice.yaml", kSlicePod)));
  // Read-only: GETs (lists) only.
  const std::vector<fakeapi::RequestRecord> requests = api_.Requests();
  ASSERT_FALSE(requests.empty());
  for (const fakeapi::RequestRecord& r : requests) {
    EXPECT_EQ(r.method, "GET") << r.method << " " << r.path;
  }
  EXPECT_GE(api_.CountRequests("GET", "/api/v1/nodes"), 1);
  EXPECT_GE(api_.CountRequests("GET", "/api/v1/pods"), 1);
  // Every GPU's allocation is exactly what the running pods' decisions grant on it.
  std::map<std::string, int64_t> granted_mib;
  std::map<std::string, double> granted_cores;
  for (const json& pod : api_.List("pods")) {
    const json decision = json::parse(
        pod["metadata"]["annotations"][config::kPrismDecisionAnnotation].get<std::string>());
    for (const json& c : decision["containers"]) {
      for (const json& d : c["devices"]) {
        granted_mib[d["uuid"]] += d["memoryMiB"].get<int64_t>();
        granted_cores[d["uuid"]] += d["cores"].get<double>();
      }
    }
  }
  ASSERT_EQ(granted_mib.size(), 3u);
  // What is not free on node-c's first GPU also counts the untracked 3g.40gb at start 4 (40448
  // MiB on an H100-SXM5-80GB): nobody may take it.
  const std::map<std::string, int64_t> untracked_mib{{"GPU-node-c-0", 40448}};
  int gpus = 0;
  for (const json& node : status["nodes"]) {
    for (const json& gpu : node["gpus"]) {
      ++gpus;
      const std::string uuid = gpu["uuid"];
      const bool holds = granted_mib.count(uuid) > 0;
      const int64_t granted = holds ? granted_mib.at(uuid) : 0;
      const int64_t untracked = untracked_mib.count(uuid) ? untracked_mib.at(uuid) : 0;
      EXPECT_EQ(gpu["memoryMiB"]["allocated"], granted + untracked) << uuid;
      EXPECT_EQ(gpu["memoryMiB"]["free"],
                gpu["memoryMiB"]["total"].get<int64_t>() - granted - untracked)
          << uuid;
      EXPECT_EQ(gpu["memoryMiB"]["untracked"], untracked) << uuid;
      EXPECT_DOUBLE_EQ(
          gpu["coresPercent"]["allocated"].get<double>(),
          (holds ? granted_cores.at(uuid) : 0.0) + gpu["coresPercent"]["untracked"].get<double>())
          << uuid;
      ASSERT_EQ(gpu["pods"].size(), holds ? 1u : 0u) << uuid;
      if (holds) {
        EXPECT_EQ(gpu["pods"][0]["memoryMiB"], granted) << uuid;
      }
    }
  }
  EXPECT_EQ(gpus, 5);
  EXPECT_EQ(status["summary"]["podsCharged"], 3);
  EXPECT_EQ(status["nodeProblems"].size(), 0u);
  // The MIG layouts: node-a realises a geometry with the pod's instance assigned; node-c keeps
  // the untracked 3g.40gb in use and gives the pod another instance.
  const json& a = status["nodes"][0]["gpus"][0];
  EXPECT_EQ(a["mig"]["strategy"], "template");
  EXPECT_TRUE(a["mig"].contains("geometry"));
  const json& c = status["nodes"][2]["gpus"][0];
  EXPECT_EQ(c["mig"]["strategy"], "placement");
  std::map<std::string, int> states;
  for (const json& i : status["nodes"][2]["gpus"][0]["mig"]["instances"]) {
    ++states[i["state"].get<std::string>()];
    if (i["start"] == 4) {
      EXPECT_EQ(i["state"], "in-use");
    }
  }
  for (const json& i : status["nodes"][2]["gpus"][1]["mig"]["instances"]) {
    ++states[i["state"].get<std::string>()];
  }
  EXPECT_EQ(states["in-use"], 1);
  EXPECT_EQ(states["assigned"], 1);
  // The text form says the same things for people.
  Result text = Status(StrCat("--device-config ", device_config_));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("3 GPU nodes, 5 GPUs, 3 pods holding GPUs"));
  EXPECT_THAT(text.out, HasSubstr("pod team-a/notebook (main): 6000 MiB, 30%"));
  EXPECT_THAT(text.out, HasSubstr("3g.40gb@4 in-use"));
}

TEST_F(StatusAgreesWithPlanTest, TheDeviceConfigCanComeFromTheSchedulersConfigMap) {
  json cm{{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", "prism-device-config"}, {"namespace", "prism-system"}}},
          {"data", {{"device-config.yaml", ReadText(device_config_)}}}};
  ASSERT_TRUE(api_.Create("configmaps", cm).ok());
  const std::string what_if = Write("slice.yaml", kSlicePod);
  json from_file = StatusJson(StrCat("--device-config ", device_config_, " --what-if ", what_if));
  json from_map = StatusJson(StrCat(
      "--config-map prism-device-config --config-namespace prism-system --what-if ", what_if));
  EXPECT_THAT(from_map["deviceConfig"].get<std::string>(),
              HasSubstr("ConfigMap prism-system/prism-device-config"));
  EXPECT_EQ(from_map["whatIf"], from_file["whatIf"]);
  EXPECT_EQ(from_map["nodes"], from_file["nodes"]);
  // With HAMi's defaults instead, node-c is in template mode: the answer really depends on it.
  json defaults = StatusJson("");
  EXPECT_EQ(defaults["nodes"][2]["gpus"][1]["mig"]["strategy"], "template");
  EXPECT_EQ(from_map["nodes"][2]["gpus"][1]["mig"]["strategy"], "placement");
  Result missing = Status("--config-map nope --config-namespace prism-system");
  EXPECT_EQ(missing.exit_code, 3) << missing.err;
  EXPECT_THAT(missing.err, HasSubstr("ConfigMap prism-system/nope"));
  Result both = Status(StrCat("--config-map x --device-config ", device_config_));
  EXPECT_NE(both.exit_code, 0);
}

TEST_F(StatusCommandTest, MalformedInventoryIsANodeProblemAndTheOtherNodesAreListed) {
  ASSERT_TRUE(api_.Create("nodes", extender::testing::NodeJson("good", {TestGpu{}})).ok());
  json bad = extender::testing::NodeJson("bad", {TestGpu{}});
  bad["metadata"]["annotations"]["prism.io/gpu-inventory"] =
      R"({"version":1,"gpus":[{"index":"x"}]})";
  ASSERT_TRUE(api_.Create("nodes", bad).ok());
  ASSERT_TRUE(api_.Create("nodes", extender::testing::NodeJson("cpu", {})).ok());
  const json j = StatusJson("");
  ASSERT_EQ(j["nodes"].size(), 1u);
  EXPECT_EQ(j["nodes"][0]["name"], "good");
  ASSERT_EQ(j["nodeProblems"].size(), 1u);
  EXPECT_EQ(j["nodeProblems"][0]["node"], "bad");
  EXPECT_THAT(j["nodeProblems"][0]["problem"].get<std::string>(), HasSubstr("index"));
  EXPECT_EQ(j["summary"]["nodesWithoutInventory"], 1);
  Result text = Status("");
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_THAT(text.out, HasSubstr("bad: unusable GPU inventory"));
}

TEST_F(StatusCommandTest, ClaimsPrismAllocatedHoldTheirDevices) {
  // Prism on DRA (docs/dra.md): a claim's allocation with Prism's marker holds its GPU.
  ASSERT_TRUE(
      api_.Create("nodes", extender::testing::NodeJson("t4", {TestGpu{"Tesla T4", 15360, false}}))
          .ok());
  const json decision{{"node", "t4"},
                      {"containers",
                       {{{"name", config::DraRequestContainerName(0)},
                         {"devices",
                          {{{"uuid", "GPU-t4-0"},
                            {"index", 0},
                            {"mode", "hami-core"},
                            {"memoryMiB", 15360},
                            {"cores", 100}}}}}}}};
  json claim{{"apiVersion", "resource.k8s.io/v1"},
             {"kind", "ResourceClaim"},
             {"metadata", {{"name", "c"}, {"namespace", "default"}}},
             {"spec",
              {{"devices",
                {{"requests",
                  {{{"name", "gpu"}, {"exactly", {{"deviceClassName", "gpu.prism.io"}}}}}}}}}},
             {"status",
              {{"allocation",
                {{"devices",
                  {{"results",
                    {{{"request", "gpu"}, {"driver", "gpu.prism.io"}, {"pool", "t4"},
                      {"device", "gpu-0"}}}},
                   {"config", {config::DraAllocationMarker("pod-uid-1", "t4", decision)}}}}}}}}};
  ASSERT_TRUE(api_.Create("resourceclaims", claim).ok());
  const json j = StatusJson("");
  ASSERT_EQ(j["nodes"].size(), 1u);
  const json& pods = j["nodes"][0]["gpus"][0]["pods"];
  ASSERT_EQ(pods.size(), 1u) << j.dump();
  EXPECT_EQ(pods[0]["pod"], "dra:default/c");
  EXPECT_TRUE(api_.CountRequests("GET", "/apis/resource.k8s.io/v1/resourceclaims") >= 1);
}

TEST_F(StatusCommandTest, UnreachableOrRefusingApiServerExitsThreeNamingTheServer) {
  fakeapi::FakeApiServer gone;
  ASSERT_TRUE(gone.Start().ok());
  const std::string kubeconfig = Write("gone-kubeconfig", gone.KubeconfigYaml());
  const std::string url = gone.url();
  gone.Stop();
  Result r = Run("status", StrCat("--kubeconfig ", kubeconfig, " --timeout 5"));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("listing nodes"));
  EXPECT_THAT(r.err, HasSubstr(url));
  EXPECT_THAT(r.out, Not(HasSubstr("GPU nodes")));
  // A server that refuses the credentials is as clear.
  api_.SetTokens({"not-what-the-kubeconfig-has"});
  r = Status("");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("listing nodes"));
  // A kubeconfig that cannot be read is local input.
  r = Run("status", StrCat("--kubeconfig ", dir_, "/missing"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("missing"));
}

TEST_F(StatusCommandTest, BadWhatIfFileIsNamedAndNothingIsAsked) {
  api_.ClearRequests();
  Result r = Status(StrCat("--what-if ", dir_, "/absent.yaml"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("absent.yaml"));
  const std::string broken = Write("broken.yaml", "kind: Pod\nmetadata: {name: [\n");
  r = Status(StrCat("--what-if ", broken));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("broken.yaml"));
  const std::string bad_quantity = Write(
      "bad-quantity.yaml",
      "kind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n    - name: c\n      resources:\n"
      "        limits: {nvidia.com/gpu: lots}\n");
  EXPECT_EQ(api_.Requests().size(), 0u);  // Local input is checked before the cluster is read.
  r = Status(StrCat("--format json --what-if ", bad_quantity));
  // An invalid request is reported in its entry, with exit status 1.
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const json j = json::parse(r.out);
  EXPECT_THAT(j["whatIf"][0]["error"].get<std::string>(), HasSubstr("nvidia.com/gpu"));
  r = Status("--max-copies 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--max-copies"));
  r = Status("--format yaml");
  EXPECT_EQ(r.exit_code, 2);
}

// docs/status.md's flag table and the binary agree (a documented flag the binary rejects was
// issue 13's finding 7 for `prism scheduler`).
TEST_F(StatusCommandTest, EveryDocumentedFlagExists) {
  const char* src = std::getenv("PRISM_SOURCE_DIR");
  const std::string doc = ReadText(std::string(src ? src : ".") + "/docs/status.md");
  const size_t table = doc.find("## Flags");
  ASSERT_NE(table, std::string::npos);
  const std::string flags = doc.substr(table, doc.find("\n## ", table + 1) - table);
  Result help = Run("status", "--help");
  ASSERT_EQ(help.exit_code, 0);
  int documented = 0;
  for (size_t at = flags.find("`--"); at != std::string::npos; at = flags.find("`--", at + 1)) {
    const size_t end = flags.find_first_of("` ", at + 1);
    const std::string flag = flags.substr(at + 1, end - at - 1);
    EXPECT_THAT(help.out, HasSubstr(flag)) << flag;
    ++documented;
  }
  EXPECT_GE(documented, 10);
}

}  // namespace
}  // namespace prism::cli
