#include "testing/fake_apiserver/selectors.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::fakeapi {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;

Json WithLabels(Json labels) { return Json{{"metadata", {{"labels", labels}}}}; }

TEST(LabelSelectorTest, SupportsEveryOperator) {
  Json pod = WithLabels({{"app", "train"}, {"tier", "gpu"}});
  struct Case {
    std::string selector;
    bool matches;
  };
  for (const Case& c : std::vector<Case>{{"", true},
                                         {"app=train", true},
                                         {"app==train", true},
                                         {"app=serve", false},
                                         {"app!=serve", true},
                                         {"app!=train", false},
                                         {"missing!=x", true},
                                         {"app", true},
                                         {"missing", false},
                                         {"!missing", true},
                                         {"!app", false},
                                         {"app in (serve, train)", true},
                                         {"app in (serve)", false},
                                         {"app notin (serve)", true},
                                         {"app notin (train,serve)", false},
                                         {"missing notin (a)", true},
                                         {"app=train,tier=gpu", true},
                                         {"app=train, tier=cpu", false},
                                         {"app in (train),!missing,tier", true}}) {
    SCOPED_TRACE(c.selector);
    auto selector = LabelSelector::Parse(c.selector);
    ASSERT_TRUE(selector.ok()) << selector.status();
    EXPECT_EQ(selector->Matches(pod), c.matches);
  }
}

TEST(LabelSelectorTest, ObjectsWithoutLabelsMatchOnlyNegations) {
  auto selector = LabelSelector::Parse("!gpu,app!=x");
  ASSERT_TRUE(selector.ok());
  EXPECT_TRUE(selector->Matches(Json{{"metadata", Json::object()}}));
  EXPECT_TRUE(selector->Matches(Json::object()));
  EXPECT_FALSE(LabelSelector::Parse("gpu")->Matches(Json::object()));
}

TEST(LabelSelectorTest, RejectsMalformedRequirements) {
  for (std::string bad : {"app in train", "app in (a", "=x", "bad key=x", "a=b c", ",", "a=(b)"}) {
    SCOPED_TRACE(bad);
    auto selector = LabelSelector::Parse(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(selector.status()));
    EXPECT_THAT(std::string(selector.status().message()), HasSubstr("unable to parse"));
  }
}

TEST(FieldSelectorTest, MatchesSupportedFields) {
  std::vector<std::string> allowed = {"metadata.name", "spec.nodeName", "spec.hostNetwork",
                                      "status.phase"};
  Json pod = {{"metadata", {{"name", "p"}}},
              {"spec", {{"nodeName", "n1"}, {"hostNetwork", true}}},
              {"status", {{"phase", "Running"}}}};
  struct Case {
    std::string selector;
    bool matches;
  };
  for (const Case& c : std::vector<Case>{{"spec.nodeName=n1", true},
                                         {"spec.nodeName==n2", false},
                                         {"spec.nodeName!=n2", true},
                                         {"metadata.name=p,status.phase=Running", true},
                                         {"status.phase!=Running", false},
                                         {"spec.hostNetwork=true", true}}) {
    SCOPED_TRACE(c.selector);
    auto selector = FieldSelector::Parse(c.selector, allowed);
    ASSERT_TRUE(selector.ok()) << selector.status();
    EXPECT_EQ(selector->Matches(pod), c.matches);
  }
  // A missing field reads as empty: `spec.nodeName=` selects unbound pods.
  Json unbound = {{"metadata", {{"name", "q"}}}};
  EXPECT_TRUE(FieldSelector::Parse("spec.nodeName=", allowed)->Matches(unbound));
  EXPECT_FALSE(FieldSelector::Parse("spec.nodeName=", allowed)->Matches(pod));
}

TEST(FieldSelectorTest, RejectsUnsupportedFieldsLikeTheApiServer) {
  auto selector = FieldSelector::Parse("spec.priority=1", {"metadata.name"});
  EXPECT_TRUE(absl::IsInvalidArgument(selector.status()));
  EXPECT_THAT(std::string(selector.status().message()),
              HasSubstr("field label not supported: spec.priority"));
  EXPECT_TRUE(
      absl::IsInvalidArgument(FieldSelector::Parse("metadata.name", {"metadata.name"}).status()));
}

}  // namespace
}  // namespace prism::fakeapi
