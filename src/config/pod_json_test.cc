#include "config/pod_json.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

#include "base/strings.h"
#include "config/pod_yaml.h"
#include "config/yaml_util.h"

namespace prism::config {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A YAML document as the API server would serve it as JSON: every scalar a string (quantities
// and annotation values are strings in the API; the reader ignores the fields where JSON would
// have a number or a boolean).
json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json out = json::object();
      for (auto it = node.begin(); it != node.end(); ++it) {
        out[it->first.Scalar()] = YamlToJson(it->second);
      }
      return out;
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const YAML::Node& item : node) out.push_back(YamlToJson(item));
      return out;
    }
    case YAML::NodeType::Scalar:
      return node.Scalar();
    default:
      return nullptr;
  }
}

// The property the two readers promise: the same object gives the same manifest.
void ExpectReadersAgreeOnYaml(const YAML::Node& doc, const std::string& what) {
  SCOPED_TRACE(what);
  absl::StatusOr<PodManifest> from_yaml = ParsePodNode(doc, what);
  ASSERT_TRUE(from_yaml.ok()) << from_yaml.status();
  absl::StatusOr<PodManifest> from_json = PodManifestFromJson(YamlToJson(doc));
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  EXPECT_EQ(*from_json, *from_yaml);
}

void ExpectReadersAgreeOnJson(const json& pod, const std::string& what) {
  SCOPED_TRACE(what);
  absl::StatusOr<PodManifest> from_json = PodManifestFromJson(pod);
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  json with_kind = pod;
  with_kind["kind"] = "Pod";  // The YAML reader insists on it; API objects in lists lack it.
  absl::StatusOr<YAML::Node> node = LoadYaml(with_kind.dump(), what);  // JSON is YAML.
  ASSERT_TRUE(node.ok()) << node.status();
  absl::StatusOr<PodManifest> from_yaml = ParsePodNode(*node, what);
  ASSERT_TRUE(from_yaml.ok()) << from_yaml.status();
  EXPECT_EQ(*from_json, *from_yaml);
}

// The fixtures of the node agent's and the extender's tests, in the shapes their harnesses
// build (src/deviceplugin/agent_harness.cc, src/extender/test_util.h).
std::vector<json> TestFixturePods() {
  std::vector<json> pods;
  pods.push_back(json::parse(R"({"apiVersion":"v1","kind":"Pod",
    "metadata":{"name":"train","namespace":"team","uid":"uid-team-train",
                "annotations":{"nvidia.com/vgpu-mode":"mig"}},
    "spec":{"schedulerName":"prism-scheduler",
      "initContainers":[{"name":"init","image":"busybox",
        "resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"2000"},
                     "requests":{"cpu":"500m"}}}],
      "containers":[{"name":"main","image":"busybox",
        "resources":{"limits":{"nvidia.com/gpu":"2","nvidia.com/gpumem":"8000",
                               "nvidia.com/gpucores":"30","memory":1073741824},
                     "requests":{"cpu":"1"}}}]},
    "status":{"phase":"Pending"}})"));
  pods.push_back(json::parse(R"({"apiVersion":"v1","kind":"Pod",
    "metadata":{"name":"slice","namespace":"prism-test",
                "annotations":{"prism.io/decision":"{\"node\":\"n\"}"},
                "labels":{"app":"x"}},
    "spec":{"nodeName":"gpu-node","schedulerName":"prism-scheduler",
      "initContainers":[
        {"name":"fetch","image":"nvidia/cuda","resources":{"limits":{"nvidia.com/gpu":"1"}}},
        {"name":"sidecar","image":"nvidia/cuda","restartPolicy":"Always",
         "resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"1000"}}}],
      "containers":[{"name":"main","image":"nvidia/cuda",
        "resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"3000"}},
        "env":[{"name":"CUDA_DISABLE_CONTROL","value":"true"},
               {"name":"FROM_SECRET","valueFrom":{"secretKeyRef":{"name":"s","key":"k"}}},
               {"name":"TWICE","value":"first"},{"name":"TWICE","value":"last"},
               {"name":"OVERRIDDEN","value":"true"},
               {"name":"OVERRIDDEN","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}},
               {"name":"EMPTY"}]}]}})"));
  pods.push_back(json::parse(R"({"metadata":{"name":"cpu-only","namespace":"default","uid":"u"},
    "spec":{"nodeName":"n1","containers":[{"name":"c","resources":{"requests":{"cpu":"2",
    "memory":"4Gi"}}}]}})"));
  return pods;
}

TEST(PodJsonTest, ReadsContainersInitContainersEnvAndQuantities) {
  const std::vector<json> pods = TestFixturePods();
  absl::StatusOr<PodManifest> m = PodManifestFromJson(pods[0]);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->Key(), "team/train");
  EXPECT_EQ(m->uid, "uid-team-train");
  ASSERT_EQ(m->containers.size(), 2u);
  EXPECT_TRUE(m->containers[0].init);
  EXPECT_FALSE(m->containers[0].restartable);
  EXPECT_EQ(m->containers[0].requests.at("cpu"), "500m");
  EXPECT_EQ(m->containers[1].limits.at("nvidia.com/gpumem"), "8000");
  EXPECT_EQ(m->containers[1].limits.at("memory"), "1073741824");  // A JSON number.
  EXPECT_EQ(m->annotations.at("nvidia.com/vgpu-mode"), "mig");

  m = PodManifestFromJson(pods[1]);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->node_name, "gpu-node");
  EXPECT_EQ(m->labels.at("app"), "x");
  ASSERT_EQ(m->containers.size(), 3u);
  EXPECT_FALSE(m->containers[0].restartable);
  EXPECT_TRUE(m->containers[1].restartable);
  // FROM_SECRET has no literal value; OVERRIDDEN's literal is replaced by a valueFrom, so the
  // container does not get "true" and the reader must not say it does.
  const std::map<std::string, std::string> env = m->containers[2].env;
  EXPECT_EQ(env, (std::map<std::string, std::string>{
                     {"CUDA_DISABLE_CONTROL", "true"}, {"TWICE", "last"}, {"EMPTY", ""}}));

  m = PodManifestFromJson(pods[2]);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->containers[0].requests.at("memory"), "4Gi");
}

