#include "extender/wire.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

#include "config/pod_json.h"
#include "config/pod_yaml.h"
#include "extender/test_util.h"

namespace prism::extender {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;
using testing::GpuPod;
using testing::NodeJson;
using testing::TestGpu;

TEST(ExtenderArgsTest, ReadsGoFieldNamesAsKubeSchedulerSendsThem) {
  const std::string body = R"({"Pod":{"metadata":{"name":"p","namespace":"ns","uid":"u1"},
      "spec":{"containers":[]}},"Nodes":null,"NodeNames":["n1","n2"]})";
  absl::StatusOr<ExtenderArgs> args = ParseExtenderArgs(body);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->pod["metadata"]["name"], "p");
  EXPECT_THAT(args->node_names, ElementsAre("n1", "n2"));
  EXPECT_FALSE(args->nodes.has_value());
}

TEST(ExtenderArgsTest, MatchesKeysIgnoringCaseLikeGo) {
  // Pre-1.17 kube-scheduler sent lowercase keys; Go's decoder accepts any case.
  absl::StatusOr<ExtenderArgs> args =
      ParseExtenderArgs(R"({"pod":{"metadata":{"name":"p"},"spec":{}},"nodenames":["a"]})");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(args->node_names, ElementsAre("a"));
  args = ParseExtenderArgs(R"({"POD":{"metadata":{"name":"p"}},"NODENAMES":["b"]})");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(args->node_names, ElementsAre("b"));
}

TEST(ExtenderArgsTest, ExactKeyWinsOverCaseInsensitiveMatch) {
  absl::StatusOr<ExtenderArgs> args = ParseExtenderArgs(
      R"({"nodenames":["lower"],"Pod":{"metadata":{"name":"p"}},"NodeNames":["exact"]})");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(args->node_names, ElementsAre("exact"));
}

// The names are taken out of the parser as they come; what a document would hold is what counts:
// a repeated key's last value, the exact spelling before another case.
TEST(ExtenderArgsTest, NamesTakenWhileParsingAreTheDocumentsNames) {
  absl::StatusOr<ExtenderArgs> repeated = ParseExtenderArgs(
      R"({"Pod":{"metadata":{"name":"p"}},"NodeNames":["old",1],"NodeNames":["a","b"]})");
  ASSERT_TRUE(repeated.ok()) << repeated.status();
  EXPECT_THAT(repeated->node_names, ElementsAre("a", "b"));
  absl::StatusOr<ExtenderArgs> spelled = ParseExtenderArgs(
      R"({"NODENAMES":["upper"],"Pod":{"metadata":{"name":"p"}},"nodeNames":["camel"]})");
  ASSERT_TRUE(spelled.ok()) << spelled.status();
  EXPECT_EQ(spelled->node_names.size(), 1u);
  absl::StatusOr<ExtenderArgs> empty =
      ParseExtenderArgs(R"({"Pod":{"metadata":{"name":"p"}},"NodeNames":[]})");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->node_names.empty());
  EXPECT_TRUE(empty->pod.contains("metadata"));
}

// The request is parsed with simdjson; the pod must come out as nlohmann would have parsed it
// (config::PodManifestFromJson reads it), numbers and repeated keys included.
TEST(ExtenderArgsTest, ThePodIsTheDocumentNlohmannWouldParse) {
  const std::string pod =
      R"({"metadata":{"name":"p","labels":{"a":"1"},"labels":{"b":"2"}},"spec":{"priority":7,)"
      R"("x":-3,"y":2.5,"z":18446744073709551615,"e":1e3,"t":true,"n":null,"s":"\u00e9\n",)"
      R"("l":[[],{},[1,[2,{"k":"v"}]]]}})";
  absl::StatusOr<ExtenderArgs> args =
      ParseExtenderArgs(StrCat(R"({"Pod":)", pod, R"(,"NodeNames":["n\u0031","b\"c"]})"));
  ASSERT_TRUE(args.ok()) << args.status();
  const json want = json::parse(pod);
  EXPECT_EQ(args->pod, want) << args->pod.dump();
  EXPECT_EQ(args->pod.dump(), want.dump());                  // Same types too (unsigned, float).
  EXPECT_THAT(args->node_names, ElementsAre("n1", "b\"c"));  // Unescaped.
}

