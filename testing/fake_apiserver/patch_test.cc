#include "testing/fake_apiserver/patch.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::fakeapi {
namespace {

using Json = nlohmann::json;

Json Apply(const Json& original, const Json& patch, PatchKind kind) {
  auto result = ApplyPatch(original, patch.dump(), kind);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : Json();
}

TEST(MergePatchTest, MergesMapsDeletesNullsReplacesLists) {
  Json original = Json::parse(R"({"metadata":{"annotations":{"a":"1","b":"2"}},
                                  "spec":{"tolerations":[{"key":"x"}],"nodeName":"n"}})");
  Json patch = Json::parse(R"({"metadata":{"annotations":{"b":null,"c":"3"}},
                               "spec":{"tolerations":[{"key":"y"}]}})");
  EXPECT_EQ(Apply(original, patch, PatchKind::kMerge), Json::parse(R"({
      "metadata":{"annotations":{"a":"1","c":"3"}},
      "spec":{"tolerations":[{"key":"y"}],"nodeName":"n"}})"));
}

TEST(StrategicMergePatchTest, MergesKnownListsByKey) {
  Json original = Json::parse(R"({"spec":{"containers":[
      {"name":"main","image":"a","env":[{"name":"X","value":"1"}]},
      {"name":"side","image":"b"}]}})");
  Json patch = Json::parse(R"({"spec":{"containers":[
      {"name":"main","env":[{"name":"Y","value":"2"},{"name":"X","value":"9"}]},
      {"name":"new","image":"c"}]}})");
  EXPECT_EQ(Apply(original, patch, PatchKind::kStrategicMerge),
            Json::parse(R"({"spec":{"containers":[
      {"name":"main","image":"a","env":[{"name":"X","value":"9"},{"name":"Y","value":"2"}]},
      {"name":"side","image":"b"},
      {"name":"new","image":"c"}]}})"));
}

TEST(StrategicMergePatchTest, MergesConditionsByType) {
  Json original = Json::parse(R"({"status":{"conditions":[
      {"type":"Ready","status":"False"},{"type":"PodScheduled","status":"True"}]}})");
  Json patch = Json::parse(R"({"status":{"conditions":[{"type":"Ready","status":"True"}]}})");
  Json result = Apply(original, patch, PatchKind::kStrategicMerge);
  ASSERT_EQ(result["status"]["conditions"].size(), 2u);
  EXPECT_EQ(result["status"]["conditions"][0]["status"], "True");
}

TEST(StrategicMergePatchTest, HonoursDirectives) {
  Json original = Json::parse(R"({"metadata":{"finalizers":["a","b"],"labels":{"x":"1"}},
      "spec":{"containers":[{"name":"main"},{"name":"side"}],"affinity":{"nodeAffinity":{}}}})");
  Json patch = Json::parse(R"({
      "metadata":{"finalizers":["c","a"],"$deleteFromPrimitiveList/finalizers":["b"],
                  "labels":{"$patch":"replace","y":"2"}},
      "spec":{"containers":[{"name":"side","$patch":"delete"}],
              "$setElementOrder/containers":[{"name":"main"}],
              "affinity":{"$patch":"delete"}}})");
  EXPECT_EQ(Apply(original, patch, PatchKind::kStrategicMerge), Json::parse(R"({
      "metadata":{"finalizers":["a","c"],"labels":{"y":"2"}},
      "spec":{"containers":[{"name":"main"}]}})"));
}

TEST(StrategicMergePatchTest, ListsWithoutMergeKeyAreReplaced) {
  Json original = Json::parse(R"({"spec":{"tolerations":[{"key":"a"}]}})");
  Json patch = Json::parse(R"({"spec":{"tolerations":[{"key":"b"}]}})");
  EXPECT_EQ(Apply(original, patch, PatchKind::kStrategicMerge), patch);
}

TEST(JsonPatchTest, AppliesOperationsAndFailsTestsCleanly) {
  Json original = Json::parse(R"({"metadata":{"resourceVersion":"5","annotations":{}}})");
  Json ops = Json::parse(R"([
      {"op":"test","path":"/metadata/resourceVersion","value":"5"},
      {"op":"add","path":"/metadata/annotations/prism.io~1gpu","value":"GPU-1"}])");
  EXPECT_EQ(Apply(original, ops, PatchKind::kJson)["metadata"]["annotations"]["prism.io/gpu"],
            "GPU-1");
  Json stale = Json::parse(R"([{"op":"test","path":"/metadata/resourceVersion","value":"4"}])");
  EXPECT_TRUE(
      absl::IsFailedPrecondition(ApplyPatch(original, stale.dump(), PatchKind::kJson).status()));
  Json missing = Json::parse(R"([{"op":"remove","path":"/spec/nothing"}])");
  EXPECT_TRUE(
      absl::IsFailedPrecondition(ApplyPatch(original, missing.dump(), PatchKind::kJson).status()));
}

TEST(PatchTest, RejectsBodiesOfTheWrongShape) {
  Json original = Json::object();
  EXPECT_TRUE(absl::IsInvalidArgument(ApplyPatch(original, "{nope", PatchKind::kMerge).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ApplyPatch(original, "[1]", PatchKind::kMerge).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(ApplyPatch(original, "[1]", PatchKind::kStrategicMerge).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ApplyPatch(original, "{}", PatchKind::kJson).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(
      ApplyPatch(original, R"([{"op":"explode"}])", PatchKind::kJson).status()));
}

}  // namespace
}  // namespace prism::fakeapi
