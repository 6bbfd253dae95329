// Runs the real `prism plan` on the files in examples/plan and on bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "nlohmann/json.hpp"

namespace prism::cli {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

struct Result {
  int exit_code;
  std::string out;
  std::string err;
};

class PlanCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "prism-plan-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
    const char* src = std::getenv("PRISM_SOURCE_DIR");
    examples_ = std::string(src ? src : ".") + "/examples/plan";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
    return dir_ + "/" + name;
  }
  std::string Read(const std::string& name) {
    std::stringstream s;
    s << std::ifstream(dir_ + "/" + name).rdbuf();
    return s.str();
  }
  Result Run(const std::string& args) {
    const std::string cmd =
        std::string(PRISM_BINARY) + " plan " + args + " >" + dir_ + "/out 2>" + dir_ + "/err";
    const int status = std::system(cmd.c_str());
    return Result{WEXITSTATUS(status), Read("out"), Read("err")};
  }
  std::string Example(const std::string& name) { return examples_ + "/" + name; }

  std::string dir_;
  std::string examples_;
};

TEST_F(PlanCommandTest, SeedExampleWithHamiDefaults) {
  Result r = Run("--cluster " + Example("seed-cluster.yaml") + " " + Example("seed-pod.yaml"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["pod"], "default/gpu-pod1");
  EXPECT_EQ(j[0]["node"], "a100-node");
  const auto& devices = j[0]["containers"][0]["devices"];
  ASSERT_EQ(devices.size(), 2u);
  for (const auto& d : devices) {
    EXPECT_EQ(d["profile"], "2g.10gb");
    EXPECT_EQ(d["template"], 1);
    EXPECT_EQ(d["memoryMiB"], 10240);
  }
  EXPECT_EQ(j[0]["migChanges"][0]["template"], 1);
  EXPECT_EQ(j[0]["migChanges"][0]["create"].size(), 4u);
  EXPECT_THAT(j[0]["annotations"]["hami.io/vgpu-devices-allocated"].get<std::string>(),
              HasSubstr("GPU-a100-0[1-"));
}

TEST_F(PlanCommandTest, MixedPodsInOrderAsJsonAndText) {
  const std::string args = "--cluster " + Example("cluster.yaml") + " --device-config " +
                           Example("device-config.yaml") + " " + Example("seed-pod.yaml") + " " +
                           Example("pods.yaml");
  Result r = Run(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 6u);
  std::map<std::string, nlohmann::json> by_pod;
  for (const auto& p : j) by_pod[p["pod"].get<std::string>()] = p;
  EXPECT_EQ(by_pod["default/gpu-pod1"]["node"], "node-a");
  // hami-core only, two distinct T4s, a quarter each.
  const auto& pct = by_pod["default/train-pct"];
  EXPECT_EQ(pct["node"], "node-b");
  ASSERT_EQ(pct["containers"][0]["devices"].size(), 2u);
  EXPECT_NE(pct["containers"][0]["devices"][0]["uuid"], pct["containers"][0]["devices"][1]["uuid"]);
  EXPECT_EQ(pct["containers"][0]["devices"][0]["memoryMiB"], 3840);
  // H100 only: the init container shares the main container's instance.
  const auto& h100 = by_pod["default/h100-job"];
  EXPECT_EQ(h100["node"], "node-c");
  EXPECT_EQ(h100["containers"][1]["devices"][0]["profile"], "3g.40gb");
  EXPECT_EQ(h100["containers"][0]["init"], true);
  EXPECT_TRUE(by_pod["default/too-big"]["unschedulable"].get<bool>());
  EXPECT_THAT(by_pod["default/too-big"]["reason"].get<std::string>(),
              HasSubstr("0/3 nodes are available: 3 Insufficient cpu"));

  Result text = Run("--format text " + args);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("default/gpu-pod1 -> node-a"));
  EXPECT_THAT(text.out, HasSubstr("mig 2g.10gb@"));
  EXPECT_THAT(text.out, HasSubstr("default/too-big: unschedulable: 0/3 nodes are available"));
  EXPECT_THAT(text.out, HasSubstr("5 of 6 pods placed"));
}