TEST(ExtenderArgsTest, InvalidJsonAnywhereIsRefused) {
  for (const std::string& body : std::vector<std::string>{
           R"({"Pod":{"metadata":{}},"NodeNames":["a"],"Other":[1,tru]})",
           R"({"Pod":{"metadata":{}},"NodeNames":["a"]} trailing)",
           StrCat(R"({"Pod":{"metadata":{}},"NodeNames":["a)", "\xff", R"("]})"),  // Not UTF-8.
           // A number out of 64-bit range (a pod serialised from Go's types has none).
           R"({"Pod":{"metadata":{},"x":123456789012345678901234},"NodeNames":["a"]})",
           StrCat(R"({"Pod":{"metadata":{}},"Deep":)", std::string(2000, '['),
                  std::string(2000, ']'), "}"),
       }) {
    absl::StatusOr<ExtenderArgs> args = ParseExtenderArgs(body);
    ASSERT_FALSE(args.ok()) << body;
    EXPECT_THAT(std::string(args.status().message()), HasSubstr("not valid JSON")) << body;
  }
}

TEST(ExtenderArgsTest, FullNodeListWhenNotNodeCacheCapable) {
  json body{{"Pod", GpuPod("p", 1, 1000)},
            {"Nodes", {{"items", {NodeJson("n1", {TestGpu{}}), NodeJson("n2", {})}}}},
            {"NodeNames", nullptr}};
  absl::StatusOr<ExtenderArgs> args = ParseExtenderArgs(body.dump());
  ASSERT_TRUE(args.ok()) << args.status();
  ASSERT_TRUE(args->nodes.has_value());
  EXPECT_EQ(args->nodes->size(), 2u);
  EXPECT_THAT(args->node_names, ElementsAre("n1", "n2"));
}

TEST(ExtenderArgsTest, MalformedRequestsNameTheProblem) {
  struct Case {
    std::string body;
    std::string want;
  };
  for (const Case& c : std::vector<Case>{
           {"", "not valid JSON"},
           {"{oops", "not valid JSON"},
           {"[1,2]", "expected a JSON object"},
           {R"({"NodeNames":["a"]})", "ExtenderArgs.Pod"},
           {R"({"Pod":"x"})", "ExtenderArgs.Pod"},
           {R"({"Pod":{"spec":{}}})", "Pod.metadata"},
           {R"({"Pod":{"metadata":{}},"NodeNames":"a"})", "NodeNames: expected an array"},
           {R"({"Pod":{"metadata":{}},"NodeNames":[1]})", "NodeNames[0]"},
           {R"({"Pod":{"metadata":{}},"NodeNames":["a","b",null,"c"]})", "NodeNames[2]: expected"},
           {R"({"Pod":{"metadata":{}},"NodeNames":["a",["b"]]})", "NodeNames[1]: expected"},
           {R"({"Pod":{"metadata":{}},"NodeNames":["a",{"b":"c"}]})", "NodeNames[1]: expected"},
           {R"({"Pod":{"metadata":{}},"NodeNames":{"a":"b"}})", "NodeNames: expected an array"},
           {R"({"Pod":{"metadata":{}},"NodeNames":["a"],"NodeNames":[true]})", "NodeNames[0]"},
           {R"({"Pod":{"metadata":{}},"Nodes":{"items":[{"metadata":{}}]}})", "items[0]"},
       }) {
    absl::StatusOr<ExtenderArgs> args = ParseExtenderArgs(c.body);
    ASSERT_FALSE(args.ok()) << c.body;
    EXPECT_TRUE(absl::IsInvalidArgument(args.status()));
    EXPECT_THAT(std::string(args.status().message()), HasSubstr(c.want)) << c.body;
  }
}

