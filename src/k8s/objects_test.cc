#include "k8s/objects.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "k8s/errors.h"
#include "k8s/test_util.h"

namespace prism::k8s {
namespace {

using ::testing::HasSubstr;

TEST(ObjectsTest, AccessorsReadMetadataAndTolerateWrongTypes) {
  Json pod = {{"metadata",
               {{"name", "p"},
                {"namespace", "ns"},
                {"uid", "u-1"},
                {"resourceVersion", "42"},
                {"labels", {{"app", "train"}, {"weird", 7}}},
                {"annotations", {{"prism.io/a", "x"}}}}},
              {"spec", {{"nodeName", "n1"}, {"schedulerName", "prism"}}},
              {"status", {{"phase", "Running"}}}};
  EXPECT_EQ(Name(pod), "p");
  EXPECT_EQ(Namespace(pod), "ns");
  EXPECT_EQ(Uid(pod), "u-1");
  EXPECT_EQ(ResourceVersion(pod), "42");
  EXPECT_EQ(ObjectKey(pod), "ns/p");
  EXPECT_EQ(Labels(pod), (std::map<std::string, std::string>{{"app", "train"}}));
  EXPECT_EQ(Annotation(pod, "prism.io/a"), "x");
  EXPECT_EQ(Annotation(pod, "missing"), std::nullopt);
  EXPECT_EQ(PodNodeName(pod), "n1");
  EXPECT_EQ(PodSchedulerName(pod), "prism");
  EXPECT_EQ(PodPhase(pod), "Running");

  for (Json bad : {Json(nullptr), Json(3), Json::array({1}), Json{{"metadata", "oops"}},
                   Json{{"metadata", {{"name", 5}, {"labels", "x"}, {"annotations", {1, 2}}}}}}) {
    SCOPED_TRACE(bad.dump());
    EXPECT_EQ(Name(bad), "");
    EXPECT_TRUE(Labels(bad).empty());
    EXPECT_TRUE(Annotations(bad).empty());
    EXPECT_EQ(Annotation(bad, "a"), std::nullopt);
    EXPECT_EQ(GetInt(bad, {"metadata", "generation"}), std::nullopt);
  }
  EXPECT_EQ(ObjectKey(Json{{"metadata", {{"name", "node-1"}}}}), "node-1");
}

TEST(ObjectsTest, ParseJsonReportsWhatWasMalformed) {
  absl::StatusOr<Json> bad = ParseJson("{\"a\": ", "pod annotation prism.io/x");
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("pod annotation prism.io/x"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("parse error"));
  ASSERT_OK_AND_ASSIGN(Json good, ParseJson("[1, 2]", "x"));
  EXPECT_EQ(good.size(), 2u);
}

TEST(ObjectsTest, TimestampsRoundTrip) {
  absl::Time t = absl::FromUnixMicros(1'700'000'000'123'456);
  EXPECT_EQ(FormatTimestamp(t), "2023-11-14T22:13:20Z");
  EXPECT_EQ(FormatMicroTimestamp(t), "2023-11-14T22:13:20.123456Z");
  ASSERT_OK_AND_ASSIGN(absl::Time parsed, ParseTimestamp(FormatMicroTimestamp(t)));
  EXPECT_EQ(parsed, t);
  ASSERT_OK_AND_ASSIGN(absl::Time offset, ParseTimestamp("2023-11-14T23:13:20+01:00"));
  EXPECT_EQ(offset, absl::FromUnixSeconds(1'700'000'000));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseTimestamp("yesterday").status()));
}

TEST(ObjectsTest, LeaseSpecRoundTrip) {
  LeaseSpec spec;
  spec.holder_identity = "prism-0";
  spec.lease_duration_seconds = 15;
  spec.acquire_time = absl::FromUnixMicros(1'700'000'000'000'001);
  spec.renew_time = absl::FromUnixMicros(1'700'000'010'000'000);
  spec.lease_transitions = 3;
  Json lease = {{"spec", LeaseSpecToJson(spec)}};
  EXPECT_EQ(lease["spec"]["renewTime"], "2023-11-14T22:13:30.000000Z");
  ASSERT_OK_AND_ASSIGN(LeaseSpec back, LeaseSpecFromJson(lease));
  EXPECT_EQ(back, spec);
  lease["spec"]["renewTime"] = "not a time";
  absl::Status bad = LeaseSpecFromJson(lease).status();
  EXPECT_TRUE(absl::IsInvalidArgument(bad));
  EXPECT_THAT(std::string(bad.message()), HasSubstr("spec.renewTime"));
  ASSERT_OK_AND_ASSIGN(LeaseSpec empty, LeaseSpecFromJson(Json::object()));
  EXPECT_EQ(empty, LeaseSpec{});
}

TEST(ObjectsTest, BindingHasTheWireShape) {
  Json binding = MakeBinding("ns", "p", "uid-1", "node-7", {{"prism.io/gpu", "GPU-1"}});
  EXPECT_EQ(binding, Json::parse(R"({
    "apiVersion": "v1", "kind": "Binding",
    "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1",
                 "annotations": {"prism.io/gpu": "GPU-1"}},
    "target": {"apiVersion": "v1", "kind": "Node", "name": "node-7"}})"));
  EXPECT_FALSE(MakeBinding("ns", "p", "", "n").at("metadata").contains("uid"));
}

TEST(ObjectsTest, ReferenceFillsKindForListItems) {
  Json item = {{"metadata", {{"name", "p"}, {"namespace", "ns"}, {"uid", "u"}}}};
  ObjectReference ref = ReferenceTo(item, "Pod", "v1");
  EXPECT_EQ(ToJson(ref), Json::parse(R"({"kind":"Pod","apiVersion":"v1","namespace":"ns",
                                         "name":"p","uid":"u"})"));
}

TEST(ErrorsTest, MapsHttpStatusesToCodes) {
  struct Case {
    int http;
    std::string reason;
    absl::StatusCode code;
  };
  for (const Case& c :
       std::vector<Case>{{400, "BadRequest", absl::StatusCode::kInvalidArgument},
                         {401, "Unauthorized", absl::StatusCode::kUnauthenticated},
                         {403, "Forbidden", absl::StatusCode::kPermissionDenied},
                         {404, "NotFound", absl::StatusCode::kNotFound},
                         {409, "Conflict", absl::StatusCode::kAborted},
                         {409, "AlreadyExists", absl::StatusCode::kAlreadyExists},
                         {410, "Expired", absl::StatusCode::kOutOfRange},
                         {422, "Invalid", absl::StatusCode::kInvalidArgument},
                         {429, "TooManyRequests", absl::StatusCode::kResourceExhausted},
                         {500, "InternalError", absl::StatusCode::kUnavailable},
                         {503, "ServiceUnavailable", absl::StatusCode::kUnavailable},
                         {504, "Timeout", absl::StatusCode::kUnavailable},
                         {418, "", absl::StatusCode::kUnknown}}) {
    SCOPED_TRACE(c.http);
    Json body = {{"kind", "Status"}, {"code", c.http}, {"reason", c.reason}, {"message", "why"}};
    absl::Status status = StatusFromHttp(c.http, body.dump(), "get pods ns/p");
    EXPECT_EQ(status.code(), c.code);
    EXPECT_EQ(HttpStatusOf(status), c.http);
    EXPECT_EQ(ReasonOf(status), c.reason);
    EXPECT_THAT(std::string(status.message()), HasSubstr("get pods ns/p: HTTP "));
    EXPECT_THAT(std::string(status.message()), HasSubstr(": why"));
  }
  EXPECT_OK(StatusFromHttp(201, "", "x"));
}

TEST(ErrorsTest, PredicatesAndContextKeepPayloads) {
  absl::Status conflict = StatusFromHttp(
      409, R"({"kind":"Status","reason":"Conflict","message":"modified"})", "update");
  EXPECT_TRUE(IsConflict(conflict));
  absl::Status wrapped = WithContext(conflict, "gave up");
  EXPECT_TRUE(IsConflict(wrapped));
  EXPECT_THAT(std::string(wrapped.message()), HasSubstr("gave up: update: HTTP 409"));
  EXPECT_FALSE(
      IsConflict(StatusFromHttp(409, R"({"kind":"Status","reason":"AlreadyExists"})", "")));
  EXPECT_TRUE(IsGone(StatusFromHttp(410, "", "")));
  EXPECT_TRUE(IsGone(StatusFromStatusObject(410, "Expired", "too old", "watch")));
  EXPECT_FALSE(IsGone(absl::OutOfRangeError("unrelated")));
  EXPECT_TRUE(IsRetryable(StatusFromHttp(429, "", "")));
  EXPECT_TRUE(IsRetryable(absl::UnavailableError("connection refused")));
  EXPECT_FALSE(IsRetryable(StatusFromHttp(403, "", "")));
}

TEST(ErrorsTest, NonStatusBodiesAreQuotedBriefly) {
  absl::Status status = StatusFromHttp(502, "<html>\n" + std::string(500, 'x'), "list nodes");
  std::string message(status.message());
  EXPECT_THAT(message, HasSubstr("<html> xxx"));
  EXPECT_LT(message.size(), 300u);
  EXPECT_EQ(HttpStatusOf(status), 502);
}

}  // namespace
}  // namespace prism::k8s