// Issue 11, item 3, as the issue reproduced it: a software-slice pod on a T4 node must not
// change the grant of a MIG pod on the A100 node (2g.10gb of geometry 1 either way; it was
// 3g.20gb of geometry 2 once the slice pod's shape joined the workload).
TEST_F(PlanCommandTest, AMigGrantDoesNotGrowWhenASlicePodComesFirst) {
  const std::string cluster = Write("cluster.yaml", R"(nodes:
  - name: a100-node
    cpu: "32"
    memory: 128Gi
    gpus:
      - {model: A100-PCIE-40GB, mode: mig, uuid: GPU-a100-0}
  - name: t4-node
    cpu: "32"
    memory: 128Gi
    gpus:
      - {model: Tesla T4, mode: hami-core, memory: 15360Mi, uuid: GPU-t4-0}
)");
  const std::string slice = Write("slice.yaml", R"(apiVersion: v1
kind: Pod
metadata:
  name: slice
  annotations: {nvidia.com/vgpu-mode: hami-core}
spec:
  containers:
    - name: main
      resources:
        limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 4000, nvidia.com/gpucores: 30}
)");
  const std::string mig = Write("mig.yaml", R"(apiVersion: v1
kind: Pod
metadata:
  name: mig
  annotations: {nvidia.com/vgpu-mode: mig}
spec:
  containers:
    - name: main
      resources:
        limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 8000}
)");
  for (const std::string& pods : {mig, slice + " " + mig}) {
    SCOPED_TRACE(pods);
    Result r = Run("--cluster " + cluster + " " + pods);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const nlohmann::json& placed = j.back();
    ASSERT_EQ(placed["pod"], "default/mig");
    ASSERT_EQ(placed["node"], "a100-node") << placed.dump();
    EXPECT_EQ(placed["containers"][0]["devices"][0]["profile"], "2g.10gb") << placed.dump();
    EXPECT_EQ(placed["containers"][0]["devices"][0]["template"], 1) << placed.dump();
    if (j.size() == 2) {
      EXPECT_EQ(j[0]["node"], "t4-node") << j[0].dump();
    }
  }
}

// Issue 33, "Done when": on a DGX-1 V100 and an 8-GPU two-socket PCIe server (the shipped
// examples/plan/topology-*.yaml), a 4-GPU pod gets an NVLink quad on one socket and a 2-GPU pod
// an NVLink pair; `required` refuses a node that cannot, saying so.
TEST_F(PlanCommandTest, MultiGpuPodsGetWellConnectedGpus) {
  Result r = Run("--cluster " + Example("topology-cluster.yaml") + " " +
                 Example("topology-pods.yaml"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 4u);
  auto gpus = [](const nlohmann::json& pod) {
    std::set<int> out;
    for (const auto& d : pod["containers"][0]["devices"]) out.insert(d["index"].get<int>());
    return out;
  };
  EXPECT_EQ(j[0]["pod"], "default/train-4");
  EXPECT_EQ(j[0]["node"], "dgx1");
  EXPECT_EQ(gpus(j[0]), (std::set<int>{0, 1, 2, 3}));  // NVLink quad, socket 0.
  // The pair: the PCIe server's NVLink-bridged pair (0-1, 2-3, 4-5 or 6-7).
  EXPECT_EQ(j[1]["node"], "pcie");
  const std::set<int> pair = gpus(j[1]);
  ASSERT_EQ(pair.size(), 2u);
  EXPECT_EQ(*pair.begin() / 2, *pair.rbegin() / 2);
  EXPECT_EQ(j[2]["node"], "dgx1");  // Only the DGX's other quad is all NVLink.
  EXPECT_EQ(gpus(j[2]), (std::set<int>{4, 5, 6, 7}));
  EXPECT_EQ(j[3]["node"], "pcie");  // One socket's four.
  const std::set<int> numa = gpus(j[3]);
  EXPECT_TRUE(numa == (std::set<int>{0, 1, 2, 3}) || numa == (std::set<int>{4, 5, 6, 7}));

  // Without the DGX, the NVLink requirement cannot be met, and the reason says so.
  const std::string pcie_only = Write("pcie.yaml", R"(nodes:
  - name: pcie
    cpu: "128"
    memory: 1Ti
    gpus: [{model: A100-PCIE-40GB, mode: hami-core, count: 8}]
    topology: {machine: pcie-8gpu-nvlink-pairs}
)");
  const std::string pod = Write("pod.yaml", R"(apiVersion: v1
kind: Pod
metadata: {name: needs-nvlink-4, annotations: {prism.io/gpu-topology: required}}
spec:
  containers:
    - name: trainer
      resources: {limits: {nvidia.com/gpu: 4}}
)");
  r = Run("--cluster " + pcie_only + " " + pod);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json refused = nlohmann::json::parse(r.out);
  EXPECT_TRUE(refused[0]["unschedulable"].get<bool>());
  EXPECT_THAT(refused[0]["reason"].get<std::string>(), HasSubstr("TopologyNotFit"));
  // A wiring the cluster file gets wrong is an error naming the node.
  const std::string bad = Write("bad.yaml", R"(nodes:
  - name: odd
    cpu: "8"
    memory: 64Gi
    gpus: [{model: T4, count: 3}]
    topology: {machine: dgx1-v100}
)");
  r = Run("--cluster " + bad + " " + pod);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("nodes[0].topology"));
}