// Issue 13 #4: a request's candidate list is bounded; the nodes over the bound are dropped while
// parsing (no memory for them) and the request is refused naming the field.
TEST(ExtenderArgsTest, CandidateListsAreBounded) {
  ExtenderLimits limits;
  limits.max_nodes = 3;
  limits.max_node_name_bytes = 8;
  auto names = [](int n, const std::string& name = "n") {
    json list = json::array();
    for (int i = 0; i < n; ++i) list.push_back(StrCat(name, i));
    return json{{"Pod", {{"metadata", {{"name", "p"}}}}}, {"NodeNames", list}}.dump();
  };
  ASSERT_TRUE(ParseExtenderArgs(names(3), limits).ok());
  absl::StatusOr<ExtenderArgs> over = ParseExtenderArgs(names(4), limits);
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(std::string(over.status().message()),
              HasSubstr("ExtenderArgs.NodeNames: 4 nodes, more than the limit of 3"));
  // Case-insensitive keys, as Go decodes them.
  over = ParseExtenderArgs(R"({"nodenames":["a","b","c","d","e"],"pod":{"metadata":{"name":"p"}}})",
                           limits);
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("5 nodes"));
  absl::StatusOr<ExtenderArgs> long_name = ParseExtenderArgs(names(1, "too-long-"), limits);
  ASSERT_FALSE(long_name.ok());
  EXPECT_THAT(std::string(long_name.status().message()),
              HasSubstr("ExtenderArgs.NodeNames[0]: 10 bytes, more than a node name's 8"));
  json items = json::array();
  for (int i = 0; i < 4; ++i) items.push_back(NodeJson(StrCat("n", i), {}));
  absl::StatusOr<ExtenderArgs> nodes = ParseExtenderArgs(
      json{{"Pod", {{"metadata", {{"name", "p"}}}}}, {"Nodes", {{"items", items}}}}.dump(), limits);
  ASSERT_FALSE(nodes.ok());
  EXPECT_THAT(std::string(nodes.status().message()), HasSubstr("ExtenderArgs.Nodes.items: 4"));
  // Arrays elsewhere (the pod's containers) do not count.
  json pod{{"metadata", {{"name", "p"}}},
           {"spec",
            {{"containers",
              json::array({json::object(), json::object(), json::object(), json::object()})}}}};
  EXPECT_TRUE(ParseExtenderArgs(json{{"Pod", pod}, {"NodeNames", {"a"}}}.dump(), limits).ok());
  // The defaults hold a 5,000-node cluster.
  EXPECT_TRUE(ParseExtenderArgs(names(5000)).ok());
}

TEST(PreemptionArgsTest, ReadsMetaVictimsAsANodeCacheCapableExtenderGetsThem) {
  auto args = ParsePreemptionArgs(R"({"Pod":{"metadata":{"name":"hi","uid":"u0"}},
      "NodeNameToVictims":null,
      "NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":"u1"},{"UID":"u2"}],"NumPDBViolations":1},
                               "n2":{"Pods":[{"uid":"u3"}]}}})");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->pod["metadata"]["name"], "hi");
  ASSERT_EQ(args->nodes.size(), 2u);
  EXPECT_EQ(args->nodes[0].node, "n1");
  EXPECT_THAT(args->nodes[0].uids, ElementsAre("u1", "u2"));
  EXPECT_EQ(args->nodes[0].pdb_violations, 1);
  EXPECT_EQ(args->nodes[1].node, "n2");
  EXPECT_THAT(args->nodes[1].uids, ElementsAre("u3"));  // Go matches "uid" to UID.
}

TEST(PreemptionArgsTest, FullVictimPodsGiveTheirUids) {
  auto args = ParsePreemptionArgs(R"({"Pod":{"metadata":{"name":"hi"}},
      "NodeNameToVictims":{"n1":{"Pods":[{"metadata":{"name":"a","uid":"ua"}}]}}})");
  ASSERT_TRUE(args.ok()) << args.status();
  ASSERT_EQ(args->nodes.size(), 1u);
  EXPECT_THAT(args->nodes[0].uids, ElementsAre("ua"));
  // No candidates at all: an empty proposal, not an error.
  auto none = ParsePreemptionArgs(R"({"Pod":{"metadata":{"name":"hi"}}})");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->nodes.empty());
}