TEST(PodJsonTest, NumbersKeepTheirJsonSpellingAndNullIsAbsent) {
  json pod = json::parse(R"({"metadata":{"name":"p","namespace":null,"annotations":null},
    "spec":{"nodeName":null,"initContainers":null,"containers":[{"name":"c","env":null,
    "resources":{"limits":{"nvidia.com/gpu":18446744073709551615,"cpu":1.5},"requests":null}}]}})");
  absl::StatusOr<PodManifest> m = PodManifestFromJson(pod);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->namespace_name, "default");
  EXPECT_EQ(m->containers[0].limits.at("nvidia.com/gpu"), "18446744073709551615");
  EXPECT_EQ(m->containers[0].limits.at("cpu"), "1.5");
  EXPECT_TRUE(m->annotations.empty());
}

TEST(PodJsonTest, MalformedPodsAreErrorsNamingTheField) {
  const json good = TestFixturePods()[1];
  struct Case {
    std::string pointer;  // JSON pointer to replace
    json value;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"/metadata/name", 7, "pod: metadata.name: expected a string, got number"},
      {"/metadata/name", "", "pod: metadata.name: empty"},
      {"/metadata/name", "bad\xff", "is not UTF-8"},
      {"/metadata/namespace", json::array(), "metadata.namespace: expected a string, got array"},
      {"/metadata/uid", true, "pod prism-test/slice: metadata.uid: expected a string, got boolean"},
      {"/metadata/annotations", "x", "metadata.annotations: expected an object, got string"},
      {"/metadata/annotations/prism.io~1decision", json::object(),
       "pod prism-test/slice: metadata.annotations.prism.io/decision: expected a string, got "
       "object"},
      {"/metadata/labels/app", 3, "metadata.labels.app: expected a string, got number"},
      {"/spec", 3, "pod prism-test/slice: spec: expected an object, got number"},
      {"/spec/nodeName", 1, "spec.nodeName: expected a string, got number"},
      {"/spec/nodeName", std::string(254, 'n'), "spec.nodeName: 254 bytes"},
      {"/spec/containers", 3, "spec.containers: expected an array, got number"},
      {"/spec/containers", json::array(), "spec.containers: empty"},
      {"/spec/containers/0", "main", "spec.containers[0]: expected an object, got string"},
      {"/spec/containers/0/name", nullptr, "spec.containers[0].name: missing"},
      {"/spec/containers/0/name", 5, "spec.containers[0].name: expected a string, got number"},
      {"/spec/initContainers/1/restartPolicy", 1,
       "spec.initContainers[1].restartPolicy: expected a string, got number"},
      {"/spec/containers/0/resources", "all", "spec.containers[0].resources: expected an object"},
      {"/spec/containers/0/resources/limits", "lots",
       "spec.containers[0].resources.limits: expected an object, got string"},
      {"/spec/containers/0/resources/limits/nvidia.com~1gpu", json::array(),
       "spec.containers[0].resources.limits.nvidia.com/gpu: expected a quantity, got array"},
      {"/spec/containers/0/resources/limits/nvidia.com~1gpu", std::string(65, '1'),
       "spec.containers[0].resources.limits.nvidia.com/gpu: 65 bytes"},
      {"/spec/containers/0/env", json::object(),
       "spec.containers[0].env: expected an array, got object"},
      {"/spec/containers/0/env/0", 1, "spec.containers[0].env[0]: expected an object, got number"},
      {"/spec/containers/0/env/0/name", json::object(),
       "spec.containers[0].env[0].name: expected a string, got object"},
      {"/spec/containers/0/env/0/value", 1,
       "spec.containers[0].env[0].value: expected a string, got number"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pointer);
    json pod = good;
    pod[json::json_pointer(c.pointer)] = c.value;
    absl::StatusOr<PodManifest> m = PodManifestFromJson(pod);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(m.status().message()), HasSubstr(c.message));
  }
  json pod = good;
  pod["metadata"].erase("name");
  EXPECT_THAT(std::string(PodManifestFromJson(pod).status().message()),
              HasSubstr("metadata.name: missing"));
  EXPECT_THAT(std::string(PodManifestFromJson(json::array()).status().message()),
              HasSubstr("pod: expected an object, got array"));
  pod = good;
  pod.erase("metadata");
  EXPECT_THAT(std::string(PodManifestFromJson(pod).status().message()),
              HasSubstr("metadata: missing"));
}