// docs/mig-slices.md through `prism plan`: with migSharing, three small MIG pods share one
// 1g.10gb of an H100; a pod that opts out with prism.io/mig-sharing: "off" gets its own.
TEST_F(PlanCommandTest, SmallMigPodsShareAnInstanceWithMigSharing) {
  const std::string cluster = Write("cluster.yaml", R"(nodes:
  - name: h100
    cpu: "64"
    memory: 256Gi
    gpus: [{model: H100-SXM5-80GB, mode: mig, count: 1}]
)");
  const std::string config = Write("device-config.yaml", R"(nvidia: {}
prism:
  migSharing:
    - {models: [H100-SXM5-80GB], profiles: [1g.10gb]}
)");
  std::string pods;
  for (const char* name : {"a", "b", "c", "own"}) {
    pods += std::string("---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: ") + name +
            "\n  annotations:\n    nvidia.com/vgpu-mode: mig\n" +
            (std::string(name) == "own" ? "    prism.io/mig-sharing: \"off\"\n" : "") +
            "spec:\n  containers:\n    - name: main\n      image: x\n      resources:\n"
            "        limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 2048}\n";
  }
  const std::string pod_file = Write("pods.yaml", pods);
  Result r = Run("--cluster " + cluster + " --device-config " + config + " " + pod_file);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 4u);
  const nlohmann::json& first = j[0]["containers"][0]["devices"][0];
  for (int i = 0; i < 3; ++i) {
    const nlohmann::json& d = j[i]["containers"][0]["devices"][0];
    EXPECT_EQ(d["shared"], true) << i;
    EXPECT_EQ(d["profile"], "1g.10gb") << i;
    EXPECT_EQ(d["memoryMiB"], 2048) << i;
    EXPECT_EQ(d["placement"], first["placement"]) << i;
  }
  const nlohmann::json& own = j[3]["containers"][0]["devices"][0];
  EXPECT_FALSE(own.contains("shared"));
  EXPECT_NE(own["placement"], first["placement"]);
  Result text =
      Run("--format text --cluster " + cluster + " --device-config " + config + " " + pod_file);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr(" shared, 2048 MiB"));
  // Why: the first slice made the instance, the next two joined it; what it holds after each.
  ASSERT_EQ(j[0]["sharedInstances"].size(), 1u);
  EXPECT_THAT(j[0]["sharedInstances"][0].get<std::string>(),
              HasSubstr("a new shared instance; it now holds 1 of"));
  EXPECT_THAT(j[2]["sharedInstances"][0].get<std::string>(),
              HasSubstr("joins a shared instance; it now holds 3 of"));
  EXPECT_THAT(j[2]["sharedInstances"][0].get<std::string>(), HasSubstr("6144 of "));
  EXPECT_FALSE(j[3].contains("sharedInstances"));
  EXPECT_THAT(text.out, HasSubstr("joins a shared instance; it now holds 2 of"));
}

TEST_F(PlanCommandTest, BadInput) {
  const std::string cluster = "--cluster " + Example("cluster.yaml") + " ";
  Result deployment = Run(cluster + Write("d.yaml", "kind: Deployment\nmetadata: {name: x}\n"));
  EXPECT_EQ(deployment.exit_code, 2);
  EXPECT_THAT(deployment.err, HasSubstr("is a Deployment, not a Pod"));

  Result quantity = Run(cluster + Write("q.yaml", R"(
kind: Pod
metadata: {name: q}
spec:
  containers:
    - name: c
      resources: {limits: {nvidia.com/gpumem: 12XB}}
)"));
  EXPECT_EQ(quantity.exit_code, 1);
  EXPECT_THAT(quantity.out, HasSubstr("invalid quantity '12XB'"));

  Result missing = Run("--cluster " + dir_ + "/nope.yaml " + Example("seed-pod.yaml"));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("cannot read"));

  // A directory named as the cluster file is an error, not an empty cluster; an endless device
  // stops at the read bound instead of exhausting memory.
  Result directory = Run("--cluster " + dir_ + " " + Example("seed-pod.yaml"));
  EXPECT_EQ(directory.exit_code, 2);
  EXPECT_THAT(directory.err, HasSubstr("cannot read " + dir_ + ": Is a directory"));
  Result endless = Run("--cluster /dev/zero " + Example("seed-pod.yaml"));
  EXPECT_EQ(endless.exit_code, 2);
  EXPECT_THAT(endless.err, HasSubstr("/dev/zero: larger than the 16777216-byte limit"));

  Result bad_cluster =
      Run("--cluster " + Write("c.yaml", "nodes:\n  - {name: a, cpu: x, memory: 1Gi}\n") + " " +
          Example("seed-pod.yaml"));
  EXPECT_EQ(bad_cluster.exit_code, 2);
  EXPECT_THAT(bad_cluster.err, HasSubstr("nodes[0].cpu"));

  Result mode = Run("--cluster " +
                    Write("m.yaml",
                          "nodes:\n  - {name: a, cpu: 1, memory: 1Gi, gpus: [{model: T4, "
                          "memory: 16Gi, mode: warp}]}\n") +
                    " " + Example("seed-pod.yaml"));
  EXPECT_EQ(mode.exit_code, 2);
  EXPECT_THAT(mode.err, HasSubstr("unknown mode 'warp'"));

  Result policy = Run("--policy fastest " + cluster + Example("seed-pod.yaml"));
  EXPECT_EQ(policy.exit_code, 2);
  EXPECT_THAT(policy.err, HasSubstr("--policy"));
}