TEST(PreemptionArgsTest, MalformedAndOversizedRequestsNameTheField) {
  auto message = [](std::string_view body, const PreemptionArgsLimits& limits = {}) {
    absl::StatusOr<PreemptionArgs> r = ParsePreemptionArgs(body, limits);
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  EXPECT_THAT(message(""), HasSubstr("not valid JSON"));
  EXPECT_THAT(message("[1]"), HasSubstr("expected a JSON object, got array"));
  EXPECT_THAT(message(R"({"NodeNameToMetaVictims":{}})"), HasSubstr("ExtenderPreemptionArgs.Pod"));
  const std::string pod = R"("Pod":{"metadata":{"name":"hi"}})";
  EXPECT_THAT(message("{" + pod + R"(,"NodeNameToMetaVictims":[]})"),
              HasSubstr("NodeNameToMetaVictims: expected an object, got array"));
  EXPECT_THAT(message("{" + pod + R"(,"NodeNameToMetaVictims":{"n1":{"Pods":[{}]}}})"),
              HasSubstr("NodeNameToMetaVictims['n1'].Pods[0].UID: missing"));
  EXPECT_THAT(message("{" + pod + R"(,"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":""}]}}})"),
              HasSubstr("Pods[0].UID: missing"));
  EXPECT_THAT(
      message("{" + pod + R"(,"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":"a"},{"UID":"a"}]}}})"),
      HasSubstr("Pods[1]: pod 'a' listed twice"));
  EXPECT_THAT(message("{" + pod + R"(,"NodeNameToMetaVictims":{"n1":{},"n1":{}}})"),
              HasSubstr("node 'n1' listed twice"));
  EXPECT_THAT(message("{" + pod + R"(,"NodeNameToMetaVictims":{"":{}}})"),
              HasSubstr("node name of 0 bytes"));
  EXPECT_THAT(message("{" + pod + R"(,"NodeNameToMetaVictims":{"n1":{"NumPDBViolations":-1}}})"),
              HasSubstr("NumPDBViolations: expected a non-negative integer"));
  EXPECT_THAT(message("{" + pod + R"(,"NodeNameToMetaVictims":{"n1":7}})"),
              HasSubstr("['n1']: expected an object, got number"));
  EXPECT_THAT(message("{" + pod + R"(,"NodeNameToVictims":{"n1":{"Pods":[{"uid":"x"}]}}})"),
              HasSubstr("Pods[0].metadata.uid: missing"));

  PreemptionArgsLimits limits;
  limits.max_nodes = 2;
  limits.max_victims_per_node = 2;
  limits.max_victims = 3;
  limits.max_uid_bytes = 4;
  auto victims = [&](int nodes, int per_node, const std::string& uid = "u") {
    json map = json::object();
    for (int n = 0; n < nodes; ++n) {
      json pods = json::array();
      for (int i = 0; i < per_node; ++i) pods.push_back({{"UID", StrCat(uid, n, i)}});
      map[StrCat("n", n)] = {{"Pods", pods}};
    }
    return json{{"Pod", {{"metadata", {{"name", "p"}}}}}, {"NodeNameToMetaVictims", map}}.dump();
  };
  EXPECT_EQ(message(victims(2, 1), limits), "ok");
  EXPECT_THAT(message(victims(3, 1), limits), HasSubstr("3 nodes, more than the limit of 2"));
  EXPECT_THAT(message(victims(1, 3), limits), HasSubstr("3 victims, more than the limit of 2"));
  EXPECT_THAT(message(victims(2, 2), limits), HasSubstr("['n1'].Pods: 2 victims"));
  EXPECT_THAT(message(victims(1, 1, "uuuuu"), limits), HasSubstr("UID of 7 bytes, more than 4"));
}

TEST(PreemptionResultTest, MetaVictimsWithGoFieldNames) {
  std::vector<NodeVictims> nodes = {{"n1", {"u2", "u1"}, 0}, {"n\"2", {}, 3}};
  json j = json::parse(PreemptionResultToJson(nodes));
  EXPECT_EQ(j["NodeNameToMetaVictims"]["n1"]["Pods"],
            json::parse(R"([{"UID":"u2"},{"UID":"u1"}])"));
  EXPECT_EQ(j["NodeNameToMetaVictims"]["n1"]["NumPDBViolations"], 0);
  EXPECT_EQ(j["NodeNameToMetaVictims"]["n\"2"]["NumPDBViolations"], 3);
  EXPECT_EQ(PreemptionResultToJson({}), R"({"NodeNameToMetaVictims":{}})");
  // What the parser reads back is what was written.
  auto back = ParsePreemptionArgs(
      R"({"Pod":{"metadata":{"name":"p"}},)" + PreemptionResultToJson(nodes).substr(1));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_THAT(back->nodes[0].uids, ElementsAre("u2", "u1"));
}

TEST(FilterResultTest, UsesGoFieldNamesAndAnExplicitEmptyList) {
  FilterResult r;
  r.failed_unresolvable_nodes.emplace_back("n1", "1/1 CardInsufficientMemory");
  json j = json::parse(FilterResultToJson(r));
  ASSERT_TRUE(j.contains("NodeNames"));
  EXPECT_TRUE(j["NodeNames"].is_array());
  EXPECT_TRUE(j["NodeNames"].empty());
  EXPECT_TRUE(j["Nodes"].is_null());
  EXPECT_EQ(j["FailedAndUnresolvableNodes"]["n1"], "1/1 CardInsufficientMemory");
  EXPECT_TRUE(j["FailedNodes"].is_object());
  EXPECT_EQ(j["Error"], "");
}

TEST(FilterResultTest, ReturnsNodesWhenGivenNodes) {
  FilterResult r;
  r.nodes = std::vector<json>{NodeJson("n1", {})};
  json j = json::parse(FilterResultToJson(r));
  EXPECT_TRUE(j["NodeNames"].is_null());
  EXPECT_EQ(j["Nodes"]["items"][0]["metadata"]["name"], "n1");
}

TEST(FilterResultTest, EscapesNamesAndReasons) {
  FilterResult r;
  r.node_names = {"a\"b"};
  const std::string reason = "tab\there, nl\n, ctl\x01";  // Outlives the reply, as in Filter.
  r.failed_unresolvable_nodes.emplace_back("n\\1", reason);
  r.error = "bad \"quote\"";
  json j = json::parse(FilterResultToJson(r));
  EXPECT_EQ(j["NodeNames"][0], "a\"b");
  EXPECT_EQ(j["FailedAndUnresolvableNodes"]["n\\1"], "tab\there, nl\n, ctl\x01");
  EXPECT_EQ(j["Error"], "bad \"quote\"");
}

TEST(HostPriorityTest, HostAndScore) {
  EXPECT_EQ(HostPriorityListToJson({{"a", 10}, {"b", 3}}),
            R"([{"Host":"a","Score":10},{"Host":"b","Score":3}])");
  EXPECT_EQ(HostPriorityListToJson({}), "[]");
  // A name is escaped as JSON (kube-scheduler's names cannot hold these; the reply stays valid).
  const json j = json::parse(HostPriorityListToJson({{"a\"b\\c", 0}}));
  EXPECT_EQ(j[0]["Host"], "a\"b\\c");
  EXPECT_EQ(j[0]["Score"], 0);
}

TEST(BindingArgsTest, ReadsTheBindingAndRejectsMissingFields) {
  absl::StatusOr<BindingArgs> args =
      ParseBindingArgs(R"({"PodName":"p","PodNamespace":"ns","PodUID":"u","Node":"n1"})");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->pod_name, "p");
  EXPECT_EQ(args->pod_namespace, "ns");
  EXPECT_EQ(args->pod_uid, "u");
  EXPECT_EQ(args->node, "n1");
  args = ParseBindingArgs(R"({"podName":"p","podNamespace":"ns","podUID":"u","node":"n1"})");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->pod_uid, "u");
  EXPECT_THAT(
      std::string(ParseBindingArgs(R"({"PodName":"p","PodNamespace":"ns"})").status().message()),
      HasSubstr("Node"));
  EXPECT_THAT(
      std::string(
          ParseBindingArgs(R"({"PodName":7,"PodNamespace":"ns","Node":"n"})").status().message()),
      HasSubstr("PodName: expected a string"));
  EXPECT_EQ(BindingResultToJson("").dump(), R"({"Error":""})");
}