TEST(PodJsonTest, BoundsAreErrorsNotWork) {
  json pod = TestFixturePods()[2];
  pod["metadata"]["annotations"]["big"] = std::string(kMaxPodAnnotationBytes, 'x');
  EXPECT_THAT(std::string(PodManifestFromJson(pod).status().message()),
              HasSubstr("metadata.annotations: more than 262144 bytes"));

  pod = TestFixturePods()[2];
  json containers = json::array();
  for (size_t i = 0; i <= kMaxPodContainers; ++i) {
    containers.push_back(json{{"name", "c" + std::to_string(i)}});
  }
  pod["spec"]["containers"] = containers;
  EXPECT_THAT(std::string(PodManifestFromJson(pod).status().message()),
              HasSubstr("spec.containers: more than 1024 containers"));
  // The limit counts init and regular containers together.
  containers.erase(containers.begin());
  pod["spec"]["containers"] = containers;
  EXPECT_TRUE(PodManifestFromJson(pod).ok());
  pod["spec"]["initContainers"] = json::array({json{{"name", "init"}}});
  EXPECT_FALSE(PodManifestFromJson(pod).ok());

  pod = TestFixturePods()[2];
  json env = json::array();
  for (size_t i = 0; i <= kMaxContainerEnv; ++i) env.push_back(json{{"name", "E"}, {"value", "v"}});
  pod["spec"]["containers"][0]["env"] = env;
  EXPECT_THAT(std::string(PodManifestFromJson(pod).status().message()),
              HasSubstr("spec.containers[0].env: 10001 entries"));

  pod = TestFixturePods()[2];
  pod["spec"]["containers"][0]["resources"]["limits"] = json::object();
  for (size_t i = 0; i <= kMaxContainerResources; ++i) {
    pod["spec"]["containers"][0]["resources"]["limits"]["r" + std::to_string(i)] = "1";
  }
  EXPECT_THAT(std::string(PodManifestFromJson(pod).status().message()),
              HasSubstr("resources.limits: 257 resources"));
}

TEST(PodJsonTest, AgreesWithTheYamlReaderOnTheTestFixtures) {
  const std::vector<json> pods = TestFixturePods();
  for (size_t i = 0; i < pods.size(); ++i) {
    ExpectReadersAgreeOnJson(pods[i], "fixture " + std::to_string(i));
  }
}

TEST(PodJsonTest, AgreesWithTheYamlReaderOnTheExamplesAndTheFuzzSeeds) {
  namespace fs = std::filesystem;
  const fs::path root = PRISM_SOURCE_DIR;
  int compared = 0;
  for (const char* file : {"examples/plan/pods.yaml", "examples/plan/seed-pod.yaml"}) {
    absl::StatusOr<std::vector<YAML::Node>> docs = LoadAllYaml(ReadFile(root / file), file);
    ASSERT_TRUE(docs.ok()) << docs.status();
    for (size_t i = 0; i < docs->size(); ++i) {
      ExpectReadersAgreeOnYaml((*docs)[i], StrCat(file, " document ", i + 1));
      ++compared;
    }
  }
  absl::StatusOr<YAML::Node> cluster =
      LoadYaml(ReadFile(root / "examples/plan/cluster.yaml"), "cluster.yaml");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  for (size_t i = 0; i < (*cluster)["pods"].size(); ++i) {
    ExpectReadersAgreeOnYaml((*cluster)["pods"][i], StrCat("cluster.yaml pods[", i, "]"));
    ++compared;
  }
  // The pod YAML fuzzer's seeds (selector '0': a pod file) that the YAML reader accepts, and
  // every pod JSON seed.
  for (const auto& entry : fs::directory_iterator(root / "fuzz/corpus/pod_yaml_fuzzer")) {
    const std::string seed = ReadFile(entry.path());
    if (seed.empty() || seed[0] != '0') continue;
    absl::StatusOr<std::vector<YAML::Node>> docs = LoadAllYaml(seed.substr(1), "seed");
    if (!docs.ok()) continue;
    for (const YAML::Node& doc : *docs) {
      if (!ParsePodNode(doc, "seed").ok()) continue;
      ExpectReadersAgreeOnYaml(doc, entry.path().filename().string());
      ++compared;
    }
  }
  for (const auto& entry : fs::directory_iterator(root / "fuzz/corpus/pod_json_fuzzer")) {
    const json pod = json::parse(ReadFile(entry.path()), nullptr, false);
    if (pod.is_discarded()) continue;
    ExpectReadersAgreeOnJson(pod, entry.path().filename().string());
    ++compared;
  }
  // A check that compared nothing would pass vacuously.
  EXPECT_GE(compared, 12);
}

}  // namespace
}  // namespace prism::config