// --workload chooses what fragmentation is measured against; --no-workload stays an alias of
// --workload=none. (That `running` is the extender's choice is checked against the live
// extender's reader by status_command_test.)
TEST_F(PlanCommandTest, WorkloadChoices) {
  const std::string args = "--cluster " + Example("cluster.yaml") + " --device-config " +
                           Example("device-config.yaml") + " " + Example("pods.yaml");
  Result none = Run("--workload=none " + args);
  ASSERT_EQ(none.exit_code, 0) << none.err;
  Result alias = Run("--no-workload " + args);
  ASSERT_EQ(alias.exit_code, 0) << alias.err;
  EXPECT_EQ(none.out, alias.out);
  Result running = Run("--workload running " + args);
  ASSERT_EQ(running.exit_code, 0) << running.err;
  EXPECT_EQ(nlohmann::json::parse(running.out).size(), 5u);
  Result bogus = Run("--workload=mine " + args);
  EXPECT_EQ(bogus.exit_code, 2);
  EXPECT_THAT(bogus.err, HasSubstr("--workload must be plan, running or none"));
  Result contradiction = Run("--no-workload --workload=running " + args);
  EXPECT_EQ(contradiction.exit_code, 2);
  EXPECT_THAT(contradiction.err, HasSubstr("--no-workload"));
}

// Issue 13 #2: a pod file whose document starts with ',' made yaml-cpp's LoadAll loop forever,
// growing memory. `timeout` turns a hang into exit code 124.
TEST_F(PlanCommandTest, PodFileStartingWithACommaIsAnError) {
  for (const std::string text : {",", "---\n,", ", a"}) {
    const std::string cmd = "timeout -s KILL 20 " + std::string(PRISM_BINARY) + " plan --cluster " +
                            Example("seed-cluster.yaml") + " " + Write("comma.yaml", text) + " >" +
                            dir_ + "/out 2>" + dir_ + "/err";
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << text;
    EXPECT_EQ(WEXITSTATUS(status), 2) << text;
    EXPECT_THAT(Read("err"), HasSubstr("comma.yaml: not valid YAML: line ")) << text;
  }
}

// Issue 13 #3: a byte that is not UTF-8 in a name aborted `prism plan` (nlohmann type_error.316
// while writing JSON). Pod and container names are rejected when read; node names and GPU UUIDs
// from the cluster file are written with U+FFFD.
TEST_F(PlanCommandTest, NamesThatAreNotUtf8) {
  const std::string cluster = "--cluster " + Example("seed-cluster.yaml") + " ";
  Result pod = Run(cluster + Write("p.yaml",
                                   "kind: Pod\nmetadata: {name: \"gpu\xff\"}\n"
                                   "spec: {containers: [{name: main}]}\n"));
  EXPECT_EQ(pod.exit_code, 2);
  EXPECT_THAT(pod.err, HasSubstr("metadata.name: byte 0xff at offset 3 is not UTF-8"));
  Result container = Run(cluster + Write("c.yaml",
                                         "kind: Pod\nmetadata: {name: p}\n"
                                         "spec: {containers: [{name: \"m\xc3\"}]}\n"));
  EXPECT_EQ(container.exit_code, 2);
  EXPECT_THAT(container.err, HasSubstr("spec.containers[0].name: byte 0xc3 at offset 1"));

  const std::string node_cluster = Write("cluster.yaml", R"(
nodes:
  - name: "node-)"
                                                         "\xfe"
                                                         R"("
    cpu: "32"
    memory: 128Gi
    gpus:
      - {model: T4, memory: 16Gi, uuid: "GPU-)"
                                                         "\xff"
                                                         R"("}
)");
  Result r = Run("--cluster " + node_cluster + " " +
                 Write("ok.yaml",
                       "kind: Pod\nmetadata: {name: ok}\nspec: {containers: [{name: "
                       "main, resources: {limits: {nvidia.com/gpu: 1}}}]}\n"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j[0]["node"], "node-\xef\xbf\xbd");
  EXPECT_EQ(j[0]["containers"][0]["devices"][0]["uuid"], "GPU-\xef\xbf\xbd");
}

}  // namespace
}  // namespace prism::cli