// The extender reads pods with config::PodManifestFromJson (tested in src/config); its test
// fixtures must mean the same to the YAML reader that `prism plan` uses.
TEST(PodManifestTest, FixturesReadTheSameAsTheirYaml) {
  std::vector<json> pods = {
      testing::PodJson("team", "train",
                       {{"init", 1, 2000, 0, true, "500m"}, {"main", 2, 8000, 30, false, "1"}},
                       {{"nvidia.com/vgpu-mode", "mig"}}),
      GpuPod("p", 1, 1000), GpuPod("q", 2, 0, 50, {{"nvidia.com/use-gputype", "A100"}})};
  pods[0]["spec"]["containers"][0]["resources"]["limits"]["memory"] = 1073741824;  // A number.
  pods[1]["spec"]["nodeName"] = "n1";
  for (const json& pod : pods) {
    SCOPED_TRACE(pod.dump());
    absl::StatusOr<config::PodManifest> from_json = config::PodManifestFromJson(pod);
    ASSERT_TRUE(from_json.ok()) << from_json.status();
    absl::StatusOr<config::PodManifest> from_yaml =
        config::ParsePodNode(YAML::Load(pod.dump()), "fixture");
    ASSERT_TRUE(from_yaml.ok()) << from_yaml.status();
    EXPECT_EQ(*from_json, *from_yaml);
  }
}

TEST(NodeSpecTest, ReadsInventoryAndAllocatable) {
  absl::StatusOr<std::optional<sched::NodeSpec>> spec = NodeSpecFromJson(
      NodeJson("n1", {TestGpu{}, TestGpu{"H100-SXM5-80GB", 81920, true}}, "8", "64Gi"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(spec->has_value());
  const sched::NodeSpec& n = **spec;
  EXPECT_EQ(n.name, "n1");
  EXPECT_EQ(n.cpu_milli, 8000);
  EXPECT_EQ(n.memory_bytes, int64_t{64} << 30);
  ASSERT_EQ(n.gpus.size(), 2u);
  EXPECT_EQ(n.gpus[0].uuid, "GPU-n1-0");
  EXPECT_EQ(n.gpus[1].mode, sched::GpuMode::kMig);
}

TEST(NodeSpecTest, NodeWithoutInventoryIsNotAGpuNode) {
  absl::StatusOr<std::optional<sched::NodeSpec>> spec = NodeSpecFromJson(NodeJson("cpu", {}));
  ASSERT_TRUE(spec.ok());
  EXPECT_FALSE(spec->has_value());
}

TEST(NodeSpecTest, MalformedInventoryNamesNodeAndAnnotation) {
  json node = NodeJson("n1", {TestGpu{}});
  node["metadata"]["annotations"]["prism.io/gpu-inventory"] = "{not json";
  absl::StatusOr<std::optional<sched::NodeSpec>> spec = NodeSpecFromJson(node);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("node n1"));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("prism.io/gpu-inventory"));
  node["metadata"]["annotations"]["prism.io/gpu-inventory"] = R"({"version":1,"gpus":[{}]})";
  EXPECT_FALSE(NodeSpecFromJson(node).ok());
  node = NodeJson("n1", {TestGpu{}}, "lots");
  EXPECT_THAT(std::string(NodeSpecFromJson(node).status().message()), HasSubstr("allocatable.cpu"));
}

}  // namespace
}  // namespace prism::extender
